"""FilegateWorkspace inside a workflow of one's own: each call scheduled through the kit.

Inside a workflow the workspace's methods schedule the operation's activity
from that workflow (``run_operation``): recorded in its history, with call ids
from ``workflow.uuid4()``, so the history replays. The worker carries both
plugins, as an agent's worker would, on the merged data converter with
Filegate's S3 codec (a write over the codec threshold goes through the S3
server). A rule the worker enforces refuses the denied write with the builtin
``PermissionError`` the protocol names.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Replayer, Worker

with workflow.unsafe.imports_passed_through():
    from minio import Minio
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin

    from filegate import FilegatePlugin
    from filegate.activities.history import ArtifactPayloadCodec
    from filegate.backends import FilesystemBackend, FilesystemPermission
    from filegate.backends.artifacts import ArtifactStore
    from filegate.devstack.servers import TemporalDevServer
    from filegate.integrations.pydantic_ai import (
        FilegateFileWorkspace,
        FilegatePydanticAIPayloadConverter,
        pydantic_ai_data_converter,
    )

pytestmark = [pytest.mark.services]

LOCKED = FilesystemPermission(operations=["write"], paths=["/locked/**"], mode="deny")
LARGE = b"0123456789abcdef" * 4096
"""64 KiB: over the codec threshold, so the upload and the read travel through S3."""


@workflow.defn
class WorkspaceInWorkflow:
    @workflow.run
    async def run(self, queue: str) -> dict[str, Any]:
        ws = FilegateFileWorkspace(backend="files", task_queue=queue, permissions=[LOCKED])
        await ws.write_bytes("/a/b.txt", b"hello\n")
        await ws.write_bytes("/big.bin", LARGE)
        answer: dict[str, Any] = {
            "read": (await ws.read_bytes("/a/b.txt")).decode(),
            "large": await ws.read_bytes("/big.bin") == LARGE,
            "listed": [(e.name, e.path, e.is_dir) for e in await ws.list_dir("/a")],
            "missing": await ws.exists("/nope"),
            "dir": (await ws.stat("/a")).is_dir,
            "file": (await ws.stat("/a/b.txt")).size,
            "below_a_file": await ws.exists("/a/b.txt/child"),
        }
        try:
            await ws.write_bytes("/locked/x.txt", b"x")
            answer["denied"] = None
        except PermissionError as exc:
            answer["denied"] = str(exc)
        try:
            await ws.read_bytes("/nope")
        except FileNotFoundError:
            answer["not_found"] = True
        await ws.remove("/a/b.txt")
        answer["removed"] = not await ws.exists("/a/b.txt")
        return answer


async def test_the_workspace_runs_through_the_kit_inside_a_workflow(
    temporal_server: TemporalDevServer, minio_client: Minio, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    queue = f"pai-wf-{uuid.uuid4().hex[:8]}"
    store = ArtifactStore(minio_client, "pai-wf", namespace=f"ns-{uuid.uuid4().hex[:8]}")
    plugin = FilegatePlugin(
        backends={"files": FilesystemBackend(root)},
        journal_dir=tmp_path / "journal",
        artifacts=store,
    )
    client = await Client.connect(
        temporal_server.address,
        namespace=temporal_server.namespace,
        plugins=[plugin, PydanticAIPlugin()],
        data_converter=pydantic_ai_data_converter(),
    )
    # Both plugins kept the merged converter; Filegate added its codec.
    converter = client.data_converter
    assert converter.payload_converter_class is FilegatePydanticAIPayloadConverter
    assert isinstance(converter.payload_codec, ArtifactPayloadCodec)
    async with Worker(client, task_queue=queue, workflows=[WorkspaceInWorkflow]):
        handle = await client.start_workflow(
            WorkspaceInWorkflow.run, queue, id=f"pai-wf-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        answer = await handle.result()
        history = await handle.fetch_history()
    await Replayer(
        workflows=[WorkspaceInWorkflow],
        plugins=[FilegatePlugin(artifacts=store), PydanticAIPlugin()],
        data_converter=pydantic_ai_data_converter(),
    ).replay_workflow(history)

    assert answer["read"] == "hello\n" and answer["large"] is True
    assert (root / "big.bin").read_bytes() == LARGE
    assert answer["listed"] == [["b.txt", "/a/b.txt", False]]
    assert answer["missing"] is False and answer["dir"] is True
    assert answer["file"] == 6 and answer["below_a_file"] is False
    assert answer["denied"] is not None and "/locked/x.txt" in answer["denied"]
    assert not (root / "locked").exists()
    assert answer["not_found"] is True and answer["removed"] is True
    events = [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
    ]
    assert "filegate.transfer.upload" in events and "filegate.delete" in events


@pytest.mark.parametrize("path", ["standalone", "workflow"])
async def test_outside_a_workflow_both_operation_paths_answer_alike(
    temporal_server: TemporalDevServer, tmp_path: Path, path: str
) -> None:
    """A standalone activity or the ``OperationWorkflow`` fallback: the same answers."""
    root = tmp_path / "root"
    root.mkdir()
    queue = f"pai-out-{uuid.uuid4().hex[:8]}"
    plugin = FilegatePlugin(
        backends={"files": FilesystemBackend(root)},
        journal_dir=tmp_path / "journal",
        artifacts=None,
    )
    client = await Client.connect(
        temporal_server.address,
        namespace=temporal_server.namespace,
        plugins=[plugin, PydanticAIPlugin()],
        data_converter=pydantic_ai_data_converter(),
    )
    ws = FilegateFileWorkspace(
        backend="files",
        task_queue=queue,
        client=client,
        permissions=[LOCKED],
        operation_path=path,  # type: ignore[arg-type]
    )
    async with Worker(client, task_queue=queue):
        await ws.write_bytes("/d/x.bin", b"\x00\xff")
        assert await ws.read_bytes("/d/x.bin") == b"\x00\xff"
        assert [entry.name for entry in await ws.list_dir("/d")] == ["x.bin"]
        with pytest.raises(PermissionError):
            await ws.write_bytes("/locked/y", b"y")
        with pytest.raises(IsADirectoryError):
            await ws.read_bytes("/d")
        with pytest.raises(NotADirectoryError):
            await ws.list_dir("/d/x.bin")
        await ws.remove("/d")
        assert not await ws.exists("/d")
    assert not (root / "d").exists() and not (root / "locked").exists()
