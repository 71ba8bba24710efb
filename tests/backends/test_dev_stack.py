"""The embedded dev stack across terminals: real ``filegate run`` subprocesses.

No Temporal or S3 is configured, so every run leases the state dir's embedded
stack (``devstack/stack.py``) on a private port
(``FILEGATE_DEV_TEMPORAL_PORT``): two runs at once share one stack, which
stops only after the second; SIGTERM stops a run like Ctrl-C and leaves no
server behind; a stack whose servers and run were killed with -9 is cleaned up
by the next run with one line each.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from filegate.cli.services import DEV_PORT_ENV
from filegate.devstack.stack import processes_using
from filegate.processes.guard import pid_alive
from tests.ports import quiet_port

pytestmark = [pytest.mark.services, pytest.mark.slow]

SERVICES = ("temporal", "s3")


class Stack:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.state = base / "state"
        self.port = quiet_port()
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("FILEGATE_", "TEMPORAL_"))
        }
        self.env.update(FILEGATE_STATE_DIR=str(self.state), **{DEV_PORT_ENV: str(self.port)})
        self.runs = 0

    def run(
        self, seconds: float, *, until: Path | None = None
    ) -> tuple[subprocess.Popen[bytes], Path]:
        """``filegate run --shell`` whose one tool call sleeps ``seconds``, or, with
        ``until``, waits for that file (a machine under load may take any time)."""
        self.runs += 1
        n = self.runs
        root = self.base / f"ws{n}"
        root.mkdir()
        command = (
            f"sleep {seconds}" if until is None else f"until [ -e {until} ]; do sleep 0.05; done"
        )
        sleep = {"id": "x", "name": "execute", "args": {"command": command}}
        turns = [{"tool_calls": [sleep]}, {"content": f"run {n} done"}]
        script = self.base / f"script{n}.json"
        script.write_text(json.dumps({"turns": turns}))
        out = self.base / f"run{n}.out"
        proc = subprocess.Popen(
            [sys.executable, "-m", "filegate", "run", "sleep", "--shell",
             "--model", f"scripted:{script}", "--root", str(root)],
            env=self.env, stdout=out.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        return proc, out

    def entries(self) -> dict[str, dict[str, Any]]:
        found = {}
        for service in SERVICES:
            path = self.state / f"stack-{service}.json"
            if path.exists():
                found[service] = json.loads(path.read_text())
        return found

    def pids(self) -> list[int]:
        return [int(e["pid"]) for e in self.entries().values()]

    def leftovers(self) -> list[int]:
        """Server processes of this state dir still running, recorded or not."""
        markers = [f"--db-filename {self.state / 'temporal' / 'temporal.db'} "]
        markers.append(f"-dir={self.state / 's3' / 'data'} ")
        return [pid for marker in markers for pid in processes_using(marker)]


def wait_for(out: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in out.read_text(errors="replace"):
        assert proc.poll() is None, out.read_text()
        assert time.monotonic() < deadline, out.read_text()
        time.sleep(0.1)


def finish(proc: subprocess.Popen[bytes], out: Path, timeout: float = 90) -> str:
    code = proc.wait(timeout=timeout)
    text = out.read_text(errors="replace")
    assert code == 0, text
    return text


def test_two_runs_share_one_stack_stopped_after_the_second(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    go_on = tmp_path / "go-on"
    long_run, long_out = stack.run(0, until=go_on)
    wait_for(long_out, "-> execute", long_run)
    pids = stack.pids()
    assert len(pids) == 2 and all(pid_alive(p) for p in pids)
    short_run, short_out = stack.run(0.1)
    text = finish(short_run, short_out)
    assert "(embedded dev server, reused (1 other user), this user's stack at " in text
    assert "(embedded SeaweedFS, reused (1 other user))" in text
    assert "completed: final_answer" in text
    assert long_run.poll() is None  # the first run is still going, on the same stack
    assert stack.pids() == pids and all(pid_alive(p) for p in pids)
    go_on.touch()
    text = finish(long_run, long_out)
    assert "completed: final_answer" in text and "Traceback" not in text
    assert not stack.entries() and not any(pid_alive(p) for p in pids)
    assert not stack.leftovers()


def test_sigterm_stops_a_run_like_ctrl_c_and_leaves_nothing(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    run, out = stack.run(60)
    wait_for(out, "-> execute", run)
    pids = stack.pids()
    assert len(pids) == 2
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=40) == 130, out.read_text()
    assert "interrupted" in out.read_text()
    assert not stack.entries() and not any(pid_alive(p) for p in pids)
    assert not stack.leftovers()
    again, again_out = stack.run(0.1)
    text = finish(again, again_out)
    assert "embedded dev server, started" in text and "cleaned up" not in text


def test_a_stack_killed_with_minus_9_is_recovered(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    run, out = stack.run(60)
    wait_for(out, "-> execute", run)
    pids = stack.pids()
    for pid in pids:
        os.killpg(pid, signal.SIGKILL)
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(stack.entries()) == 2  # the state the killed run left behind

    again, again_out = stack.run(0.1)
    text = finish(again, again_out)
    assert "cleaned up a stale embedded temporal" in text
    assert "cleaned up a stale embedded s3" in text
    assert "completed: final_answer" in text
    assert len(text.splitlines()) < 15, text  # one line per leftover, no server log
    assert not stack.entries() and not stack.leftovers()


def test_only_this_users_weed_sockets_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stale socket of another user at the same port stays, and nothing raises.

    ``filegate dev`` reaping its orphans as a normal user died with a traceback on a
    socket root's weed had left in /tmp (sticky: not removable), and root would
    have removed a live socket of another user's weed.
    """
    from filegate.devstack import s3

    socket_dir = tmp_path / "tmp"
    socket_dir.mkdir()
    socket_dir.chmod(0o1777)
    monkeypatch.setattr(s3, "_WEED_SOCKET_DIR", socket_dir)
    mine = socket_dir / "seaweedfs-s3-41001.sock"
    mine.touch()
    theirs = socket_dir / "seaweedfs-filer-41002.sock"
    theirs.touch()
    if os.getuid() == 0:
        os.chown(theirs, 65534, 65534)
    s3.remove_weed_sockets([41001, 41002, 41003])
    assert not mine.exists()
    assert theirs.exists() is (os.getuid() == 0)  # as a normal user it was ours


def test_the_embedded_servers_state_is_private_to_this_user(tmp_path: Path) -> None:
    """Issue 50: another local user read what the agent read in ``temporal.db`` and the
    S3 volumes of a 0755 state directory of 0644 files. The servers' directories are
    0700 and every file in them has no group or other bits, including a tree an
    earlier version left open, and what the servers write while they run."""
    from filegate.devstack.s3 import S3DevServer
    from filegate.devstack.servers import TemporalDevServer

    state = tmp_path / "state"
    old = state / "temporal"
    old.mkdir(parents=True, mode=0o755)
    os.chmod(old, 0o755)
    (old / "left-by-an-earlier-version.txt").write_text("content the agent read\n")
    os.chmod(old / "left-by-an-earlier-version.txt", 0o644)

    def opened() -> list[str]:
        return [
            f"{p} {oct(p.lstat().st_mode & 0o777)}"
            for p in (old, state / "s3", *old.rglob("*"), *(state / "s3").rglob("*"))
            if not p.is_symlink() and p.lstat().st_mode & 0o077
        ]

    with TemporalDevServer(old), S3DevServer(state / "s3") as s3:
        s3.client().make_bucket("private-check")
        s3.client().put_object("private-check", "k", io.BytesIO(b"x" * 100), 100)
        running = opened()
        for top in (old, state / "s3"):  # no one else gets in while they run
            assert top.stat().st_mode & 0o777 == 0o700
        assert all(Path(p.split()[0]).is_file() for p in running), running
        assert (old / "left-by-an-earlier-version.txt").stat().st_mode & 0o777 == 0o600
    assert not opened()  # and at rest, every file is this user's alone
