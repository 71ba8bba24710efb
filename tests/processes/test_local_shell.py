"""LocalShellBackend.execute against real subprocesses."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from filegate.backends.local_shell import STDERR_PREFIX, LocalShellBackend
from filegate.processes.reaper import CommandBounds


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


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.timing
def test_timeout_kills_the_whole_process_group(shell: LocalShellBackend, tmp_path: Path) -> None:
    started = time.monotonic()
    result = shell.execute("sleep 300 & echo $! > bg.pid; echo started; sleep 300", timeout=1)
    elapsed = time.monotonic() - started
    assert result.code == "timeout" and not result.ok
    assert result.exit_code == 124  # contract §1: as coreutils `timeout` and the reference
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


# -- no process outlives its command; bounds (contract §11) ----------------------


def _wait_for(path: Path, seconds: float = 5) -> int:
    deadline = time.monotonic() + seconds
    while not (path.exists() and path.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return int(path.read_text())


def test_setsid_and_double_forked_daemons_die_with_the_command(
    shell: LocalShellBackend, tmp_path: Path
) -> None:
    command = (
        "setsid sh -c 'echo $$ > s.pid; exec sleep 100' & "
        "sh -c \"setsid sh -c 'echo \\$\\$ > d.pid; exec sleep 100' &\" ; "
        "while [ ! -s s.pid ] || [ ! -s d.pid ]; do sleep 0.02; done; echo started"
    )
    started = time.monotonic()
    result = shell.execute(command, timeout=20)
    assert result.exit_code == 0 and result.output == "started\n", result
    assert time.monotonic() - started < 5
    pids = [_wait_for(tmp_path / name) for name in ("s.pid", "d.pid")]
    assert [pid for pid in pids if _alive(pid)] == []  # gone when execute returns


@pytest.mark.slow
def test_timeout_kills_processes_that_left_the_session(
    shell: LocalShellBackend, tmp_path: Path
) -> None:
    result = shell.execute("setsid sh -c 'echo $$ > s.pid; exec sleep 100' & sleep 100", timeout=1)
    assert result.code == "timeout"
    assert not _alive(_wait_for(tmp_path / "s.pid"))


def test_memory_bound(tmp_path: Path) -> None:
    shell = LocalShellBackend(tmp_path, bounds=CommandBounds(memory_bytes=256 << 20))
    big = shell.execute("python3 -c 'b = bytearray(512 << 20); print(len(b))'", timeout=20)
    assert big.exit_code != 0 and "MemoryError" in big.output
    fits = shell.execute("python3 -c 'b = bytearray(64 << 20); print(len(b))'", timeout=20)
    assert fits.exit_code == 0 and fits.output.strip() == str(64 << 20)


def test_process_bound_kills_a_fork_storm(tmp_path: Path) -> None:
    shell = LocalShellBackend(tmp_path, bounds=CommandBounds(max_processes=20))
    started = time.monotonic()
    # A storm that never ends on its own: only the bound can stop it (however
    # busy the machine is, the shell would fork until the 30 s timeout).
    result = shell.execute("while :; do sleep 60 & echo $! >> pids; done", 30)
    assert time.monotonic() - started < 10
    assert result.exit_code == 137 and "more than 20 processes" in result.output
    pids = [int(line) for line in (tmp_path / "pids").read_text().split()]
    assert len(pids) >= 20 and [pid for pid in pids if _alive(pid)] == []
    assert shell.execute("echo still fine").output == "still fine\n"  # the worker is healthy


def test_file_size_bound(tmp_path: Path) -> None:
    shell = LocalShellBackend(tmp_path, bounds=CommandBounds(file_bytes=1 << 20))
    result = shell.execute("head -c 5000000 /dev/zero > big.bin")
    assert result.exit_code != 0 and "File too large" in result.output
    assert (tmp_path / "big.bin").stat().st_size == 1 << 20
    assert shell.execute("head -c 1000 /dev/zero > small.bin").exit_code == 0


def test_defaults_and_worker_ceiling(tmp_path: Path) -> None:
    shell = LocalShellBackend(tmp_path, bounds=CommandBounds(max_seconds=30))
    assert shell.execute("true", timeout=31).code == "invalid_argument"
    assert shell.execute("true", timeout=30).exit_code == 0
    default = LocalShellBackend(tmp_path).bounds
    assert (default.memory_bytes, default.max_processes, default.file_bytes) == (
        1 << 30, 64, 64 << 20,
    )  # fmt: skip
    limits = "ulimit -d; ulimit -f; ulimit -c"  # KiB, 512-byte blocks, core blocks
    assert shell.execute(limits).output.split() == [str(1 << 20), str(128 << 10), "0"]
