"""What network rules add: per new connection, and per sandboxed command.

Run: ``python bench/egress.py [--connections N] [--trials N]`` (from the project root).

1. *Per connection.* One ``python3`` process opens N plain-HTTP connections in
   a row (a GET each, a new TCP connection each) to a web server on the host's
   loopback: once on the host directly, once inside the bubblewrap sandbox
   through the forwarder and the egress proxy (``backends/egress.py``), with a
   rule allowing that address. The per-connection difference of the medians is
   floored at 5 ms (issue 51).
2. *Per command.* ``true`` in the sandbox with no network rule (no proxy is
   started: the default), and with a rule but no connection (the proxy and the
   forwarder start and stop). The first is today's cost; the second is what
   having network rules costs a command that opens none.

Prints a table and a JSON line; exits 1 when the per-connection overhead is
over the floor.
"""

from __future__ import annotations

import argparse
import http.server
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from filegate.backends.bwrap import BwrapSandboxBackend  # noqa: E402
from filegate.kernel.execute_gate import SandboxView  # noqa: E402
from filegate.kernel.network_rules import NetworkPermission  # noqa: E402

FLOOR_MS = 5.0

CLIENT = """
import sys, time, urllib.request
n, url, proxy = int(sys.argv[1]), sys.argv[2], sys.argv[3]
handlers = [urllib.request.ProxyHandler({"http": proxy} if proxy else {})]
opener = urllib.request.build_opener(*handlers)
times = []
for _ in range(n):
    t = time.perf_counter()
    opener.open(url).read()
    times.append(time.perf_counter() - t)
times.sort()
print("MEDIAN_MS", times[len(times) // 2] * 1000)
"""


class _Quiet(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _median_of(output: str) -> float:
    for line in output.splitlines():
        if line.startswith("MEDIAN_MS"):
            return float(line.split()[1])
    raise RuntimeError(f"no measurement in: {output!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=60)
    parser.add_argument("--trials", type=int, default=15)
    args = parser.parse_args()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    url = f"http://127.0.0.1:{port}/x"
    root = Path(tempfile.mkdtemp(prefix="fg-bench-egress-"))
    sandbox = BwrapSandboxBackend(root)
    rules = SandboxView(network=(NetworkPermission(hosts=["127.0.0.1"], ports=[port]),))
    quoted = CLIENT.replace("'", "'\"'\"'")

    direct, proxied = [], []
    for _ in range(3):  # interleaved: load drifts hit both
        host = subprocess.run(
            ["/usr/bin/python3", "-c", CLIENT, str(args.connections), url, ""],
            capture_output=True,
            text=True,
            check=True,
        )
        direct.append(_median_of(host.stdout))
        command = f"python3 -c '{quoted}' {args.connections} {url} http://127.0.0.1:3128"
        inside = sandbox.execute_in_view(command, 120, rules)
        proxied.append(_median_of(inside.output))
    per_connection = statistics.median(proxied) - statistics.median(direct)

    bare, with_rules = [], []
    for _ in range(args.trials):
        started = time.perf_counter()
        sandbox.execute_in_view("true", 60, SandboxView())
        bare.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        sandbox.execute_in_view("true", 60, rules)
        with_rules.append((time.perf_counter() - started) * 1000)
    server.shutdown()

    added = statistics.median(with_rules) - statistics.median(bare)
    rows = [
        ("connection, host directly (median ms)", statistics.median(direct)),
        ("connection, sandbox through the proxy", statistics.median(proxied)),
        ("added per new connection", per_connection),
        ("command `true`, no network rule", statistics.median(bare)),
        ("command `true`, a rule, no connection", statistics.median(with_rules)),
        ("added per command by having rules", added),
    ]
    for name, value in rows:
        print(f"{name:<42} {value:8.2f} ms")
    result = {
        "direct_ms": round(statistics.median(direct), 3),
        "proxied_ms": round(statistics.median(proxied), 3),
        "per_connection_ms": round(per_connection, 3),
        "command_no_rules_ms": round(statistics.median(bare), 2),
        "command_rules_no_connection_ms": round(statistics.median(with_rules), 2),
        "per_command_with_rules_ms": round(added, 2),
        "floor_ms": FLOOR_MS,
    }
    print(json.dumps(result))
    if per_connection > FLOOR_MS:
        print(f"FAIL: a connection through the proxy adds {per_connection:.2f} ms (> {FLOOR_MS})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
