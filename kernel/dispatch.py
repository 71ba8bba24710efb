"""Run one tool call against one backend and render what the model sees.

The single implementation behind both the tool activities and the workflow's
in-workflow State path, so the two can never disagree. It is pure Python with
no Temporal or I/O of its own (only the backend it is handed does I/O), which
is what lets the workflow run it deterministically. Binary reads become content
blocks through the ``media`` reader the caller hands :func:`run_tool`: the
kernel's own (:func:`filegate.kernel.media.media_blocks`, no video decoding) by
default, the video-sampling one of :mod:`filegate.backends.media` on the
activity side.

Paths in ``request.args`` are backend-local (the workflow's route removed the
prefix); ``request.route_prefix`` puts it back on everything shown to the
model and on everything checked against ``request.permissions``, because
permission rules are written for virtual paths. That includes the path an
error is about (``error_path``, kernel.protocol): it is mapped like any other
path field, and message text is never rewritten. Rules judge a path as written
and its in-root symlink target (:mod:`filegate.kernel.visibility`); glob and
grep apply them during the walk, so nothing in an answer depends on a denied
file. An ``interrupt`` rule needs ``request.approved``. With ``request.want_raw``
(composite fan-out), ls/glob/grep also return their filtered result in
structured form, with backend-local paths, for the workflow to merge.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from filegate.kernel.execute_gate import (
    ExecuteGateError,
    check_execute_gate,
    compile_view,
    view_executor,
)
from filegate.kernel.formatting import (
    Rendered,
    format_delete,
    format_edit,
    format_error,
    format_execute,
    format_glob,
    format_grep,
    format_ls,
    format_write,
)
from filegate.kernel.gates import delete_refused, entry_refused, search_visible, visible_entries
from filegate.kernel.globbing import resolve_glob
from filegate.kernel.limits import DEFAULT_GREP_MAX, execute_timeout_problem
from filegate.kernel.media import MediaReader, media_blocks
from filegate.kernel.media_types import is_media_path
from filegate.kernel.network_rules import NETWORK_NEEDS_SANDBOX
from filegate.kernel.paths import ValidPath, below, mount_of, validate_path
from filegate.kernel.permissions import (
    filter_grep_matches,
    filter_ls_entries,
    filter_paths,
)
from filegate.kernel.protocol import (
    BackendProtocol,
    BackendResult,
    DeleteResult,
    EditResult,
    ExecuteResult,
    FileInfo,
    GlobResult,
    GrepMatch,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
    refuse_empty_command,
)
from filegate.kernel.reach import judged_at_reach, reach_for
from filegate.kernel.read_format import format_read, plan_read
from filegate.kernel.registry import TOOLS
from filegate.kernel.textops import fingerprint
from filegate.kernel.tool_types import (
    TOOL_ARGS,
    DeleteArgs,
    EditFileArgs,
    ExecuteArgs,
    GlobArgs,
    GrepArgs,
    LsArgs,
    RawListing,
    ReadFileArgs,
    ToolOutcome,
    ToolRequest,
    WriteFileArgs,
)
from filegate.kernel.visibility import to_virtual

_R = TypeVar("_R", bound=BackendResult)


class InvalidToolRequest(ValueError):
    """The request breaks the workflow/activity contract (bad args, bad path, wrong tool).

    Not a model mistake the model can fix by reading an error: the workflow
    validates arguments before routing, so this means a bug or a tampered
    request, and retrying cannot help.
    """


# --------------------------------------------------------------------------- parsing


def parse_args(request: ToolRequest) -> BaseModel:
    """Validate ``request.args`` against the tool's schema and check its path once.

    With ``request.virtual_path`` that one path is checked, and the local path
    in ``args`` must be exactly its part below ``route_prefix``; without it
    (older requests, fan-out targets) the local path and the prefix are
    checked. The path comes back as a :class:`~filegate.kernel.paths.ValidPath`,
    so the router, policies and backends do not check it again.
    Raises :class:`InvalidToolRequest`.
    """
    model = TOOL_ARGS.get(request.tool)
    if model is None:
        raise InvalidToolRequest(f"unknown tool {request.tool!r}")
    try:
        args = model.model_validate(request.args)
    except ValidationError as exc:
        raise InvalidToolRequest(f"invalid arguments for {request.tool}: {exc}") from exc
    name = TOOLS[request.tool].path_field
    if request.virtual_path is not None:
        if name is None:
            raise InvalidToolRequest(f"{request.tool} takes no path, but virtual_path is set")
        local = _local_of_virtual(request)
        if (getattr(args, name) or "/") != local:
            raise InvalidToolRequest(
                f"invalid {name} for {request.tool}: {getattr(args, name)!r} is not "
                f"{request.virtual_path!r} below route {request.route_prefix!r}"
            )
        return args.model_copy(update={name: local})
    if request.route_prefix != "/":
        try:
            validate_path(request.route_prefix)
        except ValueError as exc:
            raise InvalidToolRequest(f"invalid route_prefix: {exc}") from exc
    value = getattr(args, name) if name is not None else None
    if name is None or value is None:
        return args
    try:
        return args.model_copy(update={name: validate_path(value)})
    except ValueError as exc:
        raise InvalidToolRequest(f"invalid {name} for {request.tool}: {exc}") from exc


def _local_of_virtual(request: ToolRequest) -> ValidPath:
    """The backend-local path of ``request.virtual_path`` (checked here, once)."""
    raw = request.virtual_path
    try:
        virtual = validate_path(raw)
    except ValueError as exc:
        raise InvalidToolRequest(f"invalid virtual_path for {request.tool}: {exc}") from exc
    if virtual != raw:
        raise InvalidToolRequest(f"virtual_path {raw!r} is not normalised ({virtual!r})")
    mount = mount_of(request.route_prefix, virtual)
    if mount is None:
        raise InvalidToolRequest(
            f"invalid route_prefix: {request.route_prefix!r} does not hold {virtual!r}"
        )
    return below(virtual, mount)


def shown_path(request: ToolRequest, local_path: str) -> str:
    """The virtual path the model sees for the call's own (backend-local) path argument."""
    if request.virtual_path is not None:
        return request.virtual_path
    if request.route_prefix == "/":
        return local_path
    return to_virtual(request.route_prefix, local_path)


def _shown_error(result: _R, request: ToolRequest) -> _R:
    """``result`` with its ``error_path`` mapped into the virtual tree (structured, no text edit).

    The route root itself (local ``/``) shows as the mount (``/memories``), the
    way the model wrote it.
    """
    local = result.error_path
    if result.error is None or local is None or request.route_prefix == "/":
        return result
    virtual = to_virtual(request.route_prefix, local)
    if local == "/":
        virtual = virtual.rstrip("/")
    return result.model_copy(update={"error_path": virtual})


# --------------------------------------------------------------------------- outcomes


def outcome(rendered: Rendered) -> ToolOutcome:
    """A ToolOutcome from rendered text (and its error code)."""
    if rendered.is_error:
        return ToolOutcome(content=rendered.text, status="error", code=rendered.code)
    return ToolOutcome(content=rendered.text)


def render_mutation(
    request: ToolRequest, result: WriteResult | EditResult | DeleteResult | ExecuteResult
) -> ToolOutcome:
    """Render a write/edit/delete/execute result as :func:`run_tool` would.

    Shared with the idempotency journal, which rebuilds the outcome of an
    operation that was applied before a crash from the recorded facts.
    """
    if isinstance(result, ExecuteResult):
        ran = outcome(format_execute(result))
        facts: dict[str, Any] = {"exit_code": result.exit_code, "truncated": result.truncated}
        if result.network:
            facts["network"] = result.network
        return ran.model_copy(update=facts)
    local = result.path
    virtual = shown_path(request, local) if local else local
    shown = _shown_error(result, request).model_copy(update={"path": virtual})
    if isinstance(shown, WriteResult):
        return outcome(format_write(shown))
    if isinstance(shown, EditResult):
        edited = outcome(format_edit(shown))
        if shown.error is None or shown.occurrences:
            return edited.model_copy(update={"occurrences": shown.occurrences})
        return edited
    return outcome(format_delete(shown))


# --------------------------------------------------------------------------- gates


def _gated(refusal: Rendered | None) -> ToolOutcome | None:
    return None if refusal is None else outcome(refusal)


# --------------------------------------------------------------------------- tools


def _ls(backend: BackendProtocol, request: ToolRequest, args: LsArgs) -> ToolOutcome:
    denied = _gated(entry_refused(backend, request, "read", args.path, search=True))
    if denied:
        return denied
    result = backend.ls(args.path)
    if result.error is not None:
        shown = outcome(format_ls(_shown_error(result, request)))
        return _with_raw(request, shown, RawListing(ls=result))
    entries = [
        FileInfo.model_validate(
            {**entry.model_dump(), "path": to_virtual(request.route_prefix, entry.path)}
        )
        for entry in result.entries
    ]
    kept = visible_entries(backend, request, filter_ls_entries(request.permissions, entries))
    if request.want_raw:
        allowed = {entry.path for entry in kept}
        local = [
            entry
            for entry, virtual in zip(result.entries, entries, strict=True)
            if virtual.path in allowed
        ]
        return _raw_outcome(RawListing(ls=LsResult(entries=local)), len(local), "entries")
    return outcome(format_ls(LsResult(entries=kept)))


def _read(
    backend: BackendProtocol, request: ToolRequest, args: ReadFileArgs, *, media: MediaReader
) -> ToolOutcome:
    denied = _gated(entry_refused(backend, request, "read", args.file_path))
    if denied:
        return denied
    virtual = shown_path(request, args.file_path)
    plan = plan_read(args.offset, args.limit)
    if plan.early is not None:
        return outcome(format_read(ReadResult(path=virtual), plan))
    seen = None if is_media_path(args.file_path) else _whole_file(backend, args.file_path)
    result = backend.read(args.file_path, plan.offset, plan.limit)
    binary = media(virtual, result, offset=args.offset, limit=args.limit)
    if binary is not None:
        if binary.is_error:
            return ToolOutcome(content=binary.content, status="error", code=binary.code)
        return ToolOutcome(content=binary.content, media=binary.frames)
    shown = _shown_error(result, request).model_copy(update={"path": virtual})
    answer = outcome(format_read(shown, plan))
    if answer.status == "success" and result.error is None and seen is not None:
        return answer.model_copy(update={"fingerprint": seen})
    return answer


def _whole_file(backend: BackendProtocol, path: str) -> str | None:
    """The fingerprint of the whole file, taken *before* the read: a change that lands
    between the two makes a later write refuse (safe), never pass (unsafe)."""
    [whole] = backend.download([path])
    return fingerprint(whole.content) if whole.error is None and whole.content is not None else None


def _write(backend: BackendProtocol, request: ToolRequest, args: WriteFileArgs) -> ToolOutcome:
    denied = _gated(entry_refused(backend, request, "write", args.file_path))
    if denied:
        return denied
    return render_mutation(request, backend.write(args.file_path, args.content))


def _edit(backend: BackendProtocol, request: ToolRequest, args: EditFileArgs) -> ToolOutcome:
    denied = _gated(entry_refused(backend, request, "write", args.file_path))
    if denied:
        return denied
    result = backend.edit(args.file_path, args.old_string, args.new_string, args.replace_all)
    return render_mutation(request, result)


def _delete(backend: BackendProtocol, request: ToolRequest, args: DeleteArgs) -> ToolOutcome:
    if not backend.can_delete:
        return outcome(format_error("delete is not supported by this backend.", "unsupported"))
    blocked = _gated(delete_refused(backend, request, args.file_path))
    if blocked:
        return blocked
    return render_mutation(request, backend.delete(args.file_path))


def _search_home(backend: BackendProtocol) -> str:
    """Where a glob or grep without a path searches: the backend's ``glob_home`` (a
    host-path backend's ``root_dir``, as the reference's cwd), through wrappers; ``/``
    when it names none. Never the whole host from ``/`` (issue 54)."""
    current: object | None = backend
    while current is not None:
        home = getattr(current, "glob_home", None)
        if isinstance(home, str):
            return home
        current = getattr(current, "inner", None)
    return "/"


def _glob(backend: BackendProtocol, request: ToolRequest, args: GlobArgs) -> ToolOutcome:
    root = args.path or _search_home(backend)
    try:
        search_root = resolve_glob(args.pattern, root)[0]
    except ValueError:
        search_root = root  # the backend answers with the error value
    denied = _gated(
        entry_refused(backend, request, "read", search_root, search=True, pattern=args.pattern)
    )
    if denied:
        return denied
    visible = search_visible(backend, request, search_root)
    result = backend.glob(args.pattern, root, visible=visible)
    if result.error is not None:
        shown = outcome(format_glob(_shown_error(result, request)))
        return _with_raw(request, shown, RawListing(glob=result))
    virtual = [to_virtual(request.route_prefix, path) for path in result.matches]
    kept = filter_paths(request.permissions, virtual)
    if request.want_raw:
        allowed = set(kept)
        local = [p for p, v in zip(result.matches, virtual, strict=True) if v in allowed]
        raw = RawListing(glob=GlobResult(matches=local, **_cut(result)))
        return _raw_outcome(raw, len(local), "paths")
    return outcome(format_glob(GlobResult(matches=kept, **_cut(result))))


def _cut(result: GlobResult | GrepResult) -> dict[str, Any]:
    """Whether and why a search result is partial, for its filtered copy (contract §1)."""
    return {"truncated": result.truncated, "stopped_after": result.stopped_after}


def _grep(backend: BackendProtocol, request: ToolRequest, args: GrepArgs) -> ToolOutcome:
    root = args.path or _search_home(backend)
    denied = _gated(
        entry_refused(
            backend, request, "read", root, search=True, pattern=args.glob, root_is_result=True
        )
    )
    if denied:
        return denied
    max_count = DEFAULT_GREP_MAX if args.max_count is None else args.max_count
    if max_count <= 0:
        return outcome(
            format_error(f"max_count must be at least 1, got {max_count}.", "invalid_argument")
        )
    visible = search_visible(backend, request, root)
    result = backend.grep(args.pattern, root, args.glob, max_count=max_count, visible=visible)
    if result.error is not None:
        failure = outcome(
            format_grep(
                _shown_error(result, request),
                pattern=args.pattern,
                output_mode=args.output_mode,
            )
        )
        return _with_raw(request, failure, RawListing(grep=result))
    virtual = [
        GrepMatch(path=to_virtual(request.route_prefix, m.path), line=m.line, text=m.text)
        for m in result.matches
    ]
    # Defence in depth: the walk already skipped denied files (``visible``), so
    # this drops nothing unless a backend ignored the predicate.
    kept, _ = filter_grep_matches(request.permissions, virtual)
    if request.want_raw:
        allowed = {(m.path, m.line) for m in kept}
        local = [
            m for m, v in zip(result.matches, virtual, strict=True) if (v.path, v.line) in allowed
        ]
        raw = RawListing(grep=GrepResult(matches=local, **_cut(result)))
        return _raw_outcome(raw, len(local), "matches")
    shown = GrepResult(matches=kept, **_cut(result))
    return outcome(format_grep(shown, pattern=args.pattern, output_mode=args.output_mode))


def _execute(backend: BackendProtocol, request: ToolRequest, args: ExecuteArgs) -> ToolOutcome:
    """Run the command where the request's rules hold (kernel.execute_gate).

    A backend that compiles rules (the bubblewrap sandbox) runs it in the
    view they compile to; any other shell runs it only when no protecting
    rule reaches it or a human approved this very command.
    """
    if not backend.can_execute:
        return outcome(format_error("execute is not supported by this backend.", "unsupported"))
    empty = refuse_empty_command(args.command)  # here too: the rule view skips execute()
    if empty is not None:
        return render_mutation(request, empty)
    problem = execute_timeout_problem(args.timeout, request.max_execute_timeout)
    if problem:
        return outcome(format_error(problem, "invalid_argument"))
    rules = request.permissions
    in_view = view_executor(backend)
    try:
        if in_view is not None:
            view = compile_view(
                rules, backend=request.backend, lenient=request.approved, network=request.network
            )
            if view:
                return render_mutation(request, in_view(args.command, args.timeout, view))
        elif request.network:
            return outcome(format_error(f"execute refused: {NETWORK_NEEDS_SANDBOX}", "denied"))
        elif not request.approved:
            check_execute_gate(rules, backend=request.backend, can_execute=True)
    except ExecuteGateError as refused:
        return outcome(format_error(f"execute refused: {refused}", "denied"))
    return render_mutation(request, backend.execute(args.command, args.timeout))


def _raw_outcome(raw: RawListing, count: int, noun: str) -> ToolOutcome:
    """A fan-out part: the structured result plus a one-line summary (history stays small)."""
    return ToolOutcome(content=f"{count} {noun} (structured result)", raw=raw)


def _with_raw(request: ToolRequest, shown: ToolOutcome, raw: RawListing) -> ToolOutcome:
    """Attach a backend error's structured form when the fan-out asked for it.

    The Router tells a search root missing from one backend (harmless in a
    fan-out) from a real failure, so it needs the error code, not just text.
    """
    return shown.model_copy(update={"raw": raw}) if request.want_raw else shown


_HANDLERS: Mapping[str, Callable[[BackendProtocol, ToolRequest, Any], ToolOutcome]] = {
    "ls": _ls,
    "write_file": _write,
    "edit_file": _edit,
    "delete": _delete,
    "glob": _glob,
    "grep": _grep,
    "execute": _execute,
}


def run_tool(
    backend: BackendProtocol,
    request: ToolRequest,
    *,
    media: MediaReader = media_blocks,
    args: BaseModel | None = None,
) -> ToolOutcome:
    """Run ``request`` on ``backend``: gate, call, filter, format.

    Expected failures come back as an error-status outcome; only a request
    that breaks the contract raises (:class:`InvalidToolRequest`).
    ``media`` renders binary read results. The default never decodes video
    (what the workflow needs: decoding is I/O-heavy, slow and not
    deterministic enough for the workflow thread), so a video is returned as a
    plain file block; the activities pass
    :func:`filegate.backends.media.media_blocks`, which samples video frames.
    ``args``: what :func:`parse_args` returned for ``request``, for a caller
    that already parsed it (the activities do, to route the call); None
    parses here.
    """
    if args is None:
        args = parse_args(request)
    # The backend judges what it reached too (kernel.reach). An approved
    # ``interrupt`` covers the paths the gate judged and the reviewer saw; a
    # path reached instead of them is refused.
    reach = reach_for(request.permissions, request.route_prefix)
    with judged_at_reach(reach):
        if isinstance(args, ReadFileArgs):
            return _read(backend, request, args, media=media)
        return _HANDLERS[request.tool](backend, request, args)
