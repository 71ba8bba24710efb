"""contract §7 large tool results: offloaded inside the execute activity, read back by path.

Real Temporal dev server, real S3 (weed), a real LocalShell command printing
200 000 characters (the shell keeps ~100 000 of them, still over the 80 000
offload threshold): history must hold only the stub, S3 the whole rendered
output, and read_file of the stub's location must page through the same text.
"""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

import pytest
from minio import Minio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from filegate.activities.tools import FileToolActivities
from filegate.backends.artifacts import ArtifactStore
from filegate.backends.local_shell import LocalShellBackend
from filegate.kernel.artifacts import ArtifactRef, chain_scope
from filegate.worker import agent_worker
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec
from tests.roots import made
from tests.scripting import scripted

pytestmark = pytest.mark.services

LINES = 2000
WIDTH = 99  # + newline = 100 chars a line -> 200 000 chars


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": name, "args": args}]}


async def test_large_execute_output_is_offloaded(
    temporal_client: Client, minio_client: Minio, tmp_path: Path
) -> None:
    store = ArtifactStore(minio_client, "offload-test", namespace=f"ns-{uuid.uuid4().hex[:8]}")
    shell = LocalShellBackend(made(tmp_path / "root"))
    command = f"for i in $(seq 1 {LINES}); do printf 'L%05d%0{WIDTH - 6}d\\n' $i 0; done"
    tools = FileToolActivities({"shell": shell}, tmp_path / "journal", artifacts=store)
    agent_queue, tools_queue = f"agent-{uuid.uuid4().hex[:8]}", f"tools-{uuid.uuid4().hex[:8]}"
    stub_path = "/large_tool_results/1:0:c1"
    input = AgentInput(
        task="run it",
        model=scripted(
            _call("c1", "execute", {"command": command}),
            _call("c2", "read_file", {"file_path": stub_path, "offset": 1000, "limit": 3}),
            {"content": "done"},
        ),
        backend=BackendSpec(
            default=BackendRef(
                kind="remote", name="shell", task_queue=tools_queue, can_execute=True
            )
        ),
    )
    workflow_id = f"wf-{uuid.uuid4().hex[:8]}"
    async with (
        agent_worker(temporal_client, agent_queue),
        Worker(temporal_client, task_queue=tools_queue, activities=tools.activities()),
    ):
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=agent_queue
        )
        result = await handle.result()
    by_id = {m["tool_call_id"]: m for m in result.transcript if m["role"] == "tool"}
    stub = by_id["c1"]["content"]
    assert len(stub) < 5000, len(stub)
    assert stub_path in stub and "lines truncated" in stub and "L00001" in stub

    # The full output is in S3 under <namespace>/<workflow id>@<first run id>/<tool call id>.
    scope = chain_scope(workflow_id, handle.first_execution_run_id or "")
    keys = store.list_thread(scope)
    assert keys == [store.key_for(scope, "1:0:c1")]
    body = minio_client.get_object(store.bucket, keys[0]).read().decode()
    # The shell itself caps output near 100 000 chars; all of what it returned is stored.
    assert len(body) > 80_000 and f"({len(body)} characters" in stub
    expected_lines = body.splitlines()
    assert expected_lines[0].startswith("L00001") and expected_lines[-1] in stub

    # Paged read-back matches the stored lines 1001..1003.
    window = by_id["c2"]["content"]
    assert by_id["c2"]["status"] == "success", window
    for number in (1001, 1002, 1003):
        assert expected_lines[number - 1] in window
    assert expected_lines[1003] not in window and expected_lines[999] not in window

    # History stays small: no event payload carries the 200 000 characters.
    biggest = 0
    async for event in handle.fetch_history_events():
        if event.event_type in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
        ):
            biggest = max(biggest, event.ByteSize())
    assert 0 < biggest < 50_000, biggest
    # The ref in history is only a key; a ref built from it verifies against S3.
    ref = ArtifactRef(
        bucket=store.bucket,
        key=keys[0],
        size=len(body.encode()),
        sha256=hashlib.sha256(body.encode()).hexdigest(),
    )
    assert store.get(ref).decode() == body
