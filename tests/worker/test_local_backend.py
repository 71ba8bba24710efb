"""Local backends and the local-activity model call.

A ``kind="local"`` backend is hosted by the agent worker itself: its file
tools run as local activities inside the workflow task. These tests run every
tool that way on a real Filesystem backend, check that no call went through a
task queue (history holds markers, not scheduled activities), that the
results match the remote path byte for byte, that the journal still keeps a
repeated mutation from applying twice, and that the histories replay.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Replayer

from filegate.activities.model import ModelActivities
from filegate.backends.filesystem import FilesystemBackend
from filegate.kernel.messages import Message, ModelSpec
from filegate.kernel.transcripts import (
    TRANSCRIPT_UNAVAILABLE,
    MemoryRef,
    ModelTurn,
    ModelTurnResult,
)
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import (
    AgentInput,
    AgentResult,
    AgentWorkflow,
    BackendRef,
    BackendSpec,
    UserMessage,
)
from filegate.workflows.runner import sandboxed_runner
from tests.roots import made
from tests.scripting import calls, local_tool_calls, uid, workflow_task_failure

pytestmark = pytest.mark.services


def _script() -> dict[str, Any]:
    return {
        "turns": [
            calls(
                ("w1", "write_file", {"file_path": "/src/a.py", "content": "x = 1\n# TODO\n"}),
                ("w2", "write_file", {"file_path": "/notes.md", "content": "hello\n"}),
            ),
            calls(
                ("r1", "read_file", {"file_path": "/src/a.py"}),
                ("l1", "ls", {"path": "/"}),
                ("g1", "glob", {"pattern": "**/*.py"}),
                ("s1", "grep", {"pattern": "TODO"}),
            ),
            calls(("e1", "edit_file", {"file_path": "/src/a.py", "old_string": "1",
                                      "new_string": "2"})),
            calls(("d1", "delete", {"file_path": "/notes.md"}),
                 ("r2", "read_file", {"file_path": "/src/a.py"})),
            {"content": "done"},
        ]
    }  # fmt: skip


def _input(ref: BackendRef, model_call: str = "local_activity") -> AgentInput:
    return AgentInput.model_validate(
        {
            "task": "work on the files",
            "model": {"provider": "scripted", "options": {"script": _script()}},
            "backend": BackendSpec(default=ref),
            "model_call": model_call,
        }
    )


def _on_local_ws(task: str, script: dict[str, Any]) -> AgentInput:
    """A scripted run on the agent worker's local backend ``ws``."""
    return AgentInput.model_validate(
        {
            "task": task,
            "model": {"provider": "scripted", "options": {"script": script}},
            "backend": BackendSpec(default=BackendRef(kind="local", name="ws")),
        }
    )


def _tool_messages(result: AgentResult) -> list[tuple[str, str, str]]:
    return [
        (m["tool_call_id"], m["status"], m["content"])
        for m in result.transcript
        if m["role"] == "tool"
    ]


async def _event_counts(client: Client, workflow_id: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        name = EventType.Name(event.event_type)
        counts[name] = counts.get(name, 0) + 1
    return counts


async def test_local_backend_matches_remote_without_task_queue_trips(
    temporal_client: Client, tmp_path: Path
) -> None:
    local_root, remote_root = tmp_path / "local", tmp_path / "remote"
    local_root.mkdir()
    remote_root.mkdir()
    agent_q, tools_q = uid("agent"), uid("tools")
    local_fs = FilesystemBackend(str(local_root), virtual_mode=True)
    remote_fs = FilesystemBackend(str(remote_root), virtual_mode=True)
    local_id, remote_id = uid("local"), uid("remote")
    async with (
        agent_worker(
            temporal_client,
            agent_q,
            backends={"ws": local_fs},
            journal_dir=tmp_path / "journal-local",
            workflow_runner=sandboxed_runner(),
        ),
        tools_worker(temporal_client, tools_q, {"ws": remote_fs}, tmp_path / "journal-remote"),
    ):
        local = await temporal_client.execute_workflow(
            AgentWorkflow.run,
            _input(BackendRef(kind="local", name="ws")),
            id=local_id,
            task_queue=agent_q,
        )
        remote = await temporal_client.execute_workflow(
            AgentWorkflow.run,
            _input(BackendRef(kind="remote", name="ws", task_queue=tools_q), "activity"),
            id=remote_id,
            task_queue=agent_q,
        )
    assert local.stop_reason == remote.stop_reason == "final_answer"
    assert local.tool_calls == 9 and local.tool_errors == 0, _tool_messages(local)
    assert _tool_messages(local) == _tool_messages(remote)
    assert (local_root / "src" / "a.py").read_text() == "x = 2\n# TODO\n"
    assert not (local_root / "notes.md").exists()
    assert (remote_root / "src" / "a.py").read_bytes() == (local_root / "src" / "a.py").read_bytes()

    local_events = await _event_counts(temporal_client, local_id)
    remote_events = await _event_counts(temporal_client, remote_id)
    # Local: the 9 tool calls and 5 model calls are markers; nothing was scheduled
    # on a queue. The calls of a turn on different paths share one marker (a batch).
    assert "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED" not in local_events
    local_history = await temporal_client.get_workflow_handle(local_id).fetch_history()
    ran = local_tool_calls(local_history)
    assert len(ran) == 9 and "batched" in ran, ran
    assert local_events["EVENT_TYPE_MARKER_RECORDED"] < 9 + 5
    # Remote with model_call="activity": every call is in a scheduled activity (a
    # turn's calls on different paths in one batch); the one marker is its version.
    remote_history = await temporal_client.get_workflow_handle(remote_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in remote_history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled.count("filegate.model") == 5 and "filegate.tool_batch" in scheduled
    assert len(scheduled) < 9 + 5
    assert remote_events["EVENT_TYPE_MARKER_RECORDED"] == 1
    assert (
        local_events["EVENT_TYPE_WORKFLOW_TASK_COMPLETED"]
        < remote_events["EVENT_TYPE_WORKFLOW_TASK_COMPLETED"]
    )

    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=temporal_client.data_converter,
        workflow_runner=sandboxed_runner(),
    )
    for workflow_id in (local_id, remote_id):
        history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
        await replayer.replay_workflow(history)


async def test_local_mutation_is_journaled_once(temporal_client: Client, tmp_path: Path) -> None:
    """Two runs with the same workflow id and call ids: the journal answers the second."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "log.txt").write_text("a\n")
    fs = FilesystemBackend(str(root), virtual_mode=True)
    script = {
        "turns": [
            {"tool_calls": [{"id": "r", "name": "read_file", "args": {"file_path": "/log.txt"}}]},
            {"tool_calls": [{"id": "e", "name": "edit_file", "args": {
                "file_path": "/log.txt", "old_string": "a", "new_string": "aa"}}]},
            {"content": "done"},
        ]
    }  # fmt: skip
    agent_input = _on_local_ws("append", script)
    workflow_id = uid("once")
    queue = uid("agent")
    async with agent_worker(
        temporal_client, queue, backends={"ws": fs}, journal_dir=tmp_path / "journal"
    ):
        for run in (1, 2):
            (root / "log.txt").write_text("a\n")
            result = await temporal_client.execute_workflow(
                AgentWorkflow.run, agent_input, id=workflow_id, task_queue=queue
            )
            assert result.tool_errors == 0, result.transcript
            assert (root / "log.txt").read_text() == "aa\n"
            # One journal entry per run chain: the second run under the same workflow
            # id (same call id) is a new chain, so its edit really applied (contract §11).
            assert len(list((tmp_path / "journal").rglob("*.json"))) == run


async def test_local_ref_waits_for_a_worker_that_hosts_the_backend(
    temporal_client: Client, tmp_path: Path
) -> None:
    """A worker without the backend fails the workflow *task* with a clear message;
    the run is not lost and completes once a worker hosting the backend polls."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "here.txt").write_text("x\n")
    script = {
        "turns": [
            {"tool_calls": [{"id": "l", "name": "ls", "args": {"path": "/"}}]},
            {"content": "listed"},
        ]
    }
    agent_input = _on_local_ws("list", script)
    queue = uid("agent")
    workflow_id = uid("missing")
    async with agent_worker(temporal_client, queue):
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, agent_input, id=workflow_id, task_queue=queue
        )
        message = await workflow_task_failure(handle)
    assert "kind=local" in message and "--local-backend" in message
    fs = FilesystemBackend(str(root), virtual_mode=True)
    async with agent_worker(
        temporal_client, queue, backends={"ws": fs}, journal_dir=tmp_path / "journal"
    ):
        result = await asyncio.wait_for(handle.result(), 60)
    [tool] = [m for m in result.transcript if m["role"] == "tool"]
    assert tool["status"] == "success" and "/here.txt" in tool["content"]
    assert result.final_answer == "listed"


def test_local_backends_need_a_journal(tmp_path: Path) -> None:
    fs = FilesystemBackend(str(tmp_path), virtual_mode=True)
    with pytest.raises(ValueError, match="journal_dir"):
        agent_worker(None, "q", backends={"ws": fs})  # type: ignore[arg-type]


# --------------------------------------------------------------------------- memory refs


def _turn(call_index: int, messages: list[Message], memory: MemoryRef | None) -> ModelTurn:
    script = {"turns": [{"content": f"answer {k}"} for k in range(5)]}
    return ModelTurn(
        model=ModelSpec(provider="scripted", options={"script": script}),
        messages=messages,
        call_index=call_index,
        mode="turn",
        memory=memory,
    )


async def test_local_model_call_keeps_the_transcript_in_memory() -> None:
    model = ModelActivities()
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, is_local=True, workflow_id="wf-mem")
    first = await env.run(model.call_model, _turn(0, [Message(role="user", content="hi")], None))
    assert isinstance(first, ModelTurnResult)
    assert first.memory == MemoryRef(call_index=0, count=1)
    delta = [Message(role="assistant", content="answer 0"), Message(role="user", content="more")]
    second = await env.run(model.call_model, _turn(1, delta, first.memory))
    assert isinstance(second, ModelTurnResult)
    assert second.memory == MemoryRef(call_index=1, count=3)  # kept 1 + the 2 sent
    assert second.response.message.text() == "answer 1"

    # Another worker (or this one after a restart) does not hold it: a typed,
    # non-retryable error the workflow answers by sending everything again.
    with pytest.raises(ApplicationError) as info:
        await env.run(ModelActivities().call_model, _turn(2, delta, second.memory))
    assert info.value.type == TRANSCRIPT_UNAVAILABLE and info.value.non_retryable
    # A stale ref (an older call) is refused too, never answered from the newer copy.
    with pytest.raises(ApplicationError):
        await env.run(model.call_model, _turn(2, delta, first.memory))

    # A regular activity may run on any worker next time: it keeps nothing.
    remote = ActivityEnvironment()
    remote.info = dataclasses.replace(remote.info, is_local=False, workflow_id="wf-mem")
    plain = await remote.run(model.call_model, _turn(0, [Message(role="user", content="hi")], None))
    assert isinstance(plain, ModelTurnResult) and plain.memory is None


async def test_run_survives_an_agent_worker_that_lost_the_transcript(
    temporal_client: Client,
) -> None:
    """A new agent worker (empty memory) takes over a waiting thread: the next model
    call misses the kept transcript, and the workflow resends it by value."""
    script = {"turns": [{"content": "first"}, {"content": "second"}]}
    agent_input = AgentInput.model_validate(
        {
            "task": "one",
            "model": {"provider": "scripted", "options": {"script": script}},
            "wait_for_messages": True,
        }
    )
    queue = uid("agent")
    workflow_id = uid("lost")
    async with agent_worker(temporal_client, queue):
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, agent_input, id=workflow_id, task_queue=queue
        )
        for _ in range(200):
            status = await handle.query(AgentWorkflow.status)
            if status.state == "idle":
                break
            await asyncio.sleep(0.05)
        assert status.state == "idle"
    async with agent_worker(temporal_client, queue):  # a fresh process's memory
        await handle.execute_update(
            AgentWorkflow.add_message_update, UserMessage(content="two", end=True)
        )
        result = await asyncio.wait_for(handle.result(), 30)
    assert [m["content"] for m in result.transcript] == ["one", "first", "two", "second"]
    failures = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            failure = event.marker_recorded_event_attributes.failure
            if failure.message:
                failures.append(failure.application_failure_info.type or failure.message)
    assert len(failures) == 1 and TRANSCRIPT_UNAVAILABLE in failures[0]


async def test_local_tool_failure_is_a_tool_error(temporal_client: Client, tmp_path: Path) -> None:
    """A local activity that fails for good (here: a backend name this worker does
    not host) answers the model with an error result; the run goes on."""
    fs = FilesystemBackend(made(tmp_path / "ws"), virtual_mode=True)  # journal beside, not inside
    script = {
        "turns": [
            {"tool_calls": [{"id": "l", "name": "ls", "args": {"path": "/"}}]},
            {"content": "carried on"},
        ]
    }
    agent_input = _on_local_ws("list", script).model_copy(
        update={"backend": BackendSpec(default=BackendRef(kind="local", name="elsewhere"))}
    )
    queue = uid("agent")
    async with agent_worker(
        temporal_client, queue, backends={"ws": fs}, journal_dir=tmp_path / "journal"
    ):
        result = await temporal_client.execute_workflow(
            AgentWorkflow.run, agent_input, id=uid("unknown"), task_queue=queue
        )
    [tool] = [m for m in result.transcript if m["role"] == "tool"]
    assert tool["status"] == "error" and "elsewhere" in tool["content"]
    assert result.final_answer == "carried on"
