"""Filesystem permission rules and the decisions built on them (contract §4-5).

Pure, deterministic Python (no I/O, no Temporal): the workflow imports it for
the entry gate and the approval predicates. Every path handed in is a
*virtual* path; it goes through :func:`filegate.kernel.paths.validate_path`
first, so ``/secrets``, ``/secrets/`` and ``/secrets/./`` are one and the same path.

Answered here:

- *Entry gate* (:func:`check_permission`): first matching rule in declaration
  order decides, no match means allow.
- *Subtree questions* (:func:`delete_blockers`, the bulk half of
  :func:`interrupt_fires`): a recursive delete or a search root reaches every
  descendant, so a per-path check is not enough; patterns are compared with
  the subtree through their *anchor* (:mod:`filegate.kernel.rule_patterns`).
- *Execute*: what rules mean next to a shell lives in :mod:`filegate.kernel.execute_gate`.
- *Result filters* (:func:`filter_paths` and friends): drop what is denied for
  read so denied names never leave the activity.

Pattern syntax and matching live in :mod:`filegate.kernel.rule_patterns`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from filegate.kernel.paths import validate_path
from filegate.kernel.protocol import FileInfo, GrepMatch
from filegate.kernel.registry import TOOLS, Operation
from filegate.kernel.rule_patterns import (
    Alternative,
    alt_covers_subtree,
    anchor_overlap,
    delete_overlap,
    expand_braces,
    normalise_rule_path,
    pattern_alternatives,
    pattern_matches,
    split_anchor,
)

Mode = Literal["allow", "deny", "interrupt"]


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

    def _alternatives(self) -> Iterable[Alternative]:
        for pattern in self.paths:
            yield from pattern_alternatives(pattern)

    def covers_subtree(self, root: str) -> bool:
        """True when this rule matches ``root`` and every path below it."""
        return any(alt_covers_subtree(alt, root) for alt in self._alternatives())

    def overlaps_subtree(self, root: str) -> bool:
        """True when some pattern's anchor meets the subtree at ``root``."""
        return any(anchor_overlap(alt, root) for alt in self._alternatives())


Rules = Sequence[FilesystemPermission]


def operation_of(operation: str) -> Operation:
    """Map a tool name (or ``read``/``write`` itself) to the rule operation."""
    if operation in ("read", "write"):
        return operation  # type: ignore[return-value]
    try:
        return TOOLS.operations[operation]
    except KeyError:
        raise ValueError(
            f"unknown operation {operation!r}: expected 'read', 'write' or one of "
            f"{', '.join(TOOLS.operations)}"
        ) from None


# --------------------------------------------------------------------------- #
# Entry gate
# --------------------------------------------------------------------------- #


def first_match(rules: Rules, op: Operation, path: str) -> FilesystemPermission | None:
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
    return first_match(rules, operation_of(operation), validate_path(path))


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
    :func:`delete_overlap`) blocks, in declaration order, until a rule that
    matches the entire subtree is reached; by first-match that rule decides
    every path below, so later rules cannot matter (``allow /tmp/**`` before
    ``deny /**`` lets ``/tmp/x`` be deleted).
    """
    path = validate_path(target)
    if not has_descendants:
        rule = first_match(rules, "write", path)
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
                if any(delete_overlap(alt, path) for alt in pattern_alternatives(pattern))
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


def _raw_path_arg(tool_name: str, args: Mapping[str, Any]) -> Any:
    tool = TOOLS.get(tool_name)
    return None if tool is None or tool.path_field is None else args.get(tool.path_field)


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
            alternatives = expand_braces(pattern)
        except ValueError:
            return ["/"]  # the tool will refuse it; decide as if it searched everything
        for alt in alternatives:
            if ".." in alt.split("/"):
                return ["/"]
            if alt.startswith("/"):
                roots.append(split_anchor(alt).anchor)
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
    op = TOOLS.operations.get(tool_name)
    if op is None or not any(rule.mode == "interrupt" and rule.governs(op) for rule in rules):
        return None
    raw = _raw_path_arg(tool_name, args)
    try:
        if tool_name in TOOLS.exact and raw is not None:
            rule = first_match(rules, op, validate_path(raw))
            return rule if rule is not None and rule.mode == "interrupt" else None
        if tool_name in TOOLS.pattern_reaching:
            roots = _glob_roots(args.get(TOOLS.narrowing[tool_name]), raw)
        else:
            roots = [validate_path(raw)]
    except ValueError:
        return None
    for root in roots:
        rule = _bulk_rule(rules, op, root)
        if rule is not None:
            return rule
    return None


def interrupt_fires(
    rules: Rules, tool_name: str, args: Mapping[str, Any], *, has_descendants: bool = True
) -> bool:
    """True when the workflow's gate makes this call wait for a human (contract §5).

    The same answer as the workflow (``filegate.workflows.gate``: path checks,
    deny gate, then ``approval_trigger`` without ``interrupt_on`` entries), so
    a caller that asks this predicate learns what the agent will do, not a
    wider guess. Hence False for a call the gate refuses before anyone is
    asked: an exact tool or ``delete`` without a path (``file_path`` missing,
    empty, blank or ``.``), a path the validator refuses (glob's ``path`` too,
    even under an absolute pattern), a call a deny decides (an earlier deny on
    the path, a deny covering the search root, a delete blocked by
    write-deny patterns), and a search whose every answer would be denied
    (``deny /secrets/**`` before ``interrupt /secrets/**``: ``ls /secrets``
    runs unasked and the result filter leaves nothing). Each tool's path is
    read from its own argument (``file_path``; ``path`` for ls, glob and
    grep); a path or glob pattern of the wrong type is refused as the schema
    would. Other arguments are not checked: a call the schema refuses for
    them never runs at all. ``has_descendants=False`` is for a delete target
    known to be a leaf, as the workflow knows for the State backend.
    :func:`matching_interrupt_rule` is the rule step alone (which rule asks).
    """
    # Imported here: kernel.visibility builds on this module (a top-level
    # import would be circular); the gate's search rules live there.
    from filegate.kernel.visibility import answers_unasked, search_root_denied, search_roots

    op = TOOLS.operations.get(tool_name)
    if op is None or not any(rule.mode == "interrupt" and rule.governs(op) for rule in rules):
        return False
    search = tool_name in TOOLS.listing
    field = "path" if search else "file_path"
    raw = args.get(field)
    if raw is None and search:
        raw = "/"  # ls, glob and grep default to the root
    if not isinstance(raw, str):
        return False  # the tool's schema refuses it
    if not search and raw.strip() in ("", "."):
        return False
    narrowing = TOOLS.narrowing.get(tool_name)
    if tool_name in TOOLS.pattern_reaching and not isinstance(args.get(narrowing or ""), str):
        return False
    try:
        path = validate_path(raw)
    except ValueError:
        return False
    given = args.get(narrowing) if narrowing is not None else None
    pattern = given if isinstance(given, str) else None
    if tool_name in TOOLS.removing:
        if delete_blockers(rules, path, has_descendants=has_descendants):
            return False
    elif search:
        if search_root_denied(rules, op, path):
            return False
        grep_root = path if tool_name in TOOLS.root_results else None
        if answers_unasked(rules, op, search_roots(path, pattern), result_root=grep_root):
            return False
    elif check_permission(rules, op, path) == "deny":
        return False
    checked: dict[str, Any] = {field: path}
    if tool_name in TOOLS.pattern_reaching and narrowing is not None:
        checked[narrowing] = pattern
    return matching_interrupt_rule(rules, tool_name, checked) is not None


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


def interrupts_as(
    mode: Literal["allow", "deny"], rules: list[FilesystemPermission]
) -> list[FilesystemPermission]:
    """``rules`` with every ``interrupt`` rule in ``mode``.

    ``allow``: for a tool whose approvals an explicit ``interrupt_on`` entry decides
    (contract §5: it replaces the approvals generated from interrupt rules), so the
    activity does not refuse a call the workflow deliberately ran without asking.
    ``deny``: how a preview's reads are judged (a read interrupt asks for an
    approval of its own, which a write's approval is not).
    """
    if not any(rule.mode == "interrupt" for rule in rules):
        return rules
    return [
        rule.model_copy(update={"mode": mode}) if rule.mode == "interrupt" else rule
        for rule in rules
    ]


def read_denied(rules: Rules, path: str) -> bool:
    """True when a result path must be hidden (first-match deny for read)."""
    rule = first_match(rules, "read", _result_path(path))
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

    A second line of defence only: backends already skip denied files during
    the walk (``visible``). The count must never reach the model, since an
    answer that depends on denied files is an oracle (contract §11).
    """
    kept = _filter(rules, matches, lambda match: match.path)
    return kept, len(matches) - len(kept)


__all__ = [
    "FilesystemPermission",
    "Mode",
    "Operation",
    "Rules",
    "check_permission",
    "delete_blocked_message",
    "delete_blockers",
    "denied_message",
    "filter_grep_matches",
    "filter_ls_entries",
    "filter_paths",
    "first_match",
    "first_matching_rule",
    "interrupt_fires",
    "interrupts_as",
    "matching_interrupt_rule",
    "operation_of",
    "read_denied",
]
