"""Building scripted-model turns in tests (contract §10 script format).

Also the two helpers nearly every test on real servers needs: :func:`uid` for
fresh task queues and workflow ids, and :func:`scripted` for the model.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from filegate.kernel.messages import ModelSpec


def uid(prefix: str) -> str:
    """A fresh name (task queue, workflow id, bucket) no other test uses: ``prefix-<10 hex>``."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def scripted(*turns: dict[str, Any], **spec: Any) -> ModelSpec:
    """The scripted model answering ``turns`` in order (``spec``: more ModelSpec fields)."""
    return ModelSpec(provider="scripted", options={"script": {"turns": list(turns)}}, **spec)


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


def local_activities(history: Any) -> list[tuple[str, Any]]:
    """``(activity type, result JSON)`` of every local activity recorded in ``history``."""
    found = []
    for event in history.events:
        attributes = event.marker_recorded_event_attributes
        if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
            continue
        if attributes.marker_name != "core_local_activity":
            continue
        data = json.loads(attributes.details["data"].payloads[0].data)
        result = attributes.details["result"].payloads
        found.append((data["activity_type"], json.loads(result[0].data) if result else None))
    return found


def local_tool_calls(history: Any) -> list[str]:
    """The tools of the calls local activities ran, in order: a ``filegate.tool_batch``
    counts once per call it finished (its unfinished ones ran on activities of their own)."""
    tools: list[str] = []
    for activity_type, result in local_activities(history):
        if activity_type == "filegate.tool_batch":
            tools += ["batched"] * sum(outcome is not None for outcome in result["outcomes"])
        elif activity_type != "filegate.model":
            tools.append(activity_type.removeprefix("filegate."))
    return tools
