"""Tool-call round trip: workflow + activity on the dev server vs the backend directly.

Run: ``python bench/roundtrip.py``. Starts a private Temporal dev server and
in-process agent + tools workers, then runs two scripted agents of ``CALLS``
steps, each step one ``read_file`` of a 4 KB file:

- on a remote Filesystem backend (the call is the ``filegate.read_file``
  activity on the tools worker's queue);
- on the State backend (the call runs inside the workflow; the file is
  written by the first step).

Reported: the activity's server-side round trip (scheduled -> completed, p50
and p95) against the same ``run_tool`` call made directly on the backend
(ratio of the p50s), and the wall time of a whole agent step (model activity
+ tool + workflow tasks) for both backends, whose difference is what running
the tool as an activity costs over running it in the workflow. These two runs
make the model call a regular activity (``model_call="activity"``) so that its
scheduled events mark the steps. A third run takes the defaults with the
backend hosted by the agent worker (``kind="local"``: model call and tool both
local activities) and reports its mean step time (run time / steps).
No floor: informational (exit 0 unless a run fails).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


from common import (
    Bench,
    activity_spans,
    breakdown,
    call,
    emit_json,
    ms,
    percentile,
    print_table,
    remote,
    run_histories,
    scripted_input,
    temporal_bench,
    text_file,
)

from filegate.backends.filesystem import FilesystemBackend
from filegate.kernel.dispatch import run_tool
from filegate.kernel.state import StateBackend
from filegate.kernel.tool_types import ToolRequest
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef

CALLS = int(os.environ.get("BENCH_CALLS", "100"))
WARMUP = 5
FILE_BYTES = 4096


def direct_times(backend: object, n: int) -> list[float]:
    """Wall time of ``run_tool`` (gate, read, format) on the backend, no Temporal."""
    request = ToolRequest(
        tool="read_file", backend="fs", args={"file_path": "/data.txt"}, tool_call_id="x"
    )
    times = []
    for _ in range(n):
        began = time.perf_counter()
        out = run_tool(backend, request)  # type: ignore[arg-type]
        times.append(time.perf_counter() - began)
        assert out.status == "success", out.content
    return times


async def run_agent(
    bench: Bench, agent_q: str, input: AgentInput
) -> tuple[list[float], list[float], int]:
    """(tool activity round trips, per-step wall times, runs incl. continue-as-new)."""
    handle = await bench.client.start_workflow(
        AgentWorkflow.run, input, id=f"rt-{uuid.uuid4().hex[:8]}", task_queue=agent_q
    )
    result = await asyncio.wait_for(handle.result(), 120)
    assert result.tool_errors == 0, result.transcript[-3:]
    spans = await activity_spans(bench.client, handle)
    runs = len(await run_histories(bench.client, handle))
    tools = [s.round_trip for s in spans if s.name == "filegate.read_file"][WARMUP:]
    model_starts = [s.scheduled for s in spans if s.name == "filegate.model"]
    steps = [b - a for a, b in itertools.pairwise(model_starts)][WARMUP:]
    return tools, steps, runs


async def mean_step(bench: Bench, agent_q: str, input: AgentInput) -> float:
    """Seconds per model call of a whole run (server event times, start to close)."""
    handle = await bench.client.start_workflow(
        AgentWorkflow.run, input, id=f"rt-{uuid.uuid4().hex[:8]}", task_queue=agent_q
    )
    result = await asyncio.wait_for(handle.result(), 120)
    assert result.tool_errors == 0, result.transcript[-3:]
    split = await breakdown(bench.client, handle)
    return split.wall / result.steps


async def measure() -> dict[str, float]:
    async with temporal_bench("roundtrip") as bench:
        root = bench.tmp / "ws"
        root.mkdir()
        content = text_file(FILE_BYTES)
        (root / "data.txt").write_text(content)
        fs = FilesystemBackend(str(root), virtual_mode=True)
        agent_q, tools_q = bench.queues()
        reads = [
            {"tool_calls": [call(f"r{i}", "read_file", file_path="/data.txt")]}
            for i in range(CALLS)
        ]
        state_turns = [
            {"tool_calls": [call("w", "write_file", file_path="/data.txt", content=content)]},
            *reads,
        ]

        def activity_model(input: AgentInput) -> AgentInput:
            return input.model_copy(update={"model_call": "activity"})

        async with (
            agent_worker(
                bench.client, agent_q, backends={"fs": fs}, journal_dir=bench.tmp / "journal"
            ),
            tools_worker(bench.client, tools_q, {"fs": fs}, bench.tmp / "journal"),
        ):
            activity_rt, remote_steps, remote_runs = await run_agent(
                bench, agent_q, activity_model(scripted_input(reads, remote("fs", tools_q)))
            )
            _, state_steps, state_runs = await run_agent(
                bench,
                agent_q,
                activity_model(scripted_input(state_turns, BackendRef(kind="state"))),
            )
            local_step = await mean_step(
                bench, agent_q, scripted_input(reads, BackendRef(kind="local", name="fs"))
            )
        direct = direct_times(fs, CALLS)[WARMUP:]
    state_backend = StateBackend()
    state_backend.write("/data.txt", content)
    direct_state = direct_times(state_backend, CALLS)[WARMUP:]
    numbers = {
        "calls": CALLS,
        "runs_remote": remote_runs,
        "runs_state": state_runs,
        "direct_fs_p50_ms": ms(percentile(direct, 50)),
        "direct_fs_p95_ms": ms(percentile(direct, 95)),
        "direct_state_p50_ms": ms(percentile(direct_state, 50)),
        "activity_rt_p50_ms": ms(percentile(activity_rt, 50)),
        "activity_rt_p95_ms": ms(percentile(activity_rt, 95)),
        "step_remote_p50_ms": ms(percentile(remote_steps, 50)),
        "step_remote_p95_ms": ms(percentile(remote_steps, 95)),
        "step_state_p50_ms": ms(percentile(state_steps, 50)),
        "step_state_p95_ms": ms(percentile(state_steps, 95)),
        "step_local_mean_ms": ms(local_step),
    }
    numbers["activity_vs_direct_ratio"] = round(
        numbers["activity_rt_p50_ms"] / max(numbers["direct_fs_p50_ms"], 1e-3), 1
    )
    numbers["activity_over_state_step_ms"] = round(
        numbers["step_remote_p50_ms"] - numbers["step_state_p50_ms"], 2
    )
    return numbers


def report(n: dict[str, float]) -> None:
    print(
        f"read_file of a {FILE_BYTES // 1024} KB file, {n['calls']} calls each ({WARMUP} warm-up "
        f"dropped); workflow runs (continue-as-new): remote {n['runs_remote']}, "
        f"state {n['runs_state']}"
    )
    print_table(
        ["measure", "p50 ms", "p95 ms"],
        [
            ("direct run_tool on FilesystemBackend", n["direct_fs_p50_ms"], n["direct_fs_p95_ms"]),
            ("filegate.read_file activity (sched->done)", n["activity_rt_p50_ms"],
             n["activity_rt_p95_ms"]),
            ("agent step, remote Filesystem backend", n["step_remote_p50_ms"],
             n["step_remote_p95_ms"]),
            ("agent step, State backend (in-workflow)", n["step_state_p50_ms"],
             n["step_state_p95_ms"]),
            ("agent step, local backend, local model call (mean)", n["step_local_mean_ms"], "-"),
        ],
    )  # fmt: skip
    print(
        f"activity / direct (p50): {n['activity_vs_direct_ratio']}x; a tool call as an activity "
        f"adds {n['activity_over_state_step_ms']} ms per step over running it in the workflow "
        f"(direct State call: {n['direct_state_p50_ms']} ms)"
    )


def main() -> int:
    numbers = asyncio.run(measure())
    report(numbers)
    emit_json("roundtrip", numbers, True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
