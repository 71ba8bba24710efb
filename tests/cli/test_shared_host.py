"""The embedded stack refuses to start while other people are logged in (issue 50).

Its Temporal and S3 servers take no login, so another local user could read what
the agent read and decide its approvals. A real utmp file and a real logind
users folder, written by the test, stand for the host's (the child process
points the module at them); the commands run as subprocesses, as a user runs them.
"""

from __future__ import annotations

import os
import pwd
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from filegate.cli.shared_host import FIRST_PERSON_UID, other_people
from tests.cli.test_demo import fresh_env

CHILD = (
    "import pathlib, sys\n"
    "import filegate.cli.shared_host as host\n"
    "host.UTMP, host.LOGIND_USERS = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])\n"
    "from filegate.cli import main\n"
    "sys.exit(main(sys.argv[3:]))\n"
)


def utmp_record(kind: int, pid: int, user: str) -> bytes:
    head = struct.pack("<hxxi32s4s32s256s", kind, pid, b"pts/7", b"7", user.encode(), b"")
    return head.ljust(384, b"\0")


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def host_files(tmp_path: Path, utmp: bytes, logind: list[str]) -> tuple[Path, Path]:
    (tmp_path / "utmp").write_bytes(utmp)
    (tmp_path / "users").mkdir()
    for name in logind:
        (tmp_path / "users" / name).write_text("STATE=active\n")
    return tmp_path / "utmp", tmp_path / "users"


def test_who_counts_as_another_person(tmp_path: Path) -> None:
    me = pwd.getpwuid(os.geteuid()).pw_name
    utmp = b"".join(
        [
            utmp_record(7, os.getpid(), me),  # this user: not another person
            utmp_record(7, os.getpid(), "root"),  # root reads this user's files anyway
            utmp_record(7, dead_pid(), "ghost"),  # a stale record: its session is gone
            utmp_record(8, os.getpid(), "logged-out"),  # DEAD_PROCESS
            utmp_record(7, os.getpid(), "mallory"),  # unknown name, live session: counts
        ]
    )
    system = str(FIRST_PERSON_UID - 1)  # a greeter's account
    person = str(FIRST_PERSON_UID + 4242)
    utmp_path, logind = host_files(tmp_path, utmp, ["0", str(os.geteuid()), system, person])
    found = other_people(utmp=utmp_path, logind=logind)
    assert "mallory" in found
    assert len(found) == 2, found  # mallory, and the person logind lists
    assert me not in found and "root" not in found and "ghost" not in found
    assert other_people(utmp=tmp_path / "none", logind=tmp_path / "none") == []


def run_child(
    tmp_path: Path, args: list[str], extra: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    utmp, logind = host_files(tmp_path, utmp_record(7, os.getpid(), "mallory"), [])
    (tmp_path / "hi.json").write_text('{"turns": [{"content": "hi"}]}')
    env = {**fresh_env(tmp_path), **extra}
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(utmp), str(logind), *args],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        ["demo"],
        ["run", "hello", "--root", ".", "--model", "scripted:hi.json"],
        ["mcp", "--root", "."],
    ],
    ids=str,
)
def test_an_embedded_stack_is_refused_beside_other_people(tmp_path: Path, args: list[str]) -> None:
    began = time.monotonic()
    proc = run_child(tmp_path, args, {})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "other people are logged in on this host (mallory)" in lines[0]
    assert "FILEGATE_EMBEDDED_SHARED_HOST=1" in lines[0]
    assert time.monotonic() - began < 20
    state = [*tmp_path.glob(".filegate*/temporal"), *tmp_path.glob("**/temporal.db")]
    assert state == [], "a server was started"


def test_a_deployment_is_not_refused(tmp_path: Path) -> None:
    """Configured servers are the deployment's to authenticate: no refusal, only
    the unreachable server's own one line."""
    proc = run_child(
        tmp_path,
        ["run", "hello", "--root", ".", "--model", "scripted:hi.json"],
        {"TEMPORAL_ADDRESS": "127.0.0.1:1", "FILEGATE_S3_ENDPOINT": "127.0.0.1:1"},
    )
    assert proc.returncode != 0
    assert "other people are logged in" not in proc.stderr, proc.stderr


@pytest.mark.services
@pytest.mark.slow
def test_the_host_can_be_trusted_on_purpose(tmp_path: Path) -> None:
    proc = run_child(tmp_path, ["demo"], {"FILEGATE_EMBEDDED_SHARED_HOST": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "demo OK" in proc.stdout
