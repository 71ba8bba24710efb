"""One operation from outside a workflow: standalone activity vs ``OperationWorkflow``.

Run: ``python bench/standalone.py``. Starts a private Temporal dev server and
an in-process tools worker (tools, transfers and ``OperationWorkflow``: every
tools worker hosts them) on a Filesystem backend, then makes ``CALLS`` calls of
``read_file`` on a 4 KB file each way, alternating (so load drifts hit both
paths alike), the way ``FilegateBackend`` and ``filegate call`` make them
(:func:`filegate.operations.run_outside`):

- ``standalone``: the ``filegate.read_file`` activity started by the client;
- ``workflow``: one ``OperationWorkflow`` scheduling the same activity.

Reported: the client's wall time per call (start to result, median and
p95) and the ratio of the medians. No floor: informational (exit 0 unless a
call fails).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit_json, ms, percentile, print_table, temporal_bench, text_file
from temporalio.client import Client

from filegate.activities.stubs import tool_request
from filegate.backends.filesystem import FilesystemBackend
from filegate.kernel.operation_types import Operation
from filegate.operations import Via, run_outside
from filegate.worker import tools_worker

CALLS = int(os.environ.get("BENCH_CALLS", "100"))
WARMUP = 5
FILE_BYTES = 4096
PATHS: tuple[Via, ...] = ("standalone", "workflow")


async def one_call(client: Client, queue: str, path: Via) -> float:
    """Wall time of one read_file on ``path``, start to result, at the client."""
    request = tool_request("read_file", {"file_path": "/data.txt"}, backend="fs", tool_call_id="")
    began = time.perf_counter()
    ran = await run_outside(
        client, Operation(task_queue=queue, tool=request), operation_task_queue=queue, path=path
    )
    elapsed = time.perf_counter() - began
    outcome = ran.result.outcome
    if ran.via != path or outcome is None or outcome.status != "success":
        raise RuntimeError(f"{path} call went {ran.via}: {outcome}")
    return elapsed


async def main() -> int:
    async with temporal_bench("standalone") as bench:
        root = bench.tmp / "ws"
        root.mkdir()
        (root / "data.txt").write_text(text_file(FILE_BYTES))
        queue = f"bench-standalone-{uuid.uuid4().hex[:8]}"
        backend = FilesystemBackend(str(root), virtual_mode=True)
        times: dict[Via, list[float]] = {"standalone": [], "workflow": []}
        async with tools_worker(bench.client, queue, {"fs": backend}, bench.tmp / "journal"):
            for _ in range(WARMUP):
                for path in PATHS:
                    await one_call(bench.client, queue, path)
            for n in range(CALLS):
                order = PATHS if n % 2 == 0 else PATHS[::-1]
                for path in order:
                    times[path].append(await one_call(bench.client, queue, path))
    rows = []
    numbers: dict[str, float] = {"calls": float(CALLS)}
    for path in PATHS:
        p50, p95 = percentile(times[path], 50), percentile(times[path], 95)
        rows.append([path, ms(p50), ms(p95)])
        numbers[f"{path}_p50_ms"], numbers[f"{path}_p95_ms"] = ms(p50), ms(p95)
    numbers["workflow_over_standalone_p50"] = round(
        numbers["workflow_p50_ms"] / numbers["standalone_p50_ms"], 2
    )
    print(f"one read_file of {FILE_BYTES} B from outside a workflow, {CALLS} calls each")
    print_table(["path", "p50 ms", "p95 ms"], rows)
    print(f"workflow / standalone (p50): {numbers['workflow_over_standalone_p50']:.2f}x")
    emit_json("standalone", numbers, True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
