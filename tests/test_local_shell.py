"""LocalShellBackend.execute against real subprocesses."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from filegate.backends.local_shell import STDERR_PREFIX, LocalShellBackend


@pytest.fixture
def shell(tmp_path: Path) -> LocalShellBackend:
    return LocalShellBackend(tmp_path)


def _alive(pid: int) -> bool:
    """Running and not a zombie (PID 1 in a container may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_output_exit_code_and_cwd(shell: LocalShellBackend, tmp_path: Path) -> None:
    assert shell.can_execute and shell.can_delete
    shell.write("/hello.txt", "from the backend\n")
    result = shell.execute("cat hello.txt; pwd")
    assert result.ok and result.exit_code == 0 and not result.truncated
    assert result.output == f"from the backend\n{tmp_path.resolve()}\n"
    failed = shell.execute("echo out; exit 7")
    assert failed.ok and failed.exit_code == 7 and failed.output == "out\n"
    touched = shell.execute("echo made > made.txt")
    assert touched.exit_code == 0 and shell.read("/made.txt").lines == ["made"]


def test_stderr_lines_are_prefixed(shell: LocalShellBackend) -> None:
    result = shell.execute("echo out; printf 'e1\\ne2\\n' >&2; exit 1")
    assert result.exit_code == 1
    assert result.output == f"out\n{STDERR_PREFIX}e1\n{STDERR_PREFIX}e2"


def test_environment_is_not_inherited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FILEGATE_LEAK_CHECK", "leaked-value")
    plain = LocalShellBackend(tmp_path, env={"GIVEN": "yes"})
    out = plain.execute("env").output
    assert "leaked-value" not in out and "FILEGATE_LEAK_CHECK" not in out
    assert "GIVEN=yes" in out
    assert plain.execute("command -v sh").exit_code == 0  # a minimal PATH is still there
    inheriting = LocalShellBackend(tmp_path, inherit_env=True)
    assert "FILEGATE_LEAK_CHECK=leaked-value" in inheriting.execute("env").output


def test_output_is_capped(tmp_path: Path) -> None:
    shell = LocalShellBackend(tmp_path, max_output_bytes=1000)
    result = shell.execute("head -c 50000 /dev/zero | tr '\\0' 'a'")
    assert result.exit_code == 0 and result.truncated
    body, _, notice = result.output.rpartition("\n")
    assert body == "a" * 1000 and "truncated" in notice
    small = shell.execute("printf 12345")
    assert small.output == "12345" and not small.truncated


def test_default_cap_is_100_000_bytes(shell: LocalShellBackend) -> None:
    result = shell.execute("yes x | head -c 300000")
    assert result.truncated
    assert len(result.output.encode()) < 100_000 + 200
    assert result.output.startswith("x\nx\n")


def test_timeout_kills_the_whole_process_group(shell: LocalShellBackend, tmp_path: Path) -> None:
    started = time.monotonic()
    result = shell.execute("sleep 300 & echo $! > bg.pid; echo started; sleep 300", timeout=1)
    elapsed = time.monotonic() - started
    assert result.code == "timeout" and not result.ok
    assert "started" in result.output
    assert elapsed < 10
    bg_pid = int((tmp_path / "bg.pid").read_text())
    deadline = time.monotonic() + 5
    while _alive(bg_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(bg_pid)


def test_background_leftovers_do_not_hang_the_call(
    shell: LocalShellBackend, tmp_path: Path
) -> None:
    started = time.monotonic()
    result = shell.execute("sleep 300 & echo $! > bg.pid; echo done")
    assert result.exit_code == 0 and result.output == "done\n"
    assert time.monotonic() - started < 10
    bg_pid = int((tmp_path / "bg.pid").read_text())
    deadline = time.monotonic() + 5
    while _alive(bg_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(bg_pid)


def test_bad_timeout_and_signals(shell: LocalShellBackend) -> None:
    assert shell.execute("true", timeout=0).code == "invalid_argument"
    assert shell.execute("true", timeout=-1).code == "invalid_argument"
    killed = shell.execute("kill -TERM $$")
    assert killed.exit_code == 128 + 15


def test_command_sees_only_the_given_env_even_if_os_environ_changes(tmp_path: Path) -> None:
    shell = LocalShellBackend(tmp_path)
    before = shell.command_env()
    os.environ["FILEGATE_LATE_VAR"] = "1"
    try:
        assert shell.command_env() == before
    finally:
        del os.environ["FILEGATE_LATE_VAR"]
