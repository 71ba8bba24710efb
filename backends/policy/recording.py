"""Audit hookup of the policy wrapper: one audit record per call target.

Kept apart from :mod:`.chain` so the guard logic reads without the record
bookkeeping (outcome, payload size, command digest).
"""

from __future__ import annotations

import time
from typing import Any

from filegate.backends.audit import (
    AuditRecord,
    AuditSink,
    Outcome,
    command_digest,
    emit_safely,
    new_record,
)
from filegate.backends.policy.base import Call, Refusal
from filegate.kernel.protocol import (
    BackendResult,
    ExecuteResult,
    FileDownloadResult,
    NetworkUse,
    ReadResult,
)


def _text_bytes(text: object) -> int | None:
    """UTF-8 size; None for a wrongly typed argument (the call itself will fail)."""
    return len(text.encode("utf-8", "surrogatepass")) if isinstance(text, str) else None


def _payload_bytes(call: Call, result: BackendResult | None) -> int | None:
    """Bytes carried in (write, edit, upload: as attempted) or out (on success)."""
    if call.operation == "write" and call.content is not None:
        return _text_bytes(call.content)
    if call.operation == "edit" and call.new is not None:
        return _text_bytes(call.new)
    if call.operation == "upload" and call.data is not None:
        return len(call.data)
    if result is None or not result.ok:
        return None
    if isinstance(result, ReadResult):
        if result.data is not None:
            return len(result.data)
        return sum(len(line.encode("utf-8", "surrogatepass")) + 1 for line in result.lines)
    if isinstance(result, FileDownloadResult) and result.content is not None:
        return len(result.content)
    if isinstance(result, ExecuteResult):
        return _text_bytes(result.output)
    return None


def record_call(
    sink: AuditSink,
    call: Call,
    started: float,
    result: BackendResult | None = None,
    refusal: Refusal | None = None,
    exc: BaseException | None = None,
) -> None:
    """Emit the audit record of one call target: refused, raised, or answered."""
    outcome: Outcome
    code: str | None
    if refusal is not None:
        outcome = "denied" if refusal.policy is not None else "error"
        code = refusal.code
    elif exc is not None:
        outcome, code = "error", f"exception:{type(exc).__name__}"
    else:
        assert result is not None
        outcome = "ok" if result.ok else "error"
        code = result.code
    extra: dict[str, Any] = {}
    if call.command is not None:
        extra["command_sha256"], extra["command_length"] = command_digest(call.command)
    if isinstance(result, ExecuteResult):
        extra["exit_code"] = result.exit_code
    record = new_record(
        call.operation,
        call.path,
        outcome,
        code=code,
        policy=refusal.policy if refusal else None,
        rule=refusal.rule if refusal else None,
        bytes=_payload_bytes(call, result),
        duration_ms=round((time.monotonic() - started) * 1000, 3),
        **extra,
    )
    emit_safely(sink, record)
    if isinstance(result, ExecuteResult):
        for use in result.network:  # one line per host and decision, after the command's
            emit_safely(sink, _connect_record(use))


def _connect_record(use: NetworkUse) -> AuditRecord:
    """The audit line of a command's connections to one host and port."""
    return new_record(
        "connect",
        None,
        "ok" if use.allowed else "denied",
        code=None if use.allowed else "network_refused",
        rule=use.reason or None,
        bytes=use.bytes_out,
        host=use.host,
        port=use.port,
        connections=use.connections,
        bytes_in=use.bytes_in,
    )
