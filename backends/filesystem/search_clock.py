"""The soft time limit of a glob or grep: stop walking in time, answer with what was found.

A search over a huge tree used to run until the activity's hard deadline
stopped its thread, and the model then got only "narrow it" (or, in a
process that had no such deadline, nothing at all). A search that watches a
:class:`SearchClock` instead ends its walk itself once the limit has passed
and returns the matches it has, ``truncated`` and with ``stopped_after`` set,
so the model reads a partial answer and a note naming the time (contract §1).

Where the limit comes from: the caller of the backend sets it for the calls
it makes with :func:`search_time_limit` (the tool activities do, with
:func:`~filegate.kernel.limits.partial_search_seconds` of the search's
budget), and a backend may add a limit of its own (``search_timeout`` of
:class:`~filegate.backends.filesystem.FilesystemBackend`); the tighter one
applies. A context variable rather than a protocol argument, so the policy
wrappers, the composite and third-party backends pass it on untouched; it is
set in the thread that runs the backend call (context variables do not
follow a new thread). Wall-clock time has no place in a workflow, so the
State backend, which runs there, never reads it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

_LIMIT: ContextVar[tuple[float, float] | None] = ContextVar("filegate_search_limit", default=None)
"""``(deadline, seconds)``: the ``time.monotonic()`` at which searches stop, and the
limit in seconds the note names; None when the caller set no limit."""


@contextmanager
def search_time_limit(seconds: float | None, *, since: float | None = None) -> Iterator[None]:
    """Searches started inside this block stop ``seconds`` after ``since`` (None: no limit).

    ``since`` is a ``time.monotonic()`` value, default now. The tool activity passes
    the instant its hard deadline counts from, so the time its thread takes to
    start is taken from the search, not from the margin before the hard stop.
    """
    start = time.monotonic() if since is None else since
    limit = None if seconds is None else (start + seconds, seconds)
    token = _LIMIT.set(limit)
    try:
        yield
    finally:
        _LIMIT.reset(token)


@dataclass
class SearchClock:
    """One search's deadline; :meth:`expired` is asked between units of work.

    Once expired it stays expired (``stopped``), so every level of a recursive
    walk unwinds without asking the clock again, and :attr:`stopped_after`
    tells the result whether the walk was cut.
    """

    deadline: float | None = None
    seconds: float | None = None
    stopped: bool = False

    @classmethod
    def start(cls, own_seconds: float | None = None) -> SearchClock:
        """The clock of a search starting now: the caller's limit or ``own_seconds``,
        whichever ends first (neither: a clock that never expires)."""
        limit = _LIMIT.get()
        if own_seconds is not None:
            own = (time.monotonic() + own_seconds, own_seconds)
            if limit is None or own[0] < limit[0]:
                limit = own
        if limit is None:
            return cls()
        return cls(deadline=limit[0], seconds=limit[1])

    def expired(self) -> bool:
        """Whether the search must stop now (and from now on)."""
        if not self.stopped and self.deadline is not None and time.monotonic() >= self.deadline:
            self.stopped = True
        return self.stopped

    def remaining(self) -> float | None:
        """Seconds left (never below 0), or None without a limit."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    @property
    def stopped_after(self) -> float | None:
        """The limit in seconds when the search was cut by it, else None (for the result)."""
        return self.seconds if self.stopped else None
