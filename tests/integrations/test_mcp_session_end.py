"""An MCP session ends when its ``filegate mcp`` process ends, however it ends (issue 54).

Real parts: ``filegate mcp`` as a subprocess on the suite's Temporal server, the
official ``mcp`` SDK client, a deployment's workers built by ``FilegatePlugin``
(or the process's own with ``--root``). The old code left sessions Running: a
server stopped by SIGTERM (how a client such as the MCP Inspector stops it)
never sent ``close``, and with ``--root`` the process could exit before its own
worker ended the session; a SIGKILLed server left it Running for good.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus

from tests.cli.test_cli import CLI, cli, cli_env, write_json
from tests.integrations.test_mcp import (
    RULES,
    flags,
    free_port,
    mcp_client,
    streamable_client,
    text_of,
    until_listening,
    workspace,
)

__all__ = ["cli_env"]  # the fixture, shared with test_cli

pytestmark = pytest.mark.services

TOKEN = "s" * 32


@asynccontextmanager
async def deployment(
    temporal: TemporalClient, tmp_path: Path, root: Path
) -> AsyncIterator[list[str]]:
    """A deployment's agent and tools workers; yields ``filegate mcp``'s flags for it."""
    from temporalio.worker import Worker

    from filegate.backends.filesystem import FilesystemBackend
    from filegate.backends.settings import Settings
    from filegate.plugin import FilegatePlugin

    tag = tmp_path.name[-20:]
    agent_queue, tools_queue = f"end-agents-{tag}", f"end-tools-{tag}"
    quiet: dict[str, Any] = {"artifacts": None, "settings": Settings(), "tracer_provider": None}
    tools = FilegatePlugin(
        backends={"ws": FilesystemBackend(root)}, journal_dir=tmp_path / "j", policies=None, **quiet
    )
    rules = tmp_path / "rules.json"
    write_json(rules, RULES)
    async with (
        Worker(temporal, task_queue=agent_queue, plugins=[FilegatePlugin(agent=True, **quiet)]),
        Worker(temporal, task_queue=tools_queue, plugins=[tools]),
    ):
        yield [
            "mcp", "--tools-queue", tools_queue, "--name", "ws", "--agent-queue", agent_queue,
            "--permissions", str(rules),
        ]  # fmt: skip


def deployed_env(cli_env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in cli_env.items() if not k.startswith("FILEGATE_S3_")}


async def status(temporal: TemporalClient, workflow_id: str) -> WorkflowExecutionStatus | None:
    return (await temporal.get_workflow_handle(workflow_id).describe()).status


async def ended_within(temporal: TemporalClient, workflow_id: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while await status(temporal, workflow_id) == WorkflowExecutionStatus.RUNNING:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.2)
    return True


async def test_twenty_one_shot_sessions_leave_none_running(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """20 one-shot sessions in a row through the SDK's stdio client against a
    deployment on a Temporal server of their own: each is over when its process is
    (no waiting afterwards), and ``filegate approvals`` then exits 0."""
    from temporalio.contrib.pydantic import pydantic_data_converter

    from filegate.devstack.servers import TemporalDevServer

    root = workspace(tmp_path)
    ids = [f"mcp-once-{n}" for n in range(20)]
    with TemporalDevServer(tmp_path / "temporal") as server:
        temporal = await TemporalClient.connect(
            server.address, namespace=server.namespace, data_converter=pydantic_data_converter
        )
        env = {
            **deployed_env(cli_env), "TEMPORAL_ADDRESS": server.address,
            "TEMPORAL_NAMESPACE": server.namespace,
        }  # fmt: skip
        async with deployment(temporal, tmp_path, root) as args:
            for workflow_id in ids:
                async with mcp_client(env, [*args, "--workflow-id", workflow_id], None) as client:
                    read = await client.call_tool("read_file", {"file_path": "/notes.txt"})
                    assert "first line" in text_of(read)
                assert await status(temporal, workflow_id) != WorkflowExecutionStatus.RUNNING
            listed = cli(env, "approvals")
        assert listed.returncode == 0, listed.stdout + listed.stderr


async def test_sessions_served_from_root_end_with_their_process(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient
) -> None:
    """With ``--root`` the process's own worker must end the session before the process
    exits: nobody else serves its queue afterwards."""
    root = workspace(tmp_path)
    for n in range(5):
        workflow_id = f"mcp-root-once-{n}-{tmp_path.name[-12:]}"
        async with mcp_client(cli_env, flags(tmp_path, root, workflow_id), None) as client:
            read = await client.call_tool("read_file", {"file_path": "/notes.txt"})
            assert "first line" in text_of(read)
        assert await status(temporal_client, workflow_id) != WorkflowExecutionStatus.RUNNING


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_a_server_stopped_by_a_signal_leaves_no_session_running(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient, stop: int
) -> None:
    """SIGTERM: the session is closed on the way out. SIGKILL: nothing runs on the way
    out; the session's lease (``--lease 2``) runs out with nothing running, and the
    deployment's worker ends it."""
    root = workspace(tmp_path)
    env = {**deployed_env(cli_env), "FILEGATE_UI_TOKEN": TOKEN}
    workflow_id = f"mcp-signal-{stop}-{tmp_path.name[-12:]}"
    port = free_port()
    async with deployment(temporal_client, tmp_path, root) as args:
        proc = await asyncio.create_subprocess_exec(
            *CLI, *args, "--workflow-id", workflow_id, "--lease", "2", "--transport", "http",
            "--port", str(port), env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            await until_listening("127.0.0.1", port, proc)
            transport = streamable_client(
                f"http://127.0.0.1:{port}/mcp", {"Authorization": f"Bearer {TOKEN}"}
            )
            async with Client(transport) as client:
                read = await client.call_tool("read_file", {"file_path": "/notes.txt"})
                assert "first line" in text_of(read)
            await asyncio.sleep(3)  # renewals kept it open past its lease while served
            assert await status(temporal_client, workflow_id) == WorkflowExecutionStatus.RUNNING
            proc.send_signal(stop)
            await asyncio.wait_for(proc.wait(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        if stop == signal.SIGTERM:
            assert await status(temporal_client, workflow_id) != WorkflowExecutionStatus.RUNNING
        else:
            assert await ended_within(temporal_client, workflow_id, 15)
