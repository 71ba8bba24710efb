"""Which paths a call may see and touch: rules judged on what a path *is*, not only how it reads.

Two facts make the permission rules (virtual-path globs) hold on real trees:

- **Symlinks.** A backend with in-root symlinks serves ``/pub/alias/key``
  from ``/secrets/key``. Rules and policies therefore judge the path as
  written *and* its resolved in-root target, and both must pass.
  :func:`resolve_in_backend` asks the backend (its optional
  ``resolve_path``/``resolve_paths``) and falls back to the identity for
  backends without symlinks, third-party ones included.
- **Searches.** :func:`read_visible` is the predicate glob and grep apply
  *during* their walk (:data:`~filegate.kernel.protocol.Visible`), so budgets,
  counts, notes and hints are computed on permitted files only.

Pure: the backend it is handed does the I/O.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import Any

from filegate.kernel.globbing import resolve_glob
from filegate.kernel.paths import is_within, validate_path
from filegate.kernel.permissions import Rules, check_permission, operation_of, read_denied
from filegate.kernel.protocol import Visible
from filegate.kernel.rule_patterns import expand_braces, glob_anchor, pattern_matches


def to_virtual(route_prefix: str, local_path: str) -> str:
    """Map a backend-local path back under the route prefix (keeps a trailing ``/``)."""
    prefix = route_prefix.rstrip("/")
    if not prefix:
        return local_path
    if local_path in ("", "/"):
        return prefix + "/" if local_path == "/" else prefix
    return prefix + (local_path if local_path.startswith("/") else "/" + local_path)


def resolve_in_backend(backend: Any, path: str) -> str | None:
    """The in-root path ``path`` resolves to on ``backend`` (symlinks followed).

    None when it resolves outside the backend's root (the backend refuses
    such a path itself). Backends without ``resolve_path`` have no symlinks:
    the path is its own target.
    """
    resolve = getattr(backend, "resolve_path", None)
    if resolve is None:
        return path
    result = resolve(path)
    return result if isinstance(result, str) or result is None else path


def resolve_all(backend: Any, paths: Sequence[str]) -> list[str | None]:
    """:func:`resolve_in_backend` for many paths (one backend call when it batches)."""
    batch = getattr(backend, "resolve_paths", None)
    if batch is not None:
        answers = list(batch(list(paths)))
        if len(answers) == len(paths):
            return answers
    return [resolve_in_backend(backend, path) for path in paths]


def resolve_link_itself(backend: Any, path: str) -> str | None:
    """Where ``path`` lives without following its last component (delete removes a link).

    The parent is resolved and the name kept: deleting ``/pub/alias`` (a link)
    removes the link, deleting ``/pub/alias/key`` removes ``/secrets/key``.
    """
    if path in ("", "/"):
        return path
    parent, name = posixpath.split(path.rstrip("/"))
    resolved = resolve_in_backend(backend, parent or "/")
    if resolved is None:
        return None
    return posixpath.join(resolved, name)


def targets(written: str, resolved: str | None) -> list[str]:
    """The paths to judge: as written, plus the resolved target when it differs."""
    if resolved is None or resolved == written:
        return [written]
    return [written, resolved]


def rebase(path: str, root: str, resolved_root: str) -> str:
    """``path`` below search root ``root``, re-expressed below ``resolved_root``."""
    if path == root:
        return resolved_root
    base = root.rstrip("/") + "/"
    if not path.startswith(base):
        return path
    return resolved_root.rstrip("/") + "/" + path[len(base) :]


def search_root_denied(rules: Rules, operation: str, root: str) -> bool:
    """A search root is refused when its deciding rule, or one covering it all, denies.

    The same decision as the workflow's gate for ls/glob/grep.
    """
    if check_permission(rules, operation, root) == "deny":
        return True
    op = operation_of(operation)
    for rule in rules:
        if rule.governs(op) and rule.covers_subtree(root):
            return rule.mode == "deny"
    return False


def answers_unasked(
    rules: Rules, operation: str, roots: Sequence[str], *, result_root: str | None = None
) -> bool:
    """True when no answer of a search needs a human: all below ``roots`` are denied.

    Contract §4: an earlier deny covering the search subtree wins over a later
    ``interrupt`` rule, even one deciding a root itself: ``deny /secrets/**``
    before ``interrupt /**`` lets ``ls /secrets`` run unasked, and the result
    filter leaves nothing. Sound, not complete: per root, the first rule
    touching its subtree must deny everything below it. ``result_root``: a
    path that may itself be an answer (grep's path may name the one file
    searched, whatever its glob says); it must not be an interrupt (allowed,
    it is shown unasked; denied, the gate refuses). ``/`` is never a file.
    """
    if not roots:
        return False
    if result_root not in (None, "/") and check_permission(rules, operation, result_root) == (
        "interrupt"
    ):
        return False
    op = operation_of(operation)
    return all(_below_denied(rules, op, root) for root in roots)


def _below_denied(rules: Rules, op: str, root: str) -> bool:
    for rule in rules:
        if not rule.governs(op):  # type: ignore[arg-type]
            continue
        if rule.covers_subtree(root) or _covers_below(rule.paths, root):
            return rule.mode == "deny"
        if rule.overlaps_subtree(root):
            return False  # an earlier rule decides part of the subtree
    return False


def _covers_below(patterns: Sequence[str], root: str) -> bool:
    """True when some pattern matches every path strictly below ``root``.

    Sound, not complete: ``Q/**`` does when ``Q`` matches ``root`` (``**``
    matches any tail, dot names included, in rule matching).
    """
    for pattern in patterns:
        for alternative in expand_braces(pattern):
            if not alternative.endswith("/**"):
                continue
            parent = alternative[: -len("/**")] or "/"
            if pattern_matches(parent, root):
                return True
    return False


def search_roots(path: str, pattern: str | None) -> list[str]:
    """Directories every answer of a search at ``path`` with ``pattern`` lies *below*.

    ``pattern`` is glob's pattern or grep's glob filter; each alternative
    narrows the root to its anchor (``/secrets/**/*.py`` from ``/``:
    ``/secrets``), a literal one to its parent; a bare name (any depth) or a
    bad pattern keeps ``path``.
    """
    if not pattern:
        return [path]
    try:
        root, rel = resolve_glob(pattern, path)
        alternatives = expand_braces(rel)
    except ValueError:
        return [path]  # the tool refuses the pattern
    roots: list[str] = []
    for alternative in alternatives:
        anchor = root
        if "/" in alternative:
            base = "" if alternative.startswith("/") else root.rstrip("/") + "/"
            full = base + alternative
            try:
                anchor = glob_anchor(full)
                if anchor == validate_path(full):  # literal: the answer is that path
                    anchor = posixpath.dirname(anchor)
            except ValueError:
                anchor = root
        # Answers also lie below the path (a grep filter does not re-root).
        roots.append(anchor if is_within(anchor, path) else path)
    return list(dict.fromkeys(roots))


def read_visible(
    rules: Rules, route_prefix: str, root: str, resolved_root: str | None
) -> Visible | None:
    """The walk predicate for a search rooted at backend-local ``root``.

    A file is visible when neither its path nor, if the root itself is reached
    through a symlink, its path below the resolved root is denied for read
    (walks never follow links below the root, so the root's target is the only
    link a found file can sit behind). None when no rule can deny a read.
    """
    if not any(rule.mode == "deny" and rule.governs("read") for rule in rules):
        return None
    moved = resolved_root is not None and resolved_root != root
    cache: dict[str, bool] = {}

    def visible(local: str) -> bool:
        known = cache.get(local)
        if known is not None:
            return known
        ok = not read_denied(rules, to_virtual(route_prefix, local))
        if ok and moved:
            assert resolved_root is not None
            ok = not read_denied(
                rules, to_virtual(route_prefix, rebase(local, root, resolved_root))
            )
        cache[local] = ok
        return ok

    return visible


__all__ = [
    "read_visible",
    "rebase",
    "resolve_all",
    "resolve_in_backend",
    "resolve_link_itself",
    "search_root_denied",
    "targets",
    "to_virtual",
]
