"""Same-path ordering of one turn's tool calls: reads side by side, mutations in order."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from filegate.kernel.messages import ModelSpec
from filegate.kernel.tool_types import TOOL_ORDER, ToolOutcome, ToolRequest
from filegate.worker import agent_worker
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec
from filegate.workflows.calls import PathOrder
from tests.scripting import calls

HOLD = 0.4
"""Seconds every spied tool call takes: long enough that overlap is unambiguous."""


def test_path_order_waits_only_where_a_mutation_is_involved() -> None:
    async def scenario() -> None:
        order = PathOrder()
        made: dict[str, asyncio.Task[Any]] = {}
        waits: dict[str, list[asyncio.Task[Any]]] = {}
        plan = [
            ("w1", "/a", True),
            ("r1", "/a", False),
            ("r2", "/a", False),
            ("x1", "/b", False),
            ("w2", "/a", True),
            ("r3", "/a", False),
            ("n1", None, False),
        ]
        for name, key, mutates in plan:
            waits[name] = order.before(key, mutates=mutates)
            made[name] = asyncio.create_task(asyncio.sleep(0))
            order.add(key, made[name], mutates=mutates)
        await asyncio.gather(*made.values())
        assert waits["w1"] == []
        assert waits["r1"] == [made["w1"]] and waits["r2"] == [made["w1"]]
        assert waits["x1"] == []
        assert waits["w2"] == [made["r1"], made["r2"]]
        assert waits["r3"] == [made["w2"]]
        assert waits["n1"] == []

    asyncio.run(scenario())


SPANS: dict[str, tuple[float, float]] = {}


def spy_tool(name: str) -> Any:
    @activity.defn(name=f"filegate.{name}")
    async def spy(request: ToolRequest) -> ToolOutcome:
        began = time.monotonic()
        await asyncio.sleep(HOLD)
        call_id = request.tool_call_id.rsplit(":", 1)[-1]
        SPANS[call_id] = (began, time.monotonic())
        return ToolOutcome(content=f"{request.tool} ok")

    return spy


@pytest.mark.services
async def test_reads_of_one_path_overlap_and_mutations_stay_ordered(
    temporal_client: Client,
) -> None:
    SPANS.clear()
    a = {"file_path": "/a.txt"}
    turn = calls(
        ("w1", "write_file", {**a, "content": "x"}),
        ("r1", "read_file", a),
        ("r2", "read_file", a),
        ("w2", "write_file", {**a, "content": "y"}),
        ("r3", "read_file", a),
    )
    model = ModelSpec(provider="scripted", options={"script": {"turns": [turn, {"content": "ok"}]}})
    tag = uuid.uuid4().hex[:8]
    agent_q, tools_q = f"order-agent-{tag}", f"order-tools-{tag}"
    ref = BackendRef(kind="remote", name="spy", task_queue=tools_q)
    spies = [spy_tool(name) for name in TOOL_ORDER]
    async with (
        agent_worker(temporal_client, agent_q),
        Worker(temporal_client, task_queue=tools_q, activities=spies),
    ):
        result = await temporal_client.execute_workflow(
            AgentWorkflow.run,
            AgentInput(task="go", model=model, backend=BackendSpec(default=ref)),
            id=f"order-{tag}",
            task_queue=agent_q,
        )
    assert result.tool_calls == 5 and result.tool_errors == 0, result.transcript
    ids = ["w1", "r1", "r2", "w2", "r3"]
    assert sorted(SPANS) == sorted(ids), SPANS
    start = {k: SPANS[k][0] for k in ids}
    end = {k: SPANS[k][1] for k in ids}
    # A read waits for the write before it; a write waits for the reads before it.
    assert start["r1"] >= end["w1"] and start["r2"] >= end["w1"]
    assert start["w2"] >= max(end["r1"], end["r2"])
    assert start["r3"] >= end["w2"]
    # The two reads between the writes ran at the same time.
    assert start["r2"] < end["r1"] and start["r1"] < end["r2"]
