"""Cancelling the caller of an operation outside a workflow stops it on the tools worker.

Before: ``run_outside`` awaited the standalone activity's (or the operation
workflow's) result, so a cancelled caller left its command running on the
tools worker until the command ended or reached its timeout. Now the
cancellation is sent to the server too, and the command is stopped with the
activity's next heartbeat. Both paths, through a real command.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from filegate.activities.stubs import tool_request
from filegate.backends.local_shell import LocalShellBackend
from filegate.backends.settings import Settings
from filegate.kernel.operation_types import Operation
from filegate.operations import run_outside
from filegate.plugin import FilegatePlugin
from tests.cli.test_cli import CLI, cli_env

__all__ = ["cli_env"]  # the fixture, shared with test_cli

pytestmark = pytest.mark.services


def shell_tools(root: Path, journal: Path) -> FilegatePlugin:
    """A tools worker's plugin serving ``root`` as a host shell, with nothing from the env."""
    return FilegatePlugin(
        backends={"ws": LocalShellBackend(str(root), virtual_mode=True)},
        journal_dir=journal,
        artifacts=None,
        settings=Settings(),
        policies=None,
        tracer_provider=None,
    )


@pytest.mark.parametrize("path", ["standalone", "workflow"])
async def test_a_cancelled_caller_stops_the_command(
    temporal_client: Client, tmp_path: Path, path: str
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    queue = f"cancel-{uuid.uuid4().hex[:8]}"
    plugin = shell_tools(root, tmp_path / "journal")
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


async def test_ctrl_c_on_filegate_call_stops_the_command(
    cli_env: dict[str, str], temporal_client: Client, tmp_path: Path
) -> None:
    """The command line's Ctrl-C (SIGINT) reaches the same cancellation: the tools
    worker here is another process's (this test's), so only the server can stop it."""
    import signal

    root = tmp_path / "ws"
    root.mkdir()
    queue = f"cancel-cli-{uuid.uuid4().hex[:8]}"
    plugin = shell_tools(root, tmp_path / "journal")
    env = {k: v for k, v in cli_env.items() if not k.startswith("FILEGATE_S3_")}
    args = '{"command": "touch started && sleep 5 && touch finished"}'
    async with Worker(temporal_client, task_queue=queue, plugins=[plugin]):
        proc = await asyncio.create_subprocess_exec(
            *CLI, "call", "execute", "--args", args, "--tools-queue", queue, "--name", "ws",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        # Ctrl-C once the command runs: on a busy machine the interpreter's start
        # alone can take seconds (a Ctrl-C then is tests/cli/test_cli_one_line_errors').
        deadline = time.monotonic() + 60
        while not (root / "started").exists():
            assert time.monotonic() < deadline and proc.returncode is None, "never started"
            await asyncio.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 130, err.decode()
        await asyncio.sleep(6)
    assert not (root / "finished").exists(), "the command ran on after Ctrl-C"
