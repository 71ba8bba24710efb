"""Printing a run as it happens: tool calls, their results, approvals, the answer."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from temporalio.client import WorkflowHandle, WorkflowQueryFailedError
from temporalio.service import RPCError

from filegate.activities.telemetry import process_span
from filegate.cli.contract import QUERY_TIMEOUT
from filegate.cli.errors import unknown_query
from filegate.cli.outage import UNANSWERED, Outage, transient
from filegate.kernel.wire import PENDING_QUERY, TRANSCRIPT_PAGE_QUERY, TRANSCRIPT_QUERY

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

    Fed from the ``transcript_page`` and ``pending_approvals`` queries, so it shows the
    same thing for in-process and remote workers.
    """

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write
        self.seen = 0
        self.tool_names: dict[str, deque[str]] = {}
        """Per call id, the names of the calls still waiting for their result, in
        order: a model may reuse an id, even within one message."""
        self.approvals_seen: set[str] = set()

    def page(self, page: dict[str, Any]) -> bool:
        """Show a ``transcript_page`` answer; True while more pages follow it."""
        total, start = int(page["total"]), int(page["start"])
        if total < self.seen:  # history was compacted: start over quietly
            self.seen = total
            return False
        for message in page["messages"]:
            self._message(message)
        self.seen = start + len(page["messages"])
        return self.seen < total

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
    attempts: FailedAttempts | None = None,
) -> AgentResult:
    """Wait for the run's result while printing progress and reporting new approvals.

    With ``outage``, an unreachable Temporal is waited out (one line, then the
    result asked for again) within its budget instead of ending the command,
    and a run's worker that does not answer while Temporal does is one line of
    its own, not an outage of Temporal (:func:`_temporal_failure`).
    With ``attempts``, failed activity attempts of workers elsewhere are lines too.
    """
    with process_span(FOLLOW_SPAN, {"filegate.workflow_id": handle.id}):
        return await _follow(handle, progress, on_approval, interval, outage, attempts)


FOLLOW_SPAN = "filegate follow"
"""The span a command's wait for a run is: its polling queries are its children."""


async def _follow(
    handle: WorkflowHandle[Any, AgentResult],
    progress: Progress,
    on_approval: Callable[[Approval], Awaitable[None]],
    interval: float,
    outage: Outage | None,
    attempts: FailedAttempts | None,
) -> AgentResult:
    result_task: asyncio.Task[AgentResult] = asyncio.create_task(handle.result())
    rounds = 0
    try:
        while True:
            rounds += 1
            try:
                if attempts is not None and rounds % ATTEMPTS_EVERY == 0:
                    await attempts.report(handle)
                # Approvals first: the transcript read after them already holds
                # the tool calls they belong to, so output stays in order.
                pending = await handle.query(PENDING_QUERY, rpc_timeout=QUERY_TIMEOUT)
                await _show_transcript(handle, progress)
                for approval in progress.new_approvals(pending):
                    await on_approval(approval)
                if outage is not None:
                    outage.ok()
            except (RPCError, WorkflowQueryFailedError) as exc:
                log.debug("progress query failed: %s", exc)
                if outage is not None and isinstance(exc, RPCError) and transient(exc):
                    unreachable = await _temporal_failure(handle, exc)
                    if unreachable is None:
                        outage.unanswered()
                    else:
                        outage.failed(unreachable)
            await asyncio.wait({result_task}, timeout=interval)
            if not result_task.done():
                continue
            failure = result_task.exception()
            if outage is None or failure is None or not transient(failure):
                break
            # The result's long poll gave up on its own retries, maybe just after
            # Temporal came back: ask again; the queries above tell the outage.
            log.debug("waiting for the result failed: %s", failure)
            result_task = asyncio.create_task(handle.result())
        result = result_task.result()
    finally:
        result_task.cancel()
    progress.transcript(result.transcript)
    return result


async def _show_transcript(handle: WorkflowHandle[Any, Any], progress: Progress) -> None:
    """The messages ``progress`` has not shown yet, page by page (``transcript_page``);
    from the whole ``transcript`` on a worker older than that query."""
    try:
        while progress.page(await handle.query(
            TRANSCRIPT_PAGE_QUERY, args=[progress.seen, PROGRESS_CLIP], rpc_timeout=QUERY_TIMEOUT,
        )):  # fmt: skip
            pass
    except WorkflowQueryFailedError as exc:
        if not unknown_query(exc):
            raise
        progress.transcript(await handle.query(TRANSCRIPT_QUERY, rpc_timeout=QUERY_TIMEOUT))


async def _temporal_failure(handle: WorkflowHandle[Any, Any], exc: RPCError) -> RPCError | None:
    """Why Temporal is unreachable, given a query that failed with ``exc``; None when
    Temporal answers and only the run's worker did not.

    A query is answered by the run's worker, so one that runs out of time says
    nothing about Temporal itself: a worker busy in a workflow task (one that
    waits for S3 to fetch or store a payload) holds its queries just as long.
    The run's description comes from the frontend alone, so asking for it
    tells the two apart; a status that is not a timeout is the frontend's (or
    the transport's) own answer that it is down.
    """
    if exc.status not in UNANSWERED:
        return exc
    try:
        await handle.describe(rpc_timeout=QUERY_TIMEOUT)
    except RPCError as probe:
        return probe if transient(probe) else None
    return None


PROGRESS_CLIP = 100_000
"""Characters of each string a progress page carries: over the 80 000 at which a tool
result is offloaded, so what ``run`` prints of a result (its first lines and how many
more) is what the whole result would give; a page as a whole stays bounded."""


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


ATTEMPTS_EVERY = 1
"""``follow`` reads the run's failed attempts every this many rounds (a describe):
every round, since a failed attempt shows only until the next one (a second)."""


class FailedAttempts:
    """One ``!!`` line per failed activity attempt, read from the run's description.

    ``submit`` hosts no worker, so the SDK's log of a failed attempt is in the
    deployment's worker; the server knows each pending activity's attempt and
    last failure, which is the same line ``run`` prints (:class:`ActivityFailureLines`).
    """

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write
        self.seen: set[tuple[str, int]] = set()

    async def report(self, handle: WorkflowHandle[Any, Any]) -> None:
        described = await handle.describe(rpc_timeout=QUERY_TIMEOUT)
        for pending in described.raw_description.pending_activities:
            failed = pending.attempt - 1  # the attempt now pending follows a failed one
            key = (pending.activity_id, failed)
            if failed < 1 or not pending.HasField("last_failure") or key in self.seen:
                continue
            self.seen.add(key)
            kind = pending.activity_type.name or "activity"
            what = "model call" if kind == "filegate.model" else kind
            reason = innermost(pending.last_failure)
            self.write(f"  !! {what} failed (attempt {failed}): {one_line(reason, 160)}")


def innermost(failure: Any) -> str:
    """A Failure proto's innermost cause's message."""
    while failure.HasField("cause"):
        failure = failure.cause
    return str(failure.message)


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


WORKER_LOGGER = "temporalio.worker"
REPEAT_AFTER = 30.0
"""Seconds before the same worker failure line is printed again."""


class WorkerFailureLines(logging.Handler):
    """The SDK worker's own failures (a workflow task that fails and is retried, a
    poll that fails while Temporal is down) as one ``!!`` line, not a traceback;
    the same line at most once per :data:`REPEAT_AFTER` seconds, since a failing
    workflow task is retried many times a second."""

    def __init__(self, write: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self.write = write
        self.said: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            error = record.exc_info[1] if record.exc_info else None
            reason = error_text(error) if error is not None else record.getMessage()
            line = f"  !! worker: {one_line(record.getMessage(), 80)}: {one_line(reason, 160)}"
            if error is None:
                line = f"  !! worker: {one_line(reason, 200)}"
            now = time.monotonic()
            if now - self.said.get(line, -REPEAT_AFTER) >= REPEAT_AFTER:
                self.said[line] = now
                self.write(line)
        except Exception:  # never let progress output break the run
            self.handleError(record)


@contextlib.contextmanager
def activity_failures_as_lines(write: Callable[[str], None]) -> Iterator[None]:
    """While it lasts, failed activity attempts print one line each, and the worker's
    own failures one line per distinct failure (see above): tracebacks need ``-v``."""
    handlers = [
        (logging.getLogger(ACTIVITY_LOGGER), ActivityFailureLines(write)),
        (logging.getLogger(WORKER_LOGGER), WorkerFailureLines(write)),
    ]
    saved = [logger.propagate for logger, _ in handlers]
    for logger, handler in handlers:
        logger.addHandler(handler)
        logger.propagate = False
    try:
        yield
    finally:
        for (logger, handler), propagate in zip(handlers, saved, strict=True):
            logger.removeHandler(handler)
            logger.propagate = propagate
