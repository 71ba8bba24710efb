"""Pending human approvals as plain workflow state (contract §5).

Kept free of Temporal calls so the bookkeeping is unit-testable and the
workflow stays a thin driver: approvals live in the workflow's memory, which
Temporal rebuilds by replay, so they survive worker restarts for free.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from filegate.kernel import wire
from filegate.kernel.previews import ChangePreview
from filegate.kernel.registry import TOOLS
from filegate.kernel.transcripts import InlineOnly
from filegate.workflows.gate import ApprovalTrigger
from filegate.workflows.inputs import (
    AgentStatus,
    ApprovalConfig,
    DecidedApproval,
    Decision,
    PendingApproval,
    Via,
)

APPROVAL_ID_HEX = 16
"""Hex digits of an approval id: 64 random bits, short enough to type in the CLI."""

DECIDED_KEPT = 100
"""Decided approvals the ``status`` query keeps (the newest; history holds them all)."""

T = TypeVar("T")


class InlineAnswer(list[T], InlineOnly):
    """A query's answer that never leaves for S3: the payload codec keeps it inline.

    A query answer never enters history, so storing a large one by reference
    (as the codec does with every payload over 8 KiB) buys nothing and costs
    two things: a terminal without the run's S3 settings cannot read it (a
    pending card over 8 KiB vanished from ``filegate approvals``), and while
    S3 is down it cannot be encoded at all, which fails the whole activation
    and evicts the run. The approvals, status and transcript queries answer
    with this (or :class:`~filegate.workflows.inputs.AgentStatus`'s inline
    twin), so they need no store, whatever their size.
    """


class InlinePage(dict[str, Any], InlineOnly):
    """:class:`InlineAnswer`'s twin for a query whose answer is an object (a transcript page)."""


class InlineStatus(AgentStatus, InlineOnly):
    """The ``status`` query's answer, kept inline like :class:`InlineAnswer` (it
    carries the pending cards and up to :data:`DECIDED_KEPT` decided ones)."""


def call_signature(tool: str, args: dict[str, Any]) -> str:
    """Canonical identity of a tool call, to recognise identical re-requests."""
    return tool + ":" + json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)


SUMMARY_MAX = 120
"""Characters of a decided approval's one-line summary."""


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marked when cut (cards stay small)."""
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


def _call_path(tool: str, args: dict[str, Any]) -> str | None:
    """The virtual path a call names (None for ``execute`` and a path-less bulk call)."""
    value = args.get(TOOLS.path_fields.get(tool, ""))
    return value if isinstance(value, str) else None


def _call_summary(tool: str, args: dict[str, Any]) -> str:
    """One line for a "recent decisions" list: ``write_file /docs/a.txt``, ``execute: ls``."""
    if tool in TOOLS.running:
        return clip(f"execute: {' '.join(str(args.get('command', '')).split())}", SUMMARY_MAX)
    if tool == wire.CONNECT_TOOL:
        return clip(f"connect {args.get('host')}:{args.get('port')}", SUMMARY_MAX)
    path = _call_path(tool, args)
    return clip(f"{tool} {path}" if path is not None else tool, SUMMARY_MAX)


def _new_approval_id(random_hex: str) -> str:
    """An approval id from random hex digits (the workflow passes ``workflow.uuid4().hex``).

    Random, not sequential: knowing one approval's id tells nothing about the
    next, so a decision must come from someone who was shown the approval.
    """
    return random_hex[:APPROVAL_ID_HEX]


def _sentence(text: str) -> str:
    """``text`` ending like a sentence, so the next one does not run into it."""
    text = text.strip()
    return text if text.endswith((".", "!", "?", "…")) else text + "."


def rejection_text(reason: str | None, by: str | None = None) -> str:
    text = "A human reviewer" + (f" ({by})" if by else "") + " rejected this tool call"
    text += f": {_sentence(reason)}" if reason and reason.strip() else "."
    return text + " Do not retry it unless the user asks you to."


def response_text(message: str, by: str | None = None) -> str:
    """What the model reads after ``respond``: the reviewer's answer, and that the
    call itself did not run (the model would otherwise take it as the tool's output)."""
    who = f" ({by})" if by else ""
    return f"[This call was not run: a human reviewer{who} answered it instead]\n{message}"


def edited_note(by: str, args: dict[str, Any]) -> str:
    """The note before an edited call's result: the arguments it ran with, as JSON."""
    return EDITED_NOTE.format(by=by, args=json.dumps(args, ensure_ascii=False))


def repeated_rejection_text(reason: str | None) -> str:
    return (
        "This exact call was already rejected by a human reviewer"
        + (f" ({reason})" if reason else "")
        + "; it was not run. Do not retry it unless the user asks you to."
    )


def approval_deadline(config: ApprovalConfig, trigger: ApprovalTrigger) -> tuple[float | None, str]:
    """``(timeout_seconds, on_timeout)`` for one approval.

    Defaults and ``per_rule`` come from ``AgentInput.approvals``; an
    interrupt_on entry's explicit settings win over them.
    """
    timeout, on_timeout = config.policy_for(trigger.rule_index)
    overrides = dict(trigger.overrides)
    timeout = overrides.get("timeout_seconds", timeout)
    return timeout, overrides.get("on_timeout") or on_timeout


EDITED_NOTE = (
    "[A human reviewer changed this call before it ran (edited by {by}); arguments used: {args}]"
)
APPROVED_NOTE = "[This call was approved by {by} before it ran]"


def stamped(decision: Decision, via: Via) -> Decision:
    """``decision`` with its channel and reviewer filled in where the sender left them out."""
    return decision.model_copy(
        update={"via": decision.via or via, "reviewer": decision.reviewer or "unknown"}
    )


class ApprovalBook:
    """Open approvals, recorded decisions and rejected call signatures."""

    def __init__(
        self,
        seq: int = 0,
        rejected: dict[str, str] | None = None,
        *,
        random_hex: Callable[[], str] = lambda: uuid.uuid4().hex,
        decided: Iterable[DecidedApproval] = (),
    ) -> None:
        """``random_hex`` supplies the randomness of approval ids: in a workflow it
        must be ``lambda: workflow.uuid4().hex`` (deterministic on replay)."""
        self.seq = seq
        self.pending: dict[str, PendingApproval] = {}
        self.decisions: dict[str, Decision] = {}
        self.rejected: dict[str, str] = dict(rejected or {})
        """signature -> reason ('' when none)."""
        self.total = 0
        self.decided_total = 0
        """Decisions accepted over the thread (``FilegateDecidedApprovals``)."""
        self.decided: list[DecidedApproval] = list(decided)[-DECIDED_KEPT:]
        """Who decided what, newest last (the ``status`` query)."""
        self._random_hex = random_hex
        self.previewing: set[str] = set()
        """Approvals whose preview is still being computed (never across
        continue-as-new: a thread continues only with no approval open)."""

    def open(
        self,
        *,
        tool: str,
        args: dict[str, Any],
        rule: dict[str, Any] | None,
        tool_call_id: str,
        now: str,
        cwd: str | None = None,
        **context: Any,
    ) -> PendingApproval:
        """Record a new pending approval; ``context`` fills the reviewer's card
        (``description``, ``task``, ``assistant_text``, ``timeout_at``, ``on_timeout``,
        ``preview``: the :class:`PendingApproval` fields of the same names)."""
        self.seq += 1
        self.total += 1
        approval_id = _new_approval_id(self._random_hex())
        while approval_id in self.pending:  # 64 random bits: never in practice
            approval_id = _new_approval_id(self._random_hex())
        approval = PendingApproval(
            id=approval_id,
            tool=tool,
            args=args,
            rule=rule,
            requested_at=now,
            tool_call_id=tool_call_id,
            cwd=cwd,
            **context,
        )
        self.pending[approval.id] = approval
        return approval

    def waiting(self) -> list[PendingApproval]:
        """The approvals still waiting for a decision (the ``pending_approvals`` query)."""
        return [a for a in self.pending.values() if a.id not in self.decisions]

    def expect_preview(self, approval_id: str) -> None:
        """A preview of ``approval_id`` is being computed: approvals wait for it."""
        self.previewing.add(approval_id)
        if approval_id in self.pending:
            self.pending[approval_id].preview_pending = True

    def attach_preview(self, approval_id: str, preview: ChangePreview) -> None:
        """Show ``preview`` on the card of a still-open approval."""
        self.previewing.discard(approval_id)
        if approval_id in self.pending:
            self.pending[approval_id].preview = preview
            self.pending[approval_id].preview_pending = False

    def check(
        self, decision: Decision, check_edit: Callable[[str, dict[str, Any]], str | None]
    ) -> None:
        """Raise ValueError when ``decision`` cannot be accepted (update validator).

        ``check_edit(tool, args)`` returns an error text for unacceptable edited args.
        """
        approval = self.pending.get(decision.id)
        if approval is None:
            raise ValueError(self._not_pending(decision.id))
        if decision.id in self.decisions:
            earlier = self.decisions[decision.id]
            raise ValueError(f"approval {decision.id!r} was already decided by {earlier.by()}")
        if decision.via == "timeout":
            raise ValueError("via 'timeout' is reserved for the workflow's own approval timeout")
        if decision.via == "reviewer" or (decision.reviewer or "").startswith("auto:"):
            raise ValueError(
                "via 'reviewer' and reviewers named auto:... are the workflow's own "
                "first-pass reviewer; a person decides under their own name"
            )
        if decision.decision == "edit":
            if decision.args is None:
                raise ValueError("an edit decision needs args")
            error = check_edit(approval.tool, decision.args)
            if error:
                raise ValueError(f"edited args refused: {error}")
        if decision.decision == "respond" and decision.message is None:
            raise ValueError("a respond decision needs a message")
        if decision.decision in ("approve", "edit"):
            _check_seen(decision, approval, decision.id in self.previewing)

    def _not_pending(self, approval_id: str) -> str:
        """Why ``approval_id`` cannot be decided: decided already (by whom), or unknown."""
        earlier = next(
            (
                d
                for d in reversed(self.decided)
                if d.id == approval_id and not d.changed_since_preview
            ),
            None,
        )
        if earlier is None:
            return f"no pending approval with id {approval_id!r}"
        done = wire.DECIDED[earlier.decision]
        return (
            f"approval {approval_id!r} was already {done} by {earlier.reviewer} via {earlier.via}"
        )

    def record(self, decision: Decision, now: str) -> None:
        """Accept a checked decision (already :func:`stamped`) made at ``now``."""
        self.decisions[decision.id] = decision
        approval = self.pending.get(decision.id)
        if approval is None:
            return
        self.decided_total += 1
        self._note(decision, approval, now, changed=False)

    def bounce(self, decision: Decision, now: str, fresh: ChangePreview) -> None:
        """Refuse to apply ``decision``: the target changed since the reviewer's preview.

        The approval stays open with ``fresh`` on its card and is marked, so the
        reviewer is told; the refused decision is kept in the decided list
        (``changed_since_preview``) as a record of what was attempted.
        """
        approval = self.pending[decision.id]
        approval.preview = fresh
        approval.changed_since_preview = True
        self._note(decision, approval, now, changed=True)

    def _note(
        self, decision: Decision, approval: PendingApproval, now: str, *, changed: bool
    ) -> None:
        self.decided.append(
            DecidedApproval(
                id=decision.id,
                tool=approval.tool,
                tool_call_id=approval.tool_call_id,
                decision=decision.decision,
                reviewer=decision.reviewer or "unknown",
                via=decision.via or "signal",
                decided_at=now,
                reason=decision.reason,
                path=_call_path(approval.tool, approval.args),
                summary=_call_summary(approval.tool, approval.args),
                changed_since_preview=changed,
            )
        )
        del self.decided[:-DECIDED_KEPT]

    def is_decided(self, approval_id: str) -> bool:
        return approval_id in self.decisions

    def close(self, approval_id: str) -> Decision:
        """Remove a decided approval from the pending set and return its decision."""
        self.pending.pop(approval_id, None)
        return self.decisions.pop(approval_id)

    def escalate(self, approval_id: str) -> None:
        if approval_id in self.pending:
            self.pending[approval_id].escalated = True

    def remember_rejection(self, signature: str, reason: str | None) -> None:
        self.rejected[signature] = reason or ""

    def previous_rejection(self, signature: str) -> str | None:
        """The reason of an earlier rejection of this exact call ('' = none), or None."""
        return self.rejected.get(signature)


PREVIEW_NOT_READY = "the preview is not ready: look at it once it is shown, then decide"
PREVIEW_CHANGED = "the preview changed since it was shown: look at it again, then decide"


def _check_seen(decision: Decision, approval: PendingApproval, previewing: bool) -> None:
    """An approve or edit must be about the preview the reviewer saw (contract §5).

    Refused while the preview is still being computed (nobody can have seen
    it), and when the decision names the fingerprint of another preview. A
    decision that names none (an API caller that shows no preview) is taken
    once the preview is there; the target is still checked against it.
    """
    if previewing:
        raise ValueError(PREVIEW_NOT_READY)
    seen = decision.preview_fingerprint
    if seen is None:
        return
    if approval.preview is None:
        raise ValueError(PREVIEW_NOT_READY)
    if seen != (approval.preview.fingerprint or ""):
        raise ValueError(PREVIEW_CHANGED)
