# ruff: noqa: F811  (pytest fixtures imported from tests.cli.test_cli)
"""The operator's path (issue 28): what got in the way of a new user, each fixed.

Subprocess tests run the CLI as users do (``python -m filegate``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from filegate.backends.filesystem import FilesystemBackend
from filegate.cli.services import DEV_PORT_ENV
from filegate.workflows import BackendRef, BackendSpec, FileToolsConfig
from filegate.workflows.gate import ToolInterrupt
from tests.cli.test_cli import cli, cli_env  # noqa: F401  (cli_env: a fixture)
from tests.ports import quiet_port
from tests.workflows.test_execute_gate import ToolListWorkflow, running_host
from tests.workflows.test_workflow_e2e import eventually, running_tools

CLI = [sys.executable, "-m", "filegate"]


@pytest.mark.slow
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
        async with running_host(temporal_client) as host_queue:
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


def _dev_in_background(
    tmp_path: Path, web_ui_port: int, temporal_port: int
) -> tuple[subprocess.Popen[str], int]:
    """``filegate dev &`` in a non-interactive shell (SIGINT ignored, as in a script):
    the shell, and the pid of the dev command it started. Its Temporal port is the
    test's own: on 7233 it would join another test's server (same user)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FILEGATE_", "TEMPORAL_"))}
    env |= {"FILEGATE_STATE_DIR": str(tmp_path / "state"), DEV_PORT_ENV: str(temporal_port)}
    pidfile = tmp_path / "dev.pid"
    pidfile.unlink(missing_ok=True)
    command = " ".join(shlex.quote(a) for a in [*CLI, "dev", "--ui-port", "0",
                                                 "--web-ui-port", str(web_ui_port)])  # fmt: skip
    shell = subprocess.Popen(
        ["bash", "-c", f"{command} & echo $! > {shlex.quote(str(pidfile))}; wait $!"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert shell.stdout is not None
    said = []
    for line in shell.stdout:
        said.append(line)
        if "Ctrl-C stops the servers" in line:
            return shell, int(pidfile.read_text())
    raise AssertionError(f"dev never came up (exit {shell.wait()}): {''.join(said)}")


def _stack_pids(tmp_path: Path) -> list[int]:
    pids = []
    for name in ("stack-temporal.json", "stack-s3.json"):
        path = tmp_path / "state" / name
        if path.exists():
            pids.append(int(json.loads(path.read_text())["pid"]))
    return pids


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return True
    return state == "Z"


@pytest.mark.slow
def test_sigterm_stops_a_background_dev_and_a_killed_one_can_start_again(tmp_path: Path) -> None:
    ports = quiet_port(), quiet_port()
    shell, dev = _dev_in_background(tmp_path, *ports)
    servers = _stack_pids(tmp_path)
    assert len(servers) == 2
    os.kill(dev, signal.SIGTERM)
    out, _ = shell.communicate(timeout=60)
    assert shell.returncode == 130, out
    assert "interrupted (stopped by SIGTERM)" in out
    assert all(_gone(pid) for pid in servers) and not _stack_pids(tmp_path)

    # SIGKILL orphans the servers; the same command then starts again.
    shell, dev = _dev_in_background(tmp_path, *ports)
    orphans = _stack_pids(tmp_path)
    os.kill(dev, signal.SIGKILL)
    shell.communicate(timeout=30)
    assert not any(_gone(pid) for pid in orphans)  # still holding their ports
    shell, dev = _dev_in_background(tmp_path, *ports)
    try:
        assert all(_gone(pid) for pid in orphans)
    finally:
        os.kill(dev, signal.SIGTERM)
        out, _ = shell.communicate(timeout=60)
    assert shell.returncode == 130, out


@pytest.mark.services
def test_run_uses_a_model_profile_of_the_environment(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "hello.json").write_text(json.dumps({"turns": [{"content": "hi from mine"}]}))
    root = tmp_path / "ws"
    root.mkdir()
    env = {
        **cli_env,
        "FILEGATE_MODEL_PROFILES": json.dumps(
            {"mine": {"kind": "scripted", "script_dir": str(scripts)}}
        ),
    }
    ok = cli(env, "run", "t", "--model", "mine:hello.json", "--root", str(root), timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "final answer: hi from mine" in ok.stdout
    assert "after 1 model call, 0 tool calls (0 errors), 0 approvals" in ok.stdout
    unknown = cli(env, "run", "t", "--model", "local:llama", "--root", str(root))
    assert unknown.returncode == 2
    assert unknown.stderr == (
        "filegate: --model 'local:llama': no model profile 'local' (profiles: mine)\n"
    )
