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
- kills and reaps every descendant when the command exits, when the worker
  stops it (timeout, cancel: SIGTERM) or when the worker dies.

Why count processes instead of ``RLIMIT_NPROC``: that limit counts every
process of the *real uid* on the host (the worker's own threads, parallel
commands, the user's other programs) and is not enforced at all for root, so
it is either wrong or absent. Counting the supervisor's own subtree bounds
exactly one command, for any user, inside or outside bwrap (the sandbox's
processes are the supervisor's descendants in the host's ``/proc``). The count
is polled, so a fast fork bomb can briefly overshoot before it is killed as a
whole; a hard cap on the *sum* of memory or processes needs a cgroup around
the worker (``MemoryMax``, ``TasksMax``, a container limit).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from filegate.kernel.limits import (
    DEFAULT_EXECUTE_FILE_BYTES,
    DEFAULT_EXECUTE_MAX_PROCESSES,
    DEFAULT_EXECUTE_MEMORY_BYTES,
    DEFAULT_MAX_EXECUTE_TIMEOUT,
    DEFAULT_SANDBOX_TMP_BYTES,
    EXECUTE_WATCH_SECONDS,
    execute_timeout_problem,
)
from pydantic import ByteSize, TypeAdapter

if TYPE_CHECKING:
    from filegate.backends.settings import Settings

SUPERVISOR = Path(__file__).with_name("supervisor_main.py")


@dataclass(frozen=True)
class CommandBounds:
    """What one command may use. 0 means "no limit" (for the sizes and processes)."""

    memory_bytes: int = DEFAULT_EXECUTE_MEMORY_BYTES
    max_processes: int = DEFAULT_EXECUTE_MAX_PROCESSES
    file_bytes: int = DEFAULT_EXECUTE_FILE_BYTES
    tmp_bytes: int = DEFAULT_SANDBOX_TMP_BYTES
    """Sandbox only: size of its ``/tmp`` and ``/dev/shm`` tmpfs each."""
    max_seconds: float = DEFAULT_MAX_EXECUTE_TIMEOUT
    """The longest timeout this worker accepts, whatever the workflow allows."""
    watch_seconds: float = EXECUTE_WATCH_SECONDS

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "max_processes", "file_bytes", "tmp_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: no limit)")
        if self.max_seconds <= 0 or self.watch_seconds <= 0:
            raise ValueError("max_seconds and watch_seconds must be positive")

    @classmethod
    def from_settings(cls, settings: Settings) -> CommandBounds:
        """``FILEGATE_EXEC_MEMORY`` / ``_EXEC_MAX_PROCESSES`` / ``_EXEC_FILE_SIZE`` /
        ``_SANDBOX_TMP_SIZE`` / ``_EXEC_MAX_SECONDS``."""
        return cls(
            memory_bytes=int(settings.exec_memory),
            max_processes=settings.exec_max_processes,
            file_bytes=int(settings.exec_file_size),
            tmp_bytes=int(settings.sandbox_tmp_size),
            max_seconds=settings.exec_max_seconds,
        )

    def timeout_for(self, asked: float | None, default: float) -> float:
        """The timeout to use: ``asked``, else ``default`` capped at ``max_seconds``."""
        return min(default, self.max_seconds) if asked is None else asked

    def check_timeout(self, timeout: float) -> str | None:
        """Why ``timeout`` is refused, or None: the kernel's rule, with this worker's maximum."""
        return execute_timeout_problem(timeout, self.max_seconds)


def supervised(argv: Sequence[str], bounds: CommandBounds) -> list[str]:
    """``argv`` run under the supervisor with ``bounds``."""
    spec = (
        f"{bounds.memory_bytes},{bounds.file_bytes},{bounds.max_processes},{bounds.watch_seconds}"
    )
    return [sys.executable, "-I", "-S", str(SUPERVISOR), spec, "--", *argv]


def parse_size(text: str) -> int:
    """``"512MiB"``, ``"1GiB"``, ``"64m"`` (decimal units: ``MB`` = 10**6) or bytes."""
    try:
        return int(TypeAdapter(ByteSize).validate_python(text))
    except ValueError:
        raise ValueError(f"not a size: {text!r} (e.g. 512MiB, 2GiB, 1048576)") from None


__all__ = ["SUPERVISOR", "CommandBounds", "parse_size", "supervised"]
