"""Asking a human about one tool call: the card, the wait, the answer.

:class:`ReviewDesk` is a part the call path holds, built with what it uses
(issue 35: no mixins). A call that needs approval gets a pending approval whose
card says why (the trigger's description), for what task, what the model said,
when it times out and what the call would change (a :class:`ChangePreview`
computed on the call's own route). Then the call waits, durably, for a
decision; an approve or edit that finds the target changed since the preview
is bounced by :class:`~filegate.workflows.approvals.handlers.ApprovalHandlers`
and the call keeps waiting.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any, Protocol

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import FailureError

from filegate.kernel import wire
from filegate.kernel.dispatch import outcome
from filegate.kernel.formatting import Rendered
from filegate.kernel.messages import Message, ModelResponse, ToolCall, content_text
from filegate.kernel.previews import ChangePreview
from filegate.kernel.registry import TOOLS
from filegate.kernel.review_scope import (
    ReviewerConfig,
    Verdict,
    review,
    reviewer_approves,
    reviewer_request,
)
from filegate.kernel.textops import MISSING_FINGERPRINT
from filegate.kernel.tool_types import ToolOutcome
from filegate.workflows import telemetry
from filegate.workflows.approvals.grants import GrantBook, GrantUse
from filegate.workflows.approvals.handlers import ApprovalHandlers
from filegate.workflows.approvals.models import PendingApproval
from filegate.workflows.approvals.pending import (
    approval_deadline,
    call_signature,
    clip,
    rejection_text,
    repeated_rejection_text,
    response_text,
)
from filegate.workflows.approvals.turn_decisions import turn_of
from filegate.workflows.gate import ApprovalTrigger, CheckedCall
from filegate.workflows.inputs import Decision, FileToolsConfig

TASK_MAX = 500
ASSISTANT_TEXT_MAX = 2_000
"""Characters of the task and of the model's text kept on a card (history stays small)."""
PREVIEW_PATCH = "filegate-approval-preview"
"""``workflow.patched`` id, asked once as a run starts (``previews``): a run recorded
before previews existed replays without them, and its next run (continue-as-new)
has them. Asked there, not per call: the first workflow task is the one point
every replay reaches in the same order."""

CO_HOSTED_PATCH = "filegate-co-hosted-tools"
"""``workflow.patched`` id, asked once as a run starts, and only by a run started on
its remote default backend's task queue: the marker records that it was co-hosted
(a replay cannot tell by its own queue), and such a run recorded before co-hosting
replays with those calls as regular activities, as it ran."""


class CallChecks(Protocol):
    """What the desk uses of ``calls.Routes`` (typed here: ``calls`` imports this module)."""

    def check(self, tool: str, args: Any) -> CheckedCall | Rendered: ...
    def gate(self, call: CheckedCall) -> Rendered | None: ...
    def now(self) -> str: ...
    async def preview(self, checked: CheckedCall, call_id: str) -> ChangePreview: ...


async def first_pass(
    handlers: ApprovalHandlers, reviewer: ReviewerConfig | None, approval_id: str
) -> None:
    """Let the run's first-pass reviewer approve an open approval inside its scope
    (kernel.review_scope); outside it, or when someone decided first, the approval
    stays with the humans. Judged on the card as shown: its preview, its fingerprint."""
    approval = handlers.book.pending.get(approval_id)
    if reviewer is None or approval is None:
        return
    verdict = review(reviewer.scope, approval.tool, approval.args, approval.preview)
    if verdict.approve and reviewer.kind == "model":
        verdict = await _ask_model(handlers, reviewer, approval)
    if not verdict.approve:
        workflow.logger.info("approval %s left to a human: %s", approval_id, verdict.reason)
        return
    preview = approval.preview
    decision = Decision(
        id=approval_id,
        decision="approve",
        reviewer=reviewer.reviewer,
        via="reviewer",
        reason=verdict.reason,
        preview_fingerprint=None if preview is None else (preview.fingerprint or ""),
    )
    ack = await handlers.accept_own(decision)
    if ack is not None and ack.changed_since_preview:
        workflow.logger.info("approval %s: target changed, left to a human", approval_id)


async def _ask_model(
    handlers: ApprovalHandlers, reviewer: ReviewerConfig, approval: PendingApproval
) -> Verdict:
    """A model reviewer's answer about a call inside its envelope, racing the humans:
    whoever decides first wins, and a model that fails, times out or answers anything
    but APPROVE leaves the call to them. One attempt, within its own budget."""
    request = reviewer_request(
        reviewer, approval.tool, approval.args, approval.preview, approval.assistant_text
    )
    budget = timedelta(seconds=reviewer.timeout_seconds)
    asking = asyncio.ensure_future(
        workflow.execute_activity(
            wire.MODEL_ACTIVITY,
            request,
            result_type=ModelResponse,
            start_to_close_timeout=budget,
            schedule_to_close_timeout=budget,
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
    )
    decided = asyncio.ensure_future(
        workflow.wait_condition(lambda: handlers.book.is_decided(approval.id))
    )
    await workflow.wait([asking, decided], return_when=asyncio.FIRST_COMPLETED)
    if not asking.done():
        asking.cancel()
        return Verdict(False, "a person decided first")
    decided.cancel()
    try:
        answer = content_text(asking.result().message.content)
    except FailureError as failure:
        return Verdict(False, f"the model reviewer failed ({failure.message})")
    if not reviewer_approves(answer):
        return Verdict(False, f"the model reviewer did not approve: {clip(answer, 200)}")
    return Verdict(True, f"model reviewer: {clip(answer, 300)}")


def execute_cwd(config: FileToolsConfig) -> str:
    """Where ``execute`` runs, for reviewers: the default backend's shell location."""
    return config.backend.default.shell_path or "/"


class ReviewDesk:
    """The approval side of the call path: a grant's answer, else a human's decision.

    ``handlers`` serve the book to reviewers (and publish its counts);
    ``messages``, the host's conversation, is quoted on cards; ``previews``:
    whether the run shows change previews (:data:`PREVIEW_PATCH`).
    """

    def __init__(
        self,
        config: FileToolsConfig,
        checks: CallChecks,
        handlers: ApprovalHandlers,
        grants: GrantBook,
        messages: list[Message],
        previews: bool,
    ) -> None:
        self._input = config
        self._checks = checks
        self._approvals = handlers
        self._book = handlers.book
        self._grants = grants
        self._messages = messages
        self._previews = previews

    def granted(self, checked: CheckedCall, trigger: ApprovalTrigger | None) -> GrantUse | None:
        """The grant that answers this call's question (its use counted), or None: ask.

        Consulted only for a call that would wait for a human, so after the deny
        gate; a rejection of this very call still stands against any grant.
        """
        if trigger is None or not self._grants.live():
            return None
        if self._book.previous_rejection(call_signature(checked.tool, checked.args)) is not None:
            return None
        used = self._grants.use(checked.tool, checked.args, trigger.rule, workflow.now())
        if used is not None:
            telemetry.grant_used(checked.tool)
            workflow.logger.info("call %s allowed by grant %s", checked.tool, used.grant.id)
        return used

    async def ask_human(
        self, call: ToolCall, checked: CheckedCall, trigger: ApprovalTrigger, call_id: str
    ) -> tuple[CheckedCall | ToolOutcome, str, str | None]:
        """Wait for a decision; return the call to run or the final tool result,
        who decided (``"ana via ui"``), and the fingerprint of the file the reviewer
        was shown (None without one): an approved ``write_file`` is checked against
        what the reviewer saw, which may be newer than what the model read."""
        signature = call_signature(checked.tool, checked.args)
        earlier = self._book.previous_rejection(signature)
        if earlier is not None:
            repeated = repeated_rejection_text(earlier or None)
            refusal = ToolOutcome(content=repeated, status="error", code="rejected")
            return refusal, "an earlier rejection", None
        timeout, on_timeout = approval_deadline(self._input.approvals, trigger)
        requested_at = self._checks.now()
        approval = self._book.open(
            tool=checked.tool,
            args=checked.args,
            rule=trigger.rule,
            tool_call_id=call.id,
            turn=turn_of(call_id),
            now=requested_at,
            cwd=execute_cwd(self._input) if checked.tool in TOOLS.running else None,
            **self._card(call, trigger, requested_at, timeout, on_timeout),
        )
        opened = workflow.now()
        if checked.tool in TOOLS.previewed and self._previews:
            self._book.expect_preview(approval.id)
            self._approvals.publish()
            self._book.attach_preview(approval.id, await self._checks.preview(checked, call_id))
        else:
            self._approvals.publish()
        await first_pass(self._approvals, self._input.reviewer, approval.id)
        decided = lambda: self._book.is_decided(approval.id)  # noqa: E731
        try:
            remaining = (
                None if timeout is None else timeout - (workflow.now() - opened).total_seconds()
            )
            await workflow.wait_condition(
                decided,
                timeout=None if remaining is None else timedelta(seconds=max(remaining, 0.001)),
            )
        except TimeoutError:
            if on_timeout == "reject":
                self._approvals.reject_unanswered(
                    approval.id, reason="approval timed out", reviewer="nobody (timeout)"
                )
            else:
                self._book.escalate(approval.id)
                await workflow.wait_condition(decided)
        shown = self._book.pending.get(approval.id)
        seen = _shown_fingerprint(shown.preview if shown is not None else None)
        decision = self._approvals.close(
            approval.id, tool=checked.tool, call_id=call.id, opened=opened
        )
        by = decision.by()
        if decision.decision == "approve":
            return checked, by, seen
        if decision.decision == "respond":
            answer = response_text(decision.message or "", by)
            return ToolOutcome(content=answer, status="success"), by, None
        if decision.decision == "reject":
            self._book.remember_rejection(signature, decision.reason)
            named = by if decision.via != "timeout" else None  # no human decided
            rejected = rejection_text(decision.reason, named)
            return ToolOutcome(content=rejected, status="error", code="rejected"), by, None
        edited = self._checks.check(checked.tool, decision.args)
        if isinstance(edited, Rendered):
            return outcome(edited), by, None
        refused = self._checks.gate(edited)
        if refused is not None:
            telemetry.denied(edited.tool, call_id)
            return outcome(refused), by, None
        return edited, by, None  # edited: the preview showed another call

    def _card(
        self,
        call: ToolCall,
        trigger: ApprovalTrigger,
        requested_at: str,
        timeout: float | None,
        on_timeout: str,
    ) -> dict[str, Any]:
        """What the reviewer's card says besides the call: why, for what, until when."""
        task = next((m.text() for m in self._messages if m.role == "user"), None)
        said = next(
            (
                m.text()
                for m in reversed(self._messages)
                if m.role == "assistant" and any(c.id == call.id for c in m.tool_calls or [])
            ),
            None,
        )
        timeout_at = None
        if timeout is not None:
            deadline = datetime.fromisoformat(requested_at) + timedelta(seconds=timeout)
            timeout_at = deadline.isoformat()
        return {
            "description": trigger.rule.get("description"),
            "task": clip(task, TASK_MAX) if task else None,
            "assistant_text": clip(said, ASSISTANT_TEXT_MAX) if said else None,
            "timeout_at": timeout_at,
            "on_timeout": on_timeout if timeout is not None else None,
        }


def _shown_fingerprint(preview: ChangePreview | None) -> str | None:
    """The state of a ``write_file`` target the reviewer was shown: its fingerprint,
    ``missing`` for a new file, None when no preview showed the file."""
    if preview is None or preview.kind not in ("new_file", "overwrite"):
        return None
    return MISSING_FINGERPRINT if preview.kind == "new_file" else preview.fingerprint
