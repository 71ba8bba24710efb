"""``filegate run`` and ``submit`` ride out a short Temporal outage (issue 34 item 5).

A private Temporal dev server (never the shared session one) is stopped while a
run waits for an approval and started again on the same database. The command
says once that it waits for Temporal, keeps its co-hosted workers, and finishes
the run once the server is back; past its budget it gives up in one line that
points to ``--resume``. No traceback either way.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from filegate.activities.idempotency import STALL_BEFORE_APPLY_ENV
from filegate.devstack.s3 import S3DevServer
from filegate.devstack.servers import TemporalDevServer, free_port
from filegate.kernel.tool_types import activity_call_id
from tests.cli.test_cli import CLI, call, cli, env_for, start_worker, stop_worker, write_json

pytestmark = pytest.mark.services

OUTAGE_ENV = "FILEGATE_TEMPORAL_OUTAGE_SECONDS"
"""The budget (cli/outage.py), spelled out so this file runs on code without it."""
OUTAGE_SECONDS = 9.0
"""Longer than the 5-7 s that killed ``run`` before (and than the client's own retries)."""


@pytest.fixture
def private_temporal(tmp_path: Path) -> Iterator[TemporalDevServer]:
    """A Temporal dev server of this test alone: it is stopped and restarted."""
    with TemporalDevServer(tmp_path / "temporal") as server:
        yield server


class Lines:
    """A process's stdout and stderr, read as they come (both into one list)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, args=(stream,), daemon=True)
            for stream in (proc.stdout, proc.stderr)
        ]
        for reader in self.readers:
            reader.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            assert self.proc.poll() is None or any(text in x for x in self.lines), self.text()
            time.sleep(0.1)
        raise AssertionError(f"no {text!r} in:\n{self.text()}")

    def finish(self, timeout: float = 90) -> int:
        code = self.proc.wait(timeout=timeout)
        for reader in self.readers:
            reader.join(timeout=5)
        return code

    def text(self) -> str:
        return "\n".join(self.lines)


def gated_write(tmp_path: Path, content: str, answer: str) -> tuple[str, str]:
    """(script, interrupt-on file) of a run writing ``content`` to /a.txt behind an
    approval, then answering ``answer``."""
    turns = [
        {"tool_calls": [call("w", "write_file", file_path="/a.txt", content=content)]},
        {"content": answer},
    ]
    script = write_json(tmp_path / "script.json", {"turns": turns})
    return script, write_json(tmp_path / "gate.json", {"write_file": True})


def gated_run(env: dict[str, str], tmp_path: Path, workflow_id: str, *extra: str) -> Lines:
    """``filegate run`` of one write that waits for approval, then a final answer."""
    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    script, gate = gated_write(tmp_path, "kept\n", "written")
    proc = subprocess.Popen(
        [*CLI, "run", "write a", "--model", f"scripted:{script}", "--root", str(root),
         "--interrupt-on", gate, "--workflow-id", workflow_id, *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    return Lines(proc)


def approval_id(line: str) -> str:
    return line.split("approval ", 1)[1].split()[0]


def test_run_rides_out_a_temporal_restart(
    private_temporal: TemporalDevServer, s3_server: S3DevServer, tmp_path: Path
) -> None:
    env = env_for(private_temporal, s3_server, tmp_path)
    run = gated_run(env, tmp_path, "outage-ride")
    try:
        approval = approval_id(run.wait_for("?? approval"))
        private_temporal.stop()
        time.sleep(OUTAGE_SECONDS)
        private_temporal.start()
        decided = cli(env, "approve", approval, "--workflow", "outage-ride")
        assert decided.returncode == 0, decided.stdout + decided.stderr + run.text()
        code = run.finish()
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    out = run.text()
    assert code == 0, out
    assert "final answer: written" in out
    assert (tmp_path / "ws" / "a.txt").read_text() == "kept\n"
    assert "Traceback" not in out
    waits = [line for line in run.lines if "waiting for Temporal" in line]
    assert len(waits) == 1, out
    assert any("Temporal is back" in line for line in run.lines), out


def test_run_gives_up_past_its_budget_and_points_to_resume(
    private_temporal: TemporalDevServer, s3_server: S3DevServer, tmp_path: Path
) -> None:
    env = {**env_for(private_temporal, s3_server, tmp_path), OUTAGE_ENV: "4"}
    run = gated_run(env, tmp_path, "outage-give-up")
    try:
        run.wait_for("?? approval")
        private_temporal.stop()
        code = run.finish(timeout=60)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    out = run.text()
    assert code == 1, out
    assert "Traceback" not in out
    [last] = [line for line in run.lines if line.startswith("filegate:")]
    assert "--resume --workflow-id outage-give-up" in last, out


def test_submit_rides_out_a_restart_and_prints_failed_attempts(
    private_temporal: TemporalDevServer, s3_server: S3DevServer, tmp_path: Path
) -> None:
    """``submit`` follows deployment workers: the outage is one line, the approved
    write's failed attempt (its tools worker SIGKILLed mid-call) one ``!!`` line read
    from the server, and no traceback."""
    root = tmp_path / "ws"
    root.mkdir()
    script, gate = gated_write(tmp_path, "ok\n", "submitted")
    env = env_for(private_temporal, s3_server, tmp_path)
    tools = ["--role", "tools", "--backend", "filesystem", "--root", str(root),
             "--task-queue", "o.tools"]  # fmt: skip
    stalled = {**env, STALL_BEFORE_APPLY_ENV: activity_call_id(1, 0, "w")}
    workers = [start_worker(env, "--role", "agent", "--task-queue", "o.agent")]
    workers.append(start_worker(stalled, *tools))
    submit = Lines(subprocess.Popen(
        [*CLI, "submit", "write a", "--model", f"scripted:{script}", "--interrupt-on", gate,
         "--agent-queue", "o.agent", "--tools-queue", "o.tools", "--workflow-id", "outage-sub"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ))  # fmt: skip
    try:
        approval = approval_id(submit.wait_for("?? approval"))
        private_temporal.stop()
        time.sleep(OUTAGE_SECONDS)
        private_temporal.start()
        decided = cli(env, "approve", approval, "--workflow", "outage-sub")
        assert decided.returncode == 0, decided.stdout + decided.stderr + submit.text()
        journal = tmp_path / "state" / "journal"
        deadline = time.monotonic() + 30
        while not list(journal.glob("**/*.json")):  # the write is stalled mid-call
            assert time.monotonic() < deadline, submit.text()
            time.sleep(0.05)
        workers[1].send_signal(signal.SIGKILL)  # attempt 1 fails: heartbeat timeout
        workers[1].communicate()
        workers.append(start_worker(env, *tools))
        code = submit.finish()
    finally:
        if submit.proc.poll() is None:
            submit.proc.kill()
        outputs = [stop_worker(proc) for proc in workers if proc.poll() is None]
    out = submit.text()
    assert code == 0, (out, outputs)
    assert "final answer: submitted" in out
    assert (root / "a.txt").read_text() == "ok\n"
    assert "Traceback" not in out
    failed = [line for line in submit.lines if "failed (attempt 1)" in line]
    assert len(failed) == 1 and "eartbeat" in failed[0], out
    assert len([line for line in submit.lines if "waiting for Temporal" in line]) == 1, out


def test_dev_and_its_ui_ride_out_a_temporal_restart(
    private_temporal: TemporalDevServer, s3_server: S3DevServer, tmp_path: Path
) -> None:
    """``filegate dev`` on a configured Temporal: while it is down the UI answers one
    line (503, the page asks again), not a 500 and a traceback; dev stays up and the
    UI answers again once Temporal is back."""
    ui_port = free_port()
    env = env_for(private_temporal, s3_server, tmp_path)
    dev = Lines(subprocess.Popen(
        [*CLI, "dev", "--ui-port", str(ui_port), "--web-ui-port", "0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ))  # fmt: skip
    api = f"http://127.0.0.1:{ui_port}/api/approvals"
    try:
        login = dev.wait_for("approval UI at").split(" at ", 1)[1]
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        assert browser.open(login, timeout=10).status == 200
        assert browser.open(api, timeout=10).status == 200
        private_temporal.stop()
        with pytest.raises(urllib.error.HTTPError) as down:
            browser.open(api, timeout=30)
        answered = down.value.code, down.value.read().decode()
        private_temporal.start()
        deadline = time.monotonic() + 30
        while True:  # the client reconnects on its own
            try:
                assert browser.open(api, timeout=10).status == 200
                break
            except urllib.error.HTTPError:
                assert time.monotonic() < deadline, dev.text()
                time.sleep(0.5)
        assert dev.proc.poll() is None, dev.text()
    finally:
        dev.proc.send_signal(signal.SIGTERM)
        code = dev.finish(timeout=40)
    assert answered[0] == 503, (answered, dev.text())
    error = json.loads(answered[1])["error"]
    assert error.startswith("Temporal is unreachable") and "\n" not in error
    assert code in (0, 130), dev.text()
    assert "Traceback" not in dev.text()
