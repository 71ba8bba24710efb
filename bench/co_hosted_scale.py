"""Probe: what bounds co-hosted throughput, one worker process or the machine?

Run: ``python bench/co_hosted_scale.py``. The ``co-hosted`` row of
``bench/throughput.py`` (50 agents x 20 calls on a tools worker that also runs
them) once with that one worker, once with a second co-hosting worker process
on the same queue, root and journal (``filegate worker --role tools
--serve-agents``), each right after a no-op ceiling of its own. If one process
is the bound, the second raises the rate; if the machine is, it does not.
``ROUNDS`` (``BENCH_ROUNDS``, default 3) rounds; medians. A probe: it prints
a table and JSON and has no floor (it exits 1 only on failed calls).

CPU per call counts the server and this process only, so the two-process row
under-reports the worker side.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agent_step import tools_process
from common import Bench, emit_json, print_table, remote, temporal_bench
from throughput import CALLS_PER_WORKFLOW, WORKFLOWS, failures, noop_ceiling, run_agents

from filegate.backends.filesystem import FilesystemBackend
from filegate.worker import tools_worker

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))


async def co_hosted(bench: Bench, processes: int) -> dict[str, Any]:
    """The co-hosted row with ``processes`` worker processes (this one plus the rest)."""
    tag = uuid.uuid4().hex[:6]
    root = bench.tmp / f"ws-{processes}-{tag}"
    root.mkdir()
    journal = bench.tmp / f"journal-{processes}-{tag}"
    _, queue = bench.queues()
    fs = FilesystemBackend(str(root), virtual_mode=True)
    ref = remote("fs", queue)
    flags = ("--serve-agents", "--journal-dir", str(journal))
    extra = [tools_process(bench, root, queue, *flags) for _ in range(processes - 1)]
    async with contextlib.AsyncExitStack() as stack:
        # The other processes first: each is waited for until it polls the queue.
        for worker in extra:
            await stack.enter_async_context(worker)
        await stack.enter_async_context(
            tools_worker(bench.client, queue, {"fs": fs}, journal, serve_agents=True)
        )
        load, results = await run_agents(bench, queue, ref, "cs")
    failed = sum(failures(n, root, r) for n, r in enumerate(results))
    return load.row(WORKFLOWS * CALLS_PER_WORKFLOW, failed)


async def run() -> dict[str, Any]:
    rows: dict[str, list[dict[str, Any]]] = {"1 process": [], "2 processes": []}
    async with temporal_bench("co-hosted-scale") as bench:
        for _ in range(ROUNDS):
            for name, processes in (("1 process", 1), ("2 processes", 2)):
                ceiling = await noop_ceiling(bench)
                row = await co_hosted(bench, processes)
                row["ratio_to_ceiling"] = round(
                    row["tool_calls_per_s"] / ceiling["tool_calls_per_s"], 3
                )
                row["ceiling_calls_per_s"] = ceiling["tool_calls_per_s"]
                rows[name].append(row)
    return {
        name: {
            "ratio_median": statistics.median(r["ratio_to_ceiling"] for r in measured),
            "calls_per_s_median": statistics.median(r["tool_calls_per_s"] for r in measured),
            "failures": sum(r["failures"] for r in measured),
            "rounds": measured,
        }
        for name, measured in rows.items()
    }


def main() -> int:
    numbers = asyncio.run(run())
    print(f"co-hosted, {WORKFLOWS} workflows x {CALLS_PER_WORKFLOW} calls, {ROUNDS} rounds")
    print_table(
        ["worker processes", "calls/s (median)", "x ceiling (median)", "per round", "failures"],
        [
            (name, n["calls_per_s_median"], f"{n['ratio_median']:.2f}",
             " ".join(f"{r['tool_calls_per_s']}({r['ratio_to_ceiling']:.2f})"
                      for r in n["rounds"]), n["failures"])
            for name, n in numbers.items()
        ],
    )  # fmt: skip
    ok = all(n["failures"] == 0 for n in numbers.values())
    emit_json("co_hosted_scale", numbers, ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
