"""A run's fairness key (its tenant) rides on its tool activities (issue 36).

On a tools queue shared by many runs, Temporal dispatches by fairness key, so
one tenant's backlog does not starve another's. The key is a run input
(``FileToolsConfig.fairness_key``, so ``AgentWorkflow`` and a ``FileTools``
host alike); every remote activity the run schedules for it carries it: single
calls, batches of reads, previews. A run without a key schedules none.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from filegate.workflows import AgentInput, AgentWorkflow, Decision
from tests.scripting import calls
from tests.workflows.test_grants import docs_agent, pending_one, workers, write

pytestmark = pytest.mark.services


async def _scheduled(handle: Any) -> list[tuple[str, str, float]]:
    history = await handle.fetch_history()
    found = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            found.append(
                (
                    attrs.activity_type.name,
                    attrs.priority.fairness_key,
                    attrs.priority.fairness_weight,
                )
            )
    return found


async def _run(client: Client, tmp_path: Path, **fields: Any) -> list[tuple[str, str, float]]:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "a.txt").write_text("a\n")
    (root / "b.txt").write_text("b\n")
    queues = (f"agent-{uuid.uuid4().hex[:8]}", f"tools-{uuid.uuid4().hex[:8]}")
    reads = [
        ("r1", "read_file", {"file_path": "/a.txt"}),
        ("r2", "read_file", {"file_path": "/b.txt"}),
    ]
    async with workers(client, root, tmp_path / "journal", queues):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            docs_agent(queues[1], calls(*reads), calls(write("w", "/docs/a.md")), **fields),
            id=f"fair-{uuid.uuid4().hex[:8]}",
            task_queue=queues[0],
        )
        asked = await pending_one(handle)
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=asked.id, decision="approve")
        )
        await handle.result()
    assert (root / "docs" / "a.md").read_text() == "w\n"
    return await _scheduled(handle)


async def test_every_remote_activity_of_a_run_carries_its_fairness_key(
    temporal_client: Client, tmp_path: Path
) -> None:
    scheduled = await _run(temporal_client, tmp_path, fairness_key="tenant-a", fairness_weight=2.5)
    names = {name for name, _, _ in scheduled}
    # The reads went as one batch; the write had a preview before its approval.
    assert {"filegate.tool_batch", "filegate.preview", "filegate.write_file"} <= names, names
    assert all(key == "tenant-a" and weight == 2.5 for _, key, weight in scheduled), scheduled


async def test_a_run_without_a_key_schedules_none(temporal_client: Client, tmp_path: Path) -> None:
    scheduled = await _run(temporal_client, tmp_path)
    assert scheduled and all(key == "" for _, key, _ in scheduled), scheduled


@pytest.mark.parametrize("fields", [{"fairness_key": ""}, {"fairness_key": "x" * 65},
                                    {"fairness_weight": 0}])  # fmt: skip
def test_a_bad_key_or_weight_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        AgentInput(task="t", **fields)
