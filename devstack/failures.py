"""Why an embedded server did not start, in one line taken from its log.

The Temporal dev server is a Go program built on dependency injection (uber's
``fx``): when it cannot start, it logs each failed provider with the whole
chain that led to it, source paths included, and ends with an ``Error:`` line
that repeats the chain once more. Printed as is, one cause ("address already
in use", "permission denied", "user: Current requires cgo or $USER set in
environment") was a wall of about twenty screen lines. :func:`startup_cause`
keeps the cause: the last error line of this start, without source locations
and without the chain's "could not build arguments for function ..." links.
The whole log stays in its file, whose path the one line names
(:class:`~filegate.devstack.servers.StartupFailed`).

Plain Python (the backends layer imports no Temporal).
"""

from __future__ import annotations

import re

__all__ = ["CAUSE_MAX_CHARS", "last_error", "startup_cause"]

CAUSE_MAX_CHARS = 300
"""A cause longer than this is cut: the log file has the rest."""

_SOURCE_REF = re.compile(r"\s*\((?:[^()\s]*/)?[^()\s/]+\.(?:go|s):\d+\)")
"""`` (/home/runner/go/pkg/mod/.../fx.go:943)`` after a function name."""
_SOURCE_LINE = re.compile(r"(?:\\n|\n)(?:\\t|\t)?[^\s:]*\.(?:go|s):\d+:?(?:\\n|\n)?")
"""``\\n\\t/path/file.go:24:\\n`` between two links of a multi-line fx chain."""
_CHAIN_LINK = re.compile(
    r"^(?:could not build arguments for function|could not build value group"
    r"|failed to build\b|received non-nil error from function|missing dependencies for function"
    r"|failed starting server$|error returned$|invoke failed$)"
)
"""Segments of an fx/dig error chain that name a step, not the cause."""
_ERROR_FIELD = re.compile(r'\berror="((?:[^"\\]|\\.)*)"')
_LEVEL_ERROR = re.compile(r"\blevel=(?:ERROR|FATAL|DPANIC|PANIC)\b")
_GLOG_ERROR = re.compile(r"^[EF]\d{4} [\d:.]+ \S+:\d+\]? ?(.*)$")
"""A glog error or fatal line (SeaweedFS): ``E1201 23:10:47.422129 worker.go:514 text``."""


def last_error(log: str) -> str | None:
    """The last error line of ``log`` (one start's output), or None when there is none.

    In order of trust: the CLI's own ``Error:`` line; a structured
    ``level=ERROR`` line's ``error="..."`` field (or the whole line); a glog
    error or fatal line.
    """
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("Error:"):
            return line.removeprefix("Error:").strip()
    for line in reversed(lines):
        if _LEVEL_ERROR.search(line):
            field = _ERROR_FIELD.search(line)
            if field is None:
                return line
            return field.group(1).replace('\\"', '"').replace("\\\\", "\\")
    for line in reversed(lines):
        glog = _GLOG_ERROR.match(line)
        if glog is not None:
            return glog.group(1)
    return None


def startup_cause(log: str) -> str | None:
    """The cause of a failed start in one line (see the module), or None if the log has none."""
    error = last_error(log)
    if error is None:
        return None
    text = _SOURCE_LINE.sub(": ", error)
    text = _SOURCE_REF.sub("", text)
    segments = [s.strip() for s in text.split(": ") if s.strip()]
    kept = [s for s in segments if not _CHAIN_LINK.match(s)]
    cause = ": ".join(kept) if kept else " ".join(text.split())
    cause = " ".join(cause.split())
    if len(cause) > CAUSE_MAX_CHARS:
        cause = cause[: CAUSE_MAX_CHARS - 3] + "..."
    return cause
