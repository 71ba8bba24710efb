"""What reviewers send and read: decisions, pending and decided approvals (contract §5).

Kept apart from the run inputs (:mod:`filegate.workflows.inputs`, which
re-exports them): these are the payloads of the approval queries, the
``decide`` signal and update, and the records a run carries across
continue-as-new.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints, model_validator

from filegate.kernel.previews import ChangePreview
from filegate.workflows.approvals.grant_models import REVIEWER_MAX as REVIEWER_MAX
from filegate.workflows.approvals.grant_models import (
    Grant,
    GrantRequest,
    Reviewer,
    check_text,
    check_visible,
)

DecisionKind = Literal["approve", "edit", "reject", "respond"]

Via = Literal["ui", "cli", "api", "proxy", "signal", "timeout", "mcp", "reviewer"]
"""How a decision arrived: the web UI (a session from the token URL), the
command line, an API client of the UI (bearer token) or of the workflow (the
update without a channel), a user named by an authenticating proxy, the bare
``decide`` signal, the workflow's own approval timeout, or an MCP client's
answer to ``filegate mcp``'s elicitation."""

APPROVAL_ID_MAX = 64
"""Longest approval id a decision may name (ids are 16 hex digits)."""
FINGERPRINT_MAX = 200
"""Longest preview fingerprint a decision may name (a hash, a few dozen characters)."""
REASON_MAX = 4_000
"""Longest rejection reason: a sentence or a paragraph for the model."""
MESSAGE_MAX = 100_000
"""Longest ``respond`` message: it becomes the tool result, as long as a command's output."""

# Each bound is checked before the characters, so an error names what is wrong first.
ApprovalId = Annotated[
    str, StringConstraints(min_length=1, max_length=APPROVAL_ID_MAX), AfterValidator(check_visible)
]
Fingerprint = Annotated[
    str, StringConstraints(max_length=FINGERPRINT_MAX), AfterValidator(check_visible)
]
Reason = Annotated[str, StringConstraints(max_length=REASON_MAX), AfterValidator(check_text)]
Message = Annotated[str, StringConstraints(max_length=MESSAGE_MAX), AfterValidator(check_text)]


class Decision(BaseModel):
    """A reviewer's answer to one pending approval (signal or update ``decide``).

    ``reviewer`` and ``via`` say who decided and through what. The UI sets them
    from its authenticated caller, the CLI from ``--reviewer`` (default: the OS
    user); the model never sends decisions. A decision without them is stamped
    by the workflow (``via="signal"`` or ``"api"``, reviewer ``unknown``).
    """

    model_config = ConfigDict(extra="forbid")

    id: ApprovalId
    decision: DecisionKind
    args: dict[str, Any] | None = None
    """``edit``: the replacement tool arguments (refused with any other decision)."""
    reason: Reason | None = None
    """``reject``: optional reason passed on to the model."""
    message: Message | None = None
    """``respond``: the text that becomes the tool result."""
    reviewer: Reviewer | None = None
    """Who decided (a UI user, an OS user, a proxy-authenticated name)."""
    via: Via | None = None
    """The channel the decision came through."""
    preview_fingerprint: Fingerprint | None = None
    """``approve``/``edit``: the fingerprint of the preview the reviewer decided on
    (``PendingApproval.preview.fingerprint``; ``""`` for a preview without one).
    A stale one is refused ("the preview changed"); the UI and the CLI send it."""
    remember: GrantRequest | None = None
    """``approve``: also approve later calls like this one (a grant, workflows.approvals.grants)."""

    @model_validator(mode="after")
    def _args_go_with_edit(self) -> Decision:
        """Arguments kept with a decision that does not run them would be carried
        (and shown) for nothing: refused in one line instead."""
        if self.args is not None and self.decision != "edit":
            raise ValueError(f"args go with an edit decision, not {self.decision}")
        return self

    def by(self) -> str:
        """``"ana via ui"``: the attribution the model and the logs see."""
        return f"{self.reviewer or 'unknown'} via {self.via or 'signal'}"


class PendingApproval(BaseModel):
    id: str
    """Random (16 hex digits, from ``workflow.uuid4()``): not guessable from others."""
    tool: str
    args: dict[str, Any]
    rule: dict[str, Any] | None
    requested_at: str
    tool_call_id: str
    turn: str | None = None
    """The model turn the call belongs to (its step); ``decide_turn`` decides a
    turn's approvals together (workflows/approvals/turn_decisions.py)."""
    escalated: bool = False
    cwd: str | None = None
    """``execute``: the directory the command runs in (the default backend's
    ``shell_path``, or ``/`` when the shell's location is not declared)."""
    description: str | None = None
    """Why the call needs approval, in words: the ``interrupt_on`` entry's
    ``description`` or the matched permission rule described."""
    task: str | None = None
    """The agent's task (the first user message, clipped) for the card."""
    assistant_text: str | None = None
    """What the model said in the turn that made the call (clipped)."""
    timeout_at: str | None = None
    """When the approval times out (ISO 8601, UTC), or None for never."""
    on_timeout: Literal["reject", "escalate"] | None = None
    """What happens then: the call is rejected, or the approval escalates."""
    preview: ChangePreview | None = None
    preview_pending: bool = False
    """The preview is still being computed: an approve or edit is refused until
    it is shown (``Decision.preview_fingerprint``)."""
    """What the call would change, computed on the route's tools worker."""
    changed_since_preview: bool = False
    """An approve/edit decision found the target changed since the preview it was
    made on: that decision was not applied, ``preview`` is the fresh one, and the
    reviewer must decide again (contract §5)."""


class DecidedApproval(BaseModel):
    """One decided approval as the ``status`` query reports it: what, who, through what."""

    id: str
    tool: str
    tool_call_id: str
    decision: DecisionKind
    reviewer: str
    via: Via
    decided_at: str
    reason: str | None = None
    path: str | None = None
    """The virtual path the call named (None for ``execute`` and path-less calls)."""
    summary: str | None = None
    """One line for a "recent decisions" list: tool, path or command, clipped."""
    changed_since_preview: bool = False
    """The file changed between the preview and the decision (contract §5)."""


class DecisionAck(BaseModel):
    """Returned by the ``decide`` update once the decision is recorded."""

    id: str
    decision: DecisionKind
    reviewer: str = "unknown"
    via: Via = "api"
    changed_since_preview: bool = False
    """The target changed since the preview the reviewer saw: the call was not
    run on that decision; the approval stays open with a fresh preview."""
    grant: Grant | None = None  # recorded by an approve with ``remember``
