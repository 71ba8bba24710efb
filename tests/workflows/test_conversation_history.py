"""``/conversation_history/`` is readable: the stubs the model sees lead somewhere (contract §8).

Real Temporal dev server, real S3 (the session ``s3_server``), the workers as
``worker.py`` builds them: an agent worker whose model activity archives an
evicted user message in the artifact store, and a Filesystem tools worker
holding the same store, which answers ``read_file`` of the stub's path from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from filegate.backends.artifacts import ArtifactStore
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.settings import S3Settings
from filegate.devstack.s3 import S3DevServer
from filegate.kernel.messages import ModelSpec
from filegate.kernel.protocol import BackendProtocol
from filegate.kernel.transcripts import CONVERSATION_DIR, conversation_key
from filegate.wiring.connection import configured_store, with_payload_codec
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import AgentInput, AgentResult, AgentWorkflow, BackendRef, BackendSpec
from filegate.workflows.context import EVICT_CHARS, evicted_name
from tests.run_chain import scope_of
from tests.scripting import uid

pytestmark = pytest.mark.services

LINES = 3000
ARCHIVED = CONVERSATION_DIR + evicted_name(0)


def big_task() -> str:
    """A user message over the eviction threshold, one numbered line each."""
    text = "".join(f"requirement {i:05d}: " + "r" * 60 + "\n" for i in range(LINES))
    assert len(text) > EVICT_CHARS
    return text


def read(call_id: str, path: str, **window: int) -> dict[str, Any]:
    return {"id": call_id, "name": "read_file", "args": {"file_path": path, **window}}


def script() -> ModelSpec:
    turns = [
        {
            "tool_calls": [
                read("back", ARCHIVED, offset=1500, limit=3),
                read("head", ARCHIVED, limit=2),
                read("absent", CONVERSATION_DIR + "message-999999.md"),
                read("nested", CONVERSATION_DIR + "a/b/c.md"),
            ]
        },
        {"content": "read the archive"},
    ]
    return ModelSpec(provider="scripted", options={"script": {"turns": turns}})


@pytest.fixture
async def store(s3_server: S3DevServer) -> ArtifactStore:
    """The store ``worker.py`` builds from ``FILEGATE_S3_*`` (own bucket per test)."""
    s3 = S3Settings(
        endpoint=s3_server.endpoint,
        access_key=s3_server.access_key,
        secret_key=s3_server.secret_key,  # type: ignore[arg-type]
        bucket=uid("conv"),
    )
    found = await configured_store(s3)
    assert found is not None
    return found


async def run_agent(
    client: Client,
    tmp_path: Path,
    agent_store: ArtifactStore,
    tools_store: ArtifactStore | None,
) -> tuple[str, AgentResult]:
    """One run of :func:`script` on a workspace with workers built by ``worker.py``."""
    root = tmp_path / "ws"
    root.mkdir()
    agent_q, tools_q = uid("agent"), uid("tools")
    backend: dict[str, BackendProtocol] = {"fs": FilesystemBackend(root)}
    async with (
        agent_worker(client, agent_q, artifacts=agent_store),
        tools_worker(client, tools_q, backend, tmp_path / "journal", artifacts=tools_store),
    ):
        workflow_id = uid("wf")
        result = await client.execute_workflow(
            AgentWorkflow.run,
            AgentInput(
                task=big_task(),
                model=script(),
                backend=BackendSpec(
                    default=BackendRef(kind="remote", name="fs", task_queue=tools_q)
                ),
            ),
            id=workflow_id,
            task_queue=agent_q,
        )
    return await scope_of(client, workflow_id), result


def tool_results(result: AgentResult) -> dict[str, dict[str, Any]]:
    return {m["tool_call_id"]: m for m in result.transcript if m["role"] == "tool"}


async def test_evicted_message_is_read_back_from_the_store(
    temporal_client: Client, store: ArtifactStore, tmp_path: Path
) -> None:
    client = with_payload_codec(temporal_client, store)
    workflow_id, result = await run_agent(client, tmp_path, store, store)
    assert result.final_answer == "read the archive"
    # The archive exists where the stub points, holding the original message.
    key = store.key_for(workflow_id, conversation_key(evicted_name(0)))
    assert store.client.get_object(store.bucket, key).read().decode() == big_task()

    out = tool_results(result)
    back = out["back"]
    assert back["status"] == "success", back["content"]
    lines = big_task().splitlines()
    shown = [f"{n + 1}  {lines[n]}" for n in (1500, 1501, 1502)]  # offset 1500 = line 1501
    assert back["content"].splitlines()[:3] == shown
    assert "of 3000 total" in back["content"]
    assert "requirement 01499" not in back["content"]
    assert "requirement 01503" not in back["content"]
    head = out["head"]
    assert head["status"] == "success"
    assert "requirement 00000" in head["content"] and "requirement 00001" in head["content"]
    assert "requirement 00002" not in head["content"]
    for missing in ("absent", "nested"):
        assert out[missing]["status"] == "error", out[missing]
        assert "not found" in out[missing]["content"]
    # Nothing was created in the workspace: the reads never reached the backend.
    assert not any((tmp_path / "ws").iterdir())


async def test_without_a_store_the_path_is_an_ordinary_backend_path(
    temporal_client: Client, store: ArtifactStore, tmp_path: Path
) -> None:
    """Control: the same run with a store-less tools worker cannot read the archive."""
    client = with_payload_codec(temporal_client, store)
    workflow_id, result = await run_agent(client, tmp_path, store, None)
    assert store.list_thread(workflow_id)  # archived by the agent worker all the same
    out = tool_results(result)
    assert out["back"]["status"] == "error"
    assert "requirement 01500" not in out["back"]["content"]
