"""Tests that fail if the bubblewrap sandbox stops isolating.

Each one attacks from inside the sandbox (``execute``) and then checks the
*host*: files outside the root untouched, a host TCP server never contacted,
no process left alive. They run as whatever user runs the suite (root here):
isolation must hold for root too.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from filegate.backends.bwrap import BwrapSandboxBackend, SandboxUnavailableError
from filegate.processes.reaper import CommandBounds


def _snapshot(directory: Path) -> dict[str, tuple[int, float]]:
    return {
        str(p.relative_to(directory)): (p.lstat().st_size, p.lstat().st_mtime)
        for p in directory.rglob("*")
    }


# -- filesystem ----------------------------------------------------------------


@pytest.mark.slow
def test_host_file_outside_root_is_unreachable(
    sb: BwrapSandboxBackend, root: Path, tmp_path: Path
) -> None:
    secret_dir = tmp_path / "host-secrets"
    secret_dir.mkdir()
    secret = secret_dir / "token.txt"
    token = f"TOP-SECRET-{uuid.uuid4().hex}"
    secret.write_text(token)
    (root / "link").symlink_to(secret)
    attempts = [
        f"cat '{secret}'",
        "cat link",
        f"cat /proc/1/root'{secret}'",
        "cat ../host-secrets/token.txt",
        f"ls -la '{secret_dir}'",
        "find / -path /proc -prune -o -name token.txt -print 2>/dev/null",
        f"grep -rs '{token}' /tmp /workspace /etc /dev /proc/1/root/tmp 2>/dev/null",
    ]
    for command in attempts:
        result = sb.execute(command, timeout=60)
        assert token not in result.output, command
    assert sb.read("/link").code == "invalid_path"
    assert sb.download(["/link"])[0].content is None


def test_sensitive_host_paths_are_absent(sb: BwrapSandboxBackend) -> None:
    result = sb.execute(
        "for p in /etc/shadow /root /home /var /opt /run /sys/fs/cgroup /srv; do "
        '[ -e "$p" ] && echo "VISIBLE $p"; done; echo done'
    )
    assert result.output.strip() == "done"


@pytest.mark.slow
def test_writes_outside_workspace_leave_host_unchanged(
    sb: BwrapSandboxBackend, root: Path, tmp_path: Path
) -> None:
    marker = f"filegate-escape-{uuid.uuid4().hex}"
    host_tmp_target = Path("/tmp") / marker
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    # The root's parent; other tests' dirs beside it are not ours to watch.
    before_parent = _snapshot(tmp_path)
    before_usr = os.listdir("/usr")
    commands = [
        f"echo pwned > /tmp/{marker}",
        f"echo pwned > '{outside}/keep.txt'",
        f"echo pwned > '{outside}/new.txt'",
        f"mkdir -p '{outside}' && echo pwned > '{outside}/new2.txt'",
        f"echo pwned > ../{marker}",
        f"touch /usr/{marker}",
        f"touch /usr/bin/{marker}",
        f"touch /etc/{marker}",
        "mount -o remount,rw /usr",
        f"mount -t tmpfs none /usr && touch /usr/{marker}",
    ]
    for command in commands:
        sb.execute(command, timeout=60)
    assert not host_tmp_target.exists()
    assert (outside / "keep.txt").read_text() == "keep"
    assert sorted(os.listdir(outside)) == ["keep.txt"]
    assert not (tmp_path / marker).exists() and not (root.parent / marker).exists()
    assert os.listdir("/usr") == before_usr
    assert not Path(f"/usr/bin/{marker}").exists() and not Path(f"/etc/{marker}").exists()
    after_parent = _snapshot(tmp_path)
    changed = {k for k in before_parent if before_parent[k] != after_parent.get(k)}
    assert not {k for k in changed if not k.startswith("root")}
    # ...while the workspace itself is writable.
    assert sb.execute("echo ok > inside.txt").exit_code == 0
    assert (root / "inside.txt").read_text() == "ok\n"


def test_no_capabilities_and_proc_sys_read_only(sb: BwrapSandboxBackend) -> None:
    caps = sb.execute("grep CapEff /proc/self/status")
    assert caps.output.split() == ["CapEff:", "0000000000000000"]
    # Opening for write (never writing) is enough to tell: these knobs are global.
    knobs = ["/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches", "/proc/sysrq-trigger"]
    probe = sb.execute(
        'python3 -I -S -c "import os\n'
        f"for p in {knobs!r}:\n"
        "    try:\n"
        "        os.close(os.open(p, os.O_WRONLY))\n"
        "        print('WRITABLE', p)\n"
        "    except OSError as e:\n"
        "        print('refused', e.errno)\""
    )
    assert probe.exit_code == 0 and "WRITABLE" not in probe.output, probe.output
    assert probe.output.count("refused") == len(knobs)


def test_no_nested_user_namespace_to_regain_capabilities(sb: BwrapSandboxBackend) -> None:
    result = sb.execute(
        "unshare -U -r -m sh -c 'umount /proc/sys && echo UNMOUNTED; "
        "grep CapEff /proc/self/status'; echo rc=$?"
    )
    assert "UNMOUNTED" not in result.output and "rc=0" not in result.output, result.output


# -- network -------------------------------------------------------------------


class _Listener:
    """A host TCP server on 127.0.0.1 that records every connection it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.accepted = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[_Listener]:
    server = _Listener()
    yield server
    server.close()


def _host_ips() -> list[str]:
    ips = {"127.0.0.1"}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent for UDP connect
            ips.add(probe.getsockname()[0])
        except OSError:
            pass
    return sorted(ips)


@pytest.mark.slow
def test_host_tcp_server_unreachable(sb: BwrapSandboxBackend, listener: _Listener) -> None:
    # The host itself can connect: the test would notice a dead server.
    with socket.create_connection(("127.0.0.1", listener.port), timeout=5):
        pass
    deadline = time.monotonic() + 5
    while listener.accepted < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert listener.accepted == 1
    for ip in _host_ips():
        script = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('{ip}', {listener.port}), timeout=3)\n"
            "    print('CONNECTED')\n"
            "except OSError as e:\n"
            "    print('failed', e)\n"
        )
        result = sb.execute(f'python3 -I -S -c "{script}"', timeout=30)
        assert "CONNECTED" not in result.output and "failed" in result.output, result.output
    time.sleep(0.3)
    assert listener.accepted == 1  # nothing from the sandbox arrived


def test_only_loopback_interface_and_no_abstract_socket(sb: BwrapSandboxBackend) -> None:
    name = f"filegate-{uuid.uuid4().hex}"
    host = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    host.bind("\0" + name)  # abstract sockets belong to the network namespace
    host.listen(1)
    try:
        result = sb.execute(
            'cat /proc/net/dev | tail -n +3 | cut -d: -f1; python3 -I -S -c "import socket\n'
            "s = socket.socket(socket.AF_UNIX)\n"
            "try:\n"
            f"    s.connect('\\0{name}')\n"
            "    print('CONNECTED')\n"
            "except OSError as e:\n"
            "    print('failed', e.errno)\""
        )
    finally:
        host.close()
    lines = [line.strip() for line in result.output.splitlines()]
    assert lines[0] == "lo" and lines[1].startswith("failed"), result.output


# -- processes -----------------------------------------------------------------


def _procs_with(marker: str) -> list[int]:
    """Host pids whose command line or environment carries ``marker``.

    Commands export the marker, so every descendant (a bare ``sleep`` too)
    inherits it in its environment.
    """
    needle = marker.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        for part in ("cmdline", "environ"):
            try:
                with open(f"/proc/{entry}/{part}", "rb") as fh:
                    if needle in fh.read():
                        found.append(int(entry))
                        break
            except OSError:
                continue
    return found


def _assert_no_leftovers(marker: str, grace: float = 3.0) -> None:
    deadline = time.monotonic() + grace
    left = _procs_with(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _procs_with(marker)
    if left:
        _kill_all_with(marker)  # don't leak into the rest of the suite, but still fail
    assert not left, f"{len(left)} sandbox processes survived: {left[:10]}"


def _kill_all_with(marker: str) -> None:
    """SIGKILL marked processes until none is left (a surviving storm keeps forking)."""
    for _ in range(50):
        pids = _procs_with(marker)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.timing
def test_runaway_loop_killed_on_time(sb: BwrapSandboxBackend) -> None:
    marker = f"runaway-{uuid.uuid4().hex}"
    started = time.monotonic()
    result = sb.execute(f"export MARK={marker}; while :; do :; done", timeout=1.5)
    elapsed = time.monotonic() - started
    assert result.code == "timeout" and "timed out" in (result.error or "")
    assert elapsed < 1.5 + 3.0, elapsed
    _assert_no_leftovers(marker)


@pytest.mark.timing
@pytest.mark.slow
def test_fork_storm_killed_with_everything_it_spawned(_bwrap_ok: None, root: Path) -> None:
    sb = _bounded(root, max_processes=0)  # no process bound: the timeout kill alone
    marker = f"storm-{uuid.uuid4().hex}"
    # Linear storm: every child is a new long-lived process carrying the marker.
    command = f"export MARK={marker}; while :; do sleep 600 & done"
    started = time.monotonic()
    result = sb.execute(command, timeout=1.5)
    elapsed = time.monotonic() - started
    assert result.code == "timeout"
    assert elapsed < 1.5 + 5.0, elapsed
    _assert_no_leftovers(marker)


def test_background_jobs_die_when_command_returns(sb: BwrapSandboxBackend) -> None:
    marker = f"bg-{uuid.uuid4().hex}"
    started = time.monotonic()
    result = sb.execute(f"export MARK={marker}; sleep 600 & setsid sleep 600 & echo started")
    assert result.exit_code == 0 and "started" in result.output
    assert time.monotonic() - started < 10
    _assert_no_leftovers(marker)


def test_setsid_and_double_fork_daemons_are_gone_when_execute_returns(
    sb: BwrapSandboxBackend,
) -> None:
    marker = f"daemon-{uuid.uuid4().hex}"
    command = (
        f"export MARK={marker}; setsid sleep 100 & "
        "sh -c 'setsid sh -c \"sleep 100\" &'; sleep 0.2; echo started"
    )
    result = sb.execute(command)
    assert result.exit_code == 0 and result.output == "started\n"
    assert _procs_with(marker) == []  # no grace: gone by the time execute returns


# -- bounds (contract §11) -----------------------------------------------------


def _bounded(root: Path, **bounds: int) -> BwrapSandboxBackend:
    return BwrapSandboxBackend(root, bounds=CommandBounds(**bounds), check=False)


def test_memory_bound_inside_the_sandbox(_bwrap_ok: None, root: Path) -> None:
    sb = _bounded(root, memory_bytes=256 << 20)
    big = sb.execute("python3 -c 'b = bytearray(512 << 20)'", timeout=20)
    assert big.exit_code != 0 and "MemoryError" in big.output
    assert sb.execute("python3 -c 'b = bytearray(32 << 20)'", timeout=20).exit_code == 0


def test_process_bound_inside_the_sandbox(_bwrap_ok: None, root: Path) -> None:
    sb = _bounded(root, max_processes=24)
    marker = f"bounded-storm-{uuid.uuid4().hex}"
    started = time.monotonic()
    result = sb.execute(f"export MARK={marker}; while :; do sleep 600 & done", timeout=30)
    assert time.monotonic() - started < 10
    assert result.exit_code == 137 and "more than 24 processes" in result.output
    assert _procs_with(marker) == []
    assert sb.execute("echo healthy").output == "healthy\n"


def test_file_size_bound_inside_the_sandbox(_bwrap_ok: None, root: Path) -> None:
    sb = _bounded(root, file_bytes=1 << 20)
    result = sb.execute("head -c 5000000 /dev/zero > big.bin")
    assert result.exit_code != 0 and "File too large" in result.output
    assert (root / "big.bin").stat().st_size == 1 << 20


@pytest.mark.slow
def test_scratch_space_is_bounded(_bwrap_ok: None, root: Path) -> None:
    sb = _bounded(root, tmp_bytes=8 << 20)
    for target in ("/tmp/fill", "/dev/shm/fill"):
        result = sb.execute(f"head -c 50000000 /dev/zero > {target}; echo rc=$?; wc -c < {target}")
        assert "No space left on device" in result.output and "rc=1" in result.output, target
        stdout = [line for line in result.output.splitlines() if not line.startswith("[stderr]")]
        assert stdout[0] == "rc=1" and int(stdout[1]) <= 8 << 20
    # The sandbox's own root and /dev are tmpfs too: read-only, so nobody fills them.
    for target in ("/fill", "/dev/fill", "/usr/fill"):
        result = sb.execute(f"echo x > {target}")
        assert result.exit_code != 0 and "Read-only file system" in result.output, target
    default = BwrapSandboxBackend(root, check=False)
    shown = default.execute("df -k /tmp | tail -1").output.split()
    assert int(shown[1]) == 64 << 10  # 64 MiB by default


# -- availability --------------------------------------------------------------


def test_missing_bwrap_is_a_clear_error(root: Path) -> None:
    with pytest.raises(SandboxUnavailableError, match="bubblewrap not found"):
        BwrapSandboxBackend(root, bwrap_path="/nonexistent/path/bwrap")
    unchecked = BwrapSandboxBackend(root, bwrap_path="/nonexistent/path/bwrap", check=False)
    result = unchecked.execute("true")
    assert result.code == "unsupported" and "bubblewrap not found" in (result.error or "")
    assert unchecked.read("/x").error is not None  # file operations fail as values too


def test_namespace_failure_is_reported_with_bwrap_stderr(root: Path, tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, likely because "
        "the kernel does not allow non-privileged user namespaces' >&2\nexit 1\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(SandboxUnavailableError) as info:
        BwrapSandboxBackend(root, bwrap_path=str(fake))
    message = str(info.value)
    assert "cannot create namespaces" in message and "No permissions to creating" in message
