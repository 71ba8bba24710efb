"""What a local activity costs the worker, and what batching a turn's calls saves.

Run: ``python bench/local_batch.py``. One private dev server, workers in this
process. Rows, each ``ROUNDS`` times (medians reported):

- ``sdk, one local activity per call``: a probe, not Filegate: ``WORKFLOWS``
  workflows of ``TURNS`` turns, each turn one no-op local activity (the model
  call) and then ``CALLS_PER_TURN`` no-op local activities one after another;
- ``sdk, one local activity per turn``: the same calls, the turn's four as one
  local activity returning four results;
- ``co-hosted, one activity per call``: ``bench/throughput.py``'s co-hosted
  row with batching turned off (each call its own ``filegate.<tool>`` local
  activity, as before ``filegate.tool_batch``);
- ``co-hosted, batched``: the same row as shipped;
- ``remote, one activity per call`` / ``remote, batched``: the same for the
  ``remote`` row (agents on a worker of their own, a remote tools worker).

Reported: calls per second and the CPU milliseconds per call of this process
and of the Temporal server. The difference between the two sdk rows is what
one local activity costs a worker beyond its work (an activation, an activity
task, a marker). Checks (exit 1 when missed): batched, the co-hosted row uses
less worker CPU per call and the remote row less server CPU per call than
unbatched, with 0 failures in every Filegate row.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import throughput
from common import Bench, emit_json, print_table, temporal_bench
from temporalio import activity, workflow
from temporalio.worker import Worker

from filegate.workflows import batching

WORKFLOWS = 50
TURNS = 5
CALLS_PER_TURN = 4
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
LA_TIMEOUT = timedelta(seconds=60)


@activity.defn(name="bench.la_noop")
def la_noop(n: int) -> int:
    return n


@activity.defn(name="bench.la_noop_batch")
def la_noop_batch(ns: list[int]) -> list[int]:
    return list(ns)


@dataclass
class LocalShape:
    turns: int
    batched: bool
    """The turn's calls as one local activity (True) or one each, in a row."""


@workflow.defn(name="BenchLocalTurns", sandboxed=False)
class LocalTurnsWorkflow:
    """``turns`` x (a no-op model call, then ``CALLS_PER_TURN`` no-op calls)."""

    @workflow.run
    async def run(self, shape: LocalShape) -> int:
        done = 0
        for _ in range(shape.turns):
            await workflow.execute_local_activity(la_noop, 0, start_to_close_timeout=LA_TIMEOUT)
            if shape.batched:
                results = await workflow.execute_local_activity(
                    la_noop_batch, [1] * CALLS_PER_TURN, start_to_close_timeout=LA_TIMEOUT
                )
                done += sum(results)
                continue
            for _ in range(CALLS_PER_TURN):
                done += await workflow.execute_local_activity(
                    la_noop, 1, start_to_close_timeout=LA_TIMEOUT
                )
        return done


async def sdk_row(bench: Bench, *, batched: bool) -> dict[str, Any]:
    queue = f"bench-la-{uuid.uuid4().hex[:8]}"
    async with Worker(
        bench.client,
        task_queue=queue,
        workflows=[LocalTurnsWorkflow],
        activities=[la_noop, la_noop_batch],
        activity_executor=ThreadPoolExecutor(16),
    ):
        server = throughput.server_pid(bench)
        server_cpu = throughput.cpu_seconds(server)
        cpu, start = time.process_time(), time.perf_counter()
        handles = [
            await bench.client.start_workflow(
                LocalTurnsWorkflow.run,
                LocalShape(TURNS, batched),
                id=uuid.uuid4().hex,
                task_queue=queue,
            )
            for _ in range(WORKFLOWS)
        ]
        done = sum([await h.result() for h in handles])
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        server_cpu = throughput.cpu_seconds(server) - server_cpu
    expected = WORKFLOWS * TURNS * CALLS_PER_TURN
    return {
        "calls_per_s": round(done / wall, 1),
        "worker_cpu_ms_per_call": round(cpu * 1000 / done, 2),
        "server_cpu_ms_per_call": round(server_cpu * 1000 / done, 2),
        "failures": expected - done,
    }


async def filegate_row(bench: Bench, mode: str, *, batched: bool) -> dict[str, Any]:
    """``bench/throughput.py``'s ``mode`` row, batching on or off."""
    original = batching.LocalCalls.max_batch, batching.RemoteCalls.max_batch
    if not batched:  # one activity per call, as before filegate.tool_batch
        batching.LocalCalls.max_batch = batching.RemoteCalls.max_batch = 1
    try:
        row = await throughput.measure(bench, mode)
    finally:
        batching.LocalCalls.max_batch, batching.RemoteCalls.max_batch = original
    return {
        "calls_per_s": row["tool_calls_per_s"],
        "worker_cpu_ms_per_call": row["worker_cpu_ms_per_call"],
        "server_cpu_ms_per_call": row["server_cpu_ms_per_call"],
        "failures": row["failures"],
    }


ROWS = (
    "sdk, one local activity per call",
    "sdk, one local activity per turn",
    "co-hosted, one activity per call",
    "co-hosted, batched",
    "remote, one activity per call",
    "remote, batched",
)


async def run() -> dict[str, dict[str, Any]]:
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in ROWS}
    async with temporal_bench("local-batch") as bench:
        for _ in range(ROUNDS):
            samples[ROWS[0]].append(await sdk_row(bench, batched=False))
            samples[ROWS[1]].append(await sdk_row(bench, batched=True))
            samples[ROWS[2]].append(await filegate_row(bench, "co-hosted", batched=False))
            samples[ROWS[3]].append(await filegate_row(bench, "co-hosted", batched=True))
            samples[ROWS[4]].append(await filegate_row(bench, "remote", batched=False))
            samples[ROWS[5]].append(await filegate_row(bench, "remote", batched=True))
    return {
        name: {
            "calls_per_s": statistics.median(r["calls_per_s"] for r in rows),
            "worker_cpu_ms_per_call": statistics.median(r["worker_cpu_ms_per_call"] for r in rows),
            "server_cpu_ms_per_call": statistics.median(r["server_cpu_ms_per_call"] for r in rows),
            "failures": sum(r["failures"] for r in rows),
        }
        for name, rows in samples.items()
    }


def main() -> int:
    rows = asyncio.run(run())
    print_table(
        ["row", "calls/s", "worker CPU ms/call", "server CPU ms/call", "failures"],
        [
            [
                name,
                r["calls_per_s"],
                r["worker_cpu_ms_per_call"],
                r["server_cpu_ms_per_call"],
                r["failures"],
            ]
            for name, r in rows.items()
        ],
    )
    per_call, per_turn = rows[ROWS[0]], rows[ROWS[1]]
    # Per turn the per-call shape runs CALLS_PER_TURN - 1 local activities more.
    la_cost = (
        (per_call["worker_cpu_ms_per_call"] - per_turn["worker_cpu_ms_per_call"])
        * CALLS_PER_TURN
        / (CALLS_PER_TURN - 1)
    )
    print(f"one local activity costs the worker about {la_cost:.2f} ms of CPU beyond its work")
    checks = {
        "co-hosted: batched worker CPU per call below unbatched": (ROWS[3], ROWS[2], "worker"),
        "remote: batched server CPU per call below unbatched": (ROWS[5], ROWS[4], "server"),
    }
    ok = all(rows[name]["failures"] == 0 for name in ROWS)
    for check, (batched_row, unbatched_row, side) in checks.items():
        key = f"{side}_cpu_ms_per_call"
        met = rows[batched_row][key] < rows[unbatched_row][key]
        ok = ok and met
        print(f"{check}: {'ok' if met else 'MISSED'} "
              f"({rows[batched_row][key]} vs {rows[unbatched_row][key]} ms)")  # fmt: skip
    emit_json(
        "local_batch",
        {"rows": rows, "local_activity_cpu_ms": round(la_cost, 2)},
        ok,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
