"""The tool call path of the agent workflow: check, gate, approve, route, run.

The base of :class:`~filegate.workflows.file_tools.FileTools`, which holds the
state (the attributes read and written here are declared below). One turn's calls run
concurrently; on the same path a mutation waits for the calls before it and
the calls after it wait for the mutation, while reads of one path run side by
side (:class:`PathOrder`); each is validated and routed
(:mod:`~filegate.workflows.gate`) once, gated by the permission rules, may wait
for a human decision (:mod:`~filegate.workflows.reviews`: the card, the change
preview, the wait), is checked for read-before-edit, and then runs in the
workflow for the State backend (:func:`filegate.kernel.dispatch.run_tool`) or
as the ``filegate.<tool>`` activity (local for ``kind="local"`` backends).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from filegate.activities.contract import outcome_for_activity_error, tool_activity_options
from filegate.kernel.dispatch import run_tool
from filegate.kernel.execute_gate import protecting_rules
from filegate.kernel.formatting import Rendered, format_error, not_read_before_edit
from filegate.kernel.gates import waive_interrupts
from filegate.kernel.messages import Message, TextBlock, ToolCall
from filegate.kernel.paths import is_within
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.routing import Router
from filegate.kernel.state import StateBackend
from filegate.kernel.tool_types import (
    TOOL_ACTIVITY_NAMES,
    ToolBatch,
    ToolName,
    ToolOutcome,
    ToolRequest,
)
from filegate.workflows import fanout, telemetry
from filegate.workflows import tool_descriptions as descriptions
from filegate.workflows.approval_handlers import ApprovalHandlers
from filegate.workflows.approvals import APPROVED_NOTE, ApprovalBook, edited_note
from filegate.workflows.batching import LocalCalls, RemoteCalls
from filegate.workflows.gate import (
    PATH_FIELDS,
    CheckedCall,
    approval_trigger,
    check_call,
    deny_gate,
)
from filegate.workflows.inputs import BackendRef, FileToolsConfig
from filegate.workflows.reviews import Reviews, rendered_outcome
from filegate.workflows.unserved import not_picked_up, unserved_outcome, worker_wait_options
from temporalio import workflow
from temporalio.exceptions import FailureError


class PathOrder:
    """Which earlier calls of a turn a call must wait for, by order key (path or shell).

    A mutation (:data:`MUTATING_TOOLS`) waits for every earlier call on its key;
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


class ToolCalls(Reviews):
    """The tool call path (the base of :class:`~filegate.workflows.file_tools.FileTools`)."""

    _input: FileToolsConfig
    _messages: list[Message]
    _router: Router
    _enabled: list[ToolName]
    _states: dict[str, StateBackend]
    _seen: set[str]
    _fingerprints: dict[str, str]
    _book: ApprovalBook
    _approvals: ApprovalHandlers
    _model_time: str | None
    _local: LocalCalls
    _remote: RemoteCalls
    _tool_calls: int
    _tool_errors: int

    def _visible(self) -> list[ToolName]:
        return descriptions.visible_tools(self._enabled, self._input.backend)

    @staticmethod
    def _order_key(checked: CheckedCall | Rendered) -> str | None:
        """What a call is ordered on: its validated path, the shell, or nothing
        (a refused call touches nothing and waits for nobody)."""
        if isinstance(checked, Rendered):
            return None
        return "<shell>" if checked.tool == "execute" else checked.path

    def _check(self, tool: str, args: Any) -> CheckedCall | Rendered:
        return check_call(
            tool,
            args,
            allowed=self._visible(),
            router=self._router,
            max_args_chars=self._input.limits.max_tool_args_chars,
            max_execute_timeout=self._input.limits.max_execute_timeout,
        )

    def _gate(self, call: CheckedCall) -> Rendered | None:
        return deny_gate(self._input.permissions, call, has_descendants=self._has_descendants(call))

    def _has_descendants(self, call: CheckedCall) -> bool:
        """Only the State backend can be asked cheaply; remote targets count as trees."""
        if call.tool != "delete" or call.local_path is None:
            return True
        ref = self._input.backend.backend_for(call.prefix)
        if ref.kind != "state":
            return True
        return any(
            p.startswith(call.local_path.rstrip("/") + "/") for p in self._states[ref.name].paths()
        )

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
        refused = self._gate(checked)
        if refused is not None:
            telemetry.denied(checked.tool)
            return _rendered(refused)
        unread = self._unread_edit(checked)
        if unread is not None:  # checked before asking: a reviewer never decides a no-op
            return unread
        note = ""
        approved_by: str | None = None
        trigger = approval_trigger(self._input.permissions, self._input.interrupt_on, checked)
        granted = self._granted(checked, trigger)  # a remembered approval: nobody is asked
        if granted is not None:
            note, approved_by = granted.note, granted.approved_by
        elif trigger is not None:
            decided, by, seen = await self._ask_human(call, checked, trigger, call_id)
            approved_by = by
            if isinstance(decided, ToolOutcome):
                return decided
            if decided.tool == "write_file" and decided.path is not None:
                # Approved against what the reviewer saw, which may be newer than
                # the model's read; an edited call was not shown: no check.
                if seen is not None:
                    self._fingerprints[decided.path] = seen
                else:
                    self._fingerprints.pop(decided.path, None)
            if decided is not checked:
                note = edited_note(by, decided.args)
            else:
                note = APPROVED_NOTE.format(by=by)
            checked = decided
        # Only a call a human approved (as asked, edited, or by a grant) carries the approval.
        approved = trigger is not None and (granted is None or granted.approves)
        outcome = await self._execute(checked, call_id, approved=approved, approved_by=approved_by)
        if note:
            outcome = _with_note(outcome, note)
        return outcome

    def _now(self) -> str:
        """The time of the latest model answer: what this step's tool calls are stamped with.

        Recorded with the model call's result, so replays agree with the original
        run; ``workflow.now()`` (the fallback, before any answer) can differ
        after a local activity.
        """
        return self._model_time or workflow.now().isoformat()

    def _execute_cwd(self) -> str:
        """Where ``execute`` runs, for reviewers: the default backend's shell location."""
        return self._input.backend.default.shell_path or "/"

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
        if call.tool == "delete" and not ref.can_delete:
            return _rendered(format_error(f"delete is not supported for {call.path}"))
        if fanout.needs_fanout(self._router, call.tool, call.args):

            async def run_target(
                prefix: str | None, args: dict[str, Any], virtual_path: str
            ) -> ToolOutcome:
                request = self._request(
                    call.tool,
                    prefix,
                    args,
                    tool_call_id,
                    want_raw=True,
                    approved=approved,
                    approved_by=approved_by,
                    virtual_path=virtual_path,
                )
                return await self._dispatch(self._input.backend.backend_for(prefix), request)

            return _rendered(await fanout.fan_out(self._router, call.tool, call.args, run_target))
        local_args = dict(call.args)
        if call.path is not None and call.local_path is not None:
            local_args[PATH_FIELDS[call.tool]] = call.local_path
        # virtual_path: the call's path as the gate checked it, so the activity
        # checks one path, not two.
        request = self._request(
            call.tool,
            call.prefix,
            local_args,
            tool_call_id,
            approved=approved,
            approved_by=approved_by,
            virtual_path=call.path,
        )
        if call.tool == "write_file" and call.path in self._fingerprints:
            expected = self._fingerprints[call.path]
            request = request.model_copy(update={"expected_fingerprint": expected})
        if call.tool == "execute":
            self._fingerprints.clear()  # the run's own command may change any file
        outcome = await self._dispatch(ref, request)
        self._remember_content(call, outcome)
        if outcome.status == "success" and call.path is not None:
            if call.tool in ("read_file", "write_file", "edit_file"):
                self._seen.add(call.path)
            elif call.tool == "delete":
                self._seen = {p for p in self._seen if not is_within(p, call.path)}
        return outcome

    def _remember_content(self, call: CheckedCall, outcome: ToolOutcome) -> None:
        """Keep each file's content as this run last read or wrote it (its fingerprint).

        A later ``write_file`` of the path carries it, and the tools worker refuses
        the write when the file changed since: a whole-file write after a stale
        read never silently overwrites someone else's change. The run's own
        changes move the fingerprint along; a command forgets them all, since it
        may have changed any file."""
        if call.tool == "execute":
            self._fingerprints.clear()
        elif call.path is None or outcome.status != "success":
            return
        elif call.tool in ("read_file", "write_file", "edit_file"):
            if outcome.fingerprint is not None:
                self._fingerprints[call.path] = outcome.fingerprint
            else:
                self._fingerprints.pop(call.path, None)
        elif call.tool == "delete":
            for path in [p for p in self._fingerprints if is_within(p, call.path)]:
                del self._fingerprints[path]

    def _unread_edit(self, call: CheckedCall) -> ToolOutcome | None:
        """The refusal of an ``edit_file`` of a file this run has not read, or None."""
        if call.tool == "edit_file" and call.path not in self._seen:
            return _rendered(not_read_before_edit(call.path or ""))
        return None

    def _request(
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
    ) -> ToolRequest:
        """The request for one call on route ``prefix`` (also what a preview reads with)."""
        ref = self._input.backend.backend_for(prefix)
        return ToolRequest(
            tool=tool,
            backend=ref.name,
            args=local_args,
            tool_call_id=tool_call_id,
            first_run_id=workflow.info().first_execution_run_id,
            route_prefix=prefix or "/",
            virtual_path=virtual_path,
            # An explicit interrupt_on entry replaces the rule-generated approvals of its tool.
            permissions=self._request_rules(tool),
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
        if tool == "execute":
            return protecting_rules(rules, self._input.shell_unreachable_prefixes())
        return waive_interrupts(rules) if tool in self._input.interrupt_on else rules

    async def _dispatch(self, ref: BackendRef, request: ToolRequest) -> ToolOutcome:
        if ref.kind == "state":
            backend = self._states[ref.name]
            backend.set_now(self._now())
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


_rendered = rendered_outcome


def _with_note(outcome: ToolOutcome, note: str) -> ToolOutcome:
    """Prefix the result with the reviewer's note (text or block content)."""
    if isinstance(outcome.content, str):
        return outcome.model_copy(update={"content": f"{note}\n{outcome.content}"})
    return outcome.model_copy(update={"content": [TextBlock(text=note), *outcome.content]})


async def start_local(name: str, arg: Any, result_type: Any, options: dict[str, Any]) -> Any:
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
