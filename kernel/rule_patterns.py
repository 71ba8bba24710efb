"""The glob engine behind permission rules: normalising, matching, anchors, overlap.

A rule pattern is brace-expanded into *alternatives*, each split at its
*anchor* (longest wildcard-free prefix). Per-path matching uses compiled
wcmatch regexes; subtree questions (does a recursive delete or a search root
reach a pattern?) compare the subtree with the anchors. Kept apart from the
rule model (:mod:`filegate.kernel.permissions`) because it is the one place
that knows pattern syntax; the model and the decisions only ask it questions.

Pure, deterministic Python: the workflow replays these answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import bracex
from wcmatch import glob as wc_glob

from filegate.kernel.paths import is_within

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


def expand_braces(pattern: str) -> list[str]:
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
    for alternative in expand_braces(pattern):
        if ".." in alternative.split("/"):
            raise ValueError(f"permission path {pattern!r}: '..' components are not allowed")
    canonical = "/" + "/".join(_components(pattern))
    try:
        _regexes(canonical)
    except Exception as exc:
        raise ValueError(f"permission path {pattern!r} is not a valid glob: {exc}") from exc
    return canonical


@dataclass(frozen=True)
class Alternative:
    """One brace-free alternative of a rule pattern, split at its anchor."""

    raw: str
    anchor: str
    suffix: tuple[str, ...]

    @property
    def literal(self) -> bool:
        return not self.suffix


def _is_literal(component: str) -> bool:
    return not (_WILDCARD_CHARS & set(component))


def split_anchor(alternative: str) -> Alternative:
    comps = _components(alternative)
    literal_prefix: list[str] = []
    for comp in comps:
        if not _is_literal(comp):
            break
        literal_prefix.append(comp)
    return Alternative(
        raw=alternative,
        anchor="/" + "/".join(literal_prefix),
        suffix=tuple(comps[len(literal_prefix) :]),
    )


@lru_cache(maxsize=4096)
def pattern_alternatives(pattern: str) -> tuple[Alternative, ...]:
    return tuple(split_anchor(alt) for alt in expand_braces(pattern))


def glob_anchor(pattern: str) -> str:
    """Longest wildcard-free prefix of ``pattern`` (whole components).

    ``/secrets/**`` -> ``/secrets``; ``/a/*/b`` -> ``/a``; ``/**/secrets`` ->
    ``/``. Braces are expanded first, so ``/{a,b}/x/*`` anchors at the common
    ancestor ``/`` of ``/a/x`` and ``/b/x``; use :func:`pattern_alternatives` when
    the per-alternative anchors are wanted.
    """
    anchors = [alt.anchor for alt in pattern_alternatives(pattern)]
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


def anchor_overlap(alt: Alternative, root: str) -> bool:
    """Could the subtree at ``root`` meet a path under ``alt``'s anchor?"""
    return is_within(root, alt.anchor) or is_within(alt.anchor, root)


def alt_covers_subtree(alt: Alternative, root: str) -> bool:
    """True only when ``alt`` matches ``root`` and *every* descendant of it.

    Sound but not complete: ``Q/**`` matching ``root`` means ``root`` is
    ``a/r`` with ``a`` matching ``Q``, and ``**`` then matches any longer tail
    (``DOTGLOB`` includes dot names). Anything else is treated as partial.
    """
    return alt.raw.endswith("/**") and pattern_matches(alt.raw, root)


def delete_overlap(alt: Alternative, target: str) -> bool:
    """Recursive-delete overlap of one alternative with the subtree at ``target``.

    Literal: either path contains the other. Wildcards block when the anchor is
    ``/``; the target matches; the anchor lies inside the target (the delete
    takes matches with it); or the target lies under the anchor and either the
    remaining suffix is not a single non-``**`` component (depth unknown: fail
    closed) or an ancestor of the target matches (a protected directory would
    be modified). Otherwise no path in the subtree can match.
    """
    if alt.literal:
        return anchor_overlap(alt, target)
    if alt.anchor == "/":
        return True
    if pattern_matches(alt.raw, target) or is_within(alt.anchor, target):
        return True
    if is_within(target, alt.anchor):
        if len(alt.suffix) != 1 or "**" in alt.suffix[0]:
            return True
        return any(pattern_matches(alt.raw, parent) for parent in _ancestors(target))
    return False
