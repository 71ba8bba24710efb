"""Session histories (``filegate.Session``, ``filegate mcp``'s workflow) replay on this code.

Why: a session lives as long as its MCP client, so a worker upgrade meets
sessions in flight, and the new code first replays their histories. The
histories in ``tests/histories/session-<commit>/`` were recorded by
:func:`test_record_a_session` (run only when ``FILEGATE_RECORD_HISTORIES``
names a directory) on the commit in the directory's name: a session run
with an allowed read, a denied read, a write a rule interrupts that the MCP
client approves (``via="mcp"``), one it rejects, an edit after its read,
and the hand-over to the next run (``continue_after_calls``), whose first
call uses what the first run read. Both runs are kept. Add a new directory
for a new recording; keep the old ones (see ``test_replay_new_histories.py``).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle, WorkflowHistory, WorkflowUpdateStage
from temporalio.worker import Replayer, Worker

from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.settings import Settings
from filegate.kernel import wire
from filegate.kernel.messages import ToolCall
from filegate.kernel.permissions import FilesystemPermission
from filegate.plugin import FilegatePlugin
from filegate.workflows import BackendRef, BackendSpec, FileToolsConfig
from filegate.workflows.file_tools import ToolResult
from filegate.workflows.session import SessionInput, SessionWorkflow

HISTORIES = sorted((Path(__file__).parents[1] / "histories").glob("session-*/*.json"))


def test_session_histories_are_kept() -> None:
    assert HISTORIES, "no recorded session history: run test_record_a_session"


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: f"{p.parent.name}/{p.stem}")
async def test_a_recorded_session_replays(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(workflows=[SessionWorkflow], plugins=[FilegatePlugin(artifacts=None)])
    await replayer.replay_workflow(history)


@workflow.defn(name=wire.SESSION_WORKFLOW_TYPE, sandboxed=False)
class SleepySession(SessionWorkflow):
    """A session that sleeps before each call: a nondeterministic change."""

    @workflow.run
    async def run(self, input: SessionInput) -> Any:
        return await super().run(input)

    @workflow.update(name=wire.SESSION_CALL_UPDATE)
    async def call(self, call: ToolCall) -> ToolResult:  # type: ignore[override]
        await workflow.sleep(0.001)
        return await self._tools.run(call)


async def test_a_changed_session_fails_replay() -> None:
    """The replay can fail: a session that sleeps before each call is nondeterministic."""

    first = next(p for p in HISTORIES if p.stem.endswith("first-run"))
    history = WorkflowHistory.from_json(first.stem, first.read_text())
    replayer = Replayer(workflows=[SleepySession], plugins=[FilegatePlugin(artifacts=None)])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is not None


async def _call(handle: WorkflowHandle[Any, Any], name: str, **args: Any) -> ToolResult:
    result: ToolResult = await handle.execute_update(
        wire.SESSION_CALL_UPDATE,
        ToolCall(id=uuid.uuid4().hex, name=name, args=args),
        result_type=ToolResult,
    )
    return result


async def _decided_write(handle: WorkflowHandle[Any, Any], path: str, decision: str) -> ToolResult:
    """A write the rule interrupts, decided as ``filegate mcp`` decides (``via="mcp"``)."""
    call = ToolCall(
        id=uuid.uuid4().hex, name="write_file", args={"file_path": path, "content": "w"}
    )
    update = await handle.start_update(
        wire.SESSION_CALL_UPDATE,
        call,
        id=f"mcp-{call.id}",
        wait_for_stage=WorkflowUpdateStage.ACCEPTED,
        result_type=ToolResult,
    )
    for _ in range(200):
        listed = await handle.query(wire.PENDING_QUERY, result_type=list[dict[str, Any]])
        waiting = [a for a in listed if a["tool_call_id"] == call.id and not a["preview_pending"]]
        if waiting:
            break
        await asyncio.sleep(0.05)
    preview = waiting[0].get("preview") or {}
    await handle.execute_update(
        wire.DECIDE_UPDATE,
        {
            "id": waiting[0]["id"], "decision": decision, "reviewer": "recorder (MCP client)",
            "via": "mcp", "preview_fingerprint": str(preview.get("fingerprint") or ""),
        },
    )  # fmt: skip
    return await update.result()


@pytest.mark.skipif(
    not os.environ.get("FILEGATE_RECORD_HISTORIES"), reason="records only on request"
)
async def test_record_a_session(temporal_client: Client, tmp_path: Path) -> None:
    out = Path(os.environ["FILEGATE_RECORD_HISTORIES"])
    root = tmp_path / "ws"
    (root / "secret").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (root / "secret" / "k.txt").write_text("k\n")
    queue = f"record-session-{uuid.uuid4().hex[:8]}"
    plugin = FilegatePlugin(
        agent=True, backends={"ws": FilesystemBackend(root)}, journal_dir=tmp_path / "j",
        artifacts=None, settings=Settings(), policies=None, tracer_provider=None,
    )  # fmt: skip
    config = FileToolsConfig(
        backend=BackendSpec(default=BackendRef(kind="remote", name="ws", task_queue=queue)),
        permissions=[
            FilesystemPermission(operations=["read", "write"], paths=["/secret/**"], mode="deny")
        ],
        interrupt_on=FileToolsConfig.model_validate(
            {"interrupt_on": {"write_file": True}}
        ).interrupt_on,
    )
    async with Worker(temporal_client, task_queue=queue, plugins=[plugin]):
        started = await temporal_client.start_workflow(
            SessionWorkflow.run, SessionInput(config=config, continue_after_calls=6),
            id=queue, task_queue=queue,
        )  # fmt: skip
        handle = temporal_client.get_workflow_handle(queue)
        assert not (await _call(handle, "read_file", file_path="/a.txt")).is_error
        assert (await _call(handle, "read_file", file_path="/secret/k.txt")).is_error
        assert not (await _decided_write(handle, "/b.txt", "approve")).is_error
        assert (await _decided_write(handle, "/c.txt", "reject")).is_error
        assert not (await _call(handle, "ls", path="/")).is_error
        edited = await _call(
            handle, "edit_file", file_path="/a.txt", old_string="alpha", new_string="beta"
        )
        assert not edited.is_error
        # The next run: an edit of what the first run read.
        again = await _call(
            handle, "edit_file", file_path="/a.txt", old_string="beta", new_string="gamma"
        )
        assert not again.is_error, again.text
        await handle.signal(SessionWorkflow.close)
        await handle.result()
        first_run = temporal_client.get_workflow_handle(queue, run_id=started.result_run_id)
        first = await first_run.fetch_history()
        last = await handle.fetch_history()
    started_by = last.events[0].workflow_execution_started_event_attributes
    assert started_by.continued_execution_run_id, "the session did not continue as new"
    out.mkdir(parents=True, exist_ok=True)
    (out / "session-first-run.json").write_text(first.to_json())
    (out / "session-next-run.json").write_text(last.to_json())
