"""How a failing journal disk reaches the model: one sentence, no host path.

The idempotency journal (:mod:`filegate.activities.idempotency`) lives on the
tools worker's disk. When that disk is full or read-only, the model must learn
what happened to its files and nothing of the worker's host layout, and the
call must not sit through retries that meet the same disk.
"""

from __future__ import annotations

import errno

from temporalio.exceptions import ApplicationError

from filegate.kernel import wire
from filegate.kernel.registry import TOOLS

JOURNAL_UNAVAILABLE_ERROR = wire.JOURNAL_UNAVAILABLE_ERROR
"""ApplicationError type of a call its journal could not record (nothing applied)."""


class JournalUnavailable(Exception):
    """The journal cannot record a call. ``reason`` ("its journal disk is full")
    names no host path: the model reads what happened, not the worker's layout."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def journal_reason(exc: OSError) -> str:
    """What an ``OSError`` of the journal means, in words without its host path."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "its journal disk is full"
    if exc.errno == errno.EROFS:
        return "its journal is on a read-only file system"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "its journal directory is not writable"
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"its journal cannot be written ({name or 'I/O error'})"


def _unrecorded_message(tool: str, reason: str) -> str:
    """The one sentence the model reads when the journal refused its call."""
    effect = "nothing was run" if tool in TOOLS.running else "nothing was changed"
    return f"the tools worker cannot record this call: {reason}; {effect}"


def unrecorded_error(tool: str, exc: JournalUnavailable) -> ApplicationError:
    """The activity failure for a call the journal refused: non-retryable, since
    nothing was applied and a retry a few seconds later meets the same disk
    (a full or read-only journal cost ~15 s of retries per call before)."""
    return ApplicationError(
        _unrecorded_message(tool, exc.reason), type=JOURNAL_UNAVAILABLE_ERROR, non_retryable=True
    )
