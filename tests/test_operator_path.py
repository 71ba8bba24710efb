# ruff: noqa: F811  (pytest fixtures imported from tests.test_cli)
"""The operator's path (issue 28): what got in the way of a new user, each fixed.

Subprocess tests run the CLI as users do (``python -m filegate``).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from filegate.backends.filesystem import FilesystemBackend
from filegate.workflows import BackendRef, BackendSpec, FileToolsConfig
from filegate.workflows.gate import ToolInterrupt
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

from tests.test_cli import cli, cli_env  # noqa: F401  (cli_env: a fixture)
from tests.test_stubs import _load_example
from tests.test_workflow_e2e import eventually, running_tools

with workflow.unsafe.imports_passed_through():
    from filegate.workflows.runner import agent_runner

ToolListWorkflow = _load_example("file_tools_host").ToolListWorkflow

CLI = [sys.executable, "-m", "filegate"]


def test_a_worker_refuses_a_root_that_does_not_exist(tmp_path: Path) -> None:
    typo = tmp_path / "typo"
    proc = subprocess.run(
        [*CLI, "worker", "--role", "tools", "--backend", "filesystem", "--root", str(typo),
         "--task-queue", "q"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "does not exist" in proc.stderr
    assert not typo.exists()  # nothing was created, nothing served


@pytest.mark.services
async def test_approvals_of_a_file_tools_host_and_one_message_per_mistake(
    temporal_client: Client, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    calls = [
        {"id": f"w{n}", "name": "write_file", "args": {"file_path": f"/{n}.txt", "content": "a"}}
        for n in (1, 2)
    ]
    async with running_tools(temporal_client, {"fs": FilesystemBackend(root)}, tmp_path / "j") as q:
        config = FileToolsConfig(
            backend=BackendSpec(default=BackendRef(kind="remote", name="fs", task_queue=q)),
            interrupt_on={"write_file": ToolInterrupt(always=True)},
        )
        host_queue = f"host-{uuid.uuid4().hex[:8]}"
        async with Worker(
            temporal_client,
            task_queue=host_queue,
            workflows=[ToolListWorkflow],
            workflow_runner=agent_runner(),
        ):
            wf = f"host-{uuid.uuid4().hex[:8]}"
            handle = await temporal_client.start_workflow(
                ToolListWorkflow.run, args=[config, calls], id=wf, task_queue=host_queue
            )
            [approval] = await eventually(
                lambda: handle.query("pending_approvals", result_type=list[dict[str, Any]]),
                lambda p: len(p) == 1 and not p[0].get("preview_pending"),
            )
            listed = await asyncio.to_thread(cli, cli_env, "approvals", "--workflow", wf)
            assert listed.returncode == 0, listed.stderr
            assert approval["id"] in listed.stdout and "MyFileAgent" not in listed.stderr
            first = await asyncio.to_thread(
                cli, cli_env, "approve", approval["id"], "--workflow", wf, "--reviewer", "ana"
            )
            assert first.returncode == 0, first.stderr
            again = await asyncio.to_thread(
                cli, cli_env, "approve", approval["id"], "--workflow", wf, "--reviewer", "bo"
            )
            await handle.terminate("test over")
            closed = await asyncio.to_thread(cli, cli_env, "approve", "a1", "--workflow", wf)
    assert closed.returncode == 1 and f"workflow {wf} is not running (terminated)" in closed.stderr
    assert again.returncode == 1 and "already approved by ana via cli" in again.stderr
    missing = f"missing-{uuid.uuid4().hex[:6]}"
    answers = await asyncio.gather(
        asyncio.to_thread(cli, cli_env, "approve", "a1", "--workflow", missing),
        asyncio.to_thread(cli, cli_env, "approvals", "--workflow", missing),
        asyncio.to_thread(cli, cli_env, "status", missing),
    )
    for answer in answers:
        assert answer.returncode == 1
        assert answer.stderr == f"filegate: no workflow {missing} in namespace default\n"
