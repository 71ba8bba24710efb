"""Throughput: 50 concurrent agent workflows x 20 tool calls, in-process workers.

Run: ``python bench/throughput.py``. Starts a private Temporal dev server,
one in-process agent worker and one in-process tools worker (Filesystem
backend), then starts ``WORKFLOWS`` scripted agents at once. Each works in
its own directory with ``CALLS_PER_TURN`` parallel calls per model turn
(write, read, edit, read back, then ls/glob/grep/read), 20 calls in all.

``ROUNDS`` rounds (``BENCH_ROUNDS``, default 5) each measure, in this order
on the same server, the ``noop ceiling``, ``remote``, ``co-hosted`` and ``local``; the
``agent, no-op tools`` probe runs once after them, right after a ceiling of
its own (its ratio's reference). Rows:

- ``noop ceiling``: a probe, not Filegate: 50 trivial workflows running the
  same number of no-op activities in the same turns on the same server. It is
  what this server sustains for activities that do nothing, the bound on all
  other rows;
- ``remote``: the agents on an agent worker of their own, every tool call on
  the tools worker's task queue (a turn's calls in one ``filegate.tool_batch``
  activity there, contract §8);
- ``co-hosted`` (the floors): the deployment's common path, one worker per
  backend type: the tools worker also runs the agents (``serve_agents``),
  which are started on its queue, so their calls on its backend are local
  activities there and pay no task-queue trip (contract §8);
- ``local``: the same agents with the backend hosted by the agent worker
  (``kind="local"``), every tool call a local activity;
- ``agent, no-op tools``: a probe: the same Filegate agents, but the tools
  worker answers every ``filegate.*`` activity at once without touching a
  file. It is the bound the agent side (workflow, model calls, server) puts on
  the ``remote`` row.

One process runs every worker of a row (the ``co-hosted`` row has one worker).

Reported: tool calls per second from the first start to the last result
(the round with the median rate), that rate as a ratio of the ``noop
ceiling`` measured just before it in the same round (the median of the
rounds' ratios; a ratio of neighbours does not move with the machine and the
drifting load of a shared one the way an absolute rate does), the failures
(workflow failures + tool errors + wrong file contents), which must be zero,
and the CPU milliseconds per tool call of the Temporal server and of the
worker process. Floors (exit 1 if one is
missed, each printed ok/MISSED): ``co-hosted`` and ``remote`` each >=
``RATIO_FLOOR`` (0.85) x the no-op ceiling and >= 100 tool calls/s, 0
failures in both. The ``local`` ratio is reported, not floored.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Bench, call, emit_json, print_table, remote, scripted_input, temporal_bench
from temporalio import activity, workflow
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from filegate.backends.filesystem import FilesystemBackend
from filegate.kernel import wire
from filegate.kernel.tool_types import (
    TOOL_ORDER,
    ToolBatch,
    ToolBatchResult,
    ToolOutcome,
    ToolRequest,
)
from filegate.wiring.tuning import ACTIVITY_TASK_POLLERS, WORKFLOW_TASK_POLLERS
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import AgentResult, AgentWorkflow, BackendRef

WORKFLOWS = int(os.environ.get("BENCH_WORKFLOWS", "50"))
CALLS_PER_WORKFLOW = 20
CALLS_PER_TURN = int(os.environ.get("BENCH_CALLS_PER_TURN", "4"))
FLOOR = 100.0
"""Absolute floor of the ``co-hosted`` and ``remote`` rows, tool calls per second."""
RATIO_FLOOR = 0.85
"""``co-hosted`` tool calls/s over the ``noop ceiling`` of the same run, at least."""
FLOOR_ROW = "co-hosted"
"""The deployment's common path: one worker per backend type, co-hosting its agents."""
APART_ROW = "remote"
"""Agents on an agent worker of their own, a remote tools worker: floored like ``FLOOR_ROW``."""
CEILING_ROW = "noop ceiling"
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
"""Rounds of (ceiling, remote, local); rates and ratios are their medians."""


@dataclass
class NoopShape:
    turns: int
    per_turn: int
    task_queue: str


@activity.defn(name="bench.noop")
async def noop_activity(n: int) -> int:
    return n


@workflow.defn(name="BenchNoopTurns", sandboxed=False)
class NoopTurnsWorkflow:
    """``turns`` x ``per_turn`` parallel no-op activities; returns how many completed."""

    @workflow.run
    async def run(self, shape: NoopShape) -> int:
        done = 0
        for _ in range(shape.turns):
            results = await asyncio.gather(
                *(
                    workflow.execute_activity(
                        noop_activity,
                        1,
                        task_queue=shape.task_queue,
                        start_to_close_timeout=timedelta(seconds=60),
                    )
                    for _ in range(shape.per_turn)
                )
            )
            done += sum(results)
        return done


def instant_tool(name: str) -> Any:
    """A ``filegate.<name>`` activity that answers at once and touches no file (probe)."""

    @activity.defn(name=f"filegate.{name}")
    async def answer(request: ToolRequest) -> ToolOutcome:
        return ToolOutcome(content=f"v2 {request.tool} (no-op probe)")

    return answer


@activity.defn(name=wire.TOOL_BATCH_ACTIVITY)
async def instant_batch(batch: ToolBatch) -> ToolBatchResult:
    """``filegate.tool_batch`` answering every call at once (probe)."""
    return ToolBatchResult(
        outcomes=[ToolOutcome(content=f"v2 {r.tool} (no-op probe)") for r in batch.requests]
    )


INSTANT_TOOLS = [instant_tool(name) for name in TOOL_ORDER] + [instant_batch]


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


def probe_failures(result: AgentResult | BaseException) -> int:
    """The no-op probe writes nothing: only failed runs and missing calls count."""
    if isinstance(result, BaseException):
        return CALLS_PER_WORKFLOW
    return result.tool_errors + abs(result.tool_calls - CALLS_PER_WORKFLOW)


def failures(n: int, root: Path, result: AgentResult | BaseException) -> int:
    """Failed runs, missing calls and tool errors (:func:`probe_failures`), and wrong files."""
    bad = probe_failures(result)
    if isinstance(result, BaseException):
        return bad
    for i in range(CALLS_PER_TURN):
        path = root / f"w{n}" / f"f{i}.txt"
        if not path.is_file() or path.read_text() != f"v2 /w{n}/f{i}.txt\n":
            bad += 1
    return bad


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_pid(bench: Bench) -> int:
    pid = bench.server.pid
    assert pid is not None, "the bench's Temporal server is not running"
    return pid


@dataclass
class Load:
    """Wall time and CPU (server, this worker process) of one measured stretch."""

    wall: float = 0.0
    server_cpu: float = 0.0
    worker_cpu: float = 0.0

    def row(self, calls: int, failed: int) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall, 2),
            "tool_calls_per_s": round(calls / self.wall, 1),
            "failures": failed,
            "server_cpu_ms_per_call": round(self.server_cpu / calls * 1000, 1),
            "worker_cpu_ms_per_call": round(self.worker_cpu / calls * 1000, 1),
        }


@contextmanager
def metered(bench: Bench) -> Iterator[Load]:
    load = Load()
    server, worker = cpu_seconds(server_pid(bench)), cpu_seconds(os.getpid())
    began = time.perf_counter()
    yield load
    load.wall = time.perf_counter() - began
    load.server_cpu = cpu_seconds(server_pid(bench)) - server
    load.worker_cpu = cpu_seconds(os.getpid()) - worker


async def run_agents(
    bench: Bench, queue: str, ref: BackendRef, prefix: str
) -> tuple[Load, list[AgentResult | BaseException]]:
    """One warm-up run, then ``WORKFLOWS`` scripted agents on ``queue`` at once, metered."""
    warm = scripted_input(script(WORKFLOWS), ref)
    await bench.client.execute_workflow(
        AgentWorkflow.run, warm, id=f"warm-{uuid.uuid4().hex[:8]}", task_queue=queue
    )
    tag = uuid.uuid4().hex[:6]
    inputs = [scripted_input(script(n), ref) for n in range(WORKFLOWS)]
    with metered(bench) as load:
        handles = await asyncio.gather(
            *(
                bench.client.start_workflow(
                    AgentWorkflow.run, inp, id=f"{prefix}-{n}-{tag}", task_queue=queue
                )
                for n, inp in enumerate(inputs)
            )
        )
        results = await asyncio.wait_for(
            asyncio.gather(*(h.result() for h in handles), return_exceptions=True), 600
        )
    return load, list(results)


async def measure(bench: Bench, mode: str) -> dict[str, Any]:
    """``mode``: ``remote``, ``local`` or ``instant`` (remote refs, no-op tools worker)."""
    run_tag = uuid.uuid4().hex[:6]
    root = bench.tmp / f"ws-{mode}-{run_tag}"
    root.mkdir()
    fs = FilesystemBackend(str(root), virtual_mode=True)
    agent_q, tools_q = bench.queues()
    journal = bench.tmp / f"journal-{mode}-{run_tag}"
    if mode == "local":
        ref = BackendRef(kind="local", name="fs")
        hosted: dict[str, Any] = {"backends": {"fs": fs}, "journal_dir": journal}
    else:
        ref = remote("fs", tools_q)
        hosted = {}
    agent_q = tools_q if mode == "co-hosted" else agent_q
    if mode == "instant":
        tools = Worker(
            bench.client,
            task_queue=tools_q,
            activities=INSTANT_TOOLS,
            max_concurrent_activity_task_polls=ACTIVITY_TASK_POLLERS,
        )
    else:
        tools = tools_worker(
            bench.client, tools_q, {"fs": fs}, journal, serve_agents=mode == "co-hosted"
        )
    agents = (
        contextlib.nullcontext()
        if mode == "co-hosted"
        else agent_worker(bench.client, agent_q, **hosted)
    )
    async with agents, tools:
        load, results = await run_agents(bench, agent_q, ref, f"tp-{mode}")
    if mode == "instant":
        failed = sum(probe_failures(r) for r in results)
    else:
        failed = sum(failures(n, root, r) for n, r in enumerate(results))
    return load.row(WORKFLOWS * CALLS_PER_WORKFLOW, failed)


async def noop_ceiling(bench: Bench) -> dict[str, Any]:
    """The probe: trivial workflows, the same activity count and turns, no Filegate."""
    agent_q, tools_q = bench.queues()
    turns = -(-CALLS_PER_WORKFLOW // CALLS_PER_TURN)
    shape = NoopShape(turns=turns, per_turn=CALLS_PER_TURN, task_queue=tools_q)
    async with (
        Worker(
            bench.client,
            task_queue=agent_q,
            workflows=[NoopTurnsWorkflow],
            workflow_runner=UnsandboxedWorkflowRunner(),
            max_concurrent_workflow_task_polls=WORKFLOW_TASK_POLLERS,
        ),
        Worker(
            bench.client,
            task_queue=tools_q,
            activities=[noop_activity],
            max_concurrent_activity_task_polls=ACTIVITY_TASK_POLLERS,
        ),
    ):
        await bench.client.execute_workflow(
            NoopTurnsWorkflow.run, shape, id=f"warm-{uuid.uuid4().hex[:8]}", task_queue=agent_q
        )
        with metered(bench) as load:
            handles = [
                await bench.client.start_workflow(
                    NoopTurnsWorkflow.run,
                    shape,
                    id=f"noop-{uuid.uuid4().hex[:8]}",
                    task_queue=agent_q,
                )
                for _ in range(WORKFLOWS)
            ]
            done = await asyncio.gather(*(h.result() for h in handles))
    calls = sum(done)
    return load.row(calls, WORKFLOWS * turns * CALLS_PER_TURN - calls)


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median rate (an odd count of rounds: a measured row)."""
    ordered = sorted(rows, key=lambda r: r["tool_calls_per_s"])
    return ordered[(len(ordered) - 1) // 2]


async def run() -> dict[str, Any]:
    rounds: list[dict[str, dict[str, Any]]] = []
    async with temporal_bench("throughput") as bench:
        for _ in range(ROUNDS):
            # The ceiling right before the rows it bounds, every round: the other
            # load on a shared machine drifts, and a ratio of neighbours follows it.
            ceiling = await noop_ceiling(bench)
            rounds.append({
                CEILING_ROW: ceiling,
                APART_ROW: await measure(bench, "remote"),
                FLOOR_ROW: await measure(bench, "co-hosted"),
                "local": await measure(bench, "local"),
            })  # fmt: skip
        # The probe's ratio is of neighbours too: a ceiling right before it (the
        # last round's is two rows older, and the load drifts in between).
        probe_ceiling = await noop_ceiling(bench)
        probe = await measure(bench, "instant")
    for measured in rounds:
        ceiling = measured[CEILING_ROW]["tool_calls_per_s"]
        for row in measured.values():
            row["ratio_to_ceiling"] = round(row["tool_calls_per_s"] / ceiling, 3)
    probe["ratio_to_ceiling"] = round(
        probe["tool_calls_per_s"] / probe_ceiling["tool_calls_per_s"], 3
    )
    rows = {name: median_row([r[name] for r in rounds]) for name in rounds[0]}
    rows["agent, no-op tools"] = probe

    def ratio(name: str) -> float:
        return round(statistics.median(r[name]["ratio_to_ceiling"] for r in rounds), 3)

    return {
        "workflows": WORKFLOWS,
        "tool_calls": WORKFLOWS * CALLS_PER_WORKFLOW,
        "calls_per_turn": CALLS_PER_TURN,
        "rounds": ROUNDS,
        **rows[FLOOR_ROW],
        "ceiling_calls_per_s": rows[CEILING_ROW]["tool_calls_per_s"],
        "co_hosted_ratio": ratio(FLOOR_ROW),
        "remote_ratio": ratio(APART_ROW),
        "local_ratio": ratio("local"),
        "rows": rows,
        "per_round": rounds,
        "probe_ceiling_calls_per_s": probe_ceiling["tool_calls_per_s"],
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    n = asyncio.run(run())
    print(f"{n['workflows']} workflows x {CALLS_PER_WORKFLOW} tool calls, "
          f"{n['calls_per_turn']} parallel calls per model turn")  # fmt: skip
    print_table(
        ["row", "wall s", "tool calls/s", "x ceiling", "failures", "server CPU ms/call",
         "worker CPU ms/call"],
        [
            (name, r["wall_s"], r["tool_calls_per_s"], f"{r['ratio_to_ceiling']:.2f}",
             r["failures"], r["server_cpu_ms_per_call"], r["worker_cpu_ms_per_call"])
            for name, r in n["rows"].items()
        ],
    )  # fmt: skip
    print(f"per round, tool calls/s (x the same round's {CEILING_ROW})")
    print_table(
        ["round", *n["per_round"][0]],
        [
            (str(k + 1), *(f"{r['tool_calls_per_s']} ({r['ratio_to_ceiling']:.2f})"
                           for r in measured.values()))
            for k, measured in enumerate(n["per_round"])
        ],
    )  # fmt: skip
    print(f"load average (1 min) {n['load_avg_1m']:.2f} on {os.cpu_count()} CPUs")
    apart = n["rows"][APART_ROW]
    floors = {
        f"{FLOOR_ROW} >= {RATIO_FLOOR:g} x {CEILING_ROW}": (
            n["co_hosted_ratio"] >= RATIO_FLOOR,
            f"{n['co_hosted_ratio']:.3f} x (median of {n['rounds']} rounds)",
        ),
        f"{APART_ROW} >= {RATIO_FLOOR:g} x {CEILING_ROW}": (
            n["remote_ratio"] >= RATIO_FLOOR,
            f"{n['remote_ratio']:.3f} x (median of {n['rounds']} rounds)",
        ),
        f"{FLOOR_ROW} >= {FLOOR:g} tool calls/s": (
            n["tool_calls_per_s"] >= FLOOR,
            f"{n['tool_calls_per_s']}/s",
        ),
        f"{APART_ROW} >= {FLOOR:g} tool calls/s": (
            apart["tool_calls_per_s"] >= FLOOR,
            f"{apart['tool_calls_per_s']}/s",
        ),
        f"{FLOOR_ROW}, {APART_ROW}: 0 failures": (
            n["failures"] == 0 and apart["failures"] == 0,
            f"{n['failures']} + {apart['failures']} failures",
        ),
    }
    for floor, (met, measured) in floors.items():
        print(f"{floor}: {measured} {'ok' if met else 'MISSED'}")
    local = n["rows"]["local"]
    print(f"local: {n['local_ratio']:.3f} x {CEILING_ROW} (median of {n['rounds']} rounds; "
          f"median rate {local['tool_calls_per_s']}/s; reported, no floor)")  # fmt: skip
    ok = all(met for met, _ in floors.values())
    n["floors_missed"] = [floor for floor, (met, _) in floors.items() if not met]
    emit_json("throughput", n, ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
