"""Typed references to the file tool activities, for workflows of your own.

A tools worker (``filegate worker --role tools`` or
:func:`filegate.worker.tools_worker`) serves the ``filegate.<tool>``
activities. A workflow that is not :class:`~filegate.workflows.AgentWorkflow`
calls them through the stubs here, which carry the activity name and the
request/outcome types, so nobody has to spell ``"filegate.read_file"``::

    from filegate.activities import file_tool, read_file, ReadFileArgs

    result = await file_tool(
        read_file, ReadFileArgs(file_path="/notes.md"), task_queue="fs", backend="filesystem"
    )
    print(result.text)

or, for full control of the options, with Temporal's own call::

    outcome = await workflow.execute_activity(
        read_file, request, task_queue="fs", **tool_activity_options("read_file")
    )

Why stubs (bodies that only raise) rather than the implementation: a
workflow module must not import the backends, threads and S3 client the real
activities need. The stubs import only the kernel and Temporal's workflow API,
so they pass through the workflow sandbox; the worker that runs the call
registers :class:`~filegate.activities.tools.FileToolActivities`, whose
methods carry the same names.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow

from filegate.activities.contract import tool_activity_options
from filegate.kernel.formatting import format_glob, format_grep, format_ls
from filegate.kernel.limits import DEFAULT_TOOL_WORKER_WAIT
from filegate.kernel.network_rules import NetworkPermission
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.protocol import GrepMatch
from filegate.kernel.registry import TOOLS
from filegate.kernel.tool_types import (
    TOOL_ACTIVITY_NAMES,
    TOOL_ARGS,
    GrepArgs,
    RawListing,
    ToolName,
    ToolOutcome,
    ToolRequest,
    ToolResult,
)
from filegate.kernel.visibility import to_virtual

WORKER_WAIT = timedelta(seconds=DEFAULT_TOOL_WORKER_WAIT)
""":func:`file_tool`'s default wait for a tools worker (the one default, in ``kernel.limits``)."""

ToolStub = Callable[[ToolRequest], Awaitable[ToolOutcome]]
"""The type of every stub: one :class:`ToolRequest` in, one :class:`ToolOutcome` out."""


def _stub(tool: ToolName) -> ToolStub:
    async def call(request: ToolRequest) -> ToolOutcome:
        raise RuntimeError(
            f"{TOOL_ACTIVITY_NAMES[tool]} is a reference: call it with "
            "workflow.execute_activity; a Filegate tools worker runs it"
        )

    call.__name__ = call.__qualname__ = tool
    call.__doc__ = f"The ``{TOOL_ACTIVITY_NAMES[tool]}`` activity (served by a tools worker)."
    return activity.defn(name=TOOL_ACTIVITY_NAMES[tool])(call)


STUBS: dict[ToolName, ToolStub] = {tool.name: _stub(tool.name) for tool in TOOLS}
"""Stub per tool name, one per registry entry (:data:`filegate.kernel.registry.TOOLS`)."""

# Named references for your own workflows (``execute_activity(read_file, request)``).
ls = STUBS["ls"]
read_file = STUBS["read_file"]
write_file = STUBS["write_file"]
edit_file = STUBS["edit_file"]
delete = STUBS["delete"]
glob = STUBS["glob"]
grep = STUBS["grep"]
execute = STUBS["execute"]


ActivityResult = ToolResult
"""Deprecated: the stubs' answer is :class:`~filegate.kernel.tool_types.ToolResult`,
the one result type of a tool call (``result.name`` where this had ``tool``,
``not result.is_error`` where it had ``ok``). Kept for one release."""


def tool_name(tool: ToolStub | ToolName) -> ToolName:
    """The tool a stub (or a name) stands for."""
    if isinstance(tool, str):
        if tool not in TOOL_ARGS:
            raise ValueError(f"unknown tool {tool!r}; one of {', '.join(TOOL_ARGS)}")
        return tool
    for name, stub in STUBS.items():
        if stub is tool:
            return name
    raise ValueError(f"{tool!r} is not one of the stubs in filegate.activities.stubs")


def new_call_id() -> str:
    """A tool-call id unique in the run chain, the same on every replay.

    The idempotency journal keys mutations by run chain + call id, so an id
    must never repeat within a chain, also across continue-as-new (where a
    per-run counter would start again at 1 and replay an earlier outcome).
    :func:`temporalio.workflow.uuid4` is deterministic per run and differs
    between runs, which is exactly that.
    """
    if not workflow.in_workflow():
        raise RuntimeError("a call id is derived inside a workflow; pass tool_call_id= outside one")
    return f"{workflow.info().workflow_id}/{workflow.uuid4()}"


def tool_request(
    tool: ToolStub | ToolName,
    args: BaseModel | Mapping[str, Any],
    *,
    backend: str,
    tool_call_id: str | None = None,
    permissions: list[FilesystemPermission] | None = None,
    policies: list[str] | None = None,
    route_prefix: str = "/",
    network: list[NetworkPermission] | None = None,
) -> ToolRequest:
    """A :class:`ToolRequest` with the fields a workflow of your own rarely sets filled in.

    ``args`` are validated against the tool's schema here, in the workflow, so
    a typo fails the workflow task with the field's name rather than the
    activity with ``InvalidToolRequest``. Call inside a workflow (the id and
    run chain come from its info) unless ``tool_call_id`` is given; ``""``
    leaves the id to whoever schedules the request later, in a workflow.
    """
    name = tool_name(tool)
    model = TOOL_ARGS[name]
    parsed = args if isinstance(args, model) else model.model_validate(dict(args))
    info = workflow.info() if workflow.in_workflow() else None
    return ToolRequest(
        tool=name,
        backend=backend,
        args=parsed.model_dump(),
        tool_call_id=new_call_id() if tool_call_id is None else tool_call_id,
        first_run_id=info.first_execution_run_id if info is not None else "",
        route_prefix=route_prefix,
        permissions=list(permissions or []),
        network=list(network or []) if name in TOOLS.running else [],
        policies=policies,
        want_raw=name in TOOLS.listing,
    )


async def file_tool(
    tool: ToolStub | ToolName,
    args: BaseModel | Mapping[str, Any],
    *,
    task_queue: str,
    backend: str,
    tool_call_id: str | None = None,
    permissions: list[FilesystemPermission] | None = None,
    policies: list[str] | None = None,
    route_prefix: str = "/",
    network: list[NetworkPermission] | None = None,
    local: bool = False,
    start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    worker_wait: timedelta | None = WORKER_WAIT,
) -> ToolResult:
    """Run one file tool from a workflow and return its :class:`ToolResult`.

    Options are :func:`tool_activity_options` for the tool (retries, heartbeat,
    search and execute budgets); pass a timeout to override one. ``local``
    runs it as a local activity, for a backend the workflow's own worker hosts.
    A failure the tool itself reports (a missing file, a denied path) is an
    error *result*; an activity that failed for good raises ``ActivityError``
    as any activity does (see :func:`outcome_for_activity_error` to turn it
    into a result instead).

    ``worker_wait`` bounds how long a call waits for a tools worker to take it
    from ``task_queue`` (its schedule-to-start timeout; None waits forever): a
    queue nobody polls then raises ``ActivityError`` whose cause is a
    ``TimeoutError`` of type ``SCHEDULE_TO_START``, instead of waiting in silence.
    """
    request = tool_request(
        tool,
        args,
        backend=backend,
        tool_call_id=tool_call_id,
        permissions=permissions,
        policies=policies,
        route_prefix=route_prefix,
        network=network,
    )
    execute_timeout = request.args.get("timeout") if request.tool in TOOLS.running else None
    options = tool_activity_options(request.tool, execute_timeout=execute_timeout)
    if start_to_close_timeout is not None:
        options["start_to_close_timeout"] = start_to_close_timeout
    if heartbeat_timeout is not None:
        options["heartbeat_timeout"] = heartbeat_timeout
    stub = STUBS[request.tool]
    if local:
        outcome = await workflow.execute_local_activity(stub, request, **options)
    else:
        if worker_wait is not None:
            options["schedule_to_start_timeout"] = worker_wait
        outcome = await workflow.execute_activity(stub, request, task_queue=task_queue, **options)
    return tool_result(request, outcome)


def tool_result(request: ToolRequest, outcome: ToolOutcome) -> ToolResult:
    """Put a listing's text back from its structured answer (paths made virtual).

    The request asked for the structured form (``want_raw``), so the activity's
    own text is only a summary; rendering here uses the same kernel formatter
    the activity would have, so the text is identical and nothing is sent twice.
    """
    raw = outcome.raw
    if raw is None or request.tool not in TOOLS.listing:
        return ToolResult(name=request.tool, tool_call_id=request.tool_call_id, outcome=outcome)
    prefix = request.route_prefix
    shown = RawListing()
    if raw.ls is not None:
        entries = [
            entry.model_copy(update={"path": to_virtual(prefix, entry.path)})
            for entry in raw.ls.entries
        ]
        shown.ls = raw.ls.model_copy(update={"entries": entries})
        rendered = format_ls(shown.ls)
    elif raw.glob is not None:
        matches = [to_virtual(prefix, path) for path in raw.glob.matches]
        shown.glob = raw.glob.model_copy(update={"matches": matches})
        rendered = format_glob(shown.glob)
    elif raw.grep is not None:
        hits = [
            GrepMatch(path=to_virtual(prefix, m.path), line=m.line, text=m.text)
            for m in raw.grep.matches
        ]
        shown.grep = raw.grep.model_copy(update={"matches": hits})
        args = GrepArgs.model_validate(request.args)
        rendered = format_grep(shown.grep, pattern=args.pattern, output_mode=args.output_mode)
    else:
        return ToolResult(name=request.tool, tool_call_id=request.tool_call_id, outcome=outcome)
    # An error keeps the activity's own text: it already names the virtual path.
    content = outcome.content if outcome.status == "error" else rendered.text
    shown_outcome = outcome.model_copy(update={"content": content, "raw": None})
    return ToolResult(
        name=request.tool, tool_call_id=request.tool_call_id, outcome=shown_outcome, listing=shown
    )


__all__ = [
    "STUBS",
    "ActivityResult",
    "ToolStub",
    "delete",
    "edit_file",
    "execute",
    "file_tool",
    "glob",
    "grep",
    "ls",
    "new_call_id",
    "read_file",
    "tool_name",
    "tool_request",
    "tool_result",
    "write_file",
]
