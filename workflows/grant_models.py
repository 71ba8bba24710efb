"""The payloads of grants (remembered approvals): what a reviewer asks for, what is kept.

Apart from :mod:`~filegate.workflows.grants` (the book and its handlers) because
:mod:`~filegate.workflows.inputs` carries these models (``Decision.remember``,
``DecisionAck.grant``, the continue-as-new state) and the book needs the
inputs' models in turn: pure pydantic here, nothing imported from the
workflow, so neither module imports the other's.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

GRANT_PATTERN_MAX = 4096
"""Longest pattern a reviewer may give (a path glob, or a command glob)."""

GrantKind = Literal["path", "command", "command_glob"]
"""How a grant's ``pattern`` is matched: a permission-style glob over the call's
validated virtual path; the exact ``execute`` command; or a whole-text glob
over the command (``*`` matches anything, ``/`` and spaces too)."""

GrantStatus = Literal["active", "expired", "revoked"]


class GrantRequest(BaseModel):
    """``Decision.remember``: approve this call and the later ones like it.

    ``pattern`` narrows the scope (None: the scope of the rule that asked,
    or, for ``execute``, the exact command); ``duration_seconds`` bounds it
    in time (None: for the rest of the thread, across continue-as-new).
    """

    model_config = ConfigDict(extra="forbid")

    pattern: str | None = Field(default=None, min_length=1, max_length=GRANT_PATTERN_MAX)
    duration_seconds: float | None = Field(default=None, gt=0)


class Grant(BaseModel):
    """A remembered approval: calls of ``tool`` within ``pattern`` that the same
    rule would ask about run without asking, until ``expires_at`` or revocation.

    ``rule`` names the question it answers (``permissions:2``: the permission
    rule at index 2; ``interrupt_on:execute``), so a grant never answers
    another rule's question.
    """

    id: str
    """``g-`` and 8 random hex digits (``workflow.uuid4()``)."""
    tool: str
    kind: GrantKind
    pattern: str
    rule: str
    rule_description: str | None = None
    approval_id: str
    """The approval the reviewer remembered."""
    created_by: str
    """``"ana via cli"``: who approved with remember, through what."""
    created_at: str
    expires_at: str | None = None
    """ISO 8601 (UTC, workflow time); None: for the rest of the thread."""
    uses: int = 0
    """Calls this grant let run without asking."""
    last_used_at: str | None = None
    revoked_by: str | None = None
    revoked_at: str | None = None
    status: GrantStatus = "active"
    """As of the listing (the ``grants`` query computes ``expired`` at workflow time)."""

    def scope(self) -> str:
        return scope_text(self.tool, self.kind, self.pattern)

    def lasting(self) -> str:
        return f"until {self.expires_at}" if self.expires_at else "for the rest of the run"

    def summary(self) -> str:
        """One line: ``write_file /docs/** by ana via cli, for the rest of the run``."""
        return f"{self.scope()} by {self.created_by}, {self.lasting()}"


SCOPE_SHOWN = 80
"""Characters of a command shown in a grant's one-line scope."""


def scope_text(tool: str, kind: GrantKind, pattern: str) -> str:
    """``write_file /docs/**``, ``execute 'make test'``, ``execute matching 'pytest *'``."""
    if kind == "command":
        return f"execute {_quoted(pattern)}"
    if kind == "command_glob":
        return f"execute matching {_quoted(pattern)}"
    return f"{tool} {pattern}"


def _quoted(text: str) -> str:
    shown = text if len(text) <= SCOPE_SHOWN else text[: SCOPE_SHOWN - 3] + "..."
    return repr(shown)
