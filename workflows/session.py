"""A tool session for a caller outside any workflow: :class:`SessionWorkflow`.

Its workflow type is ``filegate.Session``. Why a workflow and not single
operations: a standalone activity is its own run, so it has nowhere to keep
what makes a session safe. Read-before-edit needs the paths read earlier; a
grant needs the approvals given earlier; an ``interrupt`` rule needs a history
that holds the human's decision while the call waits (a standalone call
refuses it as a deny, :mod:`filegate.operations`). One long-lived workflow
hosting :class:`~filegate.workflows.file_tools.FileTools` has all three, and
its approvals are those of any FileTools host: ``filegate approvals``,
``approve``, the UI and grants see and decide them.

The caller (``filegate mcp``) sends each call as the ``call`` update whose
update id is its own call id, so a retried request attaches to the call
already running instead of running it twice. Calls run side by side, each a
turn of its own. The session continues as new when the server suggests it
(history size), between calls, carrying the tools' state; ``close`` ends it
once the running calls finish, and ``reopen`` takes a ``close`` back while
they run (a caller that exited with a call still waiting for a human, served
again: the call goes on in the same session).

A caller can die without sending ``close`` (SIGKILL, a client that kills its
server): with ``lease_seconds`` the session closes itself once that long has
passed with nothing running and no word from its caller (a call, or the
``renew`` signal ``filegate mcp`` sends while it serves), so no session stays
Running after its process is gone where workers serve it (issue 54). A call
still running or waiting for a human keeps it open, as ``close`` does.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.exceptions import ApplicationError

from filegate.kernel import wire
from filegate.kernel.messages import ToolCall, ToolSpec
from filegate.kernel.tool_types import ToolOutcome
from filegate.workflows.file_tools import FileTools, ToolResult
from filegate.workflows.inputs import FileToolsConfig, FileToolsState


class NotedRead(BaseModel):
    """A read its caller answered itself (``filegate mcp --root``'s fast path): the
    call, and what the session books of its outcome. No content: history stays small."""

    call: ToolCall
    status: Literal["success", "error"] = "success"
    fingerprint: str | None = None


class SessionInput(BaseModel):
    """What a session runs with: the tools' configuration and, continued, their state."""

    config: FileToolsConfig
    state: FileToolsState | None = None
    continue_after_calls: int = Field(default=1000, ge=1)
    """Calls in one run before it continues as new (between calls), besides the
    server's own suggestion: keeps each run's history small."""
    lease_seconds: float | None = Field(default=None, gt=0)
    """Close once this long passes idle with no call or ``renew`` (module docstring);
    None: only ``close`` ends the session."""


@workflow.defn(name=wire.SESSION_WORKFLOW_TYPE)
class SessionWorkflow:
    """One caller's tool session: every call through the gate, one history for its decisions."""

    @workflow.init
    def __init__(self, input: SessionInput) -> None:
        self._tools = FileTools(input.config, state=input.state)
        self._closing = False
        self._handing_over = False
        self._calls = 0
        self._renewals = 0
        self._heard = workflow.now()
        self._running: dict[str, asyncio.Task[ToolResult]] = {}

    @workflow.run
    async def run(self, input: SessionInput) -> FileToolsState:
        self._tools.check_config()
        await self._until_closed_or_due(input)
        # No new call is accepted from here on; the running ones finish first.
        self._handing_over = True
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self._closing:
            return self._tools.state()
        # Continued, or reopened while the running calls finished: a fresh run.
        next_input = input.model_copy(update={"state": self._tools.state()})
        workflow.continue_as_new(next_input)

    async def _until_closed_or_due(self, input: SessionInput) -> None:
        """Wait for ``close`` or a continue-as-new; with a lease, also for its caller's
        silence (one timer per lease period, not one per renewal)."""
        if input.lease_seconds is None:
            await workflow.wait_condition(lambda: self._closing or self._due(input))
            return
        lease = timedelta(seconds=input.lease_seconds)
        while True:
            left = self._heard + lease - workflow.now()
            if left <= timedelta(0):
                if workflow.all_handlers_finished():
                    workflow.logger.info("session lease ran out: its caller is gone")
                    self._closing = True
                    return
                left = lease  # a call is running or waiting: its caller may come back
                self._heard = workflow.now()
            try:
                await workflow.wait_condition(
                    lambda: self._closing or self._due(input), timeout=left
                )
                return
            except TimeoutError:
                continue

    def _due(self, input: SessionInput) -> bool:
        """Time to continue as new: enough calls, or the server asks (history size)."""
        return self._calls >= input.continue_after_calls or (
            self._calls + self._renewals > 0 and workflow.info().is_continue_as_new_suggested()
        )

    @workflow.update(name=wire.SESSION_CALL_UPDATE)
    async def call(self, call: ToolCall) -> ToolResult:
        """One tool call, a turn of its own; a model mistake is an error result, never a failure."""
        self._calls += 1
        self._heard = workflow.now()
        running = asyncio.ensure_future(self._tools.run(call))
        self._running[call.id] = running
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            if not running.cancelled():
                raise  # the handler itself was cancelled, not the call
            outcome = ToolOutcome(
                content=wire.SESSION_CALL_CANCELLED, status="error", code="cancelled"
            )
            return ToolResult(tool_call_id=call.id, name=call.name, outcome=outcome)
        finally:
            self._running.pop(call.id, None)
            self._heard = workflow.now()

    @call.validator
    def _accepting(self, call: ToolCall) -> None:
        """Refuse before history records it: the caller retries on the next run, or stops."""
        if self._closing:
            raise ApplicationError("the session is closed", type=wire.SESSION_CLOSED_ERROR)
        if self._handing_over:
            raise ApplicationError(
                "the session is continuing as new: send the call again",
                type=wire.SESSION_HANDOVER_ERROR,
            )

    @workflow.query(name=wire.SESSION_SPECS_QUERY)
    def tool_specs(self) -> list[ToolSpec]:
        """The visible tools and their descriptions, rewritten for the visible set."""
        return self._tools.specs()

    @workflow.signal(name=wire.SESSION_CLOSE_SIGNAL)
    def close(self) -> None:
        self._closing = True

    @workflow.signal(name=wire.SESSION_REOPEN_SIGNAL)
    def reopen(self) -> None:
        self._closing = False
        self._heard = workflow.now()

    @workflow.signal(name=wire.SESSION_CANCEL_CALL_SIGNAL)
    def cancel_call(self, call_id: str) -> None:
        running = self._running.get(call_id)
        waiting = any(a.tool_call_id == call_id for a in self._tools.pending_approvals())
        if running is not None and not waiting:
            running.cancel()

    @workflow.signal(name=wire.SESSION_NOTED_SIGNAL)
    def noted(self, read: NotedRead) -> None:
        """Book a read its caller answered itself, as if it had run here
        (:meth:`FileTools.noted` checks it first): read-before-edit and stale-write
        checks see it, and the history keeps the call."""
        self._heard = workflow.now()
        outcome = ToolOutcome(content="", status=read.status, fingerprint=read.fingerprint)
        if self._tools.noted(read.call, outcome):
            self._calls += 1

    @workflow.signal(name=wire.SESSION_RENEW_SIGNAL)
    def renew(self) -> None:
        self._renewals += 1
        self._heard = workflow.now()


__all__ = ["SessionInput", "SessionWorkflow"]
