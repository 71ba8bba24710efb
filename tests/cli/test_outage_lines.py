"""Outages say what is out (issue 49, item 4), with real servers and real processes.

* A run's worker that does not answer its progress queries while Temporal does
  (busy, or holding a workflow task while it waits for S3) is one line saying
  so, and one when it answers again, never "Temporal is unreachable".
* An S3 outage under ``filegate run`` is Filegate's own two lines (waiting for
  S3, S3 answers again), not urllib3's warning per retry.
* For the first seconds after a Temporal restart the server knows no poller of
  any task queue; ``approvals`` asks such a workflow again for a few seconds
  instead of reporting its worker as down.
* ``worker.connect()``'s error names only what it reads.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from filegate.backends.settings import Settings, TemporalSettings
from filegate.devstack.s3 import S3DevServer
from filegate.devstack.servers import TemporalDevServer, free_port
from filegate.plugin import connect
from filegate.wiring.connection import ConfigError
from tests.cli.test_cli import CLI, call, cli, env_for, start_worker, stop_worker, write_json
from tests.cli.test_cli_outage import Lines, approval_id, gated_run, gated_write, private_temporal

__all__ = ["private_temporal"]  # the fixture, used by name below

SILENT = "the run's worker does not answer"
AGAIN = "the run's worker answers again"


@pytest.mark.services
def test_submit_says_a_silent_worker_is_not_a_temporal_outage(
    temporal_server: TemporalDevServer, s3_server: S3DevServer, tmp_path: Path
) -> None:
    """The agent worker stopped (SIGSTOP) while ``submit`` follows its run: the
    progress queries time out while the frontend answers. That is one line about
    the worker, one when it answers again, no "Temporal ... unreachable" (which
    the old code printed: it took any query timeout for a Temporal outage), and
    the run completes once the worker carries on."""
    root = tmp_path / "ws"
    root.mkdir()
    script, gate = gated_write(tmp_path, "ok\n", "submitted")
    env = env_for(temporal_server, s3_server, tmp_path)
    queue = f"silent-{tmp_path.name}"
    agent = start_worker(env, "--role", "agent", "--task-queue", f"{queue}.agent")
    tools = start_worker(env, "--role", "tools", "--backend", "filesystem", "--root", str(root),
                         "--task-queue", f"{queue}.tools")  # fmt: skip
    workflow_id = f"{queue}-run"
    submit = Lines(subprocess.Popen(
        [*CLI, "submit", "write a", "--model", f"scripted:{script}", "--interrupt-on", gate,
         "--agent-queue", f"{queue}.agent", "--tools-queue", f"{queue}.tools",
         "--workflow-id", workflow_id],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ))  # fmt: skip
    try:
        approval = approval_id(submit.wait_for("?? approval"))
        agent.send_signal(signal.SIGSTOP)
        try:
            submit.wait_for(SILENT, timeout=45)
        finally:
            agent.send_signal(signal.SIGCONT)
        submit.wait_for(AGAIN, timeout=45)
        decided = cli(env, "approve", approval, "--workflow", workflow_id)
        assert decided.returncode == 0, decided.stdout + decided.stderr + submit.text()
        code = submit.finish()
    finally:
        if submit.proc.poll() is None:
            submit.proc.kill()
        outputs = [stop_worker(proc) for proc in (agent, tools) if proc.poll() is None]
    out = submit.text()
    assert code == 0, (out, outputs)
    assert "final answer: submitted" in out
    assert (root / "a.txt").read_text() == "ok\n"
    assert "unreachable" not in out and "waiting for Temporal" not in out, out
    assert len([line for line in submit.lines if SILENT in line]) == 1, out
    assert len([line for line in submit.lines if AGAIN in line]) == 1, out
    assert "Traceback" not in out


@pytest.fixture
def private_s3(tmp_path: Path) -> Iterator[S3DevServer]:
    """An S3 of this test alone: it is stopped and started again (same port and data)."""
    with S3DevServer(tmp_path / "s3") as server:
        yield server


RETRY_WARNING = "Retrying (Retry("
"""What urllib3 logs for each retry of a request (``urllib3.connectionpool``)."""


@pytest.mark.services
def test_run_through_an_s3_outage_prints_no_urllib3_retries(
    temporal_server: TemporalDevServer, private_s3: S3DevServer, tmp_path: Path
) -> None:
    """S3 stops while a command runs; the model call after it has to store the
    transcript and waits. ``run`` says so in Filegate's own lines and completes
    once S3 is back; urllib3's warning per retry (several per second of outage
    in the old code) is not printed."""
    root = tmp_path / "ws"
    root.mkdir()
    script = write_json(
        tmp_path / "script.json",
        {"turns": [
            {"tool_calls": [call("x", "execute", command="sleep 2; echo slept")]},
            {"content": "after the outage"},
        ]},
    )  # fmt: skip
    env = env_for(temporal_server, private_s3, tmp_path)
    run = Lines(subprocess.Popen(
        [*CLI, "run", "sleep", "--model", f"scripted:{script}", "--root", str(root), "--shell"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ))  # fmt: skip
    try:
        run.wait_for("-> execute")
        private_s3.stop()
        run.wait_for("waiting for S3", timeout=30)
        time.sleep(3)  # a few rounds of retries
        private_s3.start()
        code = run.finish(timeout=120)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    out = run.text()
    assert code == 0, out
    assert "final answer: after the outage" in out
    assert RETRY_WARNING not in out and "urllib3" not in out, out
    assert any("answers again" in line for line in run.lines), out
    assert "Traceback" not in out


async def test_connect_names_only_what_it_reads(tmp_path: Path) -> None:
    """``connect()`` takes its address from the Settings it is given and reads no
    environment: its error says where the address goes for a library caller and
    for the CLI, instead of telling a library caller to set a variable it ignores."""
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(ConfigError) as refused:
        await connect(Settings(temporal=TemporalSettings(address=address)), artifacts=None)
    text = str(refused.value)
    assert text.startswith(f"cannot connect to Temporal at {address}: "), text
    assert "Settings.temporal.address" in text and "--address" in text, text
    assert "set TEMPORAL_ADDRESS" not in text, text


@pytest.mark.services
def test_approvals_right_after_a_temporal_restart_lists_a_live_run(
    private_temporal: TemporalDevServer, s3_server: S3DevServer, tmp_path: Path
) -> None:
    """Temporal restarted while a run waits for approval; ``approvals`` asks before
    the run's worker has polled again (it is held with SIGSTOP for the first 2 s,
    as the SDK's backoff after an outage holds it for 2 to 3 s). The server
    refuses the query ("no poller seen ... worker may be down"): the old code
    reported the live run as unanswered, exit 3; now it asks again and lists the
    approval, exit 0."""
    env = env_for(private_temporal, s3_server, tmp_path)
    run = gated_run(env, tmp_path, "restart-listing")
    try:
        approval = approval_id(run.wait_for("?? approval"))
        run.proc.send_signal(signal.SIGSTOP)
        try:
            private_temporal.stop()
            private_temporal.start()
            listing = subprocess.Popen(
                [*CLI, "approvals"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            time.sleep(2)
        finally:
            run.proc.send_signal(signal.SIGCONT)
        out, err = listing.communicate(timeout=60)
        assert listing.returncode == 0, out + err
        assert f"restart-listing  {approval}  write_file" in out, out + err
        assert "did not answer" not in out, out
        decided = cli(env, "approve", approval, "--workflow", "restart-listing")
        assert decided.returncode == 0, decided.stdout + decided.stderr + run.text()
        assert run.finish() == 0, run.text()
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert (tmp_path / "ws" / "a.txt").read_text() == "kept\n"
