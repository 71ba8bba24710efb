"""The operator's path: ``submit`` to running workers, ``status`` and ``approvals`` on any id.

Real ``filegate worker`` processes (an agent and a tools worker) on the session
Temporal and S3 servers serve a task that ``filegate submit`` sends and follows;
after the workers stop, ``status`` still reports its final state from history.
Unknown ids, other workflow types, closed and unserved workflows get one clear
line and exit code 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError

from filegate.cli.submit import has_pollers
from filegate.workflows import AgentInput, AgentWorkflow
from tests.cli.test_cli import (
    CLI,
    by_call,
    call,
    cli,
    cli_env,
    cli_parallel,
    start_worker,
    stop_worker,
    write_json,
)

pytestmark = pytest.mark.services

__all__ = ["cli_env"]  # the fixture, shared with tests/cli/test_cli.py


async def wait_for_pollers(client: Client, agent_queue: str, tools_queue: str) -> None:
    deadline = time.monotonic() + 60
    while not (
        await has_pollers(client, agent_queue, workflow=True)
        and await has_pollers(client, tools_queue, workflow=False)
    ):
        assert time.monotonic() < deadline, "the workers never polled their queues"
        await asyncio.sleep(0.2)


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


async def test_submit_follows_a_task_on_running_workers(
    cli_env: dict[str, str], temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "in.txt").write_text("hello\n")
    queue = f"submit-{uuid.uuid4().hex[:8]}"
    workers = [
        start_worker(cli_env, "--role", "agent", "--task-queue", f"{queue}.agent"),
        start_worker(cli_env, "--role", "tools", "--backend", "filesystem", "--root", str(root),
                     "--name", "files", "--task-queue", f"{queue}.tools"),
    ]  # fmt: skip
    script = write_json(
        tmp_path / "script.json",
        {"turns": [
            {"tool_calls": [call("r", "read_file", file_path="/in.txt")]},
            {"tool_calls": [call("w", "write_file", file_path="/out.txt", content="done\n")]},
            {"content": "submitted and done"},
        ]},
    )  # fmt: skip
    workflow_id = f"submit-{uuid.uuid4().hex[:8]}"
    transcript = tmp_path / "t.json"
    try:
        await wait_for_pollers(temporal_client, f"{queue}.agent", f"{queue}.tools")
        proc = await asyncio.to_thread(
            cli, cli_env, "submit", "copy a file", "--model", f"scripted:{script}",
            "--agent-queue", f"{queue}.agent", "--tools-queue", f"{queue}.tools",
            "--name", "files", "--workflow-id", workflow_id, "--max-steps", "5",
            "--transcript", str(transcript),
        )  # fmt: skip
        again = await asyncio.to_thread(
            cli, cli_env, "submit", "x", "--model", f"scripted:{script}",
            "--agent-queue", f"{queue}.agent", "--tools-queue", f"{queue}.tools",
            "--workflow-id", workflow_id,
        )  # fmt: skip
    finally:
        outputs = [await asyncio.to_thread(stop_worker, w) for w in workers]
    assert proc.returncode == 0, proc.stdout + proc.stderr + "\n".join(outputs)
    assert f"workflow id: {workflow_id}" in proc.stdout
    assert f"backend files on {queue}.tools" in proc.stdout
    assert "!!" not in proc.stdout  # both queues were served
    assert '  -> write_file {"file_path": "/out.txt"' in proc.stdout
    assert "completed: final_answer after 3 model calls, 2 tool calls" in proc.stdout
    assert "final answer: submitted and done" in proc.stdout
    assert (root / "out.txt").read_text() == "done\n"
    assert "hello" in by_call(json.loads(transcript.read_text()))["r"]["content"]
    # A finished id is not reused silently (as with `run`).
    assert again.returncode == 2
    assert f"workflow {workflow_id} already finished (completed)" in one_error_line(again.stderr)

    # Nobody serves the workflow now: status reads its final state from history.
    status = await asyncio.to_thread(cli, cli_env, "status", workflow_id)
    assert status.returncode == 0, status.stderr
    state = json.loads(status.stdout)
    assert state["workflow_id"] == workflow_id and state["status"] == "completed"
    assert state["stop_reason"] == "final_answer"
    assert state["final_answer"] == "submitted and done"
    assert (state["steps"], state["tool_calls"], state["tool_errors"]) == (3, 2, 0)
    assert state["closed"] and "transcript" not in state


async def test_submit_warns_about_unserved_queues_and_refuses_bad_flags(
    cli_env: dict[str, str], temporal_client: Client, tmp_path: Path
) -> None:
    script = write_json(tmp_path / "s.json", {"turns": [{"content": "x"}]})
    queue = f"unserved-{uuid.uuid4().hex[:8]}"
    workflow_id = f"unserved-{uuid.uuid4().hex[:8]}"
    unserved = subprocess_submit(cli_env, script, queue, workflow_id)
    assert unserved.stdout is not None
    handle = temporal_client.get_workflow_handle(workflow_id)
    try:
        lines = [await asyncio.to_thread(unserved.stdout.readline) for _ in range(4)]
        deadline = time.monotonic() + 20
        while True:  # started right after the warnings, then waiting for a worker
            with contextlib.suppress(RPCError):
                await handle.describe()
                break
            assert time.monotonic() < deadline, "submit never started the workflow"
            await asyncio.sleep(0.1)
        assert unserved.poll() is None, "submit must keep waiting for a worker"
    finally:
        unserved.kill()
        unserved.communicate()
        with contextlib.suppress(RPCError):
            await handle.terminate("test over")
    assert lines[0].strip() == f"workflow id: {workflow_id}"
    assert f"!! no agent worker polls task queue {queue}.agent" in lines[2]
    assert f"!! no tools worker polls task queue {queue}.tools" in lines[3]

    shell, missing_model = cli_parallel(
        cli_env,
        ["submit", "t", "--model", f"scripted:{script}", "--backend", "local-shell"],
        ["submit", "t", "--model", "scripted:/nonexistent.json"],
    )
    assert shell[0] == 2
    assert "--backend local-shell needs --tools-queue" in one_error_line(shell[2])
    assert missing_model[0] == 2 and "cannot read script" in one_error_line(missing_model[2])


def subprocess_submit(
    env: dict[str, str], script: str, queue: str, workflow_id: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "submit", "wait", "--model", f"scripted:{script}",
         "--agent-queue", f"{queue}.agent", "--tools-queue", f"{queue}.tools",
         "--workflow-id", workflow_id],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


async def test_status_and_approvals_of_unknown_unserved_and_closed_workflows(
    cli_env: dict[str, str], temporal_client: Client
) -> None:
    orphan = f"orphan-{uuid.uuid4().hex[:6]}"
    other = f"other-{uuid.uuid4().hex[:6]}"
    missing = f"missing-{uuid.uuid4().hex[:6]}"
    await temporal_client.start_workflow(
        AgentWorkflow.run, AgentInput(task="x"), id=orphan, task_queue=f"nobody-{orphan}"
    )
    await temporal_client.start_workflow("SomethingElse", id=other, task_queue=f"nobody-{other}")
    try:
        results = cli_parallel(
            cli_env,
            ["status", orphan],
            ["status", missing],
            ["status", other],
            ["approvals", "--workflow", missing],
            ["approvals", "--workflow", other],
        )
    finally:
        await temporal_client.get_workflow_handle(other).terminate("test over")
        await temporal_client.get_workflow_handle(orphan).terminate("test over")
    # approvals --workflow takes any workflow that may host Filegate's approval
    # handlers (FileTools in one's own workflow): this one has no worker, so it
    # may be waiting for a human, and the listing says so (exit 3).
    *refused, (listed_other_code, listed_other_out, _) = results
    for code, _, err in refused:
        assert code == 1, err
    assert listed_other_code == 3 and f"!! workflow {other} did not answer" in listed_other_out
    unserved, status_missing, status_other, listed_missing = (
        one_error_line(err) for _, _, err in refused
    )
    assert re.search(
        rf"workflow {orphan} is running, but no worker answers for it \(task queue "
        rf"nobody-{orphan}\): is its agent worker up\?",
        unserved,
    )
    for line in (status_missing, listed_missing):
        assert f"no workflow {missing} in namespace" in line
    assert f"workflow {other} is a SomethingElse, not a Filegate AgentWorkflow" in status_other

    closed_status, closed_listing = cli_parallel(
        cli_env, ["status", orphan], ["approvals", "--workflow", orphan, "--json"]
    )
    assert closed_status[0] == 0, closed_status[2]
    state = json.loads(closed_status[1])
    assert state["status"] == "terminated" and state["failure"]
    assert closed_listing[0] == 1
    assert f"workflow {orphan} is not running (terminated)" in one_error_line(closed_listing[2])


async def test_submit_co_hosted_runs_on_the_tools_worker_alone(
    cli_env: dict[str, str], temporal_client: Client, tmp_path: Path
) -> None:
    """``worker --role tools --serve-agents`` + ``submit --co-hosted``: no agent worker at all."""
    root = tmp_path / "ws"
    root.mkdir()
    queue = f"cohost-{uuid.uuid4().hex[:8]}"
    worker = start_worker(cli_env, "--role", "tools", "--serve-agents", "--backend",
                          "filesystem", "--root", str(root), "--name", "files",
                          "--task-queue", queue)  # fmt: skip
    script = write_json(
        tmp_path / "script.json",
        {"turns": [
            {"tool_calls": [call("w", "write_file", file_path="/out.txt", content="here\n")]},
            {"content": "co-hosted"},
        ]},
    )  # fmt: skip
    workflow_id = f"cohost-{uuid.uuid4().hex[:8]}"
    try:
        await wait_for_pollers(temporal_client, queue, queue)
        proc = await asyncio.to_thread(
            cli, cli_env, "submit", "write", "--model", f"scripted:{script}", "--co-hosted",
            "--tools-queue", queue, "--name", "files", "--workflow-id", workflow_id,
        )  # fmt: skip
    finally:
        output = await asyncio.to_thread(stop_worker, worker)
    assert proc.returncode == 0, proc.stdout + proc.stderr + output
    assert f"agent queue {queue}, backend files on {queue}" in proc.stdout
    assert "!!" not in proc.stdout
    assert "final answer: co-hosted" in proc.stdout
    assert (root / "out.txt").read_text() == "here\n"
    history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
    kinds = {e.event_type for e in history.events}
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in kinds  # the write ran locally


def test_serve_agents_is_only_for_the_tools_role(cli_env: dict[str, str]) -> None:
    proc = cli(cli_env, "worker", "--role", "agent", "--serve-agents")
    assert proc.returncode == 2
    assert "--serve-agents is for --role tools" in one_error_line(proc.stderr)
