"""Filegate's tools inside any workflow: the offer, the gated call path, the approvals.

:class:`FileTools` is what ``AgentWorkflow`` runs its tool side on, made public
so a workflow with its own model loop (or another agent framework) gets the
same guarantees with one object: the visibility-filtered tool specs (and the
tool descriptions rewritten per visible set), and ``await tools.run(call)``,
which validates the call, routes it, applies the permission rules, waits for a
human where a rule says so (with a change preview on the reviewer's card),
checks read-before-edit, runs the ``filegate.<tool>`` activity on the route's
task queue (local for ``kind="local"``, in the workflow for the State backend)
and returns the model's text together with the structured outcome.

Construct it inside the workflow (``@workflow.init`` or ``run``): it reads the
run's info and, with ``register_handlers=True`` (the default), registers the
approval handlers (``pending_approvals``, ``decided_approvals``, ``decide``,
and the grants' ``grants`` and ``revoke``) on the host through Temporal's
dynamic handler registration, so ``filegate approvals``, ``approve``/``reject``
and the approval UI work for the host like for an ``AgentWorkflow``. Its state
(:meth:`FileTools.state`) goes into the host's continue-as-new input and comes
back through ``state=``.

Example (a host workflow with its own loop)::

    @workflow.defn
    class MyAgent:
        @workflow.init
        def __init__(self, config: FileToolsConfig) -> None:
            self.tools = FileTools(config)

        @workflow.run
        async def run(self, config: FileToolsConfig) -> str:
            result = await self.tools.run(ToolCall(id="c1", name="ls", args={"path": "/"}))
            return result.text
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from filegate.kernel import wire
from filegate.kernel.execute_gate import ExecuteGateError
from filegate.kernel.messages import ContentBlock, Message, ToolCall, ToolSpec
from filegate.kernel.tool_types import ToolName, ToolOutcome, ToolResult
from filegate.workflows import tool_descriptions as descriptions
from filegate.workflows.approvals.grants import GrantBook, GrantHandlers
from filegate.workflows.approvals.handlers import ApprovalHandlers
from filegate.workflows.approvals.network_asks import NetworkDesk
from filegate.workflows.approvals.pending import ApprovalBook
from filegate.workflows.approvals.reviews import (
    CO_HOSTED_PATCH,
    PREVIEW_PATCH,
    ReviewDesk,
    execute_cwd,
)
from filegate.workflows.batching import batching_at_start
from filegate.workflows.calls import Routes, ToolCalls
from filegate.workflows.inputs import (
    DecidedApproval,
    FileToolsConfig,
    FileToolsState,
    PendingApproval,
)

__all__ = ["FileTools", "FileToolsConfig", "FileToolsState", "ToolResult", "tool_messages"]


def _co_hosted_queue(config: FileToolsConfig) -> str | None:
    """The default backend's task queue when this run is co-hosted on it, else None.

    Co-hosted: started on that queue, so the worker running it serves the backend
    (``tools_worker(serve_agents=True)``), and calls on that queue skip it
    (``Routes._in_this_worker``). Decided live by the worker's queue and recorded
    by the version marker; replaying, the marker alone decides, since a replayer
    (or a worker on another queue) has a queue of its own.
    """
    default = config.backend.default
    if default.kind != "remote" or not workflow.in_workflow():  # built for its specs only
        return None
    here = default.task_queue == workflow.info().task_queue
    if (here or workflow.unsafe.is_replaying()) and workflow.patched(CO_HOSTED_PATCH):
        return default.task_queue
    return None


class FileTools:
    """The tool side of an agent, for any workflow (see the module docstring).

    ``messages``: the host's conversation, if it keeps one as Filegate
    :class:`~filegate.kernel.messages.Message` objects; approval cards quote the
    task (first user message) and the model's text of the turn that made a
    call from it. ``register_handlers=False`` is for hosts that declare the
    handlers themselves and delegate to :attr:`approvals` (``AgentWorkflow``).

    Its parts are held, each built with what it uses (issue 35): the routes, the
    approval handlers, the review desk and the call path over them.
    """

    def __init__(
        self,
        config: FileToolsConfig,
        state: FileToolsState | None = None,
        *,
        messages: list[Message] | None = None,
        register_handlers: bool = True,
    ) -> None:
        state = state or FileToolsState()
        counters = state.counters
        self._input = config
        self._tool_calls = counters.get("tool_calls", 0)
        self._tool_errors = counters.get("tool_errors", 0)
        self._turns = counters.get("turns", 0)
        self._book = ApprovalBook(
            seq=state.approval_seq,
            rejected=state.rejected,
            random_hex=lambda: workflow.uuid4().hex,
            decided=state.decided,
        )
        self._book.total = counters.get("approvals", 0)
        self._book.decided_total = counters.get("decided_approvals", 0)
        self._grants = GrantBook(state.grants, random_hex=lambda: workflow.uuid4().hex)
        self._grant_handlers = GrantHandlers(self._grants)
        # Version markers, asked as the run starts (before any activity) in this
        # order: batching, previews (only where a human may be asked), co-hosting.
        at_start = batching_at_start()
        previews = config.may_ask() and workflow.patched(PREVIEW_PATCH)
        self._routes = Routes(config, state, _co_hosted_queue(config), at_start)
        self._approvals = ApprovalHandlers(
            self._book,
            check_edit=self._routes.check_edit,
            recheck=self._routes.recheck,
            search_attributes=config.approval_search_attributes,
            grants=self._grants,
        )
        messages = messages if messages is not None else []
        desk = ReviewDesk(config, self._routes, self._approvals, self._grants, messages, previews)
        self._network = NetworkDesk(
            config.network,
            self._approvals,
            self._grants,
            self._routes.now,
            execute_cwd(config),
            config.reviewer,
        )
        self._calls = ToolCalls(config, self._routes, desk, state, self._network)
        # Raised from the first call, not here: the host's __init__ may still be
        # setting up (its handlers, its own state), and a host that catches our
        # error there would be left half-built.
        self._config_error = _config_error(config)
        if register_handlers:
            self._approvals.register()
            self._grant_handlers.register()
            self._network.register()

    def check_config(self) -> None:
        """Fail the host workflow if the rules cannot hold on these backends.

        A rule that ``execute`` could bypass (``kernel.execute_gate``) is
        refused before any tool runs: a non-retryable ``ApplicationError`` of
        type ``InvalidConfiguration`` naming the rule and the backend. Every
        call path runs it first; a host may call it at the start of its run.
        """
        if self._config_error is not None:
            raise self._config_error

    # ------------------------------------------------------------------ the offer

    def visible(self) -> list[ToolName]:
        """The tools the model may see now: the whitelist, minus what no backend can do."""
        return self._routes.visible()

    def specs(self) -> list[ToolSpec]:
        """The visible tools as specs, descriptions rewritten for the visible set."""
        return descriptions.tool_specs(
            self._routes.visible(),
            self._input.tool_descriptions,
            video=descriptions.any_can_read_video(self._input.backend),
        )

    def openai_tools(self) -> list[dict[str, Any]]:
        """:meth:`specs` in the OpenAI Chat Completions ``tools`` format."""
        return [spec.openai() for spec in self.specs()]

    def anthropic_tools(self) -> list[dict[str, Any]]:
        """:meth:`specs` in the Anthropic Messages ``tools`` format."""
        return [spec.anthropic() for spec in self.specs()]

    def system_prompt(self, custom: str | None = None, *, extend: bool = False) -> str:
        """The default system prompt for the visible tools (or ``custom``, or both)."""
        return descriptions.system_prompt(
            custom, self._routes.visible(), self._input.backend, extend=extend
        )

    # ------------------------------------------------------------------ calls

    async def run(self, call: ToolCall | dict[str, Any]) -> ToolResult:
        """Run one call (a turn of its own): never raises for a model mistake."""
        return (await self.run_turn([call]))[0]

    async def run_turn(
        self, calls: Sequence[ToolCall | dict[str, Any]], *, step: int | None = None
    ) -> list[ToolResult]:
        """Run one model turn's calls concurrently, results in the calls' order.

        A mutation keeps its place on its path against the turn's other calls
        (reads of one path run side by side). ``step`` numbers the turn in the
        activities' call ids (unique per run chain, which keys the idempotency
        journal); None counts turns here, carried across continue-as-new.
        """
        self.check_config()
        parsed = [c if isinstance(c, ToolCall) else _tool_call(c, i) for i, c in enumerate(calls)]
        if step is None:
            self._turns += 1
            step = self._turns
        outcomes = await self._calls.run_turn(parsed, step)
        results = []
        for call, outcome in zip(parsed, outcomes, strict=True):
            self._tool_calls += 1
            if outcome.status == "error":
                self._tool_errors += 1
            results.append(ToolResult(tool_call_id=call.id, name=call.name, outcome=outcome))
        return results

    def check_edit(self, tool: str, args: dict[str, Any]) -> str | None:
        """A reviewer's edited arguments: the refusal text, or None when they may run."""
        return self._routes.check_edit(tool, args)

    def noted(self, call: ToolCall, outcome: ToolOutcome) -> bool:
        """Book a read answered outside the workflow as if it had run here.

        For a caller that answers reads the rules alone allow itself (``filegate
        mcp --root``, ``cli.mcp_fast``): the path counts as read, its fingerprint as
        the content last seen, the call and its error in the counts. The read is
        checked the way the caller checked it
        (:meth:`~filegate.workflows.calls.Routes.answered_unasked`); one this run
        would not have answered so is not booked (False).
        """
        checked = self._routes.answered_unasked(call.name, call.args)
        if checked is None:
            return False
        self._calls.remember(checked, outcome)
        self._tool_calls += 1
        if outcome.status == "error":
            self._tool_errors += 1
        return True

    def stamp(self, now: str | None) -> None:
        """Stamp the next calls with ``now``, the host's latest model answer time
        (recorded with the answer, so replays agree; :meth:`Routes.now`)."""
        self._routes.model_time = now

    # ------------------------------------------------------------------ approvals, state

    @property
    def approvals(self) -> ApprovalHandlers:
        """The approval handlers (for hosts that declare them with decorators)."""
        return self._approvals

    @property
    def network(self) -> NetworkDesk:
        """The ``ask_network`` update (hosts that declare their handlers delegate here)."""
        return self._network

    @property
    def grants(self) -> GrantHandlers:
        """The ``grants`` query and ``revoke`` update (hosts that declare them delegate here)."""
        return self._grant_handlers

    def pending_approvals(self) -> list[PendingApproval]:
        return self._approvals.pending()

    def decided_approvals(self) -> list[DecidedApproval]:
        return self._approvals.decided()

    @property
    def counts(self) -> dict[str, int]:
        """Calls, errors and approvals so far (across continue-as-new)."""
        return {
            "tool_calls": self._tool_calls,
            "tool_errors": self._tool_errors,
            "approvals": self._book.total,
            "decided_approvals": self._book.decided_total,
            "turns": self._turns,
        }

    def state(self) -> FileToolsState:
        """What the host carries across continue-as-new (call between turns)."""
        return FileToolsState(
            state_files={name: backend.to_dict() for name, backend in self._routes.states.items()},
            seen_paths=sorted(self._calls.seen),
            read_fingerprints=dict(self._calls.fingerprints),
            rejected=dict(self._book.rejected),
            approval_seq=self._book.seq,
            decided=list(self._book.decided),
            counters=self.counts,
            grants=self._grants.carried(workflow.now() if workflow.in_workflow() else None),
        )


def _config_error(config: FileToolsConfig) -> ApplicationError | None:
    try:
        config.check_execute_gate()
    except ExecuteGateError as error:
        return ApplicationError(
            str(error), type=wire.INVALID_CONFIGURATION_ERROR, non_retryable=True
        )
    return None


def _tool_call(raw: dict[str, Any], index: int) -> ToolCall:
    """A call given as a dict (``{"name", "args", "id"?}``); an id is made when missing."""
    args = raw.get("args")
    return ToolCall(
        id=str(raw.get("id") or f"call_{index}"),
        name=str(raw.get("name", "")),
        args=args if isinstance(args, dict) else {},
    )


def tool_messages(results: list[ToolResult]) -> list[Message]:
    """A turn's results as conversation messages: one ``tool`` message per call,
    then the turn's video frames as one user message (providers need a turn's
    tool results contiguous; contract §6)."""
    messages = [
        Message(
            role="tool",
            content=r.outcome.content,
            tool_call_id=r.tool_call_id,
            status=r.outcome.status,
            name=r.name,
        )
        for r in results
    ]
    frames: list[ContentBlock] = [block for r in results for block in r.outcome.media]
    if frames:
        messages.append(Message(role="user", content=frames))
    return messages
