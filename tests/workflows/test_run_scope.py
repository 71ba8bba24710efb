"""Run scope (contract §11): a later run under a reused workflow id is a new run chain.

It neither gets answers from the earlier chain's idempotency journal nor reads
its stored results, and the tools worker takes the workflow id from the
activity's own info, never from the request. Real Temporal, real S3.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from minio import Minio
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from filegate.activities.tools import FileToolActivities
from filegate.backends.artifacts import ArtifactStore
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.local_shell import LocalShellBackend
from filegate.kernel.artifacts import chain_scope
from filegate.kernel.tool_types import ToolOutcome, ToolRequest
from filegate.worker import agent_worker
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec
from tests.roots import made
from tests.scripting import scripted

pytestmark = pytest.mark.services


def call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": name, "args": args}]}


def tool_results(result: Any) -> dict[str, dict[str, Any]]:
    return {m["tool_call_id"]: m for m in result.transcript if m["role"] == "tool"}


async def test_reused_workflow_id_applies_its_own_writes(
    temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    tools = FileToolActivities({"ws": FilesystemBackend(made(root))}, tmp_path / "journal")
    agent_queue, tools_queue = f"agent-{uuid.uuid4().hex[:8]}", f"tools-{uuid.uuid4().hex[:8]}"
    body = "first line\nsecond line\n"
    input = AgentInput(
        task="write and edit",
        model=scripted(
            call("w", "write_file", {"file_path": "/notes.txt", "content": body}),
            call("r", "read_file", {"file_path": "/notes.txt"}),
            call(
                "e",
                "edit_file",
                {"file_path": "/notes.txt", "old_string": "second", "new_string": "2nd"},
            ),
            call("w2", "write_file", {"file_path": "/other.txt", "content": "other\n"}),
            {"content": "done"},
        ),
        backend=BackendSpec(default=BackendRef(kind="remote", name="ws", task_queue=tools_queue)),
    )
    workflow_id = f"reuse-{uuid.uuid4().hex[:8]}"
    expected = {"notes.txt": b"first line\n2nd line\n", "other.txt": b"other\n"}
    run_ids = []
    async with (
        agent_worker(temporal_client, agent_queue),
        Worker(temporal_client, task_queue=tools_queue, activities=tools.activities()),
    ):
        for _ in range(2):
            handle = await temporal_client.start_workflow(
                AgentWorkflow.run, input, id=workflow_id, task_queue=agent_queue
            )
            result = await handle.result()
            run_ids.append(handle.first_execution_run_id)
            assert result.tool_errors == 0, tool_results(result)
            # Byte for byte: the run really wrote and edited, not only said so.
            assert {p.name: p.read_bytes() for p in sorted(root.iterdir())} == expected
            for path in root.iterdir():  # the next run starts from an empty workspace
                path.unlink()
    assert run_ids[0] != run_ids[1]


async def test_reused_workflow_id_cannot_read_old_large_results(
    temporal_client: Client, minio_client: Minio, tmp_path: Path
) -> None:
    store = ArtifactStore(minio_client, "scope-test", namespace=f"ns-{uuid.uuid4().hex[:8]}")
    shell = LocalShellBackend(made(tmp_path / "root"))
    tools = FileToolActivities({"shell": shell}, tmp_path / "journal", artifacts=store)
    agent_queue, tools_queue = f"agent-{uuid.uuid4().hex[:8]}", f"tools-{uuid.uuid4().hex[:8]}"
    ref = BackendRef(kind="remote", name="shell", task_queue=tools_queue, can_execute=True)
    stub_path = "/large_tool_results/1:0:c1"
    command = "for i in $(seq 1 2000); do printf 'SECRET%05d%093d\\n' $i 0; done"
    first = AgentInput(
        task="make output",
        model=scripted(call("c1", "execute", {"command": command}), {"content": "done"}),
        backend=BackendSpec(default=ref),
    )
    second = AgentInput(
        task="read the old output",
        model=scripted(
            call("r1", "read_file", {"file_path": stub_path, "limit": 5}), {"content": "done"}
        ),
        backend=BackendSpec(default=ref),
    )
    workflow_id = f"reuse-{uuid.uuid4().hex[:8]}"
    async with (
        agent_worker(temporal_client, agent_queue, artifacts=store),
        Worker(temporal_client, task_queue=tools_queue, activities=tools.activities()),
    ):
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, first, id=workflow_id, task_queue=agent_queue
        )
        done = await handle.result()
        assert stub_path in tool_results(done)["c1"]["content"]
        first_scope = chain_scope(workflow_id, handle.first_execution_run_id or "")
        assert store.key_for(first_scope, "1:0:c1") in store.list_thread(first_scope)
        later = await temporal_client.execute_workflow(
            AgentWorkflow.run, second, id=workflow_id, task_queue=agent_queue
        )
    read = tool_results(later)["r1"]
    assert read["status"] == "error" and "file not found" in read["content"], read
    assert "SECRET" not in read["content"]


async def test_tools_take_the_workflow_id_from_the_activity(tmp_path: Path) -> None:
    """A request naming another workflow (an old field) is keyed by the caller's own."""
    root = tmp_path / "ws"
    tools = FileToolActivities({"ws": FilesystemBackend(made(root))}, tmp_path / "journal")
    raw = {
        "tool": "write_file", "backend": "ws", "tool_call_id": "1:0:c1",
        "args": {"file_path": "/a.txt", "content": "x"}, "workflow_id": "victim",
    }  # fmt: skip
    env = ActivityEnvironment()
    out: ToolOutcome = await env.run(tools.write_file, ToolRequest.model_validate(raw))
    assert out.status == "success"
    [entry] = [p for p in (tmp_path / "journal").rglob("*.json")]
    assert f'"workflow_id":"{chain_scope("test", "test-run")}"' in entry.read_text()
    assert "victim" not in entry.read_text()
