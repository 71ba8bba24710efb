"""Cancelling the caller of an operation outside a workflow stops it on the tools worker.

Before: ``run_outside`` awaited the standalone activity's (or the operation
workflow's) result, so a cancelled caller left its command running on the
tools worker until the command ended or reached its timeout. Now the
cancellation is sent to the server too, and the command is stopped with the
activity's next heartbeat. Both paths, through a real command.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from filegate.activities.stubs import tool_request
from filegate.backends.local_shell import LocalShellBackend
from filegate.backends.settings import Settings
from filegate.kernel.operation_types import Operation
from filegate.operations import run_outside
from filegate.plugin import FilegatePlugin
from temporalio.client import Client
from temporalio.worker import Worker

pytestmark = pytest.mark.services


@pytest.mark.parametrize("path", ["standalone", "workflow"])
async def test_a_cancelled_caller_stops_the_command(
    temporal_client: Client, tmp_path: Path, path: str
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    queue = f"cancel-{uuid.uuid4().hex[:8]}"
    plugin = FilegatePlugin(
        backends={"ws": LocalShellBackend(str(root), virtual_mode=True)},
        journal_dir=tmp_path / "journal", artifacts=None, settings=Settings(),
        policies=None, tracer_provider=None,
    )  # fmt: skip
    request = tool_request(
        "execute", {"command": "sleep 4 && touch finished"}, backend="ws", tool_call_id=""
    )
    async with Worker(temporal_client, task_queue=queue, plugins=[plugin]):
        caller = asyncio.ensure_future(
            run_outside(
                temporal_client, Operation(task_queue=queue, tool=request),
                operation_task_queue=queue, path=path,  # type: ignore[arg-type]
            )
        )  # fmt: skip
        await asyncio.sleep(1.5)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await asyncio.sleep(5)
    assert not (root / "finished").exists(), "the command ran on after its caller was cancelled"
