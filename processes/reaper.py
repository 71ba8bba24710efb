"""Bounds and process cleanup for every command a backend runs (contract §1, §11).

A command never runs directly under the worker: it runs under the supervisor
(:mod:`.supervisor_main`, a separate ``python -I -S`` process, so nothing runs
between ``fork`` and ``exec`` in the threaded worker). The supervisor

- applies the rlimits in the command's process before ``exec``: memory
  (``RLIMIT_DATA``), file size (``RLIMIT_FSIZE``, an over-size write fails
  with ``EFBIG``), no core dumps;
- makes itself a child subreaper, so processes that ``setsid`` or double-fork
  stay in its tree, counts that tree every :data:`EXECUTE_WATCH_SECONDS` and
  kills it all above ``max_processes``;
- sums what the tree wrote to disk at the same pace and kills it all above
  ``write_bytes`` (see "Why writes are counted this way" below);
- kills and reaps every descendant when the command exits, when the worker
  stops it (timeout, cancel: SIGTERM) or when the worker dies.

Sums across the whole command: where the worker can make cgroups
(:mod:`.cgroups`), each command gets its own, which the worker moves the
supervisor into before it forks, so the kernel caps the memory of all its processes together
(``command_memory_bytes``) and refuses any task beyond the first one over
``max_processes`` (:data:`~.cgroups.PIDS_SLACK`; threads count as tasks); the
supervisor watches the cgroup's OOM and refused-fork counters and then kills
the whole command. Elsewhere the
per-process bounds above still hold, and the worker's startup line says which
sum is missing and why (:func:`~.cgroups.aggregate_bounds_status`).

Why writes are counted this way: the write bound has to be exact per command,
cheap on a big workspace and enforced while the command runs. Measuring the
workspace (a ``du`` every poll) walks the whole tree, seconds on a large
checkout; free space (``statvfs``) mixes in every other writer; a size-limited
layer (an overlay on a tmpfs upper) changes what a command sees and needs its
changes copied back. The kernel already counts, per process, the bytes it
*dirtied for storage* (``write_bytes`` of ``/proc/<pid>/io``: page-cache and
mmap writes, direct I/O, on any disk-backed filesystem, overlayfs included)
and adds a reaped child's count to its parent's; the supervisor scans the
command's tree every poll anyway, so the sum costs one small read per live
process. It counts bytes written, not net growth: deleting gives nothing back,
rewriting a page that is still dirty counts once; a process the supervisor may
not inspect (a setuid program on the local shell) is not counted. ``fallocate`` and the
preallocation ioctls reserve blocks without writing them; in the sandbox a
seccomp filter refuses them (:mod:`filegate.backends.seccomp`; glibc's ``posix_fallocate`` then
writes, which counts), on the local shell they are not filtered (trusted
code). Metadata (inodes, directories) is not counted, and tmpfs is not disk:
the sandbox's ``/tmp`` has its own size, a workspace on tmpfs is charged to
the command's memory cgroup. Overshoot: the command is killed within one poll
(:data:`~filegate.kernel.limits.EXECUTE_WATCH_SECONDS`, 20 ms) of crossing the
bound, so beyond it lands at most what it writes in one poll (page-cache
speed, tens of MiB), and no file exceeds ``file_bytes``.

Why count processes instead of ``RLIMIT_NPROC``: that limit counts every
process of the *real uid* on the host (the worker's own threads, parallel
commands, the user's other programs) and is not enforced at all for root, so
it is either wrong or absent. Counting the supervisor's own subtree bounds
exactly one command, for any user, inside or outside bwrap (the sandbox's
processes are the supervisor's descendants in the host's ``/proc``). The count
is polled, so without a cgroup a fast fork bomb can briefly overshoot before it
is killed as a whole; with one the kernel refuses the fork.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ByteSize, TypeAdapter

from filegate.kernel.limits import (
    DEFAULT_EXECUTE_COMMAND_MEMORY_BYTES,
    DEFAULT_EXECUTE_FILE_BYTES,
    DEFAULT_EXECUTE_MAX_PROCESSES,
    DEFAULT_EXECUTE_MEMORY_BYTES,
    DEFAULT_EXECUTE_WRITE_BYTES,
    DEFAULT_MAX_EXECUTE_TIMEOUT,
    DEFAULT_SANDBOX_TMP_BYTES,
    EXECUTE_WATCH_SECONDS,
    execute_timeout_problem,
)
from filegate.processes.cgroups import CommandCgroup

if TYPE_CHECKING:
    from filegate.kernel.protocol import ErrorCode

SUPERVISOR = Path(__file__).with_name("supervisor_main.py")

try:
    _SUPERVISOR_SOURCE: str | None = SUPERVISOR.read_text(encoding="utf-8")
except OSError:  # pragma: no cover - a package without its sources
    _SUPERVISOR_SOURCE = None
"""Read while the worker still has its starting user's rights: a root worker that
drops to another uid (or a checkout under a private home directory) may no longer
be able to read its own package, and the supervisor then runs from this text."""


def _supervisor_program() -> list[str]:
    """How the interpreter gets the supervisor: its file, or its text when that is unreadable."""
    if _SUPERVISOR_SOURCE is None or os.access(SUPERVISOR, os.R_OK):
        return [str(SUPERVISOR)]
    return ["-c", _SUPERVISOR_SOURCE]


@dataclass(frozen=True)
class CommandBounds:
    """What one command may use. 0 means "no limit" (for the sizes and processes)."""

    memory_bytes: int = DEFAULT_EXECUTE_MEMORY_BYTES
    """One process (``RLIMIT_DATA``)."""
    max_processes: int = DEFAULT_EXECUTE_MAX_PROCESSES
    file_bytes: int = DEFAULT_EXECUTE_FILE_BYTES
    command_memory_bytes: int = DEFAULT_EXECUTE_COMMAND_MEMORY_BYTES
    """All processes of the command together (its cgroup, where the worker has one)."""
    write_bytes: int = DEFAULT_EXECUTE_WRITE_BYTES
    """What the whole command may write to disk."""
    tmp_bytes: int = DEFAULT_SANDBOX_TMP_BYTES
    """Sandbox only: size of its ``/tmp`` and ``/dev/shm`` tmpfs each."""
    max_seconds: float = DEFAULT_MAX_EXECUTE_TIMEOUT
    """The longest timeout this worker accepts, whatever the workflow allows."""
    watch_seconds: float = EXECUTE_WATCH_SECONDS

    def __post_init__(self) -> None:
        for name in self._SIZES:
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: no limit)")
        if self.max_seconds <= 0 or self.watch_seconds <= 0:
            raise ValueError("max_seconds and watch_seconds must be positive")

    _SIZES = (
        "memory_bytes",
        "max_processes",
        "file_bytes",
        "command_memory_bytes",
        "write_bytes",
        "tmp_bytes",
    )

    def timeout_for(self, asked: float | None, default: float) -> float:
        """The timeout to use: ``asked``, else ``default`` capped at ``max_seconds``."""
        return min(default, self.max_seconds) if asked is None else asked

    def check_timeout(self, timeout: float) -> str | None:
        """Why ``timeout`` is refused, or None: the kernel's rule, with this worker's maximum."""
        return execute_timeout_problem(timeout, self.max_seconds)


def supervised(
    argv: Sequence[str],
    bounds: CommandBounds,
    *,
    watches: Sequence[tuple[str, str, str]] = (),
    report_fd: int = -1,
    go_fd: int = -1,
) -> list[str]:
    """``argv`` run under the supervisor with ``bounds``.

    ``watches``: ``(bound, key, file)`` cgroup counters that mean the bound was
    hit; ``report_fd``: where it writes the name of the bound that stopped the
    command; ``go_fd``: where it waits for ``go`` before it forks.
    """
    spec = (
        f"{bounds.memory_bytes},{bounds.file_bytes},{bounds.max_processes},"
        f"{bounds.watch_seconds},{bounds.write_bytes},{report_fd},{go_fd}"
    )
    options: list[str] = []
    for reason, key, path in watches:
        options += ["--watch", reason, key, path]
    return [sys.executable, "-I", "-S", *_supervisor_program(), spec, *options, "--", *argv]


class Supervision:
    """The plumbing of one supervised command: its cgroup and the supervisor's pipes.

    :func:`~filegate.backends.local_shell.run_command` builds one per command,
    starts :meth:`command` with :attr:`child_fds`, calls :meth:`started` once
    the process exists and :meth:`finish` after it is gone (always: the cgroup
    must not outlive it). The worker, not the supervisor, moves the process into
    the cgroup: the move waits for an RCU grace period in the kernel (10-20 ms
    when the system is idle), which then overlaps the supervisor's start, and
    the supervisor needs no access to the cgroup files.
    """

    def __init__(self, bounds: CommandBounds) -> None:
        self.bounds = bounds
        self.cgroup = CommandCgroup.create(bounds)
        self.report_read, self.report_write = os.pipe()
        self.go_read, self.go_write = os.pipe() if self.cgroup else (-1, -1)

    @property
    def child_fds(self) -> tuple[int, ...]:
        """The descriptors the supervisor starts with (it keeps them from the command)."""
        return tuple(fd for fd in (self.report_write, self.go_read) if fd >= 0)

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` under the supervisor, which waits for the cgroup and reports to us."""
        return supervised(
            argv,
            self.bounds,
            watches=self.cgroup.watches if self.cgroup else (),
            report_fd=self.report_write,
            go_fd=self.go_read,
        )

    def started(self, pid: int | None) -> None:
        """Close our copies of the supervisor's ends; move ``pid`` into the cgroup and
        tell the supervisor to go on (without ``go`` it runs nothing)."""
        for fd in (self.report_write, self.go_read):
            if fd >= 0:
                os.close(fd)
        self.report_write = self.go_read = -1
        if self.go_write >= 0:
            with contextlib.suppress(OSError):  # a supervisor already gone: nothing runs
                if pid is not None and self.cgroup is not None and self.cgroup.enter(pid):
                    os.write(self.go_write, b"go")
            os.close(self.go_write)
            self.go_write = -1

    def finish(self) -> str | None:
        """Remove the cgroup (killing what is left) and return the bound that stopped
        the command (see :func:`bound_error`), if one did."""
        self.started(None)
        report = b""
        os.set_blocking(self.report_read, False)
        with contextlib.suppress(OSError):
            while chunk := os.read(self.report_read, 4096):
                report += chunk
        os.close(self.report_read)
        hit = self.cgroup.close() if self.cgroup else None
        reported = report.decode("ascii", "replace").split()
        return reported[0] if reported else hit  # the cgroup's word if the supervisor died


def size_text(size: int) -> str:
    """``2 GiB``, ``256 MiB``: a bound as people write it."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} bytes"


def bound_error(reason: str, bounds: CommandBounds) -> tuple[str, ErrorCode]:
    """The result's error and code when the supervisor reports ``reason``: it names
    the bound and the setting that raises it."""
    return _bound_text(reason, bounds), "io_error" if reason == "join" else "too_large"


def _bound_text(reason: str, bounds: CommandBounds) -> str:
    if reason == "memory":
        return (
            f"the command was killed: its processes together used more than "
            f"{size_text(bounds.command_memory_bytes)} of memory (the per-command memory "
            "bound, FILEGATE_EXEC_COMMAND_MEMORY / --exec-command-memory)"
        )
    if reason == "processes":
        return (
            f"the command was killed: it started more than {bounds.max_processes} "
            "processes or threads (the per-command process bound, "
            "FILEGATE_EXEC_MAX_PROCESSES / --exec-max-processes)"
        )
    if reason == "write":
        return (
            f"the command was killed: it wrote more than {size_text(bounds.write_bytes)} "
            "to disk (the per-command write bound, FILEGATE_EXEC_WRITE_SIZE / "
            "--max-command-write-bytes)"
        )
    return "the command was not run: it could not enter its cgroup (the per-command bounds)"


KILL_BOUNDS = ("timeout", "memory", "processes", "write")
"""The bounds a command can be killed at (:func:`report_kill`)."""

_KILLS: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "filegate_command_kills", default=None
)


@contextlib.contextmanager
def kills_reported(sink: Callable[[str], None]) -> Iterator[None]:
    """Within the block, each command killed at a bound calls ``sink(bound)``.

    For the caller's metrics and traces (the tools worker's ``sandbox_kills``);
    set it in the thread that runs the command: a context variable does not
    follow a new thread.
    """
    token = _KILLS.set(sink)
    try:
        yield
    finally:
        _KILLS.reset(token)


def report_kill(bound: str) -> None:
    """A command was killed at ``bound`` (one of :data:`KILL_BOUNDS`): tell the sink, if any."""
    sink = _KILLS.get()
    if sink is not None and bound in KILL_BOUNDS:
        sink(bound)


def parse_size(text: str) -> int:
    """``"512MiB"``, ``"1GiB"``, ``"64m"`` (decimal units: ``MB`` = 10**6) or bytes."""
    try:
        return int(TypeAdapter(ByteSize).validate_python(text))
    except ValueError:
        raise ValueError(f"not a size: {text!r} (e.g. 512MiB, 2GiB, 1048576)") from None


__all__ = [
    "SUPERVISOR",
    "CommandBounds",
    "Supervision",
    "bound_error",
    "kills_reported",
    "parse_size",
    "report_kill",
    "size_text",
    "supervised",
]
