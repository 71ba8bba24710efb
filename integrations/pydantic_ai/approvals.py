"""Filegate as a Pydantic AI capability: it supplies the workspace and decides its approvals.

:class:`FilegateCapability` does two things for an agent:

- ``get_workspace``: the run's workspace is the :class:`~.workspace.FilegateWorkspace`
  it holds, for a fresh run and for the ref a durable unit rebuilds it from
  (Pydantic AI's Temporal integration binds its workspace operation only for
  a capability that supplies workspaces at construction);
- ``handle_deferred_tool_calls``: a tool call deferred because an ``interrupt``
  rule stopped one of its workspace calls (:mod:`.settled`) is decided by a
  human through Filegate, inside the agent's workflow. The call goes to the
  host workflow's :class:`~filegate.workflows.FileTools`, which shows it as a
  pending approval (with its change preview) to ``filegate approvals``,
  ``filegate approve``/``reject`` and the approval UI, waits durably for the
  decision, and on approval runs it from the workflow, so the tools worker
  sees the approval on record. The deferral is answered with ``ToolApproved``
  and the call's outcome, which the tool's re-run returns, or ``ToolDenied``
  with Filegate's text (a rejection, or the error it ran into).

Why the run does not end with ``DeferredToolRequests`` for Filegate's calls:
inside a workflow the workflow itself is the place that waits, and Filegate's
approval handlers are already registered on it; ending the run would only
hand the same wait to the caller. Calls deferred for other reasons are left
to the next handler (or the run's output), untouched.

Outside a workflow the hook declines (no handlers to decide with), so a
Filegate approval stays a ``DeferredToolRequests`` output; approving it there
cannot reach the tools worker (:func:`.settled.ask`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UserError
from pydantic_ai.tools import (
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolApproved,
    ToolDenied,
)
from pydantic_ai.workspaces import WorkspaceBackend, WorkspaceRef
from temporalio import workflow

from filegate.kernel.messages import ToolCall

from .settled import requested_call, settled_metadata
from .workspace import FilegateFileWorkspace


class _Result(Protocol):
    @property
    def is_error(self) -> bool: ...

    @property
    def text(self) -> str: ...


class TurnRunner(Protocol):
    """What the hook needs of the host's ``FileTools``: one turn of calls."""

    async def run_turn(self, calls: Any, *, step: int | None = None) -> list[Any]: ...


def host_file_tools(host: Any) -> TurnRunner:
    """The default way to the host's ``FileTools``: its ``file_tools`` attribute."""
    tools = getattr(host, "file_tools", None)
    if tools is None or not hasattr(tools, "run_turn"):
        # UserError: PydanticAIPlugin fails the workflow with it (a code fix is needed),
        # instead of retrying the workflow task forever.
        raise UserError(
            f"{type(host).__name__} has no file_tools: build FileTools(workspace."
            "file_tools_config()) in @workflow.init as self.file_tools, or pass "
            "FilegateCapability(file_tools=...)"
        )
    return tools  # type: ignore[no-any-return]


class FilegateCapability(AbstractCapability[Any]):
    """Supplies a Filegate workspace to an agent's runs and decides its interrupts (module doc).

    ``workspace``: the :class:`~.workspace.FilegateWorkspace` (or
    ``FilegateFileWorkspace``) every run works in. ``file_tools``: how to
    reach the host workflow's ``FileTools`` from the workflow instance
    (default: its ``file_tools`` attribute), built in ``@workflow.init`` from
    ``workspace.file_tools_config()`` so the approval handlers exist before the
    first query.
    """

    def __init__(
        self,
        workspace: FilegateFileWorkspace,
        *,
        file_tools: Callable[[Any], TurnRunner] = host_file_tools,
    ) -> None:
        if not isinstance(workspace, FilegateFileWorkspace):
            raise TypeError(
                f"FilegateCapability needs a FilegateWorkspace, got {type(workspace).__name__}"
            )
        self.workspace = workspace
        self.file_tools = file_tools

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a client and a callable: no spec form

    def get_workspace(
        self, ctx: RunContext[Any], *, ref: WorkspaceRef | None
    ) -> WorkspaceBackend | None:
        if ref is not None and ref != self.workspace.ref:
            return None  # a ref from history never redirects to another backend
        return self.workspace.for_context(ctx)

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        if not workflow.in_workflow():
            return None
        wanted: list[tuple[str, str, dict[str, Any], str]] = []
        for call in requests.approvals:
            found = requested_call(requests.metadata.get(call.tool_call_id))
            if found is not None:
                wanted.append((call.tool_call_id, *found))
        if not wanted:
            return None
        tools = self.file_tools(workflow.instance())
        calls = [ToolCall(id=call_id, name=tool, args=args) for call_id, tool, args, _ in wanted]
        results: list[_Result] = await tools.run_turn(calls)
        approvals: dict[str, ToolApproved | ToolDenied] = {}
        metadata: dict[str, dict[str, Any]] = {}
        for (call_id, _, _, key), result in zip(wanted, results, strict=True):
            if result.is_error:
                approvals[call_id] = ToolDenied(result.text)
            else:
                approvals[call_id] = ToolApproved()
                metadata[call_id] = settled_metadata(key, True, result.text)
        return requests.build_results(approvals=approvals, metadata=metadata)


__all__ = ["FilegateCapability", "TurnRunner", "host_file_tools"]
