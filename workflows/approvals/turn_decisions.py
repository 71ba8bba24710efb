"""Deciding every pending call of one model turn at once (contract §5).

A *turn* is the tool calls of one assistant message: ``FileTools.run_turn``
numbers it (``step``, the model step in ``AgentWorkflow``) and every approval
opened for one of its calls carries that number as ``PendingApproval.turn``,
derived from the call's activity id, so it is the same on every replay.

The ``decide_turn`` update takes a :class:`TurnDecision`: approve or reject
all of a turn's pending approvals, with the fingerprint of every preview the
reviewer was shown. Why one update and not N ``decide`` calls: the calls of
a turn wait side by side and the model is asked again only once all of them
have a result, so N separate decisions leave the turn half decided between
them (and a client that stops midway leaves it so). The validator
(:func:`check_turn`) takes all or nothing: it refuses the whole decision when
any approval is no longer pending, a preview is not shown yet or has changed,
or the approvals named are not exactly the turn's pending ones (someone
decided one meanwhile). The handler
(:meth:`~filegate.workflows.approvals.handlers.ApprovalHandlers.update_turn`)
re-checks every target first and then records every decision in one
synchronous step, so no waiting call (and no model call) ever observes part of
it; if any target changed, nothing is applied.

Pure bookkeeping over an :class:`ApprovalBook` (no Temporal calls), so the
rules are unit-testable; the models live here rather than in
:mod:`~filegate.workflows.inputs`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from filegate.kernel.wire import DECIDE_TURN_UPDATE
from filegate.workflows.approvals.grant_models import Reviewer, check_visible
from filegate.workflows.approvals.models import ApprovalId, Fingerprint, Reason
from filegate.workflows.approvals.pending import ApprovalBook
from filegate.workflows.inputs import Decision, PendingApproval, Via

DECIDE_TURN = DECIDE_TURN_UPDATE
"""The update's name (``filegate approve --all``, the UI's "Approve all N")."""

TurnDecisionKind = Literal["approve", "reject"]
TURN_MAX = 64
"""Longest turn name a decision may give (turns are step numbers)."""
TURN_CALLS_MAX = 1_000
"""Most approvals one turn decision may name (a turn holds at most a few dozen calls)."""
Turn = Annotated[
    str, StringConstraints(min_length=1, max_length=TURN_MAX), AfterValidator(check_visible)
]


def turn_of(call_id: str) -> str:
    """The turn of a call from its activity id (``step:index:model id``,
    :func:`filegate.kernel.tool_types.activity_call_id`): the step."""
    return call_id.split(":", 1)[0]


class TurnDecision(BaseModel):
    """A reviewer's answer to every pending approval of one turn (update ``decide_turn``).

    ``fingerprints`` names the approvals decided, each with the fingerprint of
    the preview the reviewer was shown (as ``Decision.preview_fingerprint``:
    ``""`` for a preview without one, None when no computed preview was
    shown). It must name exactly the turn's pending approvals.
    """

    model_config = ConfigDict(extra="forbid")

    turn: Turn
    decision: TurnDecisionKind
    fingerprints: dict[ApprovalId, Fingerprint | None] = Field(max_length=TURN_CALLS_MAX)
    """Approval id -> fingerprint of the preview shown (None: none shown)."""
    reason: Reason | None = None
    """``reject``: passed on to the model with every call of the turn."""
    reviewer: Reviewer | None = None
    via: Via | None = None

    def stamped(self, via: Via) -> TurnDecision:
        """This decision with its channel and reviewer filled in where left out."""
        return self.model_copy(
            update={"via": self.via or via, "reviewer": self.reviewer or "unknown"}
        )

    def decisions(self, ids: list[str]) -> list[Decision]:
        """One :class:`Decision` per approval in ``ids`` (what each call is told)."""
        return [
            Decision(
                id=approval_id,
                decision=self.decision,
                reason=self.reason if self.decision == "reject" else None,
                reviewer=self.reviewer,
                via=self.via,
                preview_fingerprint=(
                    self.fingerprints.get(approval_id) if self.decision == "approve" else None
                ),
            )
            for approval_id in ids
        ]


class TurnDecisionAck(BaseModel):
    """Returned by ``decide_turn``: the approvals decided, or why none was."""

    turn: str
    decision: TurnDecisionKind
    ids: list[str]
    """The turn's approvals the decision covered, in the order they were opened."""
    reviewer: str = "unknown"
    via: Via = "api"
    changed_since_preview: list[str] = Field(default_factory=list)
    """Approvals whose target changed since the preview the reviewer saw. When
    any did, *no* decision of the turn was applied: every approval stays open
    (these with a fresh preview) and the reviewer must decide again."""

    @property
    def applied(self) -> bool:
        return not self.changed_since_preview


def turn_pending(book: ApprovalBook, turn: str) -> list[PendingApproval]:
    """The approvals of ``turn`` waiting for a decision, in the order they were opened."""
    return [a for a in book.waiting() if a.turn == turn]


def check_turn(
    book: ApprovalBook,
    decision: TurnDecision,
    check_edit: Callable[[str, dict[str, Any]], str | None],
    checking: set[str],
) -> list[str]:
    """Raise ValueError unless every approval of the turn can take ``decision``
    (the update validator); return the turn's pending approval ids.

    ``checking`` holds the approvals whose decision is being re-checked against
    a fresh preview right now (another decision is under way).
    """
    ids = [a.id for a in turn_pending(book, decision.turn)]
    if not ids:
        raise ValueError(f"no pending approvals in turn {decision.turn!r}")
    named = set(decision.fingerprints)
    if named != set(ids):
        missing, extra = sorted(set(ids) - named), sorted(named - set(ids))
        parts = [f"not named: {', '.join(missing)}"] if missing else []
        parts += [f"not pending in it: {', '.join(extra)}"] if extra else []
        raise ValueError(
            f"turn {decision.turn!r} has other pending approvals than the decision names "
            f"({'; '.join(parts)}): list them again, then decide"
        )
    for single in decision.decisions(ids):
        try:
            book.check(single, check_edit)
        except ValueError as error:
            raise ValueError(f"approval {single.id!r}: {error}") from None
        if single.id in checking:
            raise ValueError(
                f"a decision on approval {single.id!r} is being checked against the file"
            )
    return ids
