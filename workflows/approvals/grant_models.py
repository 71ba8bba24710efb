"""The payloads of grants (remembered approvals): what a reviewer asks for, what is kept.

Apart from :mod:`~filegate.workflows.approvals.grants` (the book and its handlers) because
:mod:`~filegate.workflows.inputs` carries these models (``Decision.remember``,
``DecisionAck.grant``, the continue-as-new state) and the book needs the
inputs' models in turn: pure pydantic here, nothing imported from the
workflow, so neither module imports the other's.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

GRANT_PATTERN_MAX = 4096
"""Longest pattern a reviewer may give (a path glob, or a command glob)."""
REVIEWER_MAX = 200
"""Longest reviewer name recorded (an identity, not a message)."""
GRANT_SECONDS_MAX = 10 * 366 * 86_400
"""Longest ``remember`` duration: ten years. Longer ones are refused by the validator,
so ``workflow.now() + duration`` always stays a date (year 9999 overflows)."""

_UNSEEN = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]"
)
"""Control and invisible formatting characters (newline, NUL, bidi, zero-width)."""
_UNSEEN_IN_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""In free text (a reason, a message): controls but tab, newline and carriage return."""


def check_visible(value: str) -> str:
    """An identifier, a name or a pattern as a reader sees it: one line, no hidden
    characters that would make the audit log or a grant's scope say something else."""
    found = _UNSEEN.search(value)
    if found:
        raise ValueError(f"holds the control or invisible character {found.group()!r}")
    return value


def check_text(value: str) -> str:
    """Free text may span lines, but holds no NUL or terminal control characters."""
    found = _UNSEEN_IN_TEXT.search(value)
    if found:
        raise ValueError(f"holds the control character {found.group()!r}")
    return value


# Length bounds come first in each alias, so an error names them before the characters.
Reviewer = Annotated[
    str, StringConstraints(min_length=1, max_length=REVIEWER_MAX), AfterValidator(check_visible)
]
"""Who decided or revoked, as the audit log and the model read it."""
GrantPattern = Annotated[
    str,
    StringConstraints(min_length=1, max_length=GRANT_PATTERN_MAX),
    AfterValidator(check_visible),
]

GrantKind = Literal["path", "command", "command_glob", "host"]
"""How a grant's ``pattern`` is matched: a permission-style glob over the call's
validated virtual path (a ``glob``'s roots, with ``Grant.search``); the exact
``execute`` command; a whole-text glob over one simple command (``*``
matches anything, ``/`` and spaces too, but no shell operator or expansion); or
``host:port`` of a command's connection (exactly)."""

GrantStatus = Literal["active", "expired", "revoked"]


class GrantRequest(BaseModel):
    """``Decision.remember``: approve this call and the later ones like it.

    ``pattern`` narrows the scope (None: the scope of the rule that asked,
    or, for ``execute``, the exact command); ``duration_seconds`` bounds it
    in time (None: for the rest of the thread, across continue-as-new).
    """

    model_config = ConfigDict(extra="forbid")

    pattern: GrantPattern | None = None
    duration_seconds: float | None = Field(
        default=None, gt=0, le=GRANT_SECONDS_MAX, allow_inf_nan=False
    )


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
    search: str | None = None
    """``glob``: the pattern searched. The grant covers that pattern only, at roots
    within ``pattern`` (None, from before it was kept: globs that do not re-root)."""
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
        return scope_text(self.tool, self.kind, self.pattern, self.search)

    def lasting(self) -> str:
        return f"until {self.expires_at}" if self.expires_at else "for the rest of the run"

    def summary(self) -> str:
        """One line: ``write_file /docs/** by ana via cli, for the rest of the run``."""
        return f"{self.scope()} by {self.created_by}, {self.lasting()}"


SCOPE_SHOWN = 80
"""Characters of a command shown in a grant's one-line scope."""


def scope_text(tool: str, kind: GrantKind, pattern: str, search: str | None = None) -> str:
    """``write_file /docs/**``, ``execute 'make test'``, ``execute matching 'pytest *'``,
    ``glob '*.md' in /docs/**``."""
    if kind == "command":
        return f"execute {_quoted(pattern)}"
    if kind == "command_glob":
        return f"execute matching {_quoted(pattern)}"
    if search is not None:
        return f"{tool} {_quoted(search)} in {pattern}"
    return f"{tool} {pattern}"


def _quoted(text: str) -> str:
    shown = text if len(text) <= SCOPE_SHOWN else text[: SCOPE_SHOWN - 3] + "..."
    return repr(shown)
