"""Filesystem backend plus ``execute``: a shell on the host, rooted at ``root_dir``.

Not a sandbox: the command can touch anything the worker user can. What it
does guarantee (contract §1): cwd is the root, the environment is explicit
(nothing inherited unless asked), output is capped, and a timed-out command is
killed together with everything it started (its own session/process group).
Background processes a command leaves behind are killed when it returns too:
a tool call must not leak processes into the worker.

``execute`` waits in a short polling loop rather than one blocking call, so
an exception raised into the calling thread (e.g. Temporal cancelling a sync
activity) lands within ~0.1 s; the ``finally`` then kills the process group.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress

from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.host_files import DEFAULT_MAX_FILE_BYTES
from filegate.kernel.limits import DEFAULT_EXECUTE_TIMEOUT, DEFAULT_MAX_OUTPUT_BYTES
from filegate.kernel.protocol import ExecuteResult

MINIMAL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STDERR_PREFIX = "[stderr] "
_POLL_SECONDS = 0.1
_DRAIN_GRACE_SECONDS = 0.5


class LocalShellBackend(FilesystemBackend):
    """Files on disk plus a host shell (``subprocess``, ``shell=True``)."""

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        *,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = False,
        default_timeout: float = DEFAULT_EXECUTE_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        virtual_mode: bool = True,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    ) -> None:
        super().__init__(root_dir, virtual_mode=virtual_mode, max_file_bytes=max_file_bytes)
        self.cwd = os.path.realpath(root_dir)
        self.env = dict(env or {})
        self.inherit_env = inherit_env
        self.default_timeout = default_timeout
        self.max_output_bytes = max_output_bytes

    @property
    def can_execute(self) -> bool:
        return True

    def command_env(self) -> dict[str, str]:
        """The exact environment a command sees."""
        base: dict[str, str] = dict(os.environ) if self.inherit_env else {"PATH": MINIMAL_PATH}
        base.update(self.env)
        base.setdefault("PATH", MINIMAL_PATH)
        return base

    def execute(self, command: str, timeout: float | None = None) -> ExecuteResult:
        limit = self.default_timeout if timeout is None else timeout
        if limit <= 0:
            return ExecuteResult(
                error=f"timeout must be positive, got {timeout}", code="invalid_argument"
            )
        return run_command(
            command,
            shell=True,
            cwd=self.cwd,
            env=self.command_env(),
            timeout=limit,
            max_output_bytes=self.max_output_bytes,
        )


def run_command(
    args: str | Sequence[str],
    *,
    shell: bool,
    cwd: str | None,
    env: Mapping[str, str],
    timeout: float,
    max_output_bytes: int,
) -> ExecuteResult:
    """Run one command in its own session: capped output, ``[stderr] `` prefix, group kill.

    Shared by every backend that executes (the host shell, sandboxes), so the
    timeout, output-cap and process-cleanup rules live in one place.
    """
    try:
        proc = subprocess.Popen(
            args,
            shell=shell,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return ExecuteResult(error=f"could not start the shell: {exc}", code="io_error")
    capture = _Capture(max_output_bytes)
    timed_out = False
    try:
        timed_out = not _pump(proc, capture, time.monotonic() + timeout)
    finally:
        _kill_group(proc)
        with suppress(OSError, subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        capture.close()
    output, truncated = capture.render(max_output_bytes)
    if timed_out:
        return ExecuteResult(
            output=output,
            truncated=truncated,
            error=f"command timed out after {timeout:g} s and was killed",
            code="timeout",
        )
    code = proc.returncode
    if code is not None and code < 0:
        code = 128 - code  # killed by signal N: report like a shell (128 + N)
    return ExecuteResult(output=output, exit_code=code, truncated=truncated)


class _Capture:
    """Bounded stdout/stderr buffers; the rest is drained and dropped."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.buffers: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self.overflow = False
        self.selector = selectors.DefaultSelector()

    def add(self, name: str, data: bytes) -> None:
        buf = self.buffers[name]
        room = self.cap + 1 - len(buf)
        if room > 0:
            buf += data[:room]
        if len(data) > max(room, 0):
            self.overflow = True

    def close(self) -> None:
        self.selector.close()

    def render(self, cap: int) -> tuple[str, bool]:
        """stdout, then stderr lines prefixed ``[stderr] ``, cut to ``cap`` bytes."""
        out = self.buffers["stdout"].decode("utf-8", errors="replace")
        err = self.buffers["stderr"].decode("utf-8", errors="replace")
        text = out
        if err:
            if text and not text.endswith("\n"):
                text += "\n"
            text += "\n".join(STDERR_PREFIX + line for line in err.splitlines())
        raw = text.encode("utf-8")
        truncated = self.overflow or len(raw) > cap
        if truncated:
            text = raw[:cap].decode("utf-8", errors="ignore")
            text += f"\n... [output truncated at {cap} bytes]"
        return text, truncated


def _pump(proc: subprocess.Popen[bytes], capture: _Capture, deadline: float) -> bool:
    """Read both pipes until EOF (or shortly after the shell exits). False on timeout."""
    sel = capture.selector
    assert proc.stdout is not None and proc.stderr is not None
    for stream, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
        os.set_blocking(stream.fileno(), False)
        sel.register(stream, selectors.EVENT_READ, name)
    exited_at: float | None = None
    while sel.get_map():
        now = time.monotonic()
        if now >= deadline:
            return False
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > _DRAIN_GRACE_SECONDS:
            break  # background children still hold the pipes: stop waiting for them
        for key, _ in sel.select(timeout=min(_POLL_SECONDS, deadline - now)):
            try:
                data = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            if data:
                capture.add(key.data, data)
            else:
                sel.unregister(key.fileobj)
    while proc.poll() is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(_POLL_SECONDS, max(deadline - time.monotonic(), 0)))
    return True


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the command's whole session (it leads its own process group)."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            with suppress(OSError):
                stream.close()


__all__ = ["LocalShellBackend", "run_command"]
