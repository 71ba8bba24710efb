"""Network for sandboxed commands, under the rules (issue 51): the egress suite.

Every case runs a real command in the real bubblewrap sandbox against real
servers on the host's 127.0.0.1 (they stand in for package indexes and APIs)
and checks both what the command saw and what the host saw. The refusals are
the default's promise (no rule, no network) and each trick a command could
try: a resolver, an IP literal, a malformed name, a TLS name that differs
from the tunnel's, an IPv6 literal, a redirect to another host, a socket
that ignores the proxy, UDP, and a loopback service reached by name.
"""

from __future__ import annotations

import contextlib
import glob
import http.server
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.kernel.execute_gate import SandboxView
from filegate.kernel.formatting import format_execute
from filegate.kernel.network_rules import NetworkPermission
from filegate.kernel.protocol import ExecuteResult
from tests.net_servers import token_server

pytestmark = pytest.mark.slow

TOKEN = "served-by-the-host-4711"


@pytest.fixture
def web() -> Iterator[tuple[int, list[str]]]:
    """A web server on the host's loopback: its port, and the paths it was asked for."""
    with token_server(TOKEN) as served:
        yield served


def _view(*rules: NetworkPermission) -> SandboxView:
    return SandboxView(network=rules)


def _allow(*hosts: str, ports: list[int] | None = None) -> NetworkPermission:
    return NetworkPermission(hosts=list(hosts), ports=ports, mode="allow")


def _run(sb: BwrapSandboxBackend, command: str, view: SandboxView) -> ExecuteResult:
    return sb.execute_in_view(command, 60, view)


def _shown(result: ExecuteResult) -> str:
    return format_execute(result).text


CURL = "curl -sS --max-time 20"


# -- allowed -----------------------------------------------------------------------------


def test_an_allowed_address_is_reached_through_the_proxy(
    sb: BwrapSandboxBackend, web: tuple[int, list[str]]
) -> None:
    port, seen = web
    result = _run(
        sb, f"{CURL} http://127.0.0.1:{port}/file", _view(_allow("127.0.0.1", ports=[port]))
    )
    assert TOKEN in result.output, _shown(result)
    assert seen == ["/file"]
    [use] = result.network
    assert (use.host, use.port, use.allowed) == ("127.0.0.1", port, True)
    assert use.bytes_in > len(TOKEN) and use.bytes_out > 0
    assert f"[network: reached 127.0.0.1:{port}]" in _shown(result)


def test_python_urllib_uses_the_proxy_variables_unmodified(
    sb: BwrapSandboxBackend, web: tuple[int, list[str]]
) -> None:
    port, seen = web
    code = f"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/py').read().decode())"
    result = _run(sb, f'python3 -c "{code}"', _view(_allow("127.0.0.1", ports=[port])))
    assert TOKEN in result.output, _shown(result)
    assert seen == ["/py"]


def test_an_https_tunnel_to_an_allowed_address_is_opened(sb: BwrapSandboxBackend) -> None:
    """CONNECT to an allowed address: the bytes go through both ways (an echo server)."""
    with _echo_server() as (port, received):
        code = (
            "import socket; s = socket.create_connection(('127.0.0.1', 3128));"
            f"s.sendall(b'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n');"
            "head = s.recv(4096); s.sendall(b'ping');"
            "print(head.split()[1].decode(), s.recv(100).decode())"
        )
        result = _run(sb, f'python3 -c "{code}"', _view(_allow("127.0.0.1", ports=[port])))
        assert result.output.split() == ["200", "ping"], _shown(result)
        assert received == [b"ping"]


# -- refused -----------------------------------------------------------------------------


def test_no_rule_means_no_network_at_all(
    sb: BwrapSandboxBackend, web: tuple[int, list[str]]
) -> None:
    port, seen = web
    result = _run(sb, f"{CURL} http://127.0.0.1:{port}/x; echo rc=$?", SandboxView())
    assert TOKEN not in result.output and "rc=7" in result.output, result.output
    assert seen == [] and result.network == []


def test_a_host_without_a_rule_is_refused_with_the_reason(
    sb: BwrapSandboxBackend, web: tuple[int, list[str]]
) -> None:
    port, seen = web
    view = _view(_allow("127.0.0.1", ports=[port]))
    result = _run(
        sb, f"{CURL} http://api.example.test/v1; {CURL} https://api.example.test/v1", view
    )
    assert seen == []
    refused = {(u.host, u.port): u for u in result.network}
    assert set(refused) == {("api.example.test", 80), ("api.example.test", 443)}
    assert all(not u.allowed and "no network rule names" in u.reason for u in refused.values())
    assert "no network rule names api.example.test:80" in result.output  # the 403's body
    assert "[network: refused api.example.test:443: no network rule names" in _shown(result)


def test_an_ip_literal_no_rule_names_is_refused(
    sb: BwrapSandboxBackend, web: tuple[int, list[str]]
) -> None:
    port, seen = web
    view = _view(_allow("127.0.0.1", ports=[port]))
    result = _run(
        sb, f"{CURL} http://127.0.0.2:{port}/x; {CURL} http://127.0.0.1:{port + 1}/x", view
    )
    assert seen == []
    assert {(u.host, u.port, u.allowed) for u in result.network} == {
        ("127.0.0.2", port, False),
        ("127.0.0.1", port + 1, False),
    }


def test_an_ipv6_literal_is_refused(sb: BwrapSandboxBackend, web: tuple[int, list[str]]) -> None:
    port, seen = web
    result = _run(sb, f"{CURL} 'http://[::1]:{port}/x'", _view(_allow("127.0.0.1", ports=[port])))
    assert seen == []
    [use] = result.network
    assert (use.host, use.allowed) == ("::1", False), use
    assert f"[network: refused [::1]:{port}" in _shown(result)


@pytest.mark.parametrize("host", ["a\\x00b", "a b", "pypi.org.", "a..b", "user@127.0.0.1"])
def test_a_malformed_host_is_refused_before_any_rule(
    sb: BwrapSandboxBackend, web: tuple[int, list[str]], host: str
) -> None:
    port, seen = web
    code = (
        "import socket; s = socket.create_connection(('127.0.0.1', 3128));"
        f"s.sendall(b'CONNECT {host}:{port} HTTP/1.1\\r\\n\\r\\n'); print(s.recv(4096).decode())"
    )
    result = _run(sb, f'python3 -c "{code}"', _view(_allow("*.org", "127.0.0.1")))
    assert "403" in result.output.splitlines()[0], _shown(result)
    assert seen == [] and all(not u.allowed for u in result.network)


def test_a_tls_name_that_differs_from_the_tunnel_is_refused(sb: BwrapSandboxBackend) -> None:
    """Domain fronting: a tunnel to an allowed host carrying a TLS hello for another."""
    with _echo_server() as (port, received):
        code = (
            "import socket, ssl; s = socket.create_connection(('127.0.0.1', 3128));"
            f"s.sendall(b'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n'); s.recv(4096);"
            "c = ssl.create_default_context(); c.check_hostname = False\n"
            "c.verify_mode = ssl.CERT_NONE\n"
            "try:\n c.wrap_socket(s, server_hostname='evil.test')\n"
            "except (OSError, ssl.SSLError) as e: print('closed', type(e).__name__)"
        )
        result = _run(sb, f'python3 -c "{code}"', _view(_allow("127.0.0.1", ports=[port])))
        assert "closed" in result.output, _shown(result)
        assert received == []
        [use] = result.network
        assert not use.allowed and "evil.test" in use.reason, use


def test_a_redirect_to_another_host_is_judged_again(
    sb: BwrapSandboxBackend, web: tuple[int, list[str]]
) -> None:
    port, seen = web
    view = _view(_allow("127.0.0.1", ports=[port]))
    result = _run(sb, f"{CURL} -L http://127.0.0.1:{port}/redirect", view)
    assert seen == ["/redirect"]
    assert [(u.host, u.allowed) for u in result.network] == [
        ("127.0.0.1", True),
        ("elsewhere.test", False),
    ]


def test_a_socket_that_ignores_the_proxy_reaches_nothing(
    sb: BwrapSandboxBackend, web: tuple[int, list[str]]
) -> None:
    port, seen = web
    code = (
        "import socket\n"
        f"for addr in [('127.0.0.1', {port}), ('10.0.0.1', 80), ('8.8.8.8', 53)]:\n"
        " try:\n  socket.create_connection(addr, timeout=3); print('CONNECTED', addr)\n"
        " except OSError as e: print('refused', addr, e.errno)\n"
    )
    result = _run(sb, f'python3 -c "{code}"', _view(_allow("127.0.0.1", ports=[port])))
    assert "CONNECTED" not in result.output and result.output.count("refused") == 3, result.output
    assert seen == []


def test_udp_and_dns_lead_nowhere(sb: BwrapSandboxBackend) -> None:
    with _udp_server() as (port, received):
        code = (
            "import socket\n"
            "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"for addr in [('127.0.0.1', {port}), ('8.8.8.8', 53)]:\n"
            " try: u.sendto(b'leak', addr); print('sent', addr)\n"
            " except OSError as e: print('unsent', addr, e.errno)\n"
            "try: print('RESOLVED', socket.getaddrinfo('example.com', 80))\n"
            "except OSError as e: print('no resolver', type(e).__name__)\n"
        )
        view = _view(_allow("example.com"), _allow("127.0.0.1"))
        result = _run(sb, f'python3 -c "{code}"', view)
        time.sleep(0.3)
        assert "RESOLVED" not in result.output and "no resolver" in result.output, result.output
        assert "unsent ('8.8.8.8', 53)" in result.output
        assert received == []  # the sandbox's 127.0.0.1 is its own


def test_a_name_that_resolves_to_loopback_is_refused(
    sb: BwrapSandboxBackend, web: tuple[int, list[str]]
) -> None:
    """A rule names ``localhost``, not the address: the host's own services stay out."""
    port, seen = web
    result = _run(sb, f"{CURL} http://localhost:{port}/x", _view(_allow("localhost", ports=[port])))
    assert seen == []
    [use] = result.network
    assert not use.allowed and "127.0.0.1" in use.reason, use


def test_a_deny_rule_wins_when_first(sb: BwrapSandboxBackend, web: tuple[int, list[str]]) -> None:
    port, seen = web
    deny = NetworkPermission(hosts=["127.0.0.1"], ports=[port], mode="deny")
    result = _run(sb, f"{CURL} http://127.0.0.1:{port}/x", _view(deny, _allow("127.0.0.1")))
    assert seen == [] and "network rule 1 (deny 127.0.0.1)" in result.output


def test_an_allow_rule_with_methods_lets_only_those_through(
    sb: BwrapSandboxBackend, web: tuple[int, list[str]]
) -> None:
    port, seen = web
    rule = NetworkPermission(
        hosts=["127.0.0.1"], ports=[port], methods=["GET"], path_prefixes=["/ok"]
    )
    view = _view(rule)
    result = _run(
        sb,
        f"{CURL} http://127.0.0.1:{port}/ok/1; {CURL} http://127.0.0.1:{port}/no; {CURL} -X DELETE http://127.0.0.1:{port}/ok/2",
        view,
    )
    assert seen == ["/ok/1"], result.output


# -- pip, from a local index -----------------------------------------------------------------


def _wheel(directory: Path) -> Path:
    """A one-module wheel, ``fgdemo-1.0``, built by hand (no build backend needed)."""
    import base64
    import hashlib
    import zipfile

    files = {
        "fgdemo.py": "VALUE = 42\n",
        "fgdemo-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: fgdemo\nVersion: 1.0\n",
        "fgdemo-1.0.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append("fgdemo-1.0.dist-info/RECORD,,")
    files["fgdemo-1.0.dist-info/RECORD"] = "\n".join(record) + "\n"
    path = directory / "fgdemo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


@pytest.fixture
def index(tmp_path: Path) -> Iterator[int]:
    """A PEP 503 simple index on the host's loopback serving one wheel."""
    served = tmp_path / "index"
    (served / "simple" / "fgdemo").mkdir(parents=True)
    wheel = _wheel(served / "simple" / "fgdemo")
    (served / "simple" / "fgdemo" / "index.html").write_text(
        f'<html><body><a href="{wheel.name}">{wheel.name}</a></body></html>'
    )

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(served), **kwargs)  # type: ignore[arg-type]

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _pip_python() -> tuple[str, list[str]]:
    """An interpreter with pip that the sandbox can run, and what to mount for it."""
    import subprocess

    if (
        subprocess.run(
            ["/usr/bin/python3", "-m", "pip", "--version"], capture_output=True
        ).returncode
        == 0
    ):
        return "/usr/bin/python3", []
    base = Path(sys.base_prefix)
    python = base / "bin" / "python3"
    if not python.exists() or shutil.which("pip", path=str(base / "bin")) is None:
        pytest.skip("no python3 with pip for the sandbox")
    return str(python), [str(base)]


def test_pip_installs_from_an_allowed_index_and_not_without_the_rule(
    root: Path, index: int, _bwrap_ok: None
) -> None:
    python, binds = _pip_python()
    sb = BwrapSandboxBackend(root, check=False, ro_binds=binds)
    command = (
        f"{python} -m pip install --no-cache-dir --disable-pip-version-check -q "
        f"--index-url http://127.0.0.1:{index}/simple/ --target /workspace/lib fgdemo "
        "&& PYTHONPATH=/workspace/lib python3 -c 'import fgdemo; print(\"value\", fgdemo.VALUE)'"
    )
    allowed = sb.execute_in_view(command, 120, _view(_allow("127.0.0.1", ports=[index])))
    assert "value 42" in allowed.output, _shown(allowed)
    assert all(u.allowed for u in allowed.network) and allowed.network
    shutil.rmtree(root / "lib")
    refused = sb.execute_in_view(
        command.replace(" -q ", " --retries 0 -q "), 120, _view(_allow("pypi.org"))
    )
    assert refused.exit_code != 0 and "value 42" not in refused.output
    assert f"[network: refused 127.0.0.1:{index}" in _shown(refused)


# -- helpers ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _echo_server() -> Iterator[tuple[int, list[bytes]]]:
    received: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(10)
                with contextlib.suppress(OSError):
                    while data := conn.recv(4096):
                        received.append(data)
                        conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], received
    finally:
        stop.set()
        thread.join(5)
        listener.close()


@contextlib.contextmanager
def _udp_server() -> Iterator[tuple[int, list[bytes]]]:
    received: list[bytes] = []
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                received.append(sock.recv(100))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1], received
    finally:
        stop.set()
        thread.join(5)
        sock.close()


# -- git, over HTTPS ---------------------------------------------------------------------------


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (IP SAN) and its key, made here for the test."""
    crypto = pytest.importorskip("cryptography")
    del crypto
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "filegate test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_git_clones_over_https_from_an_allowed_host(
    sb: BwrapSandboxBackend, root: Path, tmp_path: Path
) -> None:
    """A repository served over HTTPS (git's "dumb" protocol) on the host's loopback:
    ``git clone`` in the sandbox goes through the proxy's tunnel, unmodified but for
    the test's own CA; without the rule it is refused."""
    import ssl
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("no git")
    served = tmp_path / "served"
    work = tmp_path / "work"
    work.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(work)], check=True)
    (work / "README").write_text(TOKEN)
    subprocess.run([*git, "-C", str(work), "add", "README"], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-qm", "one"], check=True)
    subprocess.run([*git, "clone", "-q", "--bare", str(work), str(served / "repo.git")], check=True)
    subprocess.run(["git", "-C", str(served / "repo.git"), "update-server-info"], check=True)
    cert, key = _self_signed(tmp_path)
    shutil.copy(cert, root / "ca.pem")

    class Files(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(served), **kwargs)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    command = (
        f"GIT_SSL_CAINFO=/workspace/ca.pem git clone -q https://127.0.0.1:{port}/repo.git out "
        "&& cat out/README"
    )
    try:
        cloned = _run(sb, command, _view(_allow("127.0.0.1", ports=[port])))
        assert TOKEN in cloned.output, _shown(cloned)
        assert [(u.host, u.port, u.allowed) for u in cloned.network] == [("127.0.0.1", port, True)]
        shutil.rmtree(root / "out")
        refused = _run(sb, command, _view(_allow("127.0.0.1", ports=[port + 1])))
        assert refused.exit_code != 0 and TOKEN not in refused.output
    finally:
        server.shutdown()
        server.server_close()


# -- who else can reach the proxy; several at once ----------------------------------------------

NOBODY = 65534
KNOCK = """
import glob, socket, sys
reached = []
for path in glob.glob("/tmp/filegate-net-*/egress.sock"):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        s.sendall(b"CONNECT 127.0.0.1:" + sys.argv[1].encode() + b" HTTP/1.1\\r\\n\\r\\n")
        reached.append(path)
    except OSError:
        pass
print("reached", len(reached))
"""


def test_another_local_user_cannot_reach_a_commands_proxy(
    sb: BwrapSandboxBackend, web: tuple[int, list[str]]
) -> None:
    """While a command with network rules runs, its proxy's socket is there on the host:
    a process of another user (uid 65534) finds it and cannot connect (0700 directory,
    0600 socket), so it cannot borrow the command's rules to reach what they allow."""
    import subprocess

    from tests.readable_copy import python_for

    if os.geteuid() != 0:
        pytest.skip("needs root to run a process as uid 65534")
    python = python_for(NOBODY)
    if python is None:
        pytest.skip("no interpreter uid 65534 may run")
    port, seen = web
    view = _view(_allow("127.0.0.1", ports=[port]))
    waiting = threading.Thread(target=_run, args=(sb, "sleep 3", view))
    waiting.start()
    try:
        deadline = time.monotonic() + 10
        while not glob.glob("/tmp/filegate-net-*/egress.sock"):
            assert time.monotonic() < deadline, "the proxy's socket never appeared"
            time.sleep(0.05)
        drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        knock = subprocess.run(
            [*drop, python, "-I", "-c", KNOCK, str(port)],
            capture_output=True, text=True, timeout=30, cwd="/", check=False,
        )  # fmt: skip
    finally:
        waiting.join(30)
    assert knock.returncode == 0, knock.stderr
    assert knock.stdout.split() == ["reached", "0"], knock.stdout
    assert seen == []


def test_commands_with_other_rules_at_once_each_keep_their_own(
    sb: BwrapSandboxBackend, root: Path, web: tuple[int, list[str]]
) -> None:
    """Two commands at once, one allowed to the server and one not, beside a file tool
    writing: each proxy judges by its own command's rules and reports only its own
    connections, and the write lands."""
    port, seen = web
    loop = "for i in 1 2 3 4 5; do " + CURL + " http://127.0.0.1:{port}/{path}; sleep 0.1; done"
    results: dict[str, ExecuteResult] = {}

    def run(name: str, view: SandboxView) -> None:
        results[name] = _run(sb, loop.format(port=port, path=name), view)

    allowed = threading.Thread(target=run, args=("yes", _view(_allow("127.0.0.1", ports=[port]))))
    refused = threading.Thread(
        target=run, args=("no", _view(_allow("127.0.0.1", ports=[port + 1])))
    )
    allowed.start()
    refused.start()
    wrote = sb.write("/notes.md", "written beside them\n")
    allowed.join(60)
    refused.join(60)
    assert wrote.error is None and (root / "notes.md").read_text() == "written beside them\n"
    assert results["yes"].output.count(TOKEN) == 5
    assert [(u.host, u.port, u.allowed, u.connections) for u in results["yes"].network] == [
        ("127.0.0.1", port, True, 5)
    ]
    assert [(u.port, u.allowed, u.connections) for u in results["no"].network] == [(port, False, 5)]
    assert sorted(seen) == ["/yes"] * 5
