"""Building scripted-model turns in tests (contract §10 script format)."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle


def calls(*items: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    """One model turn making the tool calls ``(id, tool name, args)``."""
    return {"tool_calls": [{"id": i, "name": n, "args": a} for i, n, a in items]}


async def workflow_task_failure(handle: WorkflowHandle[Any, Any], tries: int = 100) -> str:
    """The message of the run's first failed workflow task, polled for up to ``tries`` x 0.1 s."""
    for _ in range(tries):
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                return event.workflow_task_failed_event_attributes.failure.message
        await asyncio.sleep(0.1)
    return ""
