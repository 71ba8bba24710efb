"""The adapters share one operation client, so what one does the other does too.

Before, the Deep Agents backend and the Pydantic AI workspace each carried a copy
of the client plumbing, and the copies had drifted: only the workspace fell back to
the running activity's client, only the backend read ``FILEGATE_OPERATION_PATH``.
Each test below failed on one adapter of the old code.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

pytest.importorskip("deepagents")
pytest.importorskip("pydantic_ai")

from filegate.backends.local_shell import LocalShellBackend
from filegate.integrations.deepagents import FilegateBackend, tools_worker
from filegate.integrations.pydantic_ai import FilegateWorkspace
from filegate.operations import OperationClient

BACKEND = "ws"
ADAPTERS = [FilegateBackend, FilegateWorkspace]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_both_adapters_are_a_mapping_onto_one_client(adapter: Any) -> None:
    built = adapter(backend=BACKEND, task_queue="q")
    assert type(built.calls) is OperationClient
    assert (built.calls.backend, built.calls.operation_task_queue) == (BACKEND, "q")


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize(
    "where", [{"backend": "", "task_queue": "q"}, {"backend": "b", "task_queue": ""}]
)
def test_an_empty_name_is_refused_in_one_line(adapter: Any, where: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=r"needs backend= and task_queue= \(non-empty\)") as bad:
        adapter(**where)
    assert "\n" not in str(bad.value)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_environment_names_the_default_path_when_a_call_is_made(
    adapter: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = adapter(backend=BACKEND, task_queue="q")
    assert built.calls.operation_path is None  # nothing read at construction
    monkeypatch.setenv("FILEGATE_OPERATION_PATH", "workflow")
    assert built.calls.default_path() == "workflow"
    monkeypatch.setenv("FILEGATE_OPERATION_PATH", "sometimes")
    with pytest.raises(ValueError, match="FILEGATE_OPERATION_PATH"):
        built.calls.default_path()
    forced = adapter(backend=BACKEND, task_queue="q", operation_path="standalone")
    assert forced.calls.operation_path == "standalone"


@activity.defn(name="test.read_through_adapter")
async def read_through_adapter(spec: dict[str, str]) -> str:
    """An activity of the user's own reading through an adapter built without client=."""
    if spec["adapter"] == "deepagents":
        backend = FilegateBackend(backend=BACKEND, task_queue=spec["queue"])
        read = await backend.aread("/note.txt")
        assert read.file_data is not None, read.error
        return str(read.file_data["content"])
    workspace = FilegateWorkspace(backend=BACKEND, task_queue=spec["queue"])
    return (await workspace.read_bytes("/note.txt")).decode()


@pytest_asyncio.fixture
async def tools_queue(
    temporal_client: Client, workspace: Path, tmp_path: Path
) -> AsyncIterator[str]:
    queue = f"oc-{uuid.uuid4().hex[:8]}"
    worker = tools_worker(
        temporal_client, queue, {BACKEND: LocalShellBackend(workspace)}, tmp_path / "journal"
    )
    async with worker:
        yield queue


@pytest.mark.services
@pytest.mark.parametrize("adapter", ["deepagents", "pydantic_ai"])
async def test_inside_an_activity_the_activitys_client_runs_the_call(
    adapter: str, temporal_client: Client, tools_queue: str, workspace: Path
) -> None:
    (workspace / "note.txt").write_text("from the tools worker\n")
    host = f"host-{uuid.uuid4().hex[:8]}"
    async with Worker(  # bare: the subject is a user's own activity beside the plugin's worker
        temporal_client, task_queue=host, activities=[read_through_adapter]
    ):
        got = await temporal_client.execute_activity(  # type: ignore[call-overload]
            read_through_adapter,
            {"adapter": adapter, "queue": tools_queue},
            id=f"read-{uuid.uuid4().hex[:8]}",
            task_queue=host,
            start_to_close_timeout=timedelta(seconds=60),
        )
    assert got.startswith("from the tools worker")
