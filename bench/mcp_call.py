"""One MCP tool call through ``filegate mcp``, as an MCP client sees it.

Run: ``python bench/mcp_call.py``. Starts a private Temporal dev server, then
``filegate mcp --root DIR`` as the client's stdio subprocess (its agent and
tools workers in that process, co-hosted: the session runs on the tools
worker's queue, so a call is one workflow task with a local activity), and
times ``CALLS`` calls of each kind with the ``mcp`` SDK's client:

- ``read_file`` of a 4 KB file;
- ``write_file`` of 4 KB (journaled; no rule interrupts it);
- ``tools/list`` (a query: no history).

Reported: wall time per call at the client (request to result, median and
p95), and beside it the reference MCP filesystem server
(``@modelcontextprotocol/server-filesystem``, installed from the npm registry
into the bench's temp directory; the column is skipped with a note when npm
or the registry is not there) answering the same reads of the same file.

Floor (issue 55): an allowed 4 KB ``read_file`` at most ``READ_FLOOR_MS`` at
p50 (such reads are answered in the ``filegate mcp --root`` process,
``cli/mcp_fast.py``). Exit 1 when it is missed or a call fails.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit_json, ms, percentile, print_table, temporal_bench, text_file
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

CALLS = int(os.environ.get("BENCH_CALLS", "100"))
WARMUP = 5
FILE_BYTES = 4096
READ_FLOOR_MS = 5.0
REFERENCE_PACKAGE = "@modelcontextprotocol/server-filesystem"


async def timed(call: Callable[[Client, int], Awaitable[Any]], client: Client, n: int) -> float:
    began = time.perf_counter()
    result = await call(client, n)
    elapsed = time.perf_counter() - began
    if getattr(result, "is_error", False):
        raise RuntimeError(f"a call failed: {result}")
    return elapsed


def reference_server(folder: Path, root: Path) -> StdioServerParameters | None:
    """The reference filesystem server over ``root``, installed into ``folder``; None
    (with a note) when npm or the registry is not there."""
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        print("reference column skipped: no npm/node on this machine")
        return None
    done = subprocess.run(
        [npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(folder),
         REFERENCE_PACKAGE],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    entry = folder / "node_modules" / REFERENCE_PACKAGE / "dist" / "index.js"
    if done.returncode != 0 or not entry.is_file():
        print(f"reference column skipped: npm install failed ({done.stderr.strip()[:200]})")
        return None
    return StdioServerParameters(command=node, args=[str(entry), str(root)])


async def reference_reads(server: StdioServerParameters, path: Path) -> list[float]:
    """The reference server's ``read_text_file`` of the same file, timed the same way."""

    def read(c: Client, n: int) -> Awaitable[Any]:
        return c.call_tool("read_text_file", {"path": str(path)})

    async with Client(server) as client:
        for n in range(WARMUP):
            await timed(read, client, n)
        return [await timed(read, client, n) for n in range(CALLS)]


async def main() -> int:
    async with temporal_bench("mcp") as bench:
        root = bench.tmp / "ws"
        root.mkdir()
        content = text_file(FILE_BYTES)
        (root / "data.txt").write_text(content)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FILEGATE_", "TEMPORAL_"))}
        env.update(
            TEMPORAL_ADDRESS=bench.server.address,
            TEMPORAL_NAMESPACE=bench.server.namespace,
            FILEGATE_STATE_DIR=str(bench.tmp / "state"),
        )
        server = StdioServerParameters(
            command=sys.executable, args=["-m", "filegate", "mcp", "--root", str(root)], env=env
        )
        kinds: dict[str, Callable[[Client, int], Awaitable[Any]]] = {  # call n of each kind
            "read_file": lambda c, n: c.call_tool("read_file", {"file_path": "/data.txt"}),
            "write_file": lambda c, n: c.call_tool(
                "write_file", {"file_path": f"/w{n}.txt", "content": content}
            ),
            "tools/list": lambda c, n: c.list_tools(),
        }
        times: dict[str, list[float]] = {kind: [] for kind in kinds}
        async with Client(server) as client:
            for n in range(WARMUP):
                for call in kinds.values():
                    await timed(call, client, -1 - n)
            for n in range(CALLS):
                for kind, call in kinds.items():
                    times[kind].append(await timed(call, client, n))
        reference = reference_server(bench.tmp / "npm", root)
        if reference is not None:
            times["reference read_text_file"] = await reference_reads(reference, root / "data.txt")
    rows = []
    numbers: dict[str, float] = {"calls": float(CALLS)}
    for kind, values in times.items():
        p50, p95 = percentile(values, 50), percentile(values, 95)
        rows.append([kind, ms(p50), ms(p95)])
        key = kind.replace("/", "_").replace(" ", "_")
        numbers[f"{key}_p50_ms"], numbers[f"{key}_p95_ms"] = ms(p50), ms(p95)
    print(f"filegate mcp over stdio, {CALLS} calls each ({FILE_BYTES} B files)")
    print_table(["call", "p50 ms", "p95 ms"], rows)
    ok = numbers["read_file_p50_ms"] <= READ_FLOOR_MS
    verdict = "PASS" if ok else "FAIL"
    print(f"floor: read_file p50 <= {READ_FLOOR_MS:g} ms: {verdict}")
    emit_json("mcp_call", numbers, ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
