"""The tool call path of a workflow's file tools: check, gate, approve, route, run.

Two of :class:`~filegate.workflows.file_tools.FileTools`' parts, each built with
what it uses (issue 35: no mixins). :class:`Routes` validates and routes a call
(:mod:`~filegate.workflows.gate`), gates it by the deny rules and runs it, or
its change preview, in the workflow for the State backend
(:func:`filegate.kernel.dispatch.run_tool`) or as the ``filegate.<tool>``
activity (local for ``kind="local"`` backends). :class:`ToolCalls` runs a turn
on it: the calls run concurrently, ordered per path (:class:`PathOrder`), each
may wait for a human (:class:`~filegate.workflows.approvals.reviews.ReviewDesk`) and is
checked for read-before-edit.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import FailureError

from filegate.activities.contract import (
    PREVIEW_ACTIVITY,
    outcome_for_activity_error,
    preview_activity_options,
    tool_activity_options,
)
from filegate.kernel.dispatch import outcome as _rendered
from filegate.kernel.dispatch import run_tool
from filegate.kernel.execute_gate import protecting_rules
from filegate.kernel.formatting import Rendered, format_error, not_read_before_edit
from filegate.kernel.messages import TextBlock, ToolCall
from filegate.kernel.paths import is_within
from filegate.kernel.permissions import FilesystemPermission, interrupts_as
from filegate.kernel.previews import ChangePreview, compute_preview
from filegate.kernel.registry import TOOLS
from filegate.kernel.routing import Router
from filegate.kernel.state import StateBackend
from filegate.kernel.tool_types import (
    TOOL_ACTIVITY_NAMES,
    ToolBatch,
    ToolName,
    ToolOutcome,
    ToolRequest,
    activity_call_id,
)
from filegate.workflows import fanout, telemetry
from filegate.workflows import tool_descriptions as descriptions
from filegate.workflows.approvals.network_asks import NetworkDesk
from filegate.workflows.approvals.pending import APPROVED_NOTE, edited_note
from filegate.workflows.approvals.reviews import ReviewDesk, execute_cwd
from filegate.workflows.batching import LocalCalls, RemoteCalls
from filegate.workflows.gate import CheckedCall, approval_trigger, check_call, deny_gate
from filegate.workflows.inputs import BackendRef, FileToolsConfig, FileToolsState, PendingApproval
from filegate.workflows.unserved import not_picked_up, unserved_outcome, worker_wait_options


class PathOrder:
    """Which earlier calls of a turn a call must wait for, by order key (path or shell).

    A mutation (:data:`TOOLS.mutating`) waits for every earlier call on its key;
    a read waits only for the last mutation before it, so reads of one path
    between two mutations run concurrently. A call without a key waits for
    nothing.
    """

    def __init__(self) -> None:
        self._mutation: dict[str, asyncio.Task[ToolOutcome]] = {}
        self._reads: dict[str, list[asyncio.Task[ToolOutcome]]] = {}

    def before(self, key: str | None, *, mutates: bool) -> list[asyncio.Task[ToolOutcome]]:
        if key is None:
            return []
        last = self._mutation.get(key)
        reads = self._reads.get(key, []) if mutates else []
        # The reads since the last mutation each wait for it already.
        return list(reads) if reads else ([last] if last is not None else [])

    def add(self, key: str | None, task: asyncio.Task[ToolOutcome], *, mutates: bool) -> None:
        if key is None:
            return
        if mutates:
            self._mutation[key] = task
            self._reads.pop(key, None)
        else:
            self._reads.setdefault(key, []).append(task)


class Routes:
    """Where a call goes and how it runs there; the call path and the review desk share it.

    ``state``: the carried State backends' files (run here in the workflow);
    ``co_hosted``: the default backend's queue when the run is co-hosted on it
    (calls there run as local activities); ``batching``: whether calls may share
    activities. Both are decided by version markers as the run starts.
    """

    def __init__(
        self, config: FileToolsConfig, state: FileToolsState, co_hosted: str | None, batching: bool
    ) -> None:
        kept = state.state_files
        names = [ref.name for ref in config.backend.all_backends() if ref.kind == "state"]
        self.states = {
            n: StateBackend.from_dict(kept[n]) if n in kept else StateBackend() for n in names
        }
        self.router = Router([route.prefix for route in config.backend.routes])
        self._input = config
        self._enabled = descriptions.whitelisted_tools(config.tools)
        self._co_hosted = co_hosted
        self._local = LocalCalls(_start_local, at_start=batching)
        self._remote = RemoteCalls(at_start=batching)
        self.model_time: str | None = None
        """When the host's latest model answer came (:meth:`FileTools.stamp`)."""

    def visible(self) -> list[ToolName]:
        return descriptions.visible_tools(self._enabled, self._input.backend)

    def check(self, tool: str, args: Any) -> CheckedCall | Rendered:
        return check_call(
            tool,
            args,
            allowed=self.visible(),
            router=self.router,
            max_args_chars=self._input.limits.max_tool_args_chars,
            max_execute_timeout=self._input.limits.max_execute_timeout,
        )

    def gate(self, call: CheckedCall) -> Rendered | None:
        return deny_gate(self._input.permissions, call, has_descendants=self._has_descendants(call))

    def check_edit(self, tool: str, args: dict[str, Any]) -> str | None:
        """A reviewer's edited arguments: the refusal text, or None when they may run."""
        checked = self.check(tool, args)
        if isinstance(checked, Rendered):
            return checked.text
        refused = self.gate(checked)
        return refused.text if refused is not None else None

    def _has_descendants(self, call: CheckedCall) -> bool:
        """Only the State backend can be asked cheaply; remote targets count as trees."""
        if call.tool not in TOOLS.removing or call.local_path is None:
            return True
        ref = self._input.backend.backend_for(call.prefix)
        if ref.kind != "state":
            return True
        return any(
            p.startswith(call.local_path.rstrip("/") + "/") for p in self.states[ref.name].paths()
        )

    def now(self) -> str:
        """The time of the latest model answer: what this step's tool calls are stamped with.

        Recorded with the model call's result, so replays agree with the original
        run; ``workflow.now()`` (the fallback, before any answer) can differ
        after a local activity.
        """
        return self.model_time or workflow.now().isoformat()

    def request(
        self,
        tool: ToolName,
        prefix: str | None,
        local_args: dict[str, Any],
        tool_call_id: str,
        *,
        want_raw: bool = False,
        approved: bool = False,
        approved_by: str | None = None,
        virtual_path: str | None = None,
        first_run_id: str | None = None,
    ) -> ToolRequest:
        """The request for one call on route ``prefix`` (also what a preview reads with).

        ``first_run_id``: the run chain's, for a request built outside the workflow
        (:meth:`answered_unasked`); None: this run's."""
        ref = self._input.backend.backend_for(prefix)
        return ToolRequest(
            tool=tool,
            backend=ref.name,
            args=local_args,
            tool_call_id=tool_call_id,
            first_run_id=first_run_id or workflow.info().first_execution_run_id,
            route_prefix=prefix or "/",
            virtual_path=virtual_path,
            # An explicit interrupt_on entry replaces the rule-generated approvals of its tool.
            permissions=self._request_rules(tool),
            network=self._input.network if tool in TOOLS.running else [],
            policies=self._input.policies,
            max_execute_timeout=self._input.limits.max_execute_timeout,
            want_raw=want_raw,
            approved=approved,
            approved_by=approved_by,
        )

    def _request_rules(self, tool: ToolName) -> list[FilesystemPermission]:
        """The rules a request carries to the tools worker.

        ``execute``: the protecting rules its shell can reach, interrupts kept
        (the worker compiles them into the command's view, or refuses a host
        shell's command no human approved; kernel.execute_gate). Other tools:
        all rules, with an explicit interrupt_on entry replacing the
        rule-generated approvals of its tool.
        """
        rules = self._input.permissions
        if tool in TOOLS.running:
            return protecting_rules(rules, self._input.shell_unreachable_prefixes())
        return interrupts_as("allow", rules) if tool in self._input.interrupt_on else rules

    def exact_request(
        self,
        call: CheckedCall,
        tool_call_id: str,
        *,
        approved: bool = False,
        approved_by: str | None = None,
        first_run_id: str | None = None,
    ) -> ToolRequest:
        """The request of a call on one route: its path made local to the route's
        backend, the checked path kept as ``virtual_path`` so the activity checks
        one path, not two."""
        local_args = dict(call.args)
        if call.path is not None and call.local_path is not None:
            local_args[TOOLS.path_fields[call.tool]] = call.local_path
        return self.request(
            call.tool,
            call.prefix,
            local_args,
            tool_call_id,
            approved=approved,
            approved_by=approved_by,
            virtual_path=call.path,
            first_run_id=first_run_id,
        )

    def answered_unasked(self, tool: str, args: Any) -> CheckedCall | None:
        """``tool(args)`` checked, when it is a read of one path that the rules alone
        allow: valid, not refused, and needing no approval (so no person, reviewer or
        grant has a say in it); else None.

        Why one question: such a read may be answered outside the workflow
        (``filegate mcp``'s fast path, ``cli.mcp_fast``) and booked here afterwards
        (:meth:`FileTools.noted`); both sides ask it, so the workflow never books a
        read it would not have answered the same way.
        """
        if tool not in TOOLS.exact or tool in TOOLS.mutating:
            return None
        checked = self.check(tool, args)
        if isinstance(checked, Rendered) or checked.path is None or self.gate(checked):
            return None
        rules, asked = self._input.permissions, self._input.interrupt_on
        if approval_trigger(rules, asked, checked) is not None:
            return None
        return checked

    def _in_this_worker(self, ref: BackendRef, tool: str) -> bool:
        """Whether a call on ``ref`` runs as a local activity of the worker running this run.

        Always for ``kind="local"``. For a remote backend on the queue of a
        co-hosted run too (started on its default backend's queue: only a worker
        serving that backend polls it for workflow tasks,
        ``tools_worker(serve_agents=True)``), except
        ``execute``: a command may run for minutes, and as a regular activity
        on the same queue it heartbeats, can be cancelled and does not hold the
        workflow task open meanwhile.
        """
        if ref.kind == "local":
            return True
        return (
            ref.kind == "remote" and ref.task_queue == self._co_hosted and tool not in TOOLS.running
        )

    async def dispatch(self, ref: BackendRef, request: ToolRequest) -> ToolOutcome:
        if ref.kind == "state":
            backend = self.states[ref.name]
            backend.set_now(self.now())
            return run_tool(backend, request)
        options = tool_activity_options(
            request.tool,
            execute_timeout=request.args.get("timeout"),
            heartbeat_timeout=timedelta(seconds=self._input.limits.tool_heartbeat_timeout_seconds),
        )
        name = TOOL_ACTIVITY_NAMES[request.tool]
        try:
            if self._in_this_worker(ref, request.tool):
                # Local activities have no heartbeats: the start-to-close timeout
                # bounds them, and a dead agent worker loses the whole task anyway.
                del options["heartbeat_timeout"]
                return await self._local.call(name, request, options)
            # Bounded: a queue nobody polls is reported, not waited on (workflows.unserved).
            options.update(worker_wait_options(self._input.limits))
            options.update(self._input.priority_options())
            return await self._remote.call(name, request, options, ref.task_queue)
        except FailureError as error:
            if not_picked_up(error):
                return unserved_outcome(request.tool, ref, self._input.limits)
            return outcome_for_activity_error(request.tool, error)

    async def recheck(self, approval: PendingApproval) -> ChangePreview | None:
        """A fresh preview of a pending approval's call (the handlers compare fingerprints)."""
        checked = self.check(approval.tool, approval.args)
        if isinstance(checked, Rendered):
            return None
        return await self.preview(checked, approval.tool_call_id)

    async def preview(self, checked: CheckedCall, call_id: str) -> ChangePreview:
        """What ``checked`` would change, read where its route's files are; never raises."""
        if checked.tool in TOOLS.running:
            command = str(checked.args.get("command", ""))
            return ChangePreview(kind="execute", command=command, cwd=execute_cwd(self._input))
        local_args = dict(checked.args)
        if checked.local_path is not None:
            local_args[TOOLS.path_fields[checked.tool]] = checked.local_path
        tool: ToolName = checked.tool
        request = self.request(tool, checked.prefix, local_args, call_id, virtual_path=checked.path)
        # All the rules: an interrupt_on entry waives the call's own approvals,
        # not the model's read rights, which decide what the preview may show.
        request = request.model_copy(update={"permissions": self._input.permissions})
        ref = self._input.backend.backend_for(checked.prefix)
        options = preview_activity_options()
        try:
            if ref.kind == "state":
                return _in_workflow(self.states[ref.name], request)
            if self._in_this_worker(ref, checked.tool):
                return await self._local.one(
                    lambda: workflow.execute_local_activity(
                        PREVIEW_ACTIVITY, request, result_type=ChangePreview, **options
                    )
                )
            remote: dict[str, Any] = {**options, **self._input.priority_options()}
            return await workflow.execute_activity(
                PREVIEW_ACTIVITY,
                request,
                result_type=ChangePreview,
                task_queue=ref.task_queue,
                **remote,
            )
        except (FailureError, ValueError) as error:
            # ValueError: a local activity this agent worker does not register.
            reason = getattr(error, "cause", None) or error
            return ChangePreview(kind="unavailable", path=checked.path, error=str(reason))


class ToolCalls:
    """The call path: one turn's calls, in order per path, each approved and run on ``routes``.

    ``desk`` asks grants and humans. The paths this run read or wrote (``seen``,
    for read-before-edit) and each file's content as it last saw it
    (``fingerprints``) come from the carried ``state`` and go into the next one.
    """

    def __init__(
        self,
        config: FileToolsConfig,
        routes: Routes,
        desk: ReviewDesk,
        state: FileToolsState,
        network: NetworkDesk | None = None,
    ) -> None:
        """``network``: told when an ``execute`` ends, so its commands' open network
        questions close (:meth:`NetworkDesk.withdraw`)."""
        self._input = config
        self._routes = routes
        self._desk = desk
        self._network = network
        self.seen = set(state.seen_paths)
        self.fingerprints = dict(state.read_fingerprints)

    async def run_turn(self, calls: list[ToolCall], step: int) -> list[ToolOutcome]:
        """Run one turn's calls concurrently; the outcomes in the calls' order."""
        order = PathOrder()
        tasks: list[asyncio.Task[ToolOutcome]] = []
        for index, call in enumerate(calls):
            # Checked here, once: the order key is the checked call's path, so the
            # workflow validates each path a single time (bench/path_checks.py).
            checked = self._routes.check(call.name, call.args)
            key = self._order_key(checked)
            mutates = call.name in TOOLS.mutating
            previous = order.before(key, mutates=mutates)
            call_id = activity_call_id(step, index, call.id)
            task = asyncio.create_task(self._one_call(call, checked, call_id, previous))
            order.add(key, task, mutates=mutates)
            tasks.append(task)
        return list(await asyncio.gather(*tasks))

    @staticmethod
    def _order_key(checked: CheckedCall | Rendered) -> str | None:
        """What a call is ordered on: its validated path, the shell, or nothing
        (a refused call touches nothing and waits for nobody)."""
        if isinstance(checked, Rendered):
            return None
        return "<shell>" if checked.tool in TOOLS.running else checked.path

    async def _one_call(
        self,
        call: ToolCall,
        checked: CheckedCall | Rendered,
        call_id: str,
        previous: list[asyncio.Task[ToolOutcome]],
    ) -> ToolOutcome:
        if previous:
            await workflow.wait(previous)
        if isinstance(checked, Rendered):
            return _rendered(checked)
        refused = self._routes.gate(checked)
        if refused is not None:
            telemetry.denied(checked.tool, call_id)
            return _rendered(refused)
        unread = self._unread_edit(checked)
        if unread is not None:  # checked before asking: a reviewer never decides a no-op
            return unread
        note = ""
        approved_by: str | None = None
        trigger = approval_trigger(self._input.permissions, self._input.interrupt_on, checked)
        granted = self._desk.granted(checked, trigger)  # a remembered approval: nobody is asked
        if granted is not None:
            note, approved_by = granted.note, granted.approved_by
        elif trigger is not None:
            decided, by, seen = await self._desk.ask_human(call, checked, trigger, call_id)
            approved_by = by
            if isinstance(decided, ToolOutcome):
                return decided
            if decided.tool in TOOLS.writing and decided.path is not None:
                # Approved against what the reviewer saw, which may be newer than
                # the model's read; an edited call was not shown: no check.
                if seen is not None:
                    self.fingerprints[decided.path] = seen
                else:
                    self.fingerprints.pop(decided.path, None)
            if decided is not checked:
                note = edited_note(by, decided.args)
            else:
                note = APPROVED_NOTE.format(by=by)
            checked = decided
        # Only a call a human approved (as asked, edited, or by a grant) carries the approval.
        approved = trigger is not None and (granted is None or granted.approves)
        network = self._network if checked.tool in TOOLS.running else None
        if network is not None:
            network.started(call_id, call.id)
        outcome = await self._execute(checked, call_id, approved=approved, approved_by=approved_by)
        if network is not None:
            network.withdraw(call_id)
        if note:
            outcome = _with_note(outcome, note)
        return outcome

    async def _execute(
        self,
        call: CheckedCall,
        tool_call_id: str,
        *,
        approved: bool = False,
        approved_by: str | None = None,
    ) -> ToolOutcome:
        unread = self._unread_edit(call)
        if unread is not None:
            return unread
        ref = self._input.backend.backend_for(call.prefix)
        if call.tool in TOOLS.removing and not ref.can_delete:
            return _rendered(
                format_error(f"delete is not supported for {call.path}", "unsupported")
            )
        if fanout.needs_fanout(self._routes.router, call.tool, call.args):

            async def run_target(
                prefix: str | None, args: dict[str, Any], virtual_path: str
            ) -> ToolOutcome:
                request = self._routes.request(
                    call.tool,
                    prefix,
                    args,
                    tool_call_id,
                    want_raw=True,
                    approved=approved,
                    approved_by=approved_by,
                    virtual_path=virtual_path,
                )
                return await self._routes.dispatch(self._input.backend.backend_for(prefix), request)

            return _rendered(
                await fanout.fan_out(self._routes.router, call.tool, call.args, run_target)
            )
        request = self._routes.exact_request(
            call, tool_call_id, approved=approved, approved_by=approved_by
        )
        if call.tool in TOOLS.writing and call.path in self.fingerprints:
            expected = self.fingerprints[call.path]
            request = request.model_copy(update={"expected_fingerprint": expected})
        if call.tool in TOOLS.running:
            self.fingerprints.clear()  # the run's own command may change any file
        outcome = await self._routes.dispatch(ref, request)
        self.remember(call, outcome)
        return outcome

    def remember(self, call: CheckedCall, outcome: ToolOutcome) -> None:
        """Book ``call``'s outcome: the paths read or written (read-before-edit) and
        each file's content as last seen (:meth:`_remember_content`). Also for a read
        answered outside the workflow (:meth:`FileTools.noted`)."""
        self._remember_content(call, outcome)
        if outcome.status == "success" and call.path is not None:
            if call.tool in TOOLS.exact:
                self.seen.add(call.path)
            elif call.tool in TOOLS.removing:
                self.seen = {p for p in self.seen if not is_within(p, call.path)}

    def _remember_content(self, call: CheckedCall, outcome: ToolOutcome) -> None:
        """Keep each file's content as this run last read or wrote it (its fingerprint).

        A later ``write_file`` of the path carries it, and the tools worker refuses
        the write when the file changed since: a whole-file write after a stale
        read never silently overwrites someone else's change. The run's own
        changes move the fingerprint along; a command forgets them all, since it
        may have changed any file."""
        if call.tool in TOOLS.running:
            self.fingerprints.clear()
        elif call.path is None or outcome.status != "success":
            return
        elif call.tool in TOOLS.exact:
            if outcome.fingerprint is not None:
                self.fingerprints[call.path] = outcome.fingerprint
            else:
                self.fingerprints.pop(call.path, None)
        elif call.tool in TOOLS.removing:
            for path in [p for p in self.fingerprints if is_within(p, call.path)]:
                del self.fingerprints[path]

    def _unread_edit(self, call: CheckedCall) -> ToolOutcome | None:
        """The refusal of an ``edit_file`` of a file this run has not read, or None."""
        if call.tool in TOOLS.editing and call.path not in self.seen:
            return _rendered(not_read_before_edit(call.path or ""))
        return None


def _in_workflow(backend: StateBackend, request: ToolRequest) -> ChangePreview:
    """The State backend's preview, computed here; a bug in it must not fail the task."""
    try:
        return compute_preview(backend, request)
    except Exception as error:  # advice only: never a stuck workflow
        return ChangePreview(kind="unavailable", path=request.virtual_path, error=str(error))


def _with_note(outcome: ToolOutcome, note: str) -> ToolOutcome:
    """Prefix the result with the reviewer's note (text or block content)."""
    if isinstance(outcome.content, str):
        return outcome.model_copy(update={"content": f"{note}\n{outcome.content}"})
    return outcome.model_copy(update={"content": [TextBlock(text=note), *outcome.content]})


async def _start_local(name: str, arg: Any, result_type: Any, options: dict[str, Any]) -> Any:
    """Schedule one local activity for :class:`LocalCalls`; a worker that does not
    host tools says so plainly.

    The error fails the workflow *task*, not the workflow: Temporal retries the
    task, so the run resumes once an agent worker that hosts the backend
    (``filegate worker --role agent --local-backend ...``) polls the queue.
    """
    try:
        return await workflow.execute_local_activity(name, arg, result_type=result_type, **options)
    except ValueError as error:
        if "not registered" not in str(error):
            raise
        requests = arg.requests if isinstance(arg, ToolBatch) else [arg]
        backends = ", ".join(sorted({repr(r.backend) for r in requests}))
        raise RuntimeError(
            f"backend {backends} runs in the worker of this run (kind=local, or a remote "
            "backend on the run's own task queue), but this worker hosts no file tools; "
            "start it with the backend (filegate worker --role agent --local-backend "
            "--backend KIND --root DIR --name NAME, agent_worker(backends=...), or "
            "filegate worker --role tools --serve-agents)"
        ) from error
