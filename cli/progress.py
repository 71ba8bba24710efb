"""Printing a run as it happens: tool calls, their results, approvals, the answer."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from filegate.cli.contract import PENDING_QUERY, QUERY_TIMEOUT, TRANSCRIPT_QUERY
from filegate.cli.outage import Outage, transient
from temporalio.client import WorkflowHandle, WorkflowQueryFailedError
from temporalio.service import RPCError

if TYPE_CHECKING:
    from filegate.workflows import AgentResult

log = logging.getLogger("filegate.cli")


def one_line(text: str, width: int = 100) -> str:
    """The first two non-blank lines of ``text``, cut to ``width``, plus how many more."""
    lines = [part.strip() for part in text.strip().splitlines() if part.strip()]
    line = " | ".join(lines[:2])
    line = line if len(line) <= width else line[: width - 3] + "..."
    return line + (f" (+{len(lines) - 2} more lines)" if len(lines) > 2 else "")


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        b.get("text", f"[{b.get('type', 'block')}]") for b in content if isinstance(b, dict)
    )


def args_text(args: dict[str, Any], width: int = 80) -> str:
    text = json.dumps(args, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 3] + "..."


Approval = dict[str, Any]
"""A pending approval as the ``pending_approvals`` query returns it (id, tool, args, rule...)."""


class Progress:
    """Prints a run as it happens: tool calls, their results, approvals, the answer.

    Fed from the ``transcript`` and ``pending_approvals`` queries, so it shows the
    same thing for in-process and remote workers.
    """

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write
        self.seen = 0
        self.tool_names: dict[str, deque[str]] = {}
        """Per call id, the names of the calls still waiting for their result, in
        order: a model may reuse an id, even within one message."""
        self.approvals_seen: set[str] = set()

    def transcript(self, messages: list[dict[str, Any]]) -> None:
        if len(messages) < self.seen:  # history was compacted: start over quietly
            self.seen = len(messages)
        for message in messages[self.seen :]:
            self._message(message)
        self.seen = len(messages)

    def _message(self, message: dict[str, Any]) -> None:
        role = message.get("role")
        text = content_text(message.get("content", ""))
        if role == "user":
            self.write(f"user: {one_line(text)}")
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                self.tool_names.setdefault(call["id"], deque()).append(call["name"])
                self.write(f"  -> {call['name']} {args_text(call.get('args', {}))}")
            if text.strip():
                self.write(f"assistant: {one_line(text)}")
        elif role == "tool":
            waiting = self.tool_names.get(message.get("tool_call_id", ""))
            name = waiting.popleft() if waiting else "tool"
            status = "ok" if message.get("status", "success") == "success" else "ERROR"
            self.write(f"  <- {name} [{status}] {one_line(text)}")

    def new_approvals(self, pending: list[Approval]) -> list[Approval]:
        fresh = [a for a in pending if a["id"] not in self.approvals_seen]
        self.approvals_seen.update(a["id"] for a in fresh)
        return fresh


async def follow(
    handle: WorkflowHandle[Any, AgentResult],
    progress: Progress,
    on_approval: Callable[[Approval], Awaitable[None]],
    interval: float = 0.2,
    outage: Outage | None = None,
) -> AgentResult:
    """Wait for the run's result while printing progress and reporting new approvals.

    With ``outage``, an unreachable Temporal is waited out (one line, then the
    result asked for again) within its budget instead of ending the command.
    """
    result_task: asyncio.Task[AgentResult] = asyncio.create_task(handle.result())
    try:
        while True:
            try:
                # Approvals first: the transcript read after them already holds
                # the tool calls they belong to, so output stays in order.
                pending = await handle.query(PENDING_QUERY, rpc_timeout=QUERY_TIMEOUT)
                progress.transcript(await handle.query(TRANSCRIPT_QUERY, rpc_timeout=QUERY_TIMEOUT))
                for approval in progress.new_approvals(pending):
                    await on_approval(approval)
                if outage is not None:
                    outage.ok()
            except (RPCError, WorkflowQueryFailedError) as exc:
                log.debug("progress query failed: %s", exc)
                if outage is not None and transient(exc):
                    outage.failed(exc)  # type: ignore[arg-type]
            await asyncio.wait({result_task}, timeout=interval)
            if not result_task.done():
                continue
            failure = result_task.exception()
            if outage is None or failure is None or not transient(failure):
                break
            outage.failed(failure)  # type: ignore[arg-type]
            result_task = asyncio.create_task(handle.result())
        result = result_task.result()
    finally:
        result_task.cancel()
    progress.transcript(result.transcript)
    return result


def say(text: str = "") -> None:
    print(text, flush=True)


def approval_context(approval: Approval) -> str:
    """`` in DIR`` for execute (where the command would run), else ``""``."""
    cwd = approval.get("cwd")
    return f" in {cwd}" if cwd else ""


def counted(n: int, noun: str) -> str:
    """``1 tool call``, ``2 tool calls``: a count with its noun in the right number."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def rule_text(rule: dict[str, Any] | None) -> str:
    """The matched rule in one line (permission rule or interrupt_on entry)."""
    rule = rule or {}
    if rule.get("description"):
        return str(rule["description"])
    return f"{rule.get('mode', '?')} {', '.join(rule.get('paths', []))}"


ACTIVITY_LOGGER = "temporalio.activity"


class ActivityFailureLines(logging.Handler):
    """One progress line per failed activity attempt instead of the SDK's traceback.

    The SDK logs every failed attempt (a provider outage: each retry of the
    model call) at WARNING with the whole traceback; the cause's message is
    what a user needs.
    """

    def __init__(self, write: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self.write = write

    def emit(self, record: logging.LogRecord) -> None:
        try:
            info = getattr(record, "temporal_activity", None) or {}
            kind = str(info.get("activity_type") or "activity")
            what = "model call" if kind == "filegate.model" else kind
            attempt = f" (attempt {info['attempt']})" if info.get("attempt") else ""
            error = record.exc_info[1] if record.exc_info else None
            reason = error_text(error) if error is not None else record.getMessage()
            self.write(f"  !! {what} failed{attempt}: {one_line(reason, 160)}")
        except Exception:  # never let progress output break the run
            self.handleError(record)


def error_text(exc: BaseException) -> str:
    """The innermost cause's message (an ApplicationError's without its type)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return str(getattr(exc, "message", None) or exc)


@contextlib.contextmanager
def activity_failures_as_lines(write: Callable[[str], None]) -> Iterator[None]:
    """While it lasts, failed activity attempts print one line each (see above)."""
    logger = logging.getLogger(ACTIVITY_LOGGER)
    handler = ActivityFailureLines(write)
    saved = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = saved
