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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from temporalio.client import Client as TemporalClient
from temporalio.worker import Worker

from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.settings import Settings
from filegate.cli.mcp import _mcp_server
from filegate.kernel import wire
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


@asynccontextmanager
async def mcp_session(
    temporal_client: TemporalClient, tmp_path: Path, backend: Any, *, shell: bool
) -> AsyncIterator[Client]:
    """A session on ``backend`` served as ``filegate mcp --root`` serves it (the tools
    beside the session, on its queue), and the SDK client on the server ``filegate mcp``
    builds, in-process."""
    queue = f"mcp-{uuid.uuid4().hex[:8]}"
    plugin = FilegatePlugin(
        agent=True, backends={"ws": backend}, journal_dir=tmp_path / "journal",
        artifacts=None, settings=Settings(), policies=None, tracer_provider=None,
    )  # fmt: skip
    shell_path = str(tmp_path / "ws") if shell else None
    ref = BackendRef(kind="remote", name="ws", task_queue=queue, can_execute=shell,
                     shell_path=shell_path)  # fmt: skip
    config = FileToolsConfig(backend=BackendSpec(default=ref))
    flags = argparse.Namespace(reviewer=None, ask="form", approval_url=None)
    async with Worker(temporal_client, task_queue=queue, plugins=[plugin]):
        handle = await temporal_client.start_workflow(
            SessionWorkflow.run, SessionInput(config=config), id=queue, task_queue=queue
        )
        server = _mcp_server(temporal_client, queue, flags, "decide it elsewhere")
        async with Client(server) as client:
            yield client
        await handle.signal(SessionWorkflow.close)
        await handle.result()


@pytest.mark.slow
async def test_a_second_call_during_a_long_one_is_answered_and_applied_once(
    temporal_client: TemporalClient, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("needle\n")
    async with mcp_session(temporal_client, tmp_path, SlowDisk(root), shell=False) as client:
        began = time.monotonic()
        grep = asyncio.ensure_future(client.call_tool("grep", {"pattern": "needle"}))
        await asyncio.sleep(3)
        wrote = await client.call_tool("write_file", {"file_path": "/b.txt", "content": "b"})
        assert not wrote.is_error, text_of(wrote)
        found = await grep
        assert "a.txt" in text_of(found), repr(text_of(found))
        assert time.monotonic() - began >= SLOW_GREP_SECONDS
    assert (root / "b.txt").read_text() == "b"


@pytest.mark.slow
async def test_a_retry_after_the_client_gave_up_never_applies_twice(
    temporal_client: TemporalClient, tmp_path: Path
) -> None:
    """Drawn timings: a command that appends a line runs for ``run`` seconds; the client
    gives up on it after ``patience`` (its read timeout: the forced error; the SDK then
    cancels the request, which stops the call) and sends the same call again after
    ``pause``. The retry attaches to the first call and gets its answer: its output if
    it finished, else that it was cancelled (perhaps after its echo). The line is never
    there twice; a call whose answer was delivered and sent again runs again. The old
    code ran the retry as a new call (two lines whenever the first applied)."""
    import random

    from filegate.backends.local_shell import LocalShellBackend

    root = tmp_path / "ws"
    root.mkdir()
    rng = random.Random(54)
    cases = [
        (rng.uniform(0.2, 2.0), rng.uniform(0.2, 1.8), rng.uniform(0.0, 2.0)) for _ in range(10)
    ]
    outcomes = {"cancelled": 0, "finished": 0}
    async with mcp_session(temporal_client, tmp_path, LocalShellBackend(root), shell=True) as (
        client
    ):
        for n, (run, patience, pause) in enumerate(cases):
            command = f"sleep {run:.2f}; echo once >> log{n}.txt; echo done-{n}"
            try:
                first = await client.call_tool(
                    "execute", {"command": command}, read_timeout_seconds=patience
                )
                assert f"done-{n}" in text_of(first)
            except Exception:  # the client gave up: the forced error
                first = None
            await asyncio.sleep(pause)
            again = await client.call_tool("execute", {"command": command})
            log = root / f"log{n}.txt"
            lines = log.read_text().split() if log.exists() else []
            case = (run, patience, pause, lines, text_of(again))
            if first is not None:  # delivered: the second is a new call
                assert f"done-{n}" in text_of(again) and lines == ["once"] * 2, case
            elif text_of(again).startswith(wire.SESSION_CALL_CANCELLED):
                assert lines in ([], ["once"]), case  # stopped, perhaps after its echo
                outcomes["cancelled"] += 1
            else:  # it finished before the cancel reached it: its own answer, once
                assert f"done-{n}" in text_of(again) and lines == ["once"], case
                outcomes["finished"] += 1
    assert outcomes["cancelled"] >= 1, outcomes  # the drawn timings cover a stopped call


def _busy(marker: str) -> list[int]:
    """Pids of processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and b"pytest" not in cmdline:
                found.append(int(entry.name))
    return found


@pytest.mark.slow
async def test_a_call_the_client_cancels_stops_within_a_second(
    temporal_client: TemporalClient, tmp_path: Path
) -> None:
    """A command that keeps a core busy, cancelled by the client (its SDK's request
    timeout sends ``notifications/cancelled``): the process is gone within 1 s of the
    cancel; sent again, the call answers that it was cancelled (nothing runs again),
    and the session goes on. The old code let it run to its own end."""
    from filegate.backends.local_shell import LocalShellBackend

    root = tmp_path / "ws"
    root.mkdir()
    marker = f"busy-{uuid.uuid4().hex[:8]}"
    command = f"python3 -c 'while True: pass' {marker}"
    async with mcp_session(temporal_client, tmp_path, LocalShellBackend(root), shell=True) as (
        client
    ):
        with pytest.raises(Exception):  # noqa: B017 - the client's own timeout
            await client.call_tool("execute", {"command": command}, read_timeout_seconds=2)
        cancelled = time.monotonic()
        while _busy(marker):
            assert time.monotonic() - cancelled < 1.0, "the command still runs"
            await asyncio.sleep(0.05)
        # Sent again, it is answered by the cancelled call, not run a second time.
        again = await client.call_tool("execute", {"command": command})
        assert wire.SESSION_CALL_CANCELLED in text_of(again), text_of(again)
        assert not _busy(marker)
        later = await client.call_tool("execute", {"command": "echo next"})
        assert "next" in text_of(later)
