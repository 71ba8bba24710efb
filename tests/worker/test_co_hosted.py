"""Co-hosted runs: a tools worker that also runs the agent workflows started on its queue.

``tools_worker(serve_agents=True)`` (``filegate worker --role tools
--serve-agents``) polls its task queue for workflow tasks too. A run started on
that queue calls the backend served there as local activities, with no trip
through the server, except ``execute``, which stays a regular activity on the
same queue; a route to another backend stays remote. These tests check each
of those by the run's history on a real server, that the permission gate
still holds on that path, that the history replays, and that a run on a queue
whose worker hosts no tools fails its workflow task with a clear message
instead of running anything.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Replayer

from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.local_shell import LocalShellBackend
from filegate.backends.policy import PolicyConfig
from filegate.kernel.tool_types import TOOL_ACTIVITY_NAMES
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import AgentInput, AgentResult, AgentWorkflow
from filegate.workflows.approvals.reviews import CO_HOSTED_PATCH
from filegate.workflows.batching import BATCH_AT_START_PATCH
from filegate.workflows.runner import sandboxed_runner
from tests.scripting import calls, uid, workflow_task_failure

pytestmark = pytest.mark.services


def _input(shell_q: str, docs_q: str, script: dict[str, Any], **extra: Any) -> AgentInput:
    """Default backend ``shell`` on ``shell_q``; ``/docs/`` routed to ``docs`` on ``docs_q``."""
    return AgentInput.model_validate(
        {
            "task": "co-hosted work",
            "model": {"provider": "scripted", "options": {"script": script}},
            "backend": {
                "default": {"kind": "remote", "name": "shell", "task_queue": shell_q,
                            "can_execute": True},
                "routes": [{"prefix": "/docs/", "backend": {
                    "kind": "remote", "name": "docs", "task_queue": docs_q}}],
            },
            **extra,
        }
    )  # fmt: skip


SCRIPT = {
    "turns": [
        calls(
            ("w", "write_file", {"file_path": "/a.txt", "content": "one\n"}),
            ("d", "write_file", {"file_path": "/docs/n.md", "content": "note\n"}),
        ),
        calls(
            ("r", "read_file", {"file_path": "/a.txt"}),
            ("x", "execute", {"command": "cat a.txt"}),
            ("s", "read_file", {"file_path": "/docs/secret/key.txt"}),
        ),
        calls(("e", "edit_file", {"file_path": "/a.txt", "old_string": "one",
                                  "new_string": "two"})),
        {"content": "done"},
    ]
}  # fmt: skip


@contextlib.asynccontextmanager
async def _tools_workers(
    client: Client, tmp_path: Path, shell_q: str, docs_q: str, *, serve_agents: bool
) -> AsyncIterator[None]:
    """The shell backend's worker (co-hosting or not) and the docs route's worker."""
    shell = LocalShellBackend(str(tmp_path / "shell"))
    docs = FilesystemBackend(str(tmp_path / "docs"), virtual_mode=True)
    async with (
        tools_worker(client, shell_q, {"shell": shell}, tmp_path / "journal-shell",
                     serve_agents=serve_agents),
        tools_worker(client, docs_q, {"docs": docs}, tmp_path / "journal-docs"),
    ):  # fmt: skip
        yield


async def _history(client: Client, workflow_id: str) -> Any:
    return await client.get_workflow_handle(workflow_id).fetch_history()


def _scheduled(history: Any) -> list[tuple[str, str]]:
    """(activity type, task queue) of every activity the run scheduled on a queue."""
    return [
        (
            e.activity_task_scheduled_event_attributes.activity_type.name,
            e.activity_task_scheduled_event_attributes.task_queue.name,
        )
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


def _markers(history: Any) -> list[str]:
    return [
        e.marker_recorded_event_attributes.marker_name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    ]


def _by_call(result: AgentResult) -> dict[str, dict[str, Any]]:
    return {m["tool_call_id"]: m for m in result.transcript if m["role"] == "tool"}


async def test_co_hosted_run_skips_the_queue_for_its_backend(
    temporal_client: Client, tmp_path: Path
) -> None:
    shell_root, docs_root = tmp_path / "shell", tmp_path / "docs"
    shell_root.mkdir()
    docs_root.mkdir()
    (docs_root / "secret").mkdir()
    (docs_root / "secret" / "key.txt").write_text("hunter2\n")
    shell_q, docs_q = uid("shell"), uid("docs")
    # A rule inside the route the shell cannot reach (contract §4).
    permissions = [{"operations": ["read"], "paths": ["/docs/secret/**"], "mode": "deny"}]
    agent_input = _input(shell_q, docs_q, SCRIPT, permissions=permissions)
    workflow_id = uid("co")
    async with _tools_workers(temporal_client, tmp_path, shell_q, docs_q, serve_agents=True):
        result = await temporal_client.execute_workflow(
            AgentWorkflow.run, agent_input, id=workflow_id, task_queue=shell_q
        )
    assert result.stop_reason == "final_answer", result
    tools = _by_call(result)
    assert tools["r"]["content"].endswith("one"), tools["r"]
    assert "one" in tools["x"]["content"] and tools["x"]["status"] == "success", tools["x"]
    assert tools["s"]["status"] == "error" and "hunter2" not in tools["s"]["content"]
    assert (shell_root / "a.txt").read_text() == "two\n"
    assert (docs_root / "n.md").read_text() == "note\n"

    history = await _history(temporal_client, workflow_id)
    # On a queue: the route's write (docs worker) and execute (same queue, heartbeats).
    assert sorted(_scheduled(history)) == sorted([
        (TOOL_ACTIVITY_NAMES["write_file"], docs_q),
        (TOOL_ACTIVITY_NAMES["execute"], shell_q),
    ])  # fmt: skip
    # Local: write, read, edit on the default backend and the 4 model calls; the
    # denied read never left the workflow; version markers for co-hosting and for
    # batching (asked as the run starts).
    markers = _markers(history)
    assert markers.count("core_local_activity") == 3 + 4, markers
    assert markers.count("core_patch") == 2, markers
    assert CO_HOSTED_PATCH in str(history.events)
    assert BATCH_AT_START_PATCH in str(history.events)

    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=temporal_client.data_converter,
        workflow_runner=sandboxed_runner(),
    )
    await replayer.replay_workflow(history)


async def test_separate_agent_worker_still_sends_every_call_to_the_queue(
    temporal_client: Client, tmp_path: Path
) -> None:
    """The same input on an agent worker's own queue: nothing is co-hosted, no co-hosting marker."""
    shell_root, docs_root = tmp_path / "shell", tmp_path / "docs"
    shell_root.mkdir()
    docs_root.mkdir()
    shell_q, docs_q, agent_q = uid("shell"), uid("docs"), uid("agent")
    workflow_id = uid("apart")
    async with (
        agent_worker(temporal_client, agent_q),
        _tools_workers(temporal_client, tmp_path, shell_q, docs_q, serve_agents=False),
    ):
        result = await temporal_client.execute_workflow(
            AgentWorkflow.run, _input(shell_q, docs_q, SCRIPT), id=workflow_id, task_queue=agent_q
        )
    assert result.stop_reason == "final_answer", result
    history = await _history(temporal_client, workflow_id)
    queues = [queue for _, queue in _scheduled(history)]
    assert queues.count(shell_q) == 4 and queues.count(docs_q) == 2, queues
    assert CO_HOSTED_PATCH not in str(history.events)


async def test_a_queue_without_tools_fails_the_task_clearly(
    temporal_client: Client, tmp_path: Path
) -> None:
    """A remote ref naming the agent worker's own queue: no tool runs, the task says why."""
    agent_q = uid("agent")
    script = {"turns": [calls(("w", "write_file", {"file_path": "/a.txt", "content": "x"}))]}
    agent_input = _input(agent_q, uid("docs"), script)
    workflow_id = uid("none")
    async with agent_worker(temporal_client, agent_q):
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, agent_input, id=workflow_id, task_queue=agent_q
        )
        failure = await workflow_task_failure(handle)
        await handle.terminate("test over")
    assert "runs in the worker of this run" in failure, failure
    assert "--serve-agents" in failure
    assert not (tmp_path / "a.txt").exists()


async def test_worker_policies_hold_on_the_co_hosted_path(
    temporal_client: Client, tmp_path: Path
) -> None:
    """A required deny_write of the worker refuses a write that runs as a local activity,
    even when the run names no policies at all."""
    root = tmp_path / "ws"
    (root / "locked").mkdir(parents=True)
    queue = uid("fs")
    policies = PolicyConfig.model_validate(
        {"policies": {"protect": {"kind": "deny_write", "prefixes": ["/locked"]}},
         "required": ["protect"]}
    )  # fmt: skip
    script = {
        "turns": [
            calls(
                ("w", "write_file", {"file_path": "/locked/x.txt", "content": "no"}),
                ("o", "write_file", {"file_path": "/open.txt", "content": "yes"}),
            ),
            {"content": "done"},
        ]
    }
    agent_input = AgentInput.model_validate(
        {
            "task": "write",
            "model": {"provider": "scripted", "options": {"script": script}},
            "backend": {"default": {"kind": "remote", "name": "fs", "task_queue": queue}},
            "policies": [],
        }
    )
    workflow_id = uid("pol")
    async with tools_worker(
        temporal_client, queue, {"fs": FilesystemBackend(str(root), virtual_mode=True)},
        tmp_path / "journal", policies=policies, serve_agents=True,
    ):  # fmt: skip
        result = await temporal_client.execute_workflow(
            AgentWorkflow.run, agent_input, id=workflow_id, task_queue=queue
        )
    tools = _by_call(result)
    assert tools["w"]["status"] == "error", tools["w"]
    assert not (root / "locked" / "x.txt").exists()
    assert (root / "open.txt").read_text() == "yes"
    history = await _history(temporal_client, workflow_id)
    assert _scheduled(history) == []  # both writes were local activities
