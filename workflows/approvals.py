"""Pending human approvals as plain workflow state (contract §5).

Kept free of Temporal calls so the bookkeeping is unit-testable and the
workflow stays a thin driver: approvals live in the workflow's memory, which
Temporal rebuilds by replay, so they survive worker restarts for free.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from filegate.workflows.gate import ApprovalTrigger
from filegate.workflows.inputs import ApprovalConfig, Decision, PendingApproval


def call_signature(tool: str, args: dict[str, Any]) -> str:
    """Canonical identity of a tool call, to recognise identical re-requests."""
    return tool + ":" + json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)


def rejection_text(reason: str | None) -> str:
    text = "A human reviewer rejected this tool call"
    text += f": {reason}" if reason else "."
    return text + " Do not retry it unless the user asks you to."


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


EDITED_NOTE = "[A human reviewer changed this call before it ran; arguments used: {args}]"


class ApprovalBook:
    """Open approvals, recorded decisions and rejected call signatures."""

    def __init__(self, seq: int = 0, rejected: dict[str, str] | None = None) -> None:
        self.seq = seq
        self.pending: dict[str, PendingApproval] = {}
        self.decisions: dict[str, Decision] = {}
        self.rejected: dict[str, str] = dict(rejected or {})
        """signature -> reason ('' when none)."""
        self.total = 0

    def open(
        self,
        *,
        tool: str,
        args: dict[str, Any],
        rule: dict[str, Any] | None,
        tool_call_id: str,
        now: str,
        cwd: str | None = None,
    ) -> PendingApproval:
        self.seq += 1
        self.total += 1
        approval = PendingApproval(
            id=f"a{self.seq}",
            tool=tool,
            args=args,
            rule=rule,
            requested_at=now,
            tool_call_id=tool_call_id,
            cwd=cwd,
        )
        self.pending[approval.id] = approval
        return approval

    def check(
        self, decision: Decision, check_edit: Callable[[str, dict[str, Any]], str | None]
    ) -> None:
        """Raise ValueError when ``decision`` cannot be accepted (update validator).

        ``check_edit(tool, args)`` returns an error text for unacceptable edited args.
        """
        approval = self.pending.get(decision.id)
        if approval is None:
            raise ValueError(f"no pending approval with id {decision.id!r}")
        if decision.id in self.decisions:
            raise ValueError(f"approval {decision.id!r} was already decided")
        if decision.decision == "edit":
            if decision.args is None:
                raise ValueError("an edit decision needs args")
            error = check_edit(approval.tool, decision.args)
            if error:
                raise ValueError(f"edited args refused: {error}")
        if decision.decision == "respond" and decision.message is None:
            raise ValueError("a respond decision needs a message")

    def record(self, decision: Decision) -> None:
        self.decisions[decision.id] = decision

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
