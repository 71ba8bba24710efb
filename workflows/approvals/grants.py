"""Grants: approvals a reviewer asked to remember (docs/approvals.md, "Grants").

A reviewer approves a call with ``remember`` (``Decision.remember``); the
workflow records a :class:`~filegate.workflows.approvals.grant_models.Grant` scoped to
the call's tool, the rule that asked and a pattern, and later calls that the
same rule would ask about, within that pattern, run without asking. Each such
call's result starts with a note naming the grant, and the tools worker's
audit log names it as the approver (``"ana via cli (grant g-1a2b3c4d)"``).

What a grant can never do, by construction:

- answer another rule's question (it is keyed by the rule that asked);
- override a ``deny`` rule or the deny gate: both run before any approval is
  asked, so a denied call never reaches the grant (``calls.ToolCalls._one_call``);
- override a rejection of the very same call (that rejection still stands);
- reach beyond its rule: a reviewer's pattern must lie under the rule's own
  pattern, judged by literal prefixes (an approximation: ``/docs/*.md``
  under ``/docs/**`` passes, ``/**`` does not).

For ``execute`` the default scope is the exact command. A reviewer may give a
whole-text glob (``pytest *``) instead, which covers only one simple command
(:func:`filegate.kernel.command_rules.simple_argv`, the ``allow_prefixes``
parse): ``echo *`` never covers ``echo a; rm x``, ``echo $(id)`` or
``echo a > f``. No ``execute`` grant is "this very command approved by a
human" for the tools worker's execute gate (kernel.execute_gate): the same
text can run different code once the model rewrote a script it calls, so a
host shell with protecting rules refuses it and a sandbox compiles every rule
strictly. A grant answers the question, never the rule.

A ``glob`` grant is scoped by what was searched: the roots it reached (a
pattern with a leading ``/`` re-roots the search at its anchor, whatever the
``path`` argument says) and the glob pattern itself (``Grant.search``). A glob
whose reach cannot be told that way (``..``, a brace alternative that leaves
its path) is not remembered.

Plain workflow state, rebuilt by replay like the approvals: grants survive
worker restarts, and :meth:`GrantBook.carried` crosses continue-as-new.
Expiry is judged at ``workflow.now()``, so replays agree.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints
from temporalio import workflow
from wcmatch import glob as wc_glob

from filegate.kernel import wire
from filegate.kernel.command_rules import simple_argv
from filegate.kernel.globbing import resolve_glob
from filegate.kernel.network_rules import host_port
from filegate.kernel.paths import is_within
from filegate.kernel.registry import TOOLS
from filegate.kernel.rule_patterns import (
    expand_braces,
    normalise_rule_path,
    pattern_alternatives,
    pattern_matches,
)
from filegate.workflows.approvals.grant_models import (
    Grant,
    GrantKind,
    GrantRequest,
    GrantStatus,
    Reviewer,
    check_visible,
)
from filegate.workflows.approvals.pending import InlineAnswer
from filegate.workflows.gate import ArgPredicate
from filegate.workflows.inputs import Via

if TYPE_CHECKING:
    from filegate.workflows.inputs import Decision, PendingApproval

__all__ = ["Grant", "GrantBook", "GrantHandlers", "GrantRequest", "GrantRevocation", "GrantUse"]

GRANT_ID_HEX = 8
"""Hex digits of a grant id after ``g-``: short enough to type in ``filegate revoke``."""
GRANT_ID_PREFIX = "g-"
GRANT_ID_MAX = 64
"""Longest id a ``revoke`` may name (ids are 10 characters; the rest is refused unread)."""
INACTIVE_KEPT = 20
"""Expired and revoked grants carried across continue-as-new (the newest; live ones all)."""

GRANTS_QUERY = wire.GRANTS_QUERY
REVOKE_UPDATE = wire.REVOKE_UPDATE

EVERY_PATH = "/**"
"""The scope of an ``interrupt_on`` entry that always asks."""
_TEXT_WILDCARDS = frozenset("*?[{\\")
"""Characters that end a command glob's literal prefix."""


class GrantRevocation(BaseModel):
    """The ``revoke`` update's payload: which grant, who revokes, through what."""

    model_config = ConfigDict(extra="forbid")

    id: Annotated[
        str, StringConstraints(min_length=1, max_length=GRANT_ID_MAX), AfterValidator(check_visible)
    ]
    reviewer: Reviewer | None = None
    via: Via | None = None

    def by(self) -> str:
        return f"{self.reviewer or 'unknown'} via {self.via or 'api'}"


@dataclass(frozen=True)
class GrantUse:
    """A grant answering one call's question: what the model and the audit log read."""

    grant: Grant

    @property
    def note(self) -> str:
        """Before the call's result: ``[allowed by grant g-1a2b3c4d (write_file /docs/**
        by ana via cli, for the rest of the run)]``."""
        return f"[allowed by grant {self.grant.id} ({self.grant.summary()})]"

    @property
    def approved_by(self) -> str:
        """``ToolRequest.approved_by``: the reviewer and the grant (never a command's text,
        which the audit log must not hold)."""
        return f"{self.grant.created_by} (grant {self.grant.id})"

    @property
    def approves(self) -> bool:
        """Whether the call counts as approved by a human at the tools worker: for a
        path, whose rules the worker judges again on the path itself. Never for
        ``execute``: the same text can run a script the model rewrote since, so
        the execute gate and the sandbox's strict view still apply."""
        return self.grant.tool not in TOOLS.running


# --------------------------------------------------------------------------- scope


def _rule_key(tool: str, rule: Mapping[str, Any] | None) -> str:
    """Which question an approval asked: ``permissions:<index>`` or ``interrupt_on:<tool>``."""
    if (
        rule
        and rule.get("source") in ("permissions", "network")
        and isinstance(rule.get("index"), int)
    ):
        return f"{rule['source']}:{rule['index']}"
    return f"interrupt_on:{tool}"


def _exact(path: str) -> str:
    """A rule pattern matching ``path`` alone (its wildcard characters escaped)."""
    try:
        return normalise_rule_path(wc_glob.escape(path, unix=True))
    except ValueError as error:
        raise ValueError(f"{path} cannot be remembered as a pattern ({error})") from None


def _rule_patterns(tool: str, path: str, rule: Mapping[str, Any] | None) -> list[str]:
    """The patterns of the rule that asked: the outer bound of a grant's pattern."""
    rule = rule or {}
    if rule.get("source") == "permissions":
        return [str(p) for p in rule.get("paths") or []] or [_exact(path)]
    if rule.get("always") is True:
        return [EVERY_PATH]
    field = TOOLS.path_fields.get(tool)
    for predicate in rule.get("when") or []:
        if predicate.get("arg") == field and isinstance(predicate.get("glob"), str):
            try:
                return [normalise_rule_path(predicate["glob"])]
            except ValueError:
                break  # a glob that can match no virtual path: the call's own path
    return [_exact(path)]


def _anchors(pattern: str) -> list[str]:
    return [alt.anchor for alt in pattern_alternatives(pattern)]


def _within(pattern: str, outer: list[str]) -> bool:
    """Every alternative of ``pattern`` is anchored under an anchor of ``outer``."""
    bounds = [anchor for p in outer for anchor in _anchors(p)]
    return all(any(is_within(a, b) for b in bounds) for a in _anchors(pattern))


def _literal_prefix(text_glob: str) -> str:
    for index, char in enumerate(text_glob):
        if char in _TEXT_WILDCARDS:
            return text_glob[:index]
    return text_glob


@lru_cache(maxsize=256)
def _command_glob(pattern: str) -> ArgPredicate:
    return ArgPredicate(arg="command", glob=pattern)


def _check_command_glob(pattern: str, rule: Mapping[str, Any] | None) -> None:
    try:
        _command_glob(pattern).matches("execute", {"command": ""})
    except Exception as error:  # pydantic or the glob translation
        raise ValueError(f"remember pattern {pattern!r} is not a valid glob ({error})") from None
    for predicate in (rule or {}).get("when") or []:
        if predicate.get("arg") == "command" and isinstance(predicate.get("glob"), str):
            bound = _literal_prefix(predicate["glob"])
            if not _literal_prefix(pattern).startswith(bound):
                raise ValueError(
                    f"remember pattern {pattern!r} is broader than the rule's "
                    f"{predicate['glob']!r}: it must start with {bound!r}"
                )


def _glob_roots(args: Mapping[str, Any]) -> list[str] | None:
    """The directories (or files) a ``glob`` call searches below, as the tool resolves it.

    A pattern with a leading ``/`` re-roots the search at each brace
    alternative's anchor and the tool ignores ``path`` (``/secrets/*.txt`` at
    ``/pub`` searches ``/secrets``); any other pattern searches ``path``. None
    when that cannot be told: the tool refuses the call (``..``), or a brace
    alternative starts with ``/`` inside a pattern that does not.
    """
    pattern, path = args.get("pattern"), args.get("path")
    if not isinstance(pattern, str) or not (path is None or isinstance(path, str)):
        return None
    try:
        root, _relative = resolve_glob(pattern, path)
        alternatives = expand_braces(pattern)
        if any(".." in alternative.split("/") for alternative in alternatives):
            return None
        if not pattern.startswith("/"):
            return None if any(a.startswith("/") for a in alternatives) else [root]
        return list(dict.fromkeys(alt.anchor for alt in pattern_alternatives(pattern)))
    except ValueError:
        return None


def _glob_scope(
    args: Mapping[str, Any], rule: Mapping[str, Any] | None, given: str | None
) -> tuple[GrantKind, str]:
    """The root pattern of a ``glob`` grant: it must hold every root the call searched."""
    roots = _glob_roots(args)
    if roots is None:
        raise ValueError(
            f"glob pattern {args.get('pattern')!r} cannot be remembered: where it searches "
            "cannot be told from it (approve without remember)"
        )
    outer = _rule_patterns("glob", roots[0], rule)
    if given is None:
        holding = next((p for p in outer if all(pattern_matches(p, r) for r in roots)), None)
        if holding is not None:
            return "path", holding
        if len(roots) > 1:
            raise ValueError(
                f"glob pattern {args.get('pattern')!r} searches {', '.join(roots)}, which no "
                "one pattern of the rule holds: it cannot be remembered"
            )
        return "path", _exact(roots[0])
    kind, pattern = _path_scope(given, outer)
    if not all(pattern_matches(pattern, r) for r in roots):
        raise ValueError(
            f"remember pattern {given!r} does not hold what this glob searched "
            f"({', '.join(roots)}): give one that does"
        )
    return kind, pattern


def _path_scope(given: str, outer: list[str]) -> tuple[GrantKind, str]:
    try:
        pattern = normalise_rule_path(given)
    except ValueError as error:
        raise ValueError(f"remember pattern: {error}") from None
    if not _within(pattern, outer):
        raise ValueError(
            f"remember pattern {given!r} is broader than the rule's scope "
            f"({', '.join(outer)}): give one under it"
        )
    return "path", pattern


def grant_scope(
    tool: str, args: Mapping[str, Any], rule: Mapping[str, Any] | None, given: str | None
) -> tuple[GrantKind, str]:
    """``(kind, pattern)`` of a grant for this call; ValueError (one line) when refused.

    ``given`` None: the rule's own pattern that matches the call's path (the
    call's exact path when none does: a search root below a rule's anchor),
    the exact command for ``execute``. Otherwise ``given`` must be a valid
    pattern under the rule's (module docstring). A ``glob`` is judged by the
    roots it searched, not its ``path`` argument (:func:`_glob_roots`); its
    pattern is kept too (:func:`grant_search`).
    """
    if tool == wire.CONNECT_TOOL:
        asked = _connect_scope(args)
        if given is not None and given != asked:
            raise ValueError(f"a connection is remembered for its host and port ({asked}) only")
        return "host", asked
    if tool in TOOLS.running:
        if given is None:
            return "command", str(args.get("command", ""))
        _check_command_glob(given, rule)
        return "command_glob", given
    if tool in TOOLS.pattern_reaching:
        return _glob_scope(args, rule, given)
    path = args.get(TOOLS.path_fields.get(tool, ""))
    if not isinstance(path, str):
        raise ValueError(f"a {tool} call without a path cannot be remembered")
    outer = _rule_patterns(tool, path, rule)
    if given is None:
        return "path", next((p for p in outer if pattern_matches(p, path)), None) or _exact(path)
    return _path_scope(given, outer)


def _connect_scope(args: Mapping[str, Any]) -> str:
    """``host:port`` of a connection's question (``[v6]:port`` for an IPv6 address)."""
    return host_port(str(args.get("host", "")), args.get("port"))


def grant_search(tool: str, args: Mapping[str, Any]) -> str | None:
    """What a grant keeps of the search besides its roots: a glob's pattern."""
    if tool not in TOOLS.pattern_reaching:
        return None
    pattern = args.get(TOOLS.narrowing[tool])
    return pattern if isinstance(pattern, str) else None


def covers(grant: Grant, tool: str, args: Mapping[str, Any]) -> bool:
    """Whether ``grant``'s scope holds this (checked) call."""
    if grant.tool != tool:
        return False
    if grant.kind == "host":
        return _connect_scope(args) == grant.pattern
    if grant.kind == "command":
        return args.get("command") == grant.pattern
    if grant.kind == "command_glob":
        # One simple command only, parsed as allow_prefixes parses it: the glob's
        # ``*`` must not stretch over ``;``, ``$(...)``, a redirection or a newline.
        command = args.get("command")
        return simple_argv(command) is not None and _command_glob(grant.pattern).matches(
            "execute", {"command": command}
        )
    if tool in TOOLS.pattern_reaching:
        return _covers_glob(grant, args)
    path = args.get(TOOLS.path_fields.get(tool, ""))
    return isinstance(path, str) and pattern_matches(grant.pattern, path)


def _covers_glob(grant: Grant, args: Mapping[str, Any]) -> bool:
    """The same pattern, searched at roots within the grant's (a grant kept without
    its pattern covers only globs that search their ``path``)."""
    pattern = args.get("pattern")
    if grant.search is not None and pattern != grant.search:
        return False
    if grant.search is None and isinstance(pattern, str) and pattern.startswith("/"):
        return False
    roots = _glob_roots(args)
    return roots is not None and all(pattern_matches(grant.pattern, r) for r in roots)


def check_remember(decision: Decision, approval: PendingApproval, book: GrantBook | None) -> None:
    """Refuse a ``remember`` that cannot be kept (the ``decide`` validator's part)."""
    if decision.remember is None:
        return
    if book is None:
        raise ValueError("this workflow keeps no grants: approve without remember")
    if decision.decision != "approve":
        raise ValueError(f"remember goes with approve, not {decision.decision}")
    grant_scope(approval.tool, approval.args, approval.rule, decision.remember.pattern)


# --------------------------------------------------------------------------- the book


def _expired(grant: Grant, now: datetime) -> bool:
    return grant.expires_at is not None and datetime.fromisoformat(grant.expires_at) <= now


class GrantBook:
    """The thread's grants, oldest first (plain state: unit-testable, replayed)."""

    def __init__(
        self,
        grants: Iterable[Grant] = (),
        *,
        random_hex: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        """``random_hex``: in a workflow ``lambda: workflow.uuid4().hex`` (replays agree)."""
        self.grants: list[Grant] = [g.model_copy() for g in grants]
        self._random_hex = random_hex

    def remember(self, decision: Decision, approval: PendingApproval, now: datetime) -> Grant:
        """Record the grant a checked approve-with-remember asks for."""
        request = decision.remember or GrantRequest()
        kind, pattern = grant_scope(approval.tool, approval.args, approval.rule, request.pattern)
        taken = {g.id for g in self.grants}
        grant_id = GRANT_ID_PREFIX + self._random_hex()[:GRANT_ID_HEX]
        while grant_id in taken:  # 32 random bits: rare
            grant_id = GRANT_ID_PREFIX + self._random_hex()[:GRANT_ID_HEX]
        duration = request.duration_seconds
        expires = None if duration is None else now + timedelta(seconds=duration)
        grant = Grant(
            id=grant_id,
            tool=approval.tool,
            kind=kind,
            pattern=pattern,
            search=grant_search(approval.tool, approval.args),
            rule=_rule_key(approval.tool, approval.rule),
            rule_description=(approval.rule or {}).get("description"),
            approval_id=approval.id,
            created_by=decision.by(),
            created_at=now.isoformat(timespec="seconds"),
            expires_at=None if expires is None else expires.isoformat(timespec="seconds"),
        )
        self.grants.append(grant)
        return grant

    def live(self) -> bool:
        """Any grant not revoked (expiry is judged per call)."""
        return any(g.revoked_at is None for g in self.grants)

    def use(
        self, tool: str, args: Mapping[str, Any], rule: Mapping[str, Any] | None, now: datetime
    ) -> GrantUse | None:
        """The first live grant that answers this call's question, its use counted."""
        key = _rule_key(tool, rule)
        for grant in self.grants:
            if grant.revoked_at is not None or grant.rule != key or _expired(grant, now):
                continue
            if covers(grant, tool, args):
                grant.uses += 1
                grant.last_used_at = now.isoformat(timespec="seconds")
                return GrantUse(grant.model_copy())
        return None

    def find(self, grant_id: str) -> Grant | None:
        return next((g for g in self.grants if g.id == grant_id), None)

    def check_revoke(self, revocation: GrantRevocation) -> None:
        """The ``revoke`` validator: an unknown or already revoked id is one line."""
        grant = self.find(revocation.id)
        if grant is None:
            raise ValueError(f"no grant with id {revocation.id!r}")
        if grant.revoked_at is not None:
            raise ValueError(f"grant {grant.id} was already revoked by {grant.revoked_by}")

    def revoke(self, revocation: GrantRevocation, now: datetime) -> Grant:
        self.check_revoke(revocation)
        grant = self.find(revocation.id)
        assert grant is not None
        grant.revoked_by = revocation.by()
        grant.revoked_at = now.isoformat(timespec="seconds")
        grant.status = "revoked"
        return grant.model_copy()

    def listing(self, now: datetime) -> list[Grant]:
        """Every grant with its status at ``now`` (the ``grants`` query), oldest first."""
        return [g.model_copy(update={"status": self._status(g, now)}) for g in self.grants]

    @staticmethod
    def _status(grant: Grant, now: datetime) -> GrantStatus:
        if grant.revoked_at is not None:
            return "revoked"
        return "expired" if _expired(grant, now) else "active"

    def carried(self, now: datetime | None) -> list[Grant]:
        """What continue-as-new hands on: every live grant, the newest inactive ones."""
        if now is None:
            return [g.model_copy() for g in self.grants]
        inactive = [g for g in self.grants if self._status(g, now) != "active"]
        dropped = {id(g) for g in inactive[:-INACTIVE_KEPT]} if inactive else set()
        return [g.model_copy() for g in self.grants if id(g) not in dropped]


class GrantHandlers:
    """The ``grants`` query and the ``revoke`` update (with its validator) over a book.

    ``FileTools`` registers them on its host; ``AgentWorkflow`` declares the same
    names with decorators and delegates here.
    """

    def __init__(self, book: GrantBook) -> None:
        self.book = book

    def register(self) -> None:
        workflow.set_query_handler(GRANTS_QUERY, self.listing)
        workflow.set_update_handler(REVOKE_UPDATE, self.revoke, validator=self.validate_revoke)

    def listing(self) -> list[Grant]:
        """The ``grants`` query: inline whatever its size (see InlineAnswer)."""
        return InlineAnswer(self.book.listing(workflow.now()))

    def validate_revoke(self, revocation: GrantRevocation) -> None:
        self.book.check_revoke(revocation)

    def revoke(self, revocation: GrantRevocation) -> Grant:
        grant = self.book.revoke(revocation, workflow.now())
        workflow.logger.info("grant %s revoked by %s", grant.id, grant.revoked_by)
        return grant
