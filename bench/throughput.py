"""Throughput: 50 concurrent agent workflows x 20 tool calls, one agent + one tools worker.

Run: ``python bench/throughput.py``. Starts a private Temporal dev server,
one in-process agent worker and one in-process tools worker (Filesystem
backend), then starts ``WORKFLOWS`` scripted agents at once. Each works in
its own directory with ``CALLS_PER_TURN`` parallel calls per model turn
(write, read, edit, read back, then ls/glob/grep/read), 20 calls in all.

Reported: tool calls per second from the first start to the last result,
and the failures (workflow failures + tool errors + wrong file contents),
which must be zero. Floor: >= 100 tool calls/s (exit 1 if missed).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Bench, call, emit_json, print_table, remote, scripted_input, temporal_bench

from backends.filesystem import FilesystemBackend
from worker import agent_worker, tools_worker
from workflows import AgentResult, AgentWorkflow

WORKFLOWS = int(os.environ.get("BENCH_WORKFLOWS", "50"))
CALLS_PER_WORKFLOW = 20
CALLS_PER_TURN = int(os.environ.get("BENCH_CALLS_PER_TURN", "4"))
FLOOR = 100.0


def script(n: int) -> list[dict[str, Any]]:
    """20 calls on ``/w<n>/``: write k files, read them, edit them, read back, inspect."""
    k = CALLS_PER_TURN
    base = f"/w{n}"
    files = [f"{base}/f{i}.txt" for i in range(k)]
    turns: list[list[dict[str, Any]]] = [
        [call(f"w{i}", "write_file", file_path=p, content=f"v1 {p}\n")
         for i, p in enumerate(files)],
        [call(f"r{i}", "read_file", file_path=p) for i, p in enumerate(files)],
        [call(f"e{i}", "edit_file", file_path=p, old_string="v1", new_string="v2")
         for i, p in enumerate(files)],
        [call(f"b{i}", "read_file", file_path=p) for i, p in enumerate(files)],
    ]  # fmt: skip
    flat = [c for turn in turns for c in turn]
    extra = [
        call("ls", "ls", path=base),
        call("glob", "glob", pattern="*.txt", path=base),
        call("grep", "grep", pattern="v2", path=base),
    ]
    i = 0
    while len(flat) < CALLS_PER_WORKFLOW:
        flat.append(extra[i % 3] if i < 3 else call(f"x{i}", "read_file", file_path=files[0]))
        if i >= 3:
            flat[-1]["id"] = f"x{i}"
        i += 1
    flat = flat[:CALLS_PER_WORKFLOW]
    return [{"tool_calls": flat[j : j + k]} for j in range(0, len(flat), k)]


def failures(n: int, root: Path, result: AgentResult | BaseException) -> int:
    if isinstance(result, BaseException):
        return CALLS_PER_WORKFLOW
    bad = result.tool_errors + abs(result.tool_calls - CALLS_PER_WORKFLOW)
    for i in range(CALLS_PER_TURN):
        path = root / f"w{n}" / f"f{i}.txt"
        if not path.is_file() or path.read_text() != f"v2 /w{n}/f{i}.txt\n":
            bad += 1
    return bad


async def measure(bench: Bench) -> dict[str, Any]:
    root = bench.tmp / "ws"
    root.mkdir()
    fs = FilesystemBackend(str(root), virtual_mode=True)
    agent_q, tools_q = bench.queues()
    inputs = [scripted_input(script(n), remote("fs", tools_q)) for n in range(WORKFLOWS)]
    async with (
        agent_worker(bench.client, agent_q),
        tools_worker(bench.client, tools_q, {"fs": fs}, bench.tmp / "journal"),
    ):
        warm = scripted_input(script(WORKFLOWS), remote("fs", tools_q))
        await bench.client.execute_workflow(
            AgentWorkflow.run, warm, id=f"warm-{uuid.uuid4().hex[:8]}", task_queue=agent_q
        )
        began = time.perf_counter()
        handles = await asyncio.gather(
            *(
                bench.client.start_workflow(
                    AgentWorkflow.run, inp, id=f"tp-{n}-{uuid.uuid4().hex[:6]}", task_queue=agent_q
                )
                for n, inp in enumerate(inputs)
            )
        )
        results = await asyncio.wait_for(
            asyncio.gather(*(h.result() for h in handles), return_exceptions=True), 600
        )
        wall = time.perf_counter() - began
    calls = WORKFLOWS * CALLS_PER_WORKFLOW
    failed = sum(failures(n, root, r) for n, r in enumerate(results))
    return {
        "workflows": WORKFLOWS,
        "tool_calls": calls,
        "calls_per_turn": CALLS_PER_TURN,
        "wall_s": round(wall, 2),
        "tool_calls_per_s": round(calls / wall, 1),
        "failures": failed,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


async def run() -> dict[str, Any]:
    async with temporal_bench("throughput") as bench:
        return await measure(bench)


def main() -> int:
    n = asyncio.run(run())
    ok = n["tool_calls_per_s"] >= FLOOR and n["failures"] == 0
    print_table(
        ["workflows x calls", "calls/turn", "wall s", "tool calls/s", "failures", "floor"],
        [
            (
                f"{n['workflows']} x {CALLS_PER_WORKFLOW}",
                n["calls_per_turn"],
                n["wall_s"],
                n["tool_calls_per_s"],
                n["failures"],
                f">= {FLOOR:g}/s, 0 failures {'ok' if ok else 'MISSED'}",
            )
        ],
    )
    emit_json("throughput", n, ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
