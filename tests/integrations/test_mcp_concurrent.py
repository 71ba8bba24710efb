"""Calls side by side in one MCP session: answered once, applied once (issue 54).

The official SDK client, connected in-process to the server ``filegate mcp``
builds (``cli.mcp._mcp_server``), on a session served as ``filegate mcp --root``
serves it: the tools run beside the session (local activities in its workflow
task), so a long call holds the task that admits the next call. The disk is
made slow (its grep takes 13.5 s, within the 15 s search limit: the fault of a
slow or huge tree). The old code gave the second call a protocol error after 10 s ("Timeout or
cancellation waiting for update") and applied it anyway when the grep ended.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from temporalio.client import Client as TemporalClient
from temporalio.worker import Worker

from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.settings import Settings
from filegate.cli.mcp import _mcp_server
from filegate.plugin import FilegatePlugin
from filegate.workflows import BackendRef, BackendSpec, FileToolsConfig
from filegate.workflows.session import SessionInput, SessionWorkflow
from tests.integrations.test_mcp import text_of

pytestmark = pytest.mark.services

SLOW_GREP_SECONDS = 13.5


class SlowDisk(FilesystemBackend):
    """A tree whose grep takes :data:`SLOW_GREP_SECONDS` (a slow disk, a huge tree)."""

    def grep(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(SLOW_GREP_SECONDS)
        return super().grep(*args, **kwargs)


@pytest.mark.slow
async def test_a_second_call_during_a_long_one_is_answered_and_applied_once(
    temporal_client: TemporalClient, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("needle\n")
    queue = f"mcp-side-{uuid.uuid4().hex[:8]}"
    plugin = FilegatePlugin(
        agent=True, backends={"ws": SlowDisk(root)}, journal_dir=tmp_path / "journal",
        artifacts=None, settings=Settings(), policies=None, tracer_provider=None,
    )  # fmt: skip
    config = FileToolsConfig(
        backend=BackendSpec(default=BackendRef(kind="remote", name="ws", task_queue=queue))
    )
    flags = argparse.Namespace(reviewer=None, ask="form", approval_url=None)
    async with Worker(temporal_client, task_queue=queue, plugins=[plugin]):
        handle = await temporal_client.start_workflow(
            SessionWorkflow.run, SessionInput(config=config), id=queue, task_queue=queue
        )
        server = _mcp_server(temporal_client, queue, flags, "decide it elsewhere")
        async with Client(server) as client:
            began = time.monotonic()
            grep = asyncio.ensure_future(client.call_tool("grep", {"pattern": "needle"}))
            await asyncio.sleep(3)
            wrote = await client.call_tool("write_file", {"file_path": "/b.txt", "content": "b"})
            assert not wrote.is_error, text_of(wrote)
            found = await grep
            assert "a.txt" in text_of(found), repr(text_of(found))
            assert time.monotonic() - began >= SLOW_GREP_SECONDS
        await handle.signal(SessionWorkflow.close)
        await handle.result()
        writes = [
            e for e in (await handle.fetch_history()).events
            if e.HasField("workflow_execution_update_accepted_event_attributes")
        ]  # fmt: skip
    assert (root / "b.txt").read_text() == "b"
    assert len(writes) == 2  # the grep and the write, each admitted once
