"""What a gated call would change, as a reviewer sees it before deciding.

The workflow never reads the workspace, so the preview is computed on the
route's tools worker by a read-only activity and stored with the pending
approval. ``fingerprint`` identifies the state the preview was computed
against: when the decision arrives, the workflow asks again and compares, so a
file that changed meanwhile is reported to the reviewer and the call is
validated again instead of being applied to content nobody looked at.
"""

from __future__ import annotations

import difflib
from typing import Literal

from pydantic import BaseModel, Field

from filegate.kernel.dispatch import InvalidToolRequest, parse_args, shown_path
from filegate.kernel.gates import entry_refused, search_visible
from filegate.kernel.permissions import check_permission, filter_paths, interrupts_as
from filegate.kernel.protocol import BackendProtocol, DeleteTree
from filegate.kernel.reach import ReachRefused, judged_at_reach, reach_for
from filegate.kernel.registry import TOOLS
from filegate.kernel.textops import apply_edit, decode_text, fingerprint
from filegate.kernel.tool_types import DeleteArgs, EditFileArgs, ToolRequest, WriteFileArgs
from filegate.kernel.visibility import to_virtual

PreviewKind = Literal["new_file", "overwrite", "edit", "delete", "execute", "unavailable"]
"""``new_file``/``overwrite``: a ``write_file`` onto a missing or existing file;
``edit``: an ``edit_file`` diff with real line numbers; ``delete``: the files
that go; ``execute``: command and working directory; ``unavailable``: the
preview could not be computed (``error`` says why; the reviewer still decides)."""


class ChangePreview(BaseModel):
    """The change one pending call would make, computed where the files are."""

    kind: PreviewKind
    path: str | None = None
    """The virtual path the call names (None for ``execute``)."""
    diff: str | None = None
    """Unified diff (``---``/``+++`` headers, ``@@ -a,b +c,d @@`` hunks with real
    line numbers, 3 lines of context) for ``new_file``, ``overwrite`` and ``edit``."""
    deleted: list[str] = Field(default_factory=list)
    """``delete``: the virtual paths that go, the target first: every file,
    directory (ending in ``/``; empty ones too), dotfile and symlink (the link
    itself, never followed) the reviewer may see, up to :data:`MAX_DELETED`."""
    deleted_links: list[str] = Field(default_factory=list)
    """The entries of ``deleted`` that are symlinks (deleted as links)."""
    deleted_more: int = 0
    """Visible entries that go beyond those listed ("and N more")."""
    deleted_hidden: int = 0
    """Entries that go which the permission rules do not let the reviewer see
    (counted, never named: "and N entries the rules hide")."""
    command: str | None = None
    cwd: str | None = None
    fingerprint: str | None = None
    """Digest of what the preview was computed against (file bytes, or the
    listing for a delete); None when nothing exists there yet."""
    truncated: bool = False
    """The diff or the deleted list was cut to stay small in history."""
    error: str | None = None
    """Why the preview is ``unavailable``, or a problem the call would hit
    (for example ``old_string`` not found): shown on the card."""


MAX_DIFF_CHARS = 16_000
"""A diff longer than this is cut at a line boundary (``truncated``): the preview
is stored in history with the activity result, and a reviewer reads the head."""
MAX_DELETED = 200
"""Paths listed for a delete before the list is cut (``truncated``)."""
CONTEXT_LINES = 3


def compute_preview(backend: BackendProtocol, request: ToolRequest) -> ChangePreview:
    """The change ``request`` would make on ``backend``, computed without making it.

    ``request`` is the call's own :class:`ToolRequest` (backend-local path,
    route prefix, permissions, virtual path), so the preview and the call
    judge the same path with the same rules. What the preview's reads reach
    is judged with the model's read rights too (kernel.reach), so a link
    re-pointed after the check shows the reviewer nothing protected.
    """
    with judged_at_reach(
        reach_for(interrupts_as("deny", request.permissions), request.route_prefix)
    ):
        return _compute_preview(backend, request)


def _compute_preview(backend: BackendProtocol, request: ToolRequest) -> ChangePreview:
    if request.tool in TOOLS.running:
        return ChangePreview(kind="execute", command=str(request.args.get("command", "")))
    try:
        args = parse_args(request)
    except InvalidToolRequest as exc:
        return ChangePreview(kind="unavailable", path=request.virtual_path, error=str(exc))
    if not isinstance(args, WriteFileArgs | EditFileArgs | DeleteArgs):
        return ChangePreview(
            kind="unavailable", path=request.virtual_path, error=f"{request.tool} changes nothing"
        )
    shown = shown_path(request, args.file_path)
    # The reviewer sees only what the model may read: a read interrupt asks for
    # an approval of its own, which this one is not (a write's is), so it hides
    # content here as a deny does.
    readable = request.model_copy(
        update={"permissions": interrupts_as("deny", request.permissions)}
    )
    refused = entry_refused(backend, readable, "read", args.file_path)
    if isinstance(args, DeleteArgs):
        return _delete_preview(backend, readable, args.file_path, shown, refused is not None)
    if refused is not None:
        return ChangePreview(
            kind="unavailable",
            path=shown,
            error="the permission rules do not let the model read this path (read: "
            f"{_read_mode(request, shown)}), so its content is not shown",
        )
    [found] = backend.download([args.file_path])
    if found.code == "is_directory":
        return ChangePreview(kind="unavailable", path=shown, error=f"{shown} is a directory")
    if found.error is not None and found.code == "permission_denied":
        return ChangePreview(kind="unavailable", path=shown, error=found.error)
    current = found.content if found.error is None else None
    if isinstance(args, WriteFileArgs):
        return _write_preview(shown, current, args.content)
    return _edit_preview(shown, current, args)


def _read_mode(request: ToolRequest, shown: str) -> str:
    try:
        return check_permission(request.permissions, "read", shown)
    except ValueError:
        return "deny"


def _current_bytes(backend: BackendProtocol, local_path: str) -> bytes | None:
    """The file's bytes, or None when there is no file there (missing, a directory)."""
    [result] = backend.download([local_path])
    return result.content if result.error is None else None


def _write_preview(shown: str, current: bytes | None, content: str) -> ChangePreview:
    if current is None:
        diff, cut = unified_diff(shown, "", content, new_file=True)
        return ChangePreview(kind="new_file", path=shown, diff=diff, truncated=cut)
    old = decode_text(current)
    if old is None:
        return ChangePreview(
            kind="overwrite",
            path=shown,
            fingerprint=fingerprint(current),
            error=f"the current file is binary ({len(current)} bytes): no diff is shown",
        )
    diff, cut = unified_diff(shown, old, content)
    return ChangePreview(
        kind="overwrite", path=shown, diff=diff, truncated=cut, fingerprint=fingerprint(current)
    )


def _edit_preview(shown: str, current: bytes | None, args: EditFileArgs) -> ChangePreview:
    if current is None:
        return ChangePreview(kind="edit", path=shown, error=f"file not found: {shown}")
    digest = fingerprint(current)
    old = decode_text(current)
    if old is None:
        binary = "the file is binary: it cannot be edited"
        return ChangePreview(kind="edit", path=shown, fingerprint=digest, error=binary)
    new, result = apply_edit(shown, old, args.old_string, args.new_string, args.replace_all)
    if new is None:
        return ChangePreview(kind="edit", path=shown, fingerprint=digest, error=result.error_text)
    diff, cut = unified_diff(shown, old, new)
    return ChangePreview(kind="edit", path=shown, diff=diff, truncated=cut, fingerprint=digest)


def _delete_preview(
    backend: BackendProtocol, request: ToolRequest, local_path: str, shown: str, hidden: bool
) -> ChangePreview:
    """Every entry that goes, as far as the rules let the reviewer see it (module docstring).

    ``hidden``: the target itself may not be read. The fingerprint covers the
    whole listing, hidden entries included, with sizes and mtimes, so any
    change after the preview bounces the decision.
    """
    lister = getattr(backend, "delete_tree", None)
    tree: DeleteTree | None = None
    if lister is not None:
        try:
            tree = lister(local_path)
        except NotImplementedError:
            lister = None
        except ReachRefused as refused:  # re-pointed after the check (kernel.reach)
            return ChangePreview(kind="unavailable", path=shown, error=str(refused.strerror))
    if lister is None:
        return _globbed_delete_preview(backend, request, local_path, shown)
    if tree is None:
        return ChangePreview(kind="delete", path=shown, error=f"nothing to delete at {shown}")
    lines: list[str] = []
    listed: list[str] = []
    links: list[str] = []
    hidden_count = 0
    for entry in tree.entries:
        virtual = to_virtual(request.route_prefix, entry.path)
        lines.append(f"{entry.kind}\t{virtual}\t{entry.size}\t{entry.modified}")
        if (hidden and virtual == shown) or _hidden(request, virtual):
            hidden_count += 1
            continue
        name = virtual + ("/" if entry.kind == "dir" and virtual != "/" else "")
        listed.append(name)
        if entry.kind == "link":
            links.append(name)
    shown_names = listed[:MAX_DELETED]
    return ChangePreview(
        kind="delete",
        path=shown,
        deleted=shown_names,
        deleted_links=[link for link in links if link in set(shown_names)],
        deleted_more=len(listed) - len(shown_names),
        deleted_hidden=hidden_count,
        fingerprint=fingerprint("\n".join(lines).encode("utf-8", "surrogateescape")),
        truncated=tree.cut or len(listed) > MAX_DELETED,
        error="the listing stopped early: the delete may remove more" if tree.cut else None,
    )


def _hidden(request: ToolRequest, virtual: str) -> bool:
    try:
        mode = check_permission(request.permissions, "read", virtual)
    except ValueError:
        return True  # a name the validator refuses is never shown
    return mode != "allow"


def _globbed_delete_preview(
    backend: BackendProtocol, request: ToolRequest, local_path: str, shown: str
) -> ChangePreview:
    """A backend without a delete listing (an object store): its files, as glob sees them."""
    current = _current_bytes(backend, local_path)
    if current is not None:
        return ChangePreview(
            kind="delete", path=shown, deleted=[shown], fingerprint=fingerprint(current)
        )
    visible = search_visible(backend, request, local_path)
    found = backend.glob("**", local_path, visible=visible)
    if found.error is not None:
        return ChangePreview(kind="delete", path=shown, error=f"nothing to delete at {shown}")
    virtual = [to_virtual(request.route_prefix, p) for p in found.matches]
    paths = sorted(filter_paths(request.permissions, virtual))
    listing = fingerprint("\n".join(paths).encode())
    cut = len(paths) > MAX_DELETED or found.truncated
    return ChangePreview(
        kind="delete",
        path=shown,
        deleted=paths[:MAX_DELETED],
        deleted_more=max(len(paths) - MAX_DELETED, 0),
        fingerprint=listing,
        truncated=cut,
    )


def unified_diff(path: str, old: str, new: str, *, new_file: bool = False) -> tuple[str, bool]:
    """``(diff, truncated)``: a unified diff of the whole files, so hunks carry real
    line numbers, with :data:`CONTEXT_LINES` of context, cut to :data:`MAX_DIFF_CHARS`."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile="/dev/null" if new_file else f"a{path}",
        tofile=f"b{path}",
        n=CONTEXT_LINES,
    )
    out: list[str] = []
    size = 0
    for line in lines:
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        if size + len(line) > MAX_DIFF_CHARS:
            return "".join(out), True
        out.append(line)
        size += len(line)
    return "".join(out), False
