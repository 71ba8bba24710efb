"""Filesystem permission rules and the decisions built on them (contract §4-5).

Pure, deterministic Python (no I/O, no Temporal): the workflow imports it for
the entry gate and the approval predicates, activities import it for the
result-side filters. Every path handed in is a *virtual* path; it goes through
:func:`backends.paths.validate_path` first, so ``/secrets``, ``/secrets/`` and
``/secrets/./`` are one and the same path.

Three kinds of question are answered here:

- *Entry gate* (:func:`check_permission`): first matching rule in declaration
  order decides, no match means allow.
- *Subtree questions* (:func:`delete_blockers`, the bulk half of
  :func:`interrupt_fires`): a recursive delete or a search root reaches every
  descendant, so a per-path check is not enough; patterns are compared with
  the subtree through their *anchor* (longest wildcard-free prefix).
- *Result filters* (:func:`filter_paths` and friends): drop what is denied for
  read so denied names never leave the activity.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, TypeVar

import bracex
from filegate.kernel.paths import is_within, validate_path
from filegate.kernel.protocol import FileInfo, GrepMatch
from pydantic import BaseModel, ConfigDict, Field, field_validator
from wcmatch import glob as wc_glob

Operation = Literal["read", "write"]
Mode = Literal["allow", "deny", "interrupt"]

TOOL_OPERATIONS: dict[str, Operation] = {
    "ls": "read",
    "read_file": "read",
    "glob": "read",
    "grep": "read",
    "write_file": "write",
    "edit_file": "write",
    "delete": "write",
}
"""Which rule operation governs each path-taking tool (``execute`` has no path)."""

EXACT_TOOLS = frozenset({"read_file", "write_file", "edit_file"})
"""Tools whose path names exactly what they touch."""
BULK_TOOLS = frozenset({"ls", "glob", "grep", "delete"})
"""Tools whose path is a root: they may touch any descendant."""

RULE_FLAGS = wc_glob.GLOBSTAR | wc_glob.BRACE | wc_glob.DOTGLOB | wc_glob.FORCEUNIX | wc_glob.CASE
"""wcmatch flags for rule patterns.

``DOTGLOB`` is the deliberate difference from the glob *tool*: hiding
dotfiles from ``*``/``**`` is a listing convenience, but a rule is a security
boundary, and ``deny /secrets/**`` that silently skipped ``/secrets/.env`` (as
the reference implementation does) would leak exactly the files people mean
to protect. ``FORCEUNIX | CASE`` pin ``/`` separators and case-sensitive
matching on every platform: the workflow replays these decisions on whichever
worker picks it up, so they must not depend on the host OS.
"""

MAX_PATTERN_ALTERNATIVES = 256
"""Brace expansions allowed per rule pattern (wcmatch itself allows more)."""

_WILDCARD_CHARS = frozenset("*?[]{}\\")
"""A component holding any of these is not literal (escapes count: fail closed)."""


# --------------------------------------------------------------------------- #
# Patterns: validation, expansion, anchors
# --------------------------------------------------------------------------- #


def _expand_braces(pattern: str) -> list[str]:
    try:
        alternatives = bracex.expand(pattern, keep_escapes=True, limit=MAX_PATTERN_ALTERNATIVES)
    except Exception as exc:  # bracex raises its own types for limits and syntax
        raise ValueError(f"permission path {pattern!r}: invalid brace expansion ({exc})") from exc
    return list(dict.fromkeys(alternatives)) or [pattern]


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def normalise_rule_path(pattern: str) -> str:
    """Validate one rule pattern and return its canonical form.

    Must start with ``/``; no ``..`` component in any brace alternative (a rule
    cannot climb); ``~`` is refused outright because home expansion is not
    supported. Empty and ``.`` components and a trailing ``/`` are dropped so
    a rule is written the way :func:`validate_path` writes the paths it is
    matched against (``/secrets/`` would otherwise never match anything).
    """
    if not isinstance(pattern, str) or not pattern:
        raise ValueError("permission path must be a non-empty string")
    if "\x00" in pattern:
        raise ValueError(f"permission path {pattern!r} contains a NUL byte")
    if "~" in pattern:
        raise ValueError(
            f"permission path {pattern!r}: '~' is not supported (write the absolute virtual path)"
        )
    if not pattern.startswith("/"):
        raise ValueError(f"permission path {pattern!r} must be absolute (start with '/')")
    for alternative in _expand_braces(pattern):
        if ".." in alternative.split("/"):
            raise ValueError(f"permission path {pattern!r}: '..' components are not allowed")
    canonical = "/" + "/".join(_components(pattern))
    try:
        _regexes(canonical)
    except Exception as exc:
        raise ValueError(f"permission path {pattern!r} is not a valid glob: {exc}") from exc
    return canonical


@dataclass(frozen=True)
class _Alternative:
    """One brace-free alternative of a rule pattern, split at its anchor."""

    raw: str
    anchor: str
    suffix: tuple[str, ...]

    @property
    def literal(self) -> bool:
        return not self.suffix


def _is_literal(component: str) -> bool:
    return not (_WILDCARD_CHARS & set(component))


def _split_anchor(alternative: str) -> _Alternative:
    comps = _components(alternative)
    literal_prefix: list[str] = []
    for comp in comps:
        if not _is_literal(comp):
            break
        literal_prefix.append(comp)
    return _Alternative(
        raw=alternative,
        anchor="/" + "/".join(literal_prefix),
        suffix=tuple(comps[len(literal_prefix) :]),
    )


@lru_cache(maxsize=4096)
def _alternatives(pattern: str) -> tuple[_Alternative, ...]:
    return tuple(_split_anchor(alt) for alt in _expand_braces(pattern))


def glob_anchor(pattern: str) -> str:
    """Longest wildcard-free prefix of ``pattern`` (whole components).

    ``/secrets/**`` -> ``/secrets``; ``/a/*/b`` -> ``/a``; ``/**/secrets`` ->
    ``/``. Braces are expanded first, so ``/{a,b}/x/*`` anchors at the common
    ancestor ``/`` of ``/a/x`` and ``/b/x``; use :func:`_alternatives` when
    the per-alternative anchors are wanted.
    """
    anchors = [alt.anchor for alt in _alternatives(pattern)]
    common = _components(anchors[0])
    for anchor in anchors[1:]:
        comps = _components(anchor)
        n = 0
        while n < min(len(common), len(comps)) and common[n] == comps[n]:
            n += 1
        common = common[:n]
    return "/" + "/".join(common)


@lru_cache(maxsize=4096)
def _regexes(pattern: str) -> tuple[re.Pattern[str], ...]:
    """wcmatch's own translation of ``pattern`` to regular expressions.

    Matching through ``re`` rather than ``WcMatcher.match`` keeps the module
    usable inside the Temporal workflow sandbox: ``WcMatcher.match`` calls
    ``os.fspath``, which the sandbox forbids. For strings and these flags
    (no NEGATE, no REALPATH) the two are equivalent; the tests check it.
    """
    include, _exclude = wc_glob.translate(pattern, flags=RULE_FLAGS)
    return tuple(re.compile(regex) for regex in include)


def pattern_matches(pattern: str, path: str) -> bool:
    """True when validated ``path`` matches rule ``pattern`` (dotfiles included)."""
    return any(regex.match(path) for regex in _regexes(pattern))


def _ancestors(path: str) -> list[str]:
    """Strict ancestors of a validated path, root first (``/a/b`` -> ``/``, ``/a``)."""
    comps = _components(path)
    return ["/" + "/".join(comps[:n]) for n in range(len(comps))]


def _anchor_overlap(alt: _Alternative, root: str) -> bool:
    """Could the subtree at ``root`` meet a path under ``alt``'s anchor?"""
    return is_within(root, alt.anchor) or is_within(alt.anchor, root)


def _covers_subtree(alt: _Alternative, root: str) -> bool:
    """True only when ``alt`` matches ``root`` and *every* descendant of it.

    Sound but not complete: ``Q/**`` matching ``root`` means ``root`` is
    ``a/r`` with ``a`` matching ``Q``, and ``**`` then matches any longer tail
    (``DOTGLOB`` includes dot names). Anything else is treated as partial.
    """
    return alt.raw.endswith("/**") and pattern_matches(alt.raw, root)


def _delete_overlap(alt: _Alternative, target: str) -> bool:
    """Recursive-delete overlap of one alternative with the subtree at ``target``.

    Literal: either path contains the other. Wildcards block when the anchor is
    ``/``; the target matches; the anchor lies inside the target (the delete
    takes matches with it); or the target lies under the anchor and either the
    remaining suffix is not a single non-``**`` component (depth unknown: fail
    closed) or an ancestor of the target matches (a protected directory would
    be modified). Otherwise no path in the subtree can match.
    """
    if alt.literal:
        return _anchor_overlap(alt, target)
    if alt.anchor == "/":
        return True
    if pattern_matches(alt.raw, target) or is_within(alt.anchor, target):
        return True
    if is_within(target, alt.anchor):
        if len(alt.suffix) != 1 or "**" in alt.suffix[0]:
            return True
        return any(pattern_matches(alt.raw, parent) for parent in _ancestors(target))
    return False


# --------------------------------------------------------------------------- #
# The rule model
# --------------------------------------------------------------------------- #


class FilesystemPermission(BaseModel):
    """One permission rule: which operations, on which path globs, decide what.

    Patterns are wcmatch globs (``**``, ``*``, ``?``, ``[..]``, ``{a,b}``)
    over absolute virtual paths; ``*`` and ``**`` also match dot names. Prefer
    patterns with a literal prefix (``/secrets/**``): subtree checks compare
    against that prefix, so ``/**/secrets`` (anchor ``/``) makes every
    recursive delete and every bulk search overlap.
    """

    model_config = ConfigDict(extra="forbid")

    operations: list[Operation] = Field(
        min_length=1, description="Operations the rule governs: 'read' and/or 'write'."
    )
    paths: list[str] = Field(
        min_length=1, description="Absolute glob patterns, e.g. '/secrets/**'."
    )
    mode: Mode = Field(default="allow", description="What a match means: allow, deny or interrupt.")

    @field_validator("paths")
    @classmethod
    def _validate_paths(cls, value: list[str]) -> list[str]:
        return [normalise_rule_path(pattern) for pattern in value]

    def governs(self, operation: Operation) -> bool:
        return operation in self.operations

    def matching_patterns(self, path: str) -> list[str]:
        """Patterns of this rule that match validated ``path``."""
        return [pattern for pattern in self.paths if pattern_matches(pattern, path)]

    def matches(self, path: str) -> bool:
        return any(pattern_matches(pattern, path) for pattern in self.paths)

    def _alternatives(self) -> Iterable[_Alternative]:
        for pattern in self.paths:
            yield from _alternatives(pattern)

    def covers_subtree(self, root: str) -> bool:
        """True when this rule matches ``root`` and every path below it."""
        return any(_covers_subtree(alt, root) for alt in self._alternatives())

    def overlaps_subtree(self, root: str) -> bool:
        """True when some pattern's anchor meets the subtree at ``root``."""
        return any(_anchor_overlap(alt, root) for alt in self._alternatives())


Rules = Sequence[FilesystemPermission]


def operation_of(operation: str) -> Operation:
    """Map a tool name (or ``read``/``write`` itself) to the rule operation."""
    if operation in ("read", "write"):
        return operation  # type: ignore[return-value]
    try:
        return TOOL_OPERATIONS[operation]
    except KeyError:
        raise ValueError(
            f"unknown operation {operation!r}: expected 'read', 'write' or one of "
            f"{', '.join(TOOL_OPERATIONS)}"
        ) from None


# --------------------------------------------------------------------------- #
# Entry gate
# --------------------------------------------------------------------------- #


def _first_match(rules: Rules, op: Operation, path: str) -> FilesystemPermission | None:
    for rule in rules:
        if rule.governs(op) and rule.matches(path):
            return rule
    return None


def first_matching_rule(
    rules: Rules, operation: str, path: str | None
) -> FilesystemPermission | None:
    """The rule that decides ``operation`` on ``path`` (first match), or None.

    Raises ValueError for an unknown operation or a path validate_path refuses.
    """
    return _first_match(rules, operation_of(operation), validate_path(path))


def check_permission(rules: Rules, operation: str, path: str | None) -> Mode:
    """``allow``, ``deny`` or ``interrupt`` for one operation on one path.

    First match in declaration order wins; no match means allow.
    """
    rule = first_matching_rule(rules, operation, path)
    return rule.mode if rule is not None else "allow"


def denied_message(operation: str, path: str) -> str:
    """Error text for an entry-gate deny (shared so every layer says the same)."""
    return f"Permission denied: {operation} on {path} is not allowed by the permission rules."


# --------------------------------------------------------------------------- #
# Recursive delete
# --------------------------------------------------------------------------- #


def delete_blockers(rules: Rules, target: str, has_descendants: bool = True) -> list[str]:
    """Write-deny patterns that block deleting ``target``; empty when allowed.

    ``has_descendants=False`` is for a target confirmed to be a leaf (a
    regular file or an empty directory): then plain first-match decides and
    the blockers are the deciding deny rule's matching patterns. Otherwise the
    whole subtree is checked: every write-deny pattern that overlaps it (see
    :func:`_delete_overlap`) blocks, in declaration order, until a rule that
    matches the entire subtree is reached; by first-match that rule decides
    every path below, so later rules cannot matter (``allow /tmp/**`` before
    ``deny /**`` lets ``/tmp/x`` be deleted).
    """
    path = validate_path(target)
    if not has_descendants:
        rule = _first_match(rules, "write", path)
        if rule is None or rule.mode != "deny":
            return []
        return rule.matching_patterns(path)
    blockers: list[str] = []
    for rule in rules:
        if not rule.governs("write"):
            continue
        if rule.mode == "deny":
            blockers.extend(
                pattern
                for pattern in rule.paths
                if any(_delete_overlap(alt, path) for alt in _alternatives(pattern))
            )
        if rule.covers_subtree(path):
            break
    return list(dict.fromkeys(blockers))


def delete_blocked_message(target: str, blockers: Sequence[str]) -> str:
    """Error text for a refused delete; names every blocking pattern."""
    listed = ", ".join(blockers)
    return (
        f"Permission denied: cannot delete {target}: it overlaps write-deny "
        f"pattern(s) {listed}. Delete individual allowed files instead."
    )


# --------------------------------------------------------------------------- #
# Interrupt predicates
# --------------------------------------------------------------------------- #

_PATH_KEYS = ("file_path", "path")


def _raw_path_arg(args: Mapping[str, Any]) -> Any:
    for key in _PATH_KEYS:
        value = args.get(key)
        if value is not None:
            return value
    return None


def _bulk_rule(rules: Rules, op: Operation, root: str) -> FilesystemPermission | None:
    """First interrupt rule reachable from the subtree at ``root``.

    Rules are read in order; a rule that matches the whole subtree decides
    every path in it (first match), so an earlier deny or allow covering the
    subtree means no approval is needed.
    """
    for rule in rules:
        if not rule.governs(op):
            continue
        if rule.mode == "interrupt" and rule.overlaps_subtree(root):
            return rule
        if rule.covers_subtree(root):
            return None
    return None


def _glob_roots(pattern: Any, path: Any) -> list[str]:
    """Search roots a glob call may reach.

    An absolute pattern re-roots the search at its own anchor(s) and the glob
    tool then ignores the path argument, even an invalid one (kept as a root
    anyway, to be safe; an invalid one counts as ``/``). A relative pattern
    that climbs with ``..`` could land anywhere, so it counts as ``/``.
    """
    roots: list[str] = []
    if isinstance(pattern, str) and pattern:
        try:
            alternatives = _expand_braces(pattern)
        except ValueError:
            return ["/"]  # the tool will refuse it; decide as if it searched everything
        for alt in alternatives:
            if ".." in alt.split("/"):
                return ["/"]
            if alt.startswith("/"):
                roots.append(_split_anchor(alt).anchor)
    try:
        roots.append(validate_path(path))
    except ValueError:
        roots.append("/")  # an absolute pattern ignores the path argument entirely
    return list(dict.fromkeys(roots))


def matching_interrupt_rule(
    rules: Rules, tool_name: str, args: Mapping[str, Any]
) -> FilesystemPermission | None:
    """The interrupt rule that makes this tool call need approval, or None.

    Exact tools (read_file, write_file, edit_file): the validated path's first
    matching rule, when it is an interrupt (an earlier deny wins: no approval,
    the gate refuses). Bulk tools (ls, glob, grep, delete): the subtree at the
    search root overlaps an interrupt rule's anchor, unless an earlier rule
    covers the whole subtree. A missing/None path, ``.`` and ``""`` all mean
    the root ``/`` (which overlaps every anchor); glob patterns that re-root
    or climb are followed. A path the validator refuses needs no approval:
    the tool refuses it before touching anything.
    """
    op = TOOL_OPERATIONS.get(tool_name)
    if op is None or not any(rule.mode == "interrupt" and rule.governs(op) for rule in rules):
        return None
    raw = _raw_path_arg(args)
    try:
        if tool_name in EXACT_TOOLS and raw is not None:
            rule = _first_match(rules, op, validate_path(raw))
            return rule if rule is not None and rule.mode == "interrupt" else None
        if tool_name == "glob":
            roots = _glob_roots(args.get("pattern"), raw)
        else:
            roots = [validate_path(raw)]
    except ValueError:
        return None
    for root in roots:
        rule = _bulk_rule(rules, op, root)
        if rule is not None:
            return rule
    return None


def interrupt_fires(rules: Rules, tool_name: str, args: Mapping[str, Any]) -> bool:
    """True when this tool call must wait for a human decision (contract §5)."""
    return matching_interrupt_rule(rules, tool_name, args) is not None


# --------------------------------------------------------------------------- #
# Result-side filters
# --------------------------------------------------------------------------- #


def _result_path(path: str) -> str:
    """Canonical form of a path a backend returned (directories end with ``/``).

    A name validate_path would refuse as *input* (e.g. containing a
    backslash) can still exist on disk; it is matched as written.
    """
    try:
        return validate_path(path)
    except ValueError:
        return path.rstrip("/") or "/"


def read_denied(rules: Rules, path: str) -> bool:
    """True when a result path must be hidden (first-match deny for read)."""
    rule = _first_match(rules, "read", _result_path(path))
    return rule is not None and rule.mode == "deny"


_T = TypeVar("_T")


def _filter(rules: Rules, items: list[_T], path_of: Callable[[_T], str]) -> list[_T]:
    if not rules:
        return list(items)
    return [item for item in items if not read_denied(rules, path_of(item))]


def filter_paths(rules: Rules, paths: list[str]) -> list[str]:
    """Drop result paths denied for read; interrupt matches stay (already approved)."""
    return _filter(rules, paths, lambda path: path)


def filter_ls_entries(rules: Rules, entries: list[FileInfo]) -> list[FileInfo]:
    """:func:`filter_paths` for ``ls`` entries (directory paths end with ``/``)."""
    return _filter(rules, entries, lambda entry: entry.path)


def filter_grep_matches(rules: Rules, matches: list[GrepMatch]) -> tuple[list[GrepMatch], int]:
    """Kept grep matches and how many were removed.

    The count lets the formatter suppress the "grep is literal" regex hint
    when matches existed but permissions hid them.
    """
    kept = _filter(rules, matches, lambda match: match.path)
    return kept, len(matches) - len(kept)


# --------------------------------------------------------------------------- #
# Configuration check
# --------------------------------------------------------------------------- #


def rules_within(rules: Rules, prefixes: Iterable[str]) -> bool:
    """True when every path any rule can match lies inside one of ``prefixes``."""
    roots = [validate_path(prefix) for prefix in prefixes]
    return all(
        any(is_within(alt.anchor, root) for root in roots)
        for rule in rules
        for alt in rule._alternatives()
    )


def check_execute_config(
    rules: Rules, *, can_execute: bool, unreachable_prefixes: Iterable[str] = ()
) -> None:
    """Refuse permission rules next to a shell that could ignore them.

    Path rules cannot constrain ``execute``: a shell reaches files directly.
    ``can_execute`` is the default backend's capability; ``unreachable_prefixes``
    are composite route prefixes whose backends the shell cannot reach (e.g.
    an S3 store route). Rules are acceptable only when every rule pattern's
    anchor lies inside one of them. Raises ValueError with the reason.
    """
    if not rules or not can_execute:
        return
    prefixes = list(unreachable_prefixes)
    if prefixes and rules_within(rules, prefixes):
        return
    scope = (
        f"inside the routes the shell cannot reach ({', '.join(prefixes)})"
        if prefixes
        else "inside a composite route the shell cannot reach"
    )
    raise ValueError(
        "permission rules cannot be combined with a backend that can execute shell "
        f"commands: the shell bypasses path rules. Keep every rule path {scope}, "
        "or use a backend without execute."
    )


__all__ = [
    "BULK_TOOLS",
    "EXACT_TOOLS",
    "RULE_FLAGS",
    "TOOL_OPERATIONS",
    "FilesystemPermission",
    "Mode",
    "Operation",
    "check_execute_config",
    "check_permission",
    "delete_blocked_message",
    "delete_blockers",
    "denied_message",
    "filter_grep_matches",
    "filter_ls_entries",
    "filter_paths",
    "first_matching_rule",
    "glob_anchor",
    "interrupt_fires",
    "matching_interrupt_rule",
    "normalise_rule_path",
    "operation_of",
    "pattern_matches",
    "read_denied",
    "rules_within",
]
