"""A tools worker serving the Store backend (``filegate worker --backend store``).

Files written by one agent thread are read by the next: the Store keeps them in
the real S3 server under the worker's namespace, not in any workflow.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from filegate.backends.settings import S3Settings
from filegate.cli.commands import build_parser
from filegate.devstack.s3 import S3DevServer
from filegate.kernel.messages import ModelSpec
from filegate.worker import in_process_workers, make_backend
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec

pytestmark = pytest.mark.services


def _settings(s3: S3DevServer) -> S3Settings:
    return S3Settings.from_env(
        {
            "FILEGATE_S3_ENDPOINT": s3.endpoint,
            "FILEGATE_S3_ACCESS_KEY": s3.access_key,
            "FILEGATE_S3_SECRET_KEY": s3.secret_key,
            "FILEGATE_S3_BUCKET": f"store-worker-{uuid.uuid4().hex[:8]}",
        }
    )


def _script(*turns: dict[str, object]) -> ModelSpec:
    return ModelSpec(provider="scripted", options={"script": {"turns": list(turns)}})


async def test_store_worker_keeps_files_across_threads(
    temporal_client: Client, s3_server: S3DevServer, tmp_path: Path
) -> None:
    settings = _settings(s3_server)
    backend = make_backend("store", None, namespace="users/alice", s3=settings)
    other = make_backend("store", None, namespace="users/bob", s3=settings)
    suffix = uuid.uuid4().hex[:8]
    agent_q, tools_q = f"store-agent-{suffix}", f"store-tools-{suffix}"
    spec = BackendSpec(default=BackendRef(kind="remote", name="store", task_queue=tools_q))
    write = _script(
        {
            "tool_calls": [
                {
                    "id": "w",
                    "name": "write_file",
                    "args": {"file_path": "/memories/prefs.md", "content": "tea\n"},
                }
            ]
        },
        {"content": "saved"},
    )
    read = _script(
        {
            "tool_calls": [
                {"id": "r", "name": "read_file", "args": {"file_path": "/memories/prefs.md"}}
            ]
        },
        {"content": "read"},
    )
    async with in_process_workers(temporal_client, agent_q, tools_q, {"store": backend}, tmp_path):
        first = await temporal_client.execute_workflow(
            AgentWorkflow.run,
            AgentInput(task="remember", model=write, backend=spec),
            id=f"store-w-{suffix}",
            task_queue=agent_q,
        )
        second = await temporal_client.execute_workflow(
            AgentWorkflow.run,
            AgentInput(task="recall", model=read, backend=spec),
            id=f"store-r-{suffix}",
            task_queue=agent_q,
        )
    assert first.tool_errors == 0 and second.tool_errors == 0
    tool_result = next(m for m in second.transcript if m["role"] == "tool")
    assert "tea" in str(tool_result["content"])
    assert backend.read("/memories/prefs.md").lines == ["tea"]
    assert other.read("/memories/prefs.md").code == "file_not_found"


def test_store_backend_needs_a_namespace(s3_server: S3DevServer) -> None:
    with pytest.raises(ValueError, match="--store-namespace is required"):
        make_backend("store", None, s3=_settings(s3_server))


def test_worker_cli_accepts_the_store_backend() -> None:
    args = build_parser().parse_args(
        [
            "worker",
            "--role",
            "tools",
            "--backend",
            "store",
            "--store-namespace",
            "users/a",
            "--task-queue",
            "q",
        ]
    )
    assert args.backend == "store" and args.store_namespace == "users/a"
