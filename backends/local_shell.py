"""Filesystem backend plus ``execute``: a shell on the host, rooted at ``root_dir``.

Not a sandbox: the command can touch anything the worker user can. What it
does guarantee (contract §1, §11): cwd is the root, the environment is
explicit (nothing inherited unless asked), output is capped, memory, file size
and process count are bounded (:class:`~filegate.processes.reaper.CommandBounds`;
their sums per command where the worker can make cgroups, and what the command
writes to disk; ``fallocate`` is not filtered here, unlike in the sandbox),
and no process outlives the command: it runs under the supervisor of
:mod:`filegate.processes.reaper`, which kills everything it started -- also
processes that called ``setsid`` or double-forked -- when it returns, times out
or is cancelled. A hostile command can still kill its supervisor (it runs as
the worker's user; what it started then dies with the command's cgroup, where
there is one) or, as root, change its own cgroup; use the sandbox for
untrusted code.

Credentials: a command cannot read the worker's environment or memory through
``/proc``: building a backend makes the worker non-dumpable, and a root
worker's commands (and their supervisor) run without any capability, still as
uid 0 (:mod:`filegate.processes.guard`).

``execute`` waits in a short polling loop rather than one blocking call, so
an exception raised into the calling thread (e.g. Temporal cancelling a sync
activity) lands within ~0.1 s; the ``finally`` then stops the supervisor.
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
from filegate.backends.filesystem.host_files import DEFAULT_MAX_FILE_BYTES
from filegate.kernel.limits import DEFAULT_EXECUTE_TIMEOUT, DEFAULT_MAX_OUTPUT_BYTES
from filegate.kernel.protocol import ExecuteResult, refuse_empty_command
from filegate.processes.guard import (
    guarded,
    make_non_dumpable,
    needs_capability_drop,
    parse_refusal,
)
from filegate.processes.reaper import CommandBounds, Supervision, bound_error, report_kill

MINIMAL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STDERR_PREFIX = "[stderr] "
_POLL_SECONDS = 0.1
_DRAIN_GRACE_SECONDS = 0.5
_STOP_GRACE_SECONDS = 4.0
"""How long a stopped supervisor gets to kill and reap its tree before the group kill."""


class LocalShellBackend(FilesystemBackend):
    """Files on disk plus a host shell (``subprocess``, ``shell=True``).

    Building one makes the current process (the worker) non-dumpable, so its
    commands cannot read its environment from ``/proc``; doing it here covers
    every worker that serves a host shell, whatever entry point built it.
    """

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
        bounds: CommandBounds | None = None,
    ) -> None:
        """``bounds``: memory, processes, file size and the longest timeout of a command
        (default :class:`CommandBounds`; its ``tmp_bytes`` only applies to sandboxes)."""
        make_non_dumpable()
        super().__init__(root_dir, virtual_mode=virtual_mode, max_file_bytes=max_file_bytes)
        self.cwd = os.path.realpath(root_dir)
        self.env = dict(env or {})
        self.inherit_env = inherit_env
        self.default_timeout = default_timeout
        self.max_output_bytes = max_output_bytes
        self.bounds = bounds or CommandBounds()

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
        empty = refuse_empty_command(command)  # exit code 1, not the shell's 0
        if empty is not None:
            return empty
        limit = self.bounds.timeout_for(timeout, self.default_timeout)
        refused = self.bounds.check_timeout(limit)
        if refused:
            return ExecuteResult(error=refused, code="invalid_argument")
        return run_command(
            ["/bin/sh", "-c", command],
            shell=False,
            cwd=self.cwd,
            env=self.command_env(),
            timeout=limit,
            max_output_bytes=self.max_output_bytes,
            bounds=self.bounds,
            drop_capabilities=True,
        )


TIMEOUT_EXIT_CODE = 124
"""Exit code of a timed-out command, as coreutils ``timeout`` and the reference report it."""


def run_command(
    args: str | Sequence[str],
    *,
    shell: bool,
    cwd: str | None,
    env: Mapping[str, str],
    timeout: float,
    max_output_bytes: int,
    bounds: CommandBounds | None = None,
    drop_capabilities: bool = False,
    pass_fds: Sequence[int] = (),
) -> ExecuteResult:
    """Run one command in its own session: capped output, ``[stderr] `` prefix, no leftovers.

    Shared by every backend that executes (the host shell, sandboxes), so the
    timeout, output-cap, bounds and process-cleanup rules live in one place.
    With ``bounds`` (a sequence ``args`` only) the command runs under the
    supervisor (:mod:`filegate.processes.reaper`); it is stopped with SIGTERM,
    so it kills the whole tree, then the session's process group is killed.
    A timed-out command reports :data:`TIMEOUT_EXIT_CODE` (contract §1). The
    supervisor also joins the command's cgroup, if the worker can make one, and
    reports which bound stopped it: the result's error names it
    (:class:`~filegate.processes.reaper.Supervision`). ``pass_fds``: descriptors
    the command inherits (the sandbox's seccomp filter).

    ``drop_capabilities`` (the host shell): when the worker is root, the
    supervisor and the command start through the guard of
    :mod:`~filegate.processes.guard`, which drops every capability
    first; if it cannot, nothing runs and the result is its error. Sandboxes
    leave it off: bwrap needs root's capabilities to build its namespaces and
    drops them itself for the command.
    """
    if (bounds is not None or drop_capabilities) and (isinstance(args, str) or shell):
        raise ValueError("bounds and drop_capabilities need an argument list, not a shell string")
    supervision = Supervision(bounds) if bounds is not None else None
    if supervision is not None:
        args = supervision.command(list(args))
    status_read = status_write = -1
    if drop_capabilities and needs_capability_drop():
        status_read, status_write = os.pipe()
        args = guarded(list(args), status_write)
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
            pass_fds=_inherited(status_write, supervision, pass_fds),
        )
    except OSError as exc:
        if status_read >= 0:
            os.close(status_read)
        if supervision is not None:
            supervision.finish()
        return ExecuteResult(error=f"could not start the shell: {exc}", code="io_error")
    finally:
        if status_write >= 0:
            os.close(status_write)  # the guard holds the only copy: EOF once it execs or exits
    capture = _Capture(max_output_bytes)
    timed_out = False
    bound: str | None = None
    try:
        if supervision is not None:
            supervision.started(proc.pid)  # into the cgroup, then the command may start
        timed_out = not _pump(proc, capture, time.monotonic() + timeout, status_read)
    finally:
        _stop(proc, supervised=bounds is not None)
        capture.close()
        if status_read >= 0:
            os.close(status_read)
        if supervision is not None:
            bound = supervision.finish()
    refusal = parse_refusal(bytes(capture.buffers[_GUARD]))
    if refusal is not None:  # the guard reported instead of exec'ing: nothing ran
        kind, reason = refusal
        return ExecuteResult(
            error=f"the command was not run: {reason}",
            code="io_error" if kind == "io_error" else "unsupported",
        )
    output, truncated = capture.render(max_output_bytes)
    if timed_out:
        report_kill("timeout")
        return ExecuteResult(
            output=output,
            exit_code=TIMEOUT_EXIT_CODE,
            truncated=truncated,
            error=f"command timed out after {timeout:g} s and was killed",
            code="timeout",
        )
    code = proc.returncode
    if code is not None and code < 0:
        code = 128 - code  # killed by signal N: report like a shell (128 + N)
    if bound is not None and bounds is not None:  # a bound stopped it: say which (§11)
        report_kill(bound)  # "join" (never started) is no kill: report_kill ignores it
        error, kind = bound_error(bound, bounds)
        return ExecuteResult(
            output=output, exit_code=code, truncated=truncated, error=error, code=kind
        )
    return ExecuteResult(output=output, exit_code=code, truncated=truncated)


def _inherited(
    status_write: int, supervision: Supervision | None, extra: Sequence[int]
) -> tuple[int, ...]:
    """The descriptors the guard, the supervisor and the command start with."""
    fds = [status_write, *(supervision.child_fds if supervision else ()), *extra]
    return tuple(fd for fd in fds if fd >= 0)


_GUARD = "guard"
"""The capture buffer of the guard's status pipe: its refusal, if any; never shown as output."""


class _Capture:
    """Bounded stdout/stderr buffers; the rest is drained and dropped."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.buffers: dict[str, bytearray] = {
            "stdout": bytearray(),
            "stderr": bytearray(),
            _GUARD: bytearray(),
        }
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


def _pump(
    proc: subprocess.Popen[bytes], capture: _Capture, deadline: float, status_fd: int = -1
) -> bool:
    """Read both pipes and the guard's ``status_fd`` until EOF (or shortly after the
    shell exits). False on timeout."""
    sel = capture.selector
    assert proc.stdout is not None and proc.stderr is not None
    for stream, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
        os.set_blocking(stream.fileno(), False)
        sel.register(stream, selectors.EVENT_READ, name)
    if status_fd >= 0:
        os.set_blocking(status_fd, False)
        sel.register(status_fd, selectors.EVENT_READ, _GUARD)
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


def _stop(proc: subprocess.Popen[bytes], *, supervised: bool) -> None:
    """Stop the supervisor (it kills its tree), then SIGKILL the process group, reap."""
    if supervised and proc.poll() is None:
        with suppress(ProcessLookupError, PermissionError):
            proc.send_signal(signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=_STOP_GRACE_SECONDS)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with suppress(OSError, subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            with suppress(OSError):
                stream.close()


__all__ = ["TIMEOUT_EXIT_CODE", "LocalShellBackend", "run_command"]
