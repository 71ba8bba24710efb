"""Shared plumbing of the Temporal benchmarks (roundtrip, agent_step, throughput).

Each bench starts its own embedded Temporal dev server in a temp dir, runs an
agent worker and a tools worker in-process, drives scripted AgentWorkflows
and reads timings from the wall clock and from workflow history (server-side
event times, so they do not include the client's polling for the result).
Output style follows ``bench/search.py``: an aligned table, then one JSON line.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))

from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.client import Client, WorkflowHandle  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402

from filegate.devstack.servers import TemporalDevServer  # noqa: E402
from filegate.kernel.messages import ModelSpec  # noqa: E402
from filegate.workflows import AgentInput, BackendRef, BackendSpec, Limits  # noqa: E402

Turn = dict[str, Any]


@dataclass
class Bench:
    """What a running bench holds: the client, a scratch dir, fresh queue names."""

    client: Client
    tmp: Path
    server: TemporalDevServer

    @staticmethod
    def queues() -> tuple[str, str]:
        suffix = uuid.uuid4().hex[:8]
        return f"bench-agent-{suffix}", f"bench-tools-{suffix}"


@asynccontextmanager
async def temporal_bench(prefix: str) -> AsyncIterator[Bench]:
    """A private dev server (SQLite in a temp dir) and a pydantic-converter client."""
    with tempfile.TemporaryDirectory(prefix=f"filegate-{prefix}-") as scratch:
        tmp = Path(scratch)
        with TemporalDevServer(tmp / "temporal") as server:
            client = await Client.connect(
                server.address, namespace=server.namespace, data_converter=pydantic_data_converter
            )
            yield Bench(client, tmp, server)


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": args}


def scripted_input(
    turns: Sequence[Turn],
    backend: BackendRef,
    *,
    task: str = "bench",
    limits: Limits | None = None,
) -> AgentInput:
    """A scripted agent run on one backend (remote or State), final answer last."""
    script = {"turns": [*turns, {"content": "done"}]}
    return AgentInput(
        task=task,
        model=ModelSpec(provider="scripted", options={"script": script}),
        backend=BackendSpec(default=backend),
        limits=limits or Limits(max_steps=len(turns) + 5),
    )


def remote(name: str, task_queue: str) -> BackendRef:
    return BackendRef(kind="remote", name=name, task_queue=task_queue)


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


@dataclass
class ActivitySpan:
    name: str
    scheduled: float
    started: float
    completed: float

    @property
    def round_trip(self) -> float:
        """Scheduled -> completed on the server: queueing + dispatch + run + report."""
        return self.completed - self.scheduled


def _ts(event: Any) -> float:
    return float(event.event_time.seconds) + event.event_time.nanos / 1e9


async def run_histories(client: Client, handle: WorkflowHandle[Any, Any]) -> list[Any]:
    """Histories of every run of the workflow, following continue-as-new from the first."""
    histories = []
    run_id = handle.first_execution_run_id or handle.run_id
    while run_id:
        history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        histories.append(history)
        last = history.events[-1]
        run_id = None
        if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return histories


async def activity_spans(client: Client, handle: WorkflowHandle[Any, Any]) -> list[ActivitySpan]:
    """Every completed activity of a workflow (all runs) with its server-side event times."""
    spans: list[ActivitySpan] = []
    for history in await run_histories(client, handle):
        scheduled: dict[int, tuple[str, float]] = {}
        started: dict[int, float] = {}
        for event in history.events:
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                scheduled[event.event_id] = (attrs.activity_type.name, _ts(event))
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                attrs = event.activity_task_started_event_attributes
                started[attrs.scheduled_event_id] = _ts(event)
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                sid = event.activity_task_completed_event_attributes.scheduled_event_id
                name, at = scheduled[sid]
                spans.append(ActivitySpan(name, at, started.get(sid, at), _ts(event)))
    return spans


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Left-aligned first column, right-aligned numbers, like bench/search.py."""
    cells = [[str(h) for h in headers]] + [
        [f"{v:.2f}" if isinstance(v, float) else str(v) for v in row] for row in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        first = row[0].ljust(widths[0])
        rest = "  ".join(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))
        print(f"{first}  {rest}")
        if n == 0:
            print("-" * (sum(widths) + 2 * (len(widths) - 1)))


def emit_json(name: str, numbers: dict[str, Any], floors_met: bool) -> None:
    """The machine-readable line ``bench/run_all.py`` collects (last stdout line)."""
    print(json.dumps({"bench": name, **numbers, "floors_met": floors_met}))


def text_file(size: int, seed: int = 7) -> str:
    """Deterministic ~``size`` bytes of 80-column text."""
    lines: list[str] = []
    total = 0
    n = seed
    while total < size:
        n = (n * 1103515245 + 12345) % 2**31
        line = f"{len(lines):05d} " + ("lorem ipsum dolor sit amet " * 3)[:60] + f" {n:010d}"
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines) + "\n"


@dataclass
class Breakdown:
    """Where a workflow's wall time went, summed over all its runs (server event times)."""

    wall: float = 0.0
    wft_queue: float = 0.0
    """Workflow tasks: scheduled -> started (waiting for the agent worker to pick it up)."""
    wft_run: float = 0.0
    """Workflow tasks: started -> completed (workflow code, sandbox, payload conversion)."""
    model: float = 0.0
    tools: float = 0.0
    workflow_tasks: int = 0
    history_bytes: int = 0
    runs: int = 0

    def per(self, n: int) -> dict[str, float]:
        return {
            "wall_ms": ms(self.wall / n),
            "wft_queue_ms": ms(self.wft_queue / n),
            "wft_run_ms": ms(self.wft_run / n),
            "model_activity_ms": ms(self.model / n),
            "tool_activity_ms": ms(self.tools / n),
        }


async def breakdown(client: Client, handle: WorkflowHandle[Any, Any]) -> Breakdown:
    """Split a finished workflow's time into workflow tasks, model and tool activities."""
    out = Breakdown()
    spans = await activity_spans(client, handle)
    out.model = sum(s.round_trip for s in spans if s.name == "filegate.model")
    out.tools = sum(s.round_trip for s in spans if s.name.startswith("filegate.") and
                    s.name != "filegate.model")  # fmt: skip
    histories = await run_histories(client, handle)
    out.runs = len(histories)
    first, last = histories[0].events[0], histories[-1].events[-1]
    out.wall = _ts(last) - _ts(first)
    for history in histories:
        scheduled = 0.0
        started = 0.0
        for event in history.events:
            out.history_bytes += event.ByteSize()
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
                scheduled = _ts(event)
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                started = _ts(event)
                out.wft_queue += started - scheduled
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                out.wft_run += _ts(event) - started
                out.workflow_tasks += 1
    return out
