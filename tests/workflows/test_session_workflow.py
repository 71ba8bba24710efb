"""``SessionWorkflow`` (``filegate.Session``): one caller's tool session across runs.

What ``filegate mcp`` relies on, on a worker built by ``FilegatePlugin``:
read-before-edit survives continue-as-new; a call sent twice under one id
runs once; calls that meet the hand-over to the next run are refused before
history records them and land in the next run when sent again; ``close`` ends
the session once its calls finish.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateStage
from temporalio.worker import Worker

from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.settings import Settings
from filegate.cli.mcp_gate import McpGate
from filegate.kernel import wire
from filegate.kernel.messages import ToolCall
from filegate.plugin import FilegatePlugin
from filegate.workflows import BackendRef, BackendSpec, FileToolsConfig
from filegate.workflows.file_tools import ToolResult
from filegate.workflows.session import SessionInput, SessionWorkflow

pytestmark = pytest.mark.services


@asynccontextmanager
async def session(
    client: Client,
    tmp_path: Path,
    *,
    continue_after_calls: int = 1000,
    lease_seconds: float | None = None,
    interrupt_on: dict[str, Any] | None = None,
) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    queue = f"session-{uuid.uuid4().hex[:8]}"
    plugin = FilegatePlugin(
        agent=True,
        backends={"ws": FilesystemBackend(root)},
        journal_dir=tmp_path / "journal",
        artifacts=None,
        settings=Settings(),
        policies=None,
        tracer_provider=None,
    )
    ref = BackendRef(kind="remote", name="ws", task_queue=queue)
    config = FileToolsConfig.model_validate(
        {"backend": BackendSpec(default=ref), "interrupt_on": interrupt_on or {}}
    )
    async with Worker(client, task_queue=queue, plugins=[plugin]):
        await client.start_workflow(
            SessionWorkflow.run,
            SessionInput(
                config=config,
                continue_after_calls=continue_after_calls,
                lease_seconds=lease_seconds,
            ),
            id=queue,
            task_queue=queue,
        )
        # Not bound to the first run: calls follow the session across continue-as-new.
        yield client.get_workflow_handle(queue)


async def call(handle: WorkflowHandle[Any, Any], name: str, **args: Any) -> ToolResult:
    result: ToolResult = await handle.execute_update(
        wire.SESSION_CALL_UPDATE,
        ToolCall(id=uuid.uuid4().hex, name=name, args=args),
        result_type=ToolResult,
    )
    return result


async def test_read_before_edit_survives_continue_as_new(
    temporal_client: Client, tmp_path: Path
) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("alpha\n")
    async with session(temporal_client, tmp_path, continue_after_calls=2) as handle:
        unread = await call(handle, "edit_file", file_path="/a.txt", old_string="a", new_string="b")
        assert unread.is_error and "read" in unread.text.lower(), unread.text
        await call(handle, "read_file", file_path="/a.txt")
        described = await handle.describe()
        first_run = described.raw_description.workflow_execution_info.first_run_id
        assert described.run_id != first_run, "no continue-as-new after 2 calls"
        edited = await call(
            handle, "edit_file", file_path="/a.txt", old_string="alpha", new_string="beta"
        )
        assert not edited.is_error, edited.text
    assert (tmp_path / "ws" / "a.txt").read_text() == "beta\n"


async def test_one_call_id_runs_once(temporal_client: Client, tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("x\n")
    async with session(temporal_client, tmp_path) as handle:
        await call(handle, "read_file", file_path="/a.txt")
        same = ToolCall(
            id="c1",
            name="edit_file",
            args={"file_path": "/a.txt", "old_string": "x", "new_string": "xx"},
        )
        results = await asyncio.gather(
            *(
                handle.execute_update(
                    wire.SESSION_CALL_UPDATE, same, id="mcp-c1", result_type=ToolResult
                )
                for _ in range(3)
            )
        )
        assert [r.is_error for r in results] == [False, False, False]
    assert (tmp_path / "ws" / "a.txt").read_text() == "xx\n"


async def test_calls_meeting_the_hand_over_land_in_the_next_run(
    temporal_client: Client, tmp_path: Path
) -> None:
    """With a hand-over after every call, eight calls sent at once all answer, through
    the retry of ``filegate mcp``'s gate, and no call is lost or doubled."""
    (tmp_path / "ws").mkdir()
    async with session(temporal_client, tmp_path, continue_after_calls=1) as handle:
        gate = McpGate(temporal_client, handle.id, reviewer="test")
        calls = [
            ToolCall(
                id=f"w{i}", name="write_file", args={"file_path": f"/f{i}.txt", "content": str(i)}
            )
            for i in range(8)
        ]
        updates = await asyncio.gather(*(gate._send(c) for c in calls))
        results = await asyncio.gather(*(u.result() for u in updates))
        assert all(not r.is_error for r in results), [r.text for r in results]
        described = await handle.describe()
        first_run = described.raw_description.workflow_execution_info.first_run_id
        assert described.run_id != first_run, "one run took every call: no hand-over met"
    for i in range(8):
        assert (tmp_path / "ws" / f"f{i}.txt").read_text() == str(i)


async def test_close_ends_the_session_after_its_calls(
    temporal_client: Client, tmp_path: Path
) -> None:
    async with session(temporal_client, tmp_path) as handle:
        await call(handle, "write_file", file_path="/n.txt", content="n")
        await handle.signal(SessionWorkflow.close)
        state = await handle.result()
        assert "/n.txt" in state["seen_paths"]
        late = handle.start_update(
            wire.SESSION_CALL_UPDATE,
            ToolCall(id="late", name="ls", args={"path": "/"}),
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
        )
        with pytest.raises(Exception):  # noqa: B017 - a closed run refuses any update
            await late


async def test_a_lease_ends_a_silent_session_but_not_a_waiting_call(
    temporal_client: Client, tmp_path: Path
) -> None:
    """Its caller killed, a session with a lease closes itself once idle that long:
    renewals keep it open, a call waiting for a person keeps it open past the lease (its
    caller may come back for it), and once that call is decided and the lease passes in
    silence, the session ends."""
    async with session(
        temporal_client, tmp_path, lease_seconds=1.5, interrupt_on={"write_file": True}
    ) as handle:
        for _ in range(6):  # 3 s of renewals: twice the lease
            await handle.signal(SessionWorkflow.renew)
            await asyncio.sleep(0.5)
        waiting = await handle.start_update(
            wire.SESSION_CALL_UPDATE,
            ToolCall(id="w", name="write_file", args={"file_path": "/w.txt", "content": "w"}),
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            result_type=ToolResult,
        )
        await asyncio.sleep(4)  # no renewal, but a call waits for a person
        [card] = await handle.query(wire.PENDING_QUERY, result_type=list[dict[str, Any]])
        await handle.execute_update(
            wire.DECIDE_UPDATE,
            {"id": card["id"], "decision": "approve", "reviewer": "ana", "via": "cli"},
            result_type=dict[str, Any],
        )
        assert not (await waiting.result()).is_error
        began = asyncio.get_running_loop().time()
        state = await asyncio.wait_for(handle.result(), 20)
        assert asyncio.get_running_loop().time() - began >= 1.0
        assert "/w.txt" in state["seen_paths"]
