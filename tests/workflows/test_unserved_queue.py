"""A tool call to a task queue nobody polls ends in bounded time, with one clear answer.

Issue 28 item 7: a ``FileTools`` host calling a remote backend whose queue no
tools worker polls waited minutes without a word. Now the wait is
``Limits.tool_worker_wait_seconds`` (the activity's schedule-to-start timeout,
not retried), and the call ends with an error result naming the queue; a turn's
batched calls fail together, after one wait, instead of waiting again alone.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from filegate.kernel.limits import DEFAULT_TOOL_WORKER_WAIT
from filegate.kernel.messages import ToolCall
from filegate.workflows import BackendRef, BackendSpec, FileTools, FileToolsConfig
from filegate.workflows.inputs import Limits
from tests.workflows.test_execute_gate import ToolListWorkflow, running_host

pytestmark = pytest.mark.services

WAIT = 1.0
"""The configured wait of these tests (the default is a minute)."""
BOUND = 30.0
"""Seconds the runs may take: the wait plus workflow tasks, far below "forever"."""


@workflow.defn(name="UnservedTurnHost")
class TurnHost:
    """Runs all its calls as one model turn (a batch per task queue)."""

    @workflow.init
    def __init__(self, config: FileToolsConfig, calls: list[dict[str, Any]]) -> None:
        self.tools = FileTools(config)

    @workflow.run
    async def run(self, config: FileToolsConfig, calls: list[dict[str, Any]]) -> list[str]:
        results = await self.tools.run_turn([ToolCall.model_validate(c) for c in calls])
        return [r.text for r in results if r.is_error]


def unserved_config(queue: str, wait: float | None = WAIT) -> FileToolsConfig:
    return FileToolsConfig(
        backend=BackendSpec(default=BackendRef(kind="remote", name="fs", task_queue=queue)),
        limits=Limits(tool_worker_wait_seconds=wait),
    )


async def scheduled(handle: WorkflowHandle[Any, Any]) -> list[Any]:
    history = await handle.fetch_history()
    return [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


def test_the_wait_has_one_named_default() -> None:
    assert Limits().tool_worker_wait_seconds == DEFAULT_TOOL_WORKER_WAIT == 60.0
    assert FileToolsConfig().limits.tool_worker_wait_seconds == DEFAULT_TOOL_WORKER_WAIT


async def test_a_file_tools_host_calling_an_unpolled_queue_gets_a_report(
    temporal_client: Client,
) -> None:
    queue = f"nobody-polls-{uuid.uuid4().hex[:8]}"
    calls = [{"id": "l", "name": "ls", "args": {"path": "/"}}]
    async with running_host(temporal_client) as host_queue:
        handle = await temporal_client.start_workflow(
            ToolListWorkflow.run,
            args=[unserved_config(queue), calls],
            id=f"unserved-{uuid.uuid4().hex[:8]}",
            task_queue=host_queue,
        )
        result = await asyncio.wait_for(handle.result(), BOUND)
        [activity] = await scheduled(handle)  # not retried: another try would wait again
    answer = result["answers"]["l"]
    assert answer["error"] is True
    text = answer["text"]
    assert text.startswith("Error: the ls call got no tools worker")
    assert f"task queue '{queue}'" in text and "no worker polls that queue" in text
    assert "backend 'fs'" in text and "within 1 s" in text
    assert activity.schedule_to_start_timeout.ToTimedelta().total_seconds() == WAIT
    assert result["state"]["counters"]["tool_errors"] == 1


async def test_a_turns_batched_calls_fail_together_after_one_wait(
    temporal_client: Client,
) -> None:
    queue = f"nobody-polls-{uuid.uuid4().hex[:8]}"
    calls = [
        {"id": "a", "name": "ls", "args": {"path": "/a"}},
        {"id": "b", "name": "read_file", "args": {"file_path": "/b.txt"}},
    ]
    host_queue = f"turn-host-{uuid.uuid4().hex[:8]}"
    async with Worker(
        temporal_client,
        task_queue=host_queue,
        workflows=[TurnHost],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await temporal_client.start_workflow(
            TurnHost.run,
            args=[unserved_config(queue), calls],
            id=f"unserved-turn-{uuid.uuid4().hex[:8]}",
            task_queue=host_queue,
        )
        errors = await asyncio.wait_for(handle.result(), BOUND)
        activities = await scheduled(handle)
    assert [a.activity_type.name for a in activities] == ["filegate.tool_batch"]
    assert len(errors) == 2
    assert errors[0].startswith("Error: the ls call got no tools worker")
    assert errors[1].startswith("Error: the read_file call got no tools worker")
    assert all(f"'{queue}'" in e for e in errors)


async def test_none_waits_for_a_worker_as_before(temporal_client: Client) -> None:
    queue = f"nobody-polls-{uuid.uuid4().hex[:8]}"
    calls = [{"id": "l", "name": "ls", "args": {"path": "/"}}]
    async with running_host(temporal_client) as host_queue:
        handle = await temporal_client.start_workflow(
            ToolListWorkflow.run,
            args=[unserved_config(queue, wait=None), calls],
            id=f"unserved-none-{uuid.uuid4().hex[:8]}",
            task_queue=host_queue,
        )
        try:
            [activity] = await _eventually_scheduled(handle)
        finally:
            await handle.terminate("test over")
    assert not activity.HasField("schedule_to_start_timeout") or (
        activity.schedule_to_start_timeout.ToTimedelta().total_seconds() == 0
    )


async def _eventually_scheduled(handle: WorkflowHandle[Any, Any]) -> list[Any]:
    for _ in range(100):
        found = await scheduled(handle)
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError("the call was never scheduled")
