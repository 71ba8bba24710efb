"""Audit records for backend operations, and where they go.

One JSON line per operation (per file for ``upload``/``download``), written by
:class:`backends.policy.chain.PolicyBackend`. A record says *who* (workflow id,
tool-call id), *what* (operation, path), *how it ended* (ok, denied by a
policy, or an error value / exception from the backend) and *how much*
(payload bytes). It never holds file contents, search strings or command
text: an audit log is read by more people than the files it describes, so a
secret must not leak into it. ``execute`` records the command's SHA-256 and
length instead, enough to correlate with a transcript without copying it.

Context comes through a contextvar because the protocol methods do not carry
it: the activity that calls the backend wraps the call in
``with audit_context(workflow_id=..., tool_call_id=...):``.

Sinks are pluggable (:class:`AuditSink`); :class:`FileAuditSink` appends to a
local file. A sink that stores batches elsewhere (S3) only has to implement
``emit``.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

logger = logging.getLogger(__name__)

Outcome = Literal["ok", "denied", "error"]
"""``denied``: a policy refused (backend not touched); ``error``: the backend
returned an error value or raised."""

MAX_AUDIT_PATH = 512
"""Longest path written verbatim; longer (invalid) paths are cut, never content."""


@dataclass(frozen=True)
class AuditContext:
    """Who is calling: set by the activity around each backend call."""

    workflow_id: str | None = None
    tool_call_id: str | None = None
    approved_by: str | None = None
    """The reviewer who approved this call (``"ana via ui"``), when one did."""


_NO_CONTEXT = AuditContext()
_CONTEXT: ContextVar[AuditContext | None] = ContextVar("filegate_audit_context", default=None)


@contextmanager
def audit_context(
    workflow_id: str | None = None,
    tool_call_id: str | None = None,
    approved_by: str | None = None,
) -> Iterator[AuditContext]:
    """Attribute every backend operation inside the block to this workflow/tool call
    (and to the reviewer who approved it, if one did)."""
    ctx = AuditContext(workflow_id, tool_call_id, approved_by)
    token = _CONTEXT.set(ctx)
    try:
        yield ctx
    finally:
        _CONTEXT.reset(token)


def current_audit_context() -> AuditContext:
    return _CONTEXT.get() or _NO_CONTEXT


class AuditRecord(BaseModel):
    """One audit line. Every key is always present (stable schema for log tools).

    ``bytes`` is the payload the call carried: content written (write, upload),
    replacement text (edit), content returned (read, download) or output
    (execute); None for metadata operations.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    time: str
    workflow_id: str | None = None
    tool_call_id: str | None = None
    approved_by: str | None = None
    operation: str
    path: str | None = None
    outcome: Outcome
    code: str | None = None
    policy: str | None = None
    rule: str | None = None
    bytes: int | None = None
    duration_ms: float = 0.0
    command_sha256: str | None = None
    command_length: int | None = None
    exit_code: int | None = None
    host: str | None = None
    """``connect`` records: the host a sandboxed command asked for (no URL, no
    header: the host, port and decision are all the proxy tells)."""
    port: int | None = None
    connections: int | None = None
    bytes_in: int | None = None
    """``connect``: bytes received (``bytes`` holds those sent)."""


def new_record(operation: str, path: str | None, outcome: Outcome, **fields: object) -> AuditRecord:
    """A record stamped with the current time and audit context."""
    ctx = current_audit_context()
    if path is not None and len(path) > MAX_AUDIT_PATH:
        path = path[:MAX_AUDIT_PATH] + "..."
    return AuditRecord.model_validate(
        {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "workflow_id": ctx.workflow_id,
            "tool_call_id": ctx.tool_call_id,
            "approved_by": ctx.approved_by,
            "operation": operation,
            "path": path,
            "outcome": outcome,
            **fields,
        }
    )


def command_digest(command: str) -> tuple[str, int]:
    """``(sha256 hex, length in characters)`` of a command: what the log keeps of it."""
    return hashlib.sha256(command.encode("utf-8", "surrogatepass")).hexdigest(), len(command)


@runtime_checkable
class AuditSink(Protocol):
    """Where audit records go. ``emit`` must be thread-safe (sync activities run in threads)."""

    def emit(self, record: AuditRecord) -> None: ...


class FileAuditSink:
    """Append JSON lines to a local file (created 0600, parents created).

    Each line is one ``write`` on an ``O_APPEND`` descriptor, so concurrent
    threads and processes sharing the file never interleave within a line.
    The file is opened at construction so a bad path fails at worker start,
    not on the first tool call.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        os.close(self._open())

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def emit(self, record: AuditRecord) -> None:
        line = (record.model_dump_json() + "\n").encode("utf-8")
        fd = self._open()
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def emit_safely(sink: AuditSink, record: AuditRecord) -> None:
    """Emit, logging (not raising) a sink failure.

    The operation has already happened when its record is written; failing the
    tool call then would make Temporal retry an operation that succeeded.
    """
    try:
        sink.emit(record)
    except Exception:
        logger.exception("audit sink %r failed; record for %s lost", sink, record.operation)
