"""The activity's permission gates: entry checks, recursive delete, and what searches may see.

Defence in depth behind the workflow's own gate (:mod:`filegate.workflows.gate`),
with the same rules and more facts: the activity can ask the backend where a
path *really* is. Every gate judges the path as written and its in-root
symlink target (:mod:`filegate.kernel.visibility`), both must pass, and an
``interrupt`` rule counts as a deny unless ``request.approved`` says a human
approved the call. Pure: only the backend handed in does I/O.
"""

from __future__ import annotations

import posixpath

from filegate.kernel.formatting import Rendered, delete_blocked, format_error, permission_denied
from filegate.kernel.permissions import (
    check_permission,
    delete_blockers,
    matching_interrupt_rule,
    read_denied,
)
from filegate.kernel.protocol import BackendProtocol, FileInfo, Visible
from filegate.kernel.reach import judged_at_reach, note_judged
from filegate.kernel.tool_types import ToolRequest
from filegate.kernel.visibility import (
    answers_unasked,
    read_visible,
    resolve_all,
    resolve_in_backend,
    resolve_link_itself,
    search_root_denied,
    search_roots,
    targets,
    to_virtual,
)


def _judged_paths(
    backend: BackendProtocol, request: ToolRequest, local_path: str, *, link_itself: bool = False
) -> tuple[list[str], list[str]]:
    """The backend-local paths a rule must pass for ``local_path`` (as written, and its
    target) and their virtual paths. Noted as judged (:func:`_passed`) only once they
    pass: a refused path must never count as judged for another item of the same call
    (a transfer batch goes on after a refusal; issue 50)."""
    if link_itself:
        resolved = resolve_link_itself(backend, local_path)
    else:
        resolved = resolve_in_backend(backend, local_path)
    local = targets(local_path, resolved)
    return local, [to_virtual(request.route_prefix, p) for p in local]


def _passed(local: list[str]) -> None:
    """The gate let these through: the backend's last check (kernel.reach) keeps its answer."""
    note_judged(local)


def approval_missing(operation: str, path: str) -> Rendered:
    """An ``interrupt`` rule reached the activity without a recorded human approval."""
    return format_error(
        f"Permission denied: {operation} on {path} needs human approval (an interrupt "
        "rule matches) and this call carries none. It was not run.",
        "approval_required",
    )


def entry_refused(
    backend: BackendProtocol,
    request: ToolRequest,
    operation: str,
    local_path: str,
    *,
    search: bool = False,
    pattern: str | None = None,
    root_is_result: bool = False,
) -> Rendered | None:
    """Entry gate (defence in depth: the workflow gates first with the same rules).

    Both the path as written and its in-root target must pass. A search root
    (``search``: ls, glob, grep) is also refused when a rule covering its
    whole subtree denies, as in the workflow. A call reaching an ``interrupt``
    rule is refused unless the workflow recorded the human approval, except
    a search whose every answer would be denied (``pattern``, glob's pattern
    or grep's filter, narrows where answers lie; ``root_is_result``: grep's
    root may be the file searched), which the workflow runs unasked.
    """
    rules = request.permissions
    if not rules:
        return None
    shown = to_virtual(request.route_prefix, local_path)
    unasked = search and answers_unasked(
        rules,
        operation,
        [to_virtual(request.route_prefix, root) for root in search_roots(local_path, pattern)],
        result_root=to_virtual(request.route_prefix, local_path)
        if root_is_result and local_path != "/"
        else None,
    )
    local, judged = _judged_paths(backend, request, local_path)
    for virtual in judged:
        if search:
            denied = search_root_denied(rules, operation, virtual)
            needs_approval = not unasked and (
                matching_interrupt_rule(rules, "ls", {"path": virtual}) is not None
            )
        else:
            mode = check_permission(rules, operation, virtual)
            denied, needs_approval = mode == "deny", mode == "interrupt"
        if denied:
            return permission_denied(operation, shown)
        if needs_approval and not request.approved:
            return approval_missing(operation, shown)
    _passed(local)
    return None


def delete_refused(
    backend: BackendProtocol, request: ToolRequest, local_path: str
) -> Rendered | None:
    """Recursive delete: refuse when the subtree overlaps a write-deny pattern.

    The subtree as written and the one it resolves to (a link itself is
    deleted, not its target) are both judged; an unapproved interrupt match
    refuses too.
    """
    rules = request.permissions
    if not rules:
        return None
    shown = to_virtual(request.route_prefix, local_path)
    local, judged = _judged_paths(backend, request, local_path, link_itself=True)
    if not request.approved:
        for virtual in judged:
            if check_permission(rules, "write", virtual) == "interrupt":
                return approval_missing("write", shown)
    if any(rule.mode == "deny" and rule.governs("write") for rule in rules):
        leaf = _is_leaf(backend, local_path)
        for virtual in judged:
            blockers = delete_blockers(rules, virtual, has_descendants=not leaf)
            if blockers:
                return delete_blocked(shown, blockers)
    _passed(local)
    return None


def _is_leaf(backend: BackendProtocol, local_path: str) -> bool:
    """True when ``local_path`` is confirmed to be a regular file (no descendants)."""
    if local_path == "/":
        return False
    with judged_at_reach(None):  # a fact for the gate, not an answer: nothing to judge
        listing = backend.ls(posixpath.dirname(local_path) or "/")
    return any(
        entry.path.rstrip("/") == local_path and not entry.is_dir for entry in listing.entries
    )


def visible_entries(
    backend: BackendProtocol, request: ToolRequest, entries: list[FileInfo]
) -> list[FileInfo]:
    """Drop ls entries whose in-root symlink target is denied for read."""
    rules = request.permissions
    if not entries or not any(rule.mode == "deny" and rule.governs("read") for rule in rules):
        return entries
    prefix = request.route_prefix.rstrip("/")
    local = [entry.path[len(prefix) :] or "/" for entry in entries]
    resolved = resolve_all(backend, [p.rstrip("/") or "/" for p in local])
    return [
        entry
        for entry, written, target in zip(entries, local, resolved, strict=True)
        if target is None
        or target == written.rstrip("/")
        or not read_denied(rules, to_virtual(request.route_prefix, target))
    ]


def search_visible(backend: BackendProtocol, request: ToolRequest, root: str) -> Visible | None:
    """The walk predicate for a search rooted at ``root`` (None: nothing can be denied)."""
    if not any(rule.mode == "deny" and rule.governs("read") for rule in request.permissions):
        return None
    resolved = resolve_in_backend(backend, root)
    return read_visible(request.permissions, request.route_prefix, root, resolved)
