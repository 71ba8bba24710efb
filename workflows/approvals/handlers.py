"""The approval handlers, reusable by any workflow that asks humans (contract §5).

One object serves an :class:`~filegate.workflows.approvals.pending.ApprovalBook` to
reviewers under the names every Filegate client uses: the ``pending_approvals``
and ``decided_approvals`` queries, the ``decide`` signal, the ``decide``
update with its validator, and the ``decide_turn`` update (every pending call
of one model turn at once, :mod:`~filegate.workflows.approvals.turn_decisions`). A host
that declares nothing calls :meth:`ApprovalHandlers.register` in its
``@workflow.init`` and is found and
decided by the CLI and UI like an ``AgentWorkflow``; ``AgentWorkflow`` declares
the same names with decorators (typed references for Python clients, e.g.
``AgentWorkflow.decide_update``) and delegates to the same object.

Why a recheck: a reviewer approves what a preview showed. When an approve or
edit decision arrives the host's ``recheck`` computes the preview again; if the
target's fingerprint changed, the decision is not applied: the approval stays
open with the fresh preview, marked ``changed_since_preview``, and the update
answers ``DecisionAck(changed_since_preview=True)``.

Search attributes ``FilegatePendingApprovals`` / ``FilegateDecidedApprovals``
(Int) make waiting workflows listable by the server (``FilegatePendingApprovals
> 0``). An upsert of an attribute the server does not know fails every
workflow task, so they are kept only when enabled: explicitly, or because the
run was started with them set (:func:`initial_search_attributes`), which the
server accepts only when they are registered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ApplicationError

from filegate.kernel import wire
from filegate.kernel.previews import ChangePreview
from filegate.workflows import telemetry
from filegate.workflows.approvals.grant_models import Grant
from filegate.workflows.approvals.grants import GrantBook, check_remember
from filegate.workflows.approvals.pending import DECIDED_KEPT, ApprovalBook, InlineAnswer, stamped
from filegate.workflows.approvals.turn_decisions import (
    DECIDE_TURN,
    TurnDecision,
    TurnDecisionAck,
    check_turn,
    turn_pending,
)
from filegate.workflows.inputs import (
    DecidedApproval,
    Decision,
    DecisionAck,
    PendingApproval,
    Via,
)

PENDING_APPROVALS = SearchAttributeKey.for_int(wire.PENDING_ATTRIBUTE)
"""Approvals of the workflow waiting for a decision now (0 when none)."""
DECIDED_APPROVALS = SearchAttributeKey.for_int(wire.DECIDED_ATTRIBUTE)
"""Decisions the workflow accepted so far (across continue-as-new)."""

RECHECKED = frozenset({"new_file", "overwrite", "edit", "delete"})
"""Preview kinds whose fingerprint is compared again before a decision runs the call."""

ALREADY_DECIDED_ERROR = wire.APPROVAL_ALREADY_DECIDED_ERROR
"""The update's error when the approval was decided (or timed out) while its
preview was being checked again."""

Recheck = Callable[[PendingApproval], Awaitable[ChangePreview | None]]
"""The host's fresh preview of a pending approval's target (None: cannot tell)."""
CheckEdit = Callable[[str, dict[str, Any]], str | None]
"""The host's verdict on edited arguments: an error text, or None when acceptable."""


def initial_search_attributes() -> TypedSearchAttributes:
    """Search attributes to start a run with, on a server that has them registered:
    ``client.start_workflow(..., search_attributes=initial_search_attributes())``."""
    return TypedSearchAttributes(
        [SearchAttributePair(PENDING_APPROVALS, 0), SearchAttributePair(DECIDED_APPROVALS, 0)]
    )


class ApprovalHandlers:
    """Queries, signal and update over one :class:`ApprovalBook`.

    ``check_edit`` re-validates edited arguments (schema, path, deny gate);
    ``recheck`` (optional) gives the fresh preview for the fingerprint check;
    ``search_attributes``: see the module docstring (None = when started with them).
    Construct it in the workflow (``@workflow.init``): it reads the run's info.
    """

    def __init__(
        self,
        book: ApprovalBook,
        *,
        check_edit: CheckEdit,
        recheck: Recheck | None = None,
        search_attributes: bool | None = None,
        grants: GrantBook | None = None,
    ) -> None:
        self.book = book
        self.grants = grants
        """Where an approve with ``remember`` records its grant (None: refused)."""
        self._check_edit = check_edit
        self._recheck = recheck
        if search_attributes is None:
            started = workflow.info().typed_search_attributes
            search_attributes = started.get(PENDING_APPROVALS) is not None
        self._publishing = search_attributes
        self._published: tuple[int, int] | None = None
        self._checking: set[str] = set()
        """Approvals whose decision is being checked against a fresh preview."""

    def register(self) -> None:
        """Register the handlers on the current workflow under their public names."""
        workflow.set_query_handler(wire.PENDING_QUERY, self.pending)
        workflow.set_query_handler(wire.DECIDED_QUERY, self.decided)
        workflow.set_signal_handler(wire.DECIDE_UPDATE, self.signal)
        workflow.set_update_handler(wire.DECIDE_UPDATE, self.update, validator=self.validate)
        workflow.set_update_handler(DECIDE_TURN, self.update_turn, validator=self.validate_turn)

    # ------------------------------------------------------------------ queries

    def pending(self) -> list[PendingApproval]:
        """Approvals waiting for a decision (inline whatever their size: never hidden
        from a terminal without S3, never evicting the run while S3 is down)."""
        return InlineAnswer(self.book.waiting())

    def decided(self) -> list[DecidedApproval]:
        """Decided approvals, newest last, at most :data:`DECIDED_KEPT` (inline)."""
        return InlineAnswer(self.book.decided[-DECIDED_KEPT:])

    # ------------------------------------------------------------------ decisions

    def validate(self, decision: Decision) -> None:
        """Update validator: refuse what cannot be accepted, before it enters history."""
        self.book.check(decision, self._check_edit)
        check_remember(decision, self.book.pending[decision.id], self.grants)
        if decision.id in self._checking:
            raise ValueError(
                f"a decision on approval {decision.id!r} is being checked against the file"
            )

    async def signal(self, decision: Decision) -> None:
        """Fire-and-forget decision; invalid ones are logged and dropped."""
        try:
            self.validate(decision)
            ack = await self._accept(decision, "signal")
        except (ValueError, ApplicationError) as error:
            workflow.logger.warning("ignored decision %s: %s", decision.id, error)
            return
        if ack.changed_since_preview:
            workflow.logger.info("decision %s not applied: target changed", decision.id)

    def close(self, approval_id: str, *, tool: str, call_id: str, opened: datetime) -> Decision:
        """Take a decided approval off the book and record its wait (metric and span)."""
        decision = self.book.close(approval_id)
        telemetry.approval_decided(
            approval_id=approval_id,
            tool=tool,
            call_id=call_id,
            decision=decision.decision,
            reviewer=decision.reviewer,
            via=decision.via,
            opened=opened,
        )
        return decision

    def reject_unanswered(self, approval_id: str, *, reason: str, reviewer: str) -> None:
        """Record that nobody answered an approval in time (a timeout, a command that
        ended first) as a rejection, and publish the book's new counts."""
        unanswered = Decision(
            id=approval_id, decision="reject", reason=reason, reviewer=reviewer, via="timeout"
        )
        self.book.record(unanswered, workflow.now().isoformat())
        self.publish()

    async def accept_own(self, decision: Decision) -> DecisionAck | None:
        """A decision the workflow itself makes (its first-pass reviewer), taken like a
        person's (the fingerprint check included) unless someone decided first: then
        None, and the first decision stands."""
        if self.book.is_decided(decision.id) or decision.id not in self.book.pending:
            return None
        if decision.id in self._checking:
            return None
        return await self._accept(decision, decision.via or "reviewer")

    async def update(self, decision: Decision) -> DecisionAck:
        """The decision, recorded; ``changed_since_preview`` when it was not applied."""
        return await self._accept(decision, "api")

    async def _accept(self, decision: Decision, via: Via) -> DecisionAck:
        decision = stamped(decision, via)
        approval = self.book.pending[decision.id]
        preview = approval.preview
        if (
            self._recheck is not None
            and decision.decision in ("approve", "edit")
            and preview is not None
            and preview.kind in RECHECKED
        ):
            self._checking.add(decision.id)
            try:
                fresh = await self._recheck(approval)
            finally:
                self._checking.discard(decision.id)
            self._still_open(decision.id)
            if _changed(preview, fresh):
                assert fresh is not None
                self.book.bounce(decision, workflow.now().isoformat(), fresh)
                workflow.logger.info("decision %s: target changed since preview", decision.id)
                return _ack(decision, changed=True)
        self._still_open(decision.id)
        ack = self.apply(decision, workflow.now())
        if ack.grant is not None:
            workflow.logger.info("decision %s remembered as grant %s", decision.id, ack.grant.id)
        workflow.logger.info("decision %s %s by %s", decision.id, decision.decision, decision.by())
        return ack

    def apply(self, decision: Decision, now: datetime) -> DecisionAck:
        """Record a validated, stamped decision made at ``now``, and its grant.

        The handler's synchronous part, free of Temporal calls: an exception
        here fails the workflow task on every retry, so whatever :meth:`validate`
        lets through must pass it (tests/workflows/test_decision_payloads.py shows it).
        """
        self.book.record(decision, now.isoformat())
        grant = None
        if decision.remember is not None and self.grants is not None:
            grant = self.grants.remember(decision, self.book.pending[decision.id], now)
        self.publish()
        return _ack(decision, changed=False, grant=grant)

    # ------------------------------------------------------------------ turn decisions

    def validate_turn(self, decision: TurnDecision) -> None:
        """``decide_turn`` validator: all of the turn's approvals can take it, or none."""
        check_turn(self.book, decision, self._check_edit, self._checking)

    async def update_turn(self, decision: TurnDecision) -> TurnDecisionAck:
        """Decide every pending approval of a turn at once (workflows/approvals/turn_decisions.py).

        An approve re-checks every target first (side by side); when any changed,
        nothing is applied: those approvals get their fresh preview and the ack
        names them. Otherwise every decision is recorded in one synchronous step,
        so no call of the turn resumes before all of them are decided.
        """
        decision = decision.stamped("api")
        ids, singles = self._turn_singles(decision)
        changed: list[tuple[Decision, ChangePreview]] = []
        if decision.decision == "approve" and self._recheck is not None:
            changed = await self._changed_targets(singles, self._recheck)
        # Another decision validated in the same activation may have come first.
        for single in singles:
            self._still_open(single.id)
        if changed:
            now = workflow.now().isoformat()
            for single, fresh in changed:
                self.book.bounce(single, now, fresh)
        else:
            self.apply_turn(decision, workflow.now())
        workflow.logger.info(
            "turn %s: %d approvals %s by %s%s",
            decision.turn,
            len(singles),
            decision.decision,
            decision.reviewer,
            " not applied: targets changed since preview" if changed else "",
        )
        return TurnDecisionAck(
            turn=decision.turn,
            decision=decision.decision,
            ids=ids,
            reviewer=decision.reviewer or "unknown",
            via=decision.via or "api",
            changed_since_preview=[single.id for single, _ in changed],
        )

    def _turn_singles(self, decision: TurnDecision) -> tuple[list[str], list[Decision]]:
        """The turn's approvals the decision names (the validator checked that they are
        exactly its pending set), and one decision for each."""
        named = decision.fingerprints
        ids = [a.id for a in turn_pending(self.book, decision.turn) if a.id in named]
        return ids, decision.decisions(ids)

    def apply_turn(self, decision: TurnDecision, now: datetime) -> list[str]:
        """Record every decision of a validated, stamped turn decision at ``now``; the
        ids decided. Synchronous and free of Temporal calls, as :meth:`apply`: no
        call of the turn resumes before all of them are decided."""
        ids, singles = self._turn_singles(decision)
        for single in singles:
            self.book.record(single, now.isoformat())
        self.publish()
        return ids

    async def _changed_targets(
        self, singles: list[Decision], recheck: Recheck
    ) -> list[tuple[Decision, ChangePreview]]:
        """The approvals among ``singles`` whose target changed since the preview
        shown, with the fresh preview; all targets are read again side by side."""
        targets = [(d, self.book.pending[d.id]) for d in singles]
        targets = [(d, a) for d, a in targets if _rechecked(a.preview)]
        self._checking.update(d.id for d, _ in targets)
        try:
            fresh = await asyncio.gather(*(recheck(a) for _, a in targets))
        finally:
            self._checking.difference_update(d.id for d, _ in targets)
        changed = []
        for (single, approval), preview in zip(targets, fresh, strict=True):
            seen = approval.preview
            if seen is not None and preview is not None and _changed(seen, preview):
                changed.append((single, preview))
        return changed

    def _still_open(self, approval_id: str) -> None:
        """Fail the update when the approval was decided while its preview was checked."""
        if approval_id not in self.book.pending or self.book.is_decided(approval_id):
            raise ApplicationError(
                f"approval {approval_id!r} was decided meanwhile",
                type=ALREADY_DECIDED_ERROR,
                non_retryable=True,
            )

    # ------------------------------------------------------------------ search attributes

    def publish(self) -> None:
        """Upsert the approval counts when they changed (and publishing is on), and
        report the waiting ones to the ``filegate_approvals_pending`` gauge."""
        telemetry.approvals_waiting(self, len(self.book.waiting()))
        if not self._publishing:
            return
        counts = (len(self.book.waiting()), self.book.decided_total)
        if counts == self._published:
            return
        self._published = counts
        workflow.upsert_search_attributes(
            [PENDING_APPROVALS.value_set(counts[0]), DECIDED_APPROVALS.value_set(counts[1])]
        )


def _rechecked(preview: ChangePreview | None) -> bool:
    """Whether a decision on this preview compares the target's fingerprint again."""
    return preview is not None and preview.kind in RECHECKED


def _changed(seen: ChangePreview, fresh: ChangePreview | None) -> bool:
    """The target differs from what the reviewer saw; an unknown state is no evidence."""
    if fresh is None or fresh.kind == "unavailable":
        return False
    return fresh.fingerprint != seen.fingerprint


def _ack(decision: Decision, *, changed: bool, grant: Grant | None = None) -> DecisionAck:
    return DecisionAck(
        id=decision.id,
        decision=decision.decision,
        reviewer=decision.reviewer or "unknown",
        via=decision.via or "api",
        changed_since_preview=changed,
        grant=grant,
    )
