"""AgentWorkflow: the durable model loop around the file tools.

The workflow owns everything that must be deterministic and survive worker
restarts: the transcript, tool visibility, the permission gate, pending
approvals, the read-before-edit set and the State backend's files. Model
calls and every non-State tool call are activities; the State backend runs
in-workflow because its operations are pure. The model call is a local
activity by default, and so are calls on ``kind="local"`` backends (hosted by
the agent worker): both then run inside the workflow task, with no trip
through a task queue, which is what keeps a step within a few milliseconds of
the work it does (``bench/agent_step.py``).

Sandbox: everything this module uses from ``activities``/``backends``/
``workflows`` is pure and imported once, passed through from the host, with
the pure third-party matchers it relies on (``wcmatch``, ``bracex``) passed
through too, so the sandbox never re-imports them per workflow run.
:data:`SANDBOX_PASSTHROUGH` lists them for a worker that wants to declare
them on its runner as well (see :func:`sandboxed_runner`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    # Pure third-party pattern matchers used by the State backend, the Router
    # and the permission rules: pass them through explicitly (not only as
    # transitive imports) so a later sandboxed import finds the host modules.
    import bracex  # noqa: F401
    import wcmatch.fnmatch
    import wcmatch.glob  # noqa: F401
    from filegate.activities.dispatch import run_tool
    from filegate.activities.history import (
        TRANSCRIPT_UNAVAILABLE,
        LocalModelTurn,
        MemoryRef,
        ModelTurn,
        ModelTurnResult,
        Purpose,
    )
    from filegate.activities.tool_types import ToolName, ToolOutcome, ToolRequest, activity_call_id
    from filegate.activities.tools import (
        failure_cause,
        outcome_for_activity_error,
        tool_activity_options,
    )
    from filegate.kernel.formatting import Rendered, format_error, not_read_before_edit
    from filegate.kernel.messages import (
        ContentBlock,
        Message,
        ModelRequest,
        ModelResponse,
        TextBlock,
        ToolCall,
        Usage,
    )
    from filegate.kernel.paths import is_within, validate_path
    from filegate.kernel.permissions import check_execute_config
    from filegate.kernel.routing import Router
    from filegate.kernel.state import StateBackend
    from filegate.workflows import fanout, runner
    from filegate.workflows import tool_descriptions as descriptions
    from filegate.workflows.approvals import (
        EDITED_NOTE,
        ApprovalBook,
        approval_deadline,
        call_signature,
        rejection_text,
        repeated_rejection_text,
    )
    from filegate.workflows.context import (
        cut_for_summary,
        model_view,
        summarize_threshold,
        summary_message,
        to_archive,
        view_tokens,
    )
    from filegate.workflows.gate import (
        PATH_FIELDS,
        ApprovalTrigger,
        CheckedCall,
        approval_trigger,
        check_call,
        deny_gate,
    )
    from filegate.workflows.inputs import (
        AgentInput,
        AgentResult,
        AgentStatus,
        BackendRef,
        CarryOver,
        Decision,
        DecisionAck,
        PendingApproval,
        StopReason,
        UserMessage,
    )

MODEL_ACTIVITY = "filegate.model"

SANDBOX_PASSTHROUGH = runner.SANDBOX_PASSTHROUGH
sandboxed_runner = runner.sandboxed_runner


def _rendered(result: Rendered) -> ToolOutcome:
    return ToolOutcome(content=result.text, status="error" if result.is_error else "success")


def transcript_json(messages: list[Message]) -> list[dict[str, Any]]:
    """contract §10 transcript: role/content plus tool_calls, tool_call_id, status when set."""
    out: list[dict[str, Any]] = []
    for message in messages:
        item = message.model_dump(mode="json", exclude_none=True, exclude={"name"})
        out.append(item)
    return out


@workflow.defn(name="AgentWorkflow")
class AgentWorkflow:
    """One agent thread: model turns, gated tool calls, human approvals."""

    @workflow.init
    def __init__(self, input: AgentInput) -> None:
        self._input = input
        carry = input.carry or CarryOver()
        self._messages: list[Message] = list(carry.messages)
        self._seen: set[str] = set(carry.seen_paths)
        self._call_index = carry.call_index
        self._usage = carry.usage.model_copy()
        counters = carry.counters
        self._steps = counters.get("steps", 0)
        self._tool_calls = counters.get("tool_calls", 0)
        self._tool_errors = counters.get("tool_errors", 0)
        self._book = ApprovalBook(seq=carry.approval_seq, rejected=carry.rejected)
        self._book.total = counters.get("approvals", 0)
        self._inbox: list[Message] = []
        self._end_requested = carry.end_requested
        self._transcript = carry.transcript
        self._context = carry.context.model_copy()
        self._state = "running"
        self._awaiting_model = carry.awaiting_model
        self._model_time: str | None = None
        self._memory: MemoryRef | None = None
        self._local_busy = False
        spec = input.backend
        self._router = Router([route.prefix for route in spec.routes])
        self._enabled = descriptions.whitelisted_tools(input.tools)
        self._states: dict[str, StateBackend] = {}
        for ref in spec.all_backends():
            if ref.kind == "state" and ref.name not in self._states:
                saved = carry.state_files.get(ref.name)
                self._states[ref.name] = (
                    StateBackend.from_dict(saved) if saved is not None else StateBackend()
                )
        if input.carry is None:
            self._messages.extend(input.messages)
            if input.task:
                self._messages.append(Message(role="user", content=input.task))
            self._awaiting_model = bool(self._messages)

    # ------------------------------------------------------------------ run

    @workflow.run
    async def run(self, input: AgentInput) -> AgentResult:
        self._check_config()
        final = ""
        steps_this_run = 0
        while True:
            self._drain_inbox()
            if not self._awaiting_model:
                reason = await self._wait_for_more()
                if reason is not None:
                    return self._result(final or self._last_answer(), reason)
                continue
            if self._steps >= input.limits.max_steps:
                return self._result(self._last_answer(), "max_steps")
            limit = input.limits.max_total_tokens
            if limit is not None and self._usage.input_tokens + self._usage.output_tokens >= limit:
                return self._result(self._last_answer(), "token_limit")
            if steps_this_run >= input.continue_as_new_after_steps or (
                steps_this_run > 0 and workflow.info().is_continue_as_new_suggested()
            ):
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(self._continued_input())
            response = await self._call_model()
            steps_this_run += 1
            reply = response.message.model_copy(update={"role": "assistant"})
            self._messages.append(reply)
            if reply.tool_calls:
                await self._run_tool_calls(reply.tool_calls, self._steps)
                continue
            final = reply.text()
            self._awaiting_model = False
            if not input.wait_for_messages:
                return self._result(final, "final_answer")

    def _check_config(self) -> None:
        spec = self._input.backend
        unreachable = [r.prefix for r in spec.routes if r.backend.shell_path is None]
        try:
            check_execute_config(
                self._input.permissions,
                can_execute=spec.default.can_execute,
                unreachable_prefixes=unreachable,
            )
        except ValueError as error:
            raise ApplicationError(
                str(error), type="InvalidConfiguration", non_retryable=True
            ) from None

    async def _wait_for_more(self) -> StopReason | None:
        """Idle after a final answer: None when a new user message arrived."""
        if not self._input.wait_for_messages or self._end_requested:
            return "ended" if self._end_requested else "final_answer"
        self._state = "idle"
        timeout = self._input.idle_timeout_seconds
        try:
            await workflow.wait_condition(
                lambda: bool(self._inbox) or self._end_requested,
                timeout=timedelta(seconds=timeout) if timeout is not None else None,
            )
        except TimeoutError:
            return "idle_timeout"
        self._state = "running"
        if self._inbox:
            return None
        return "ended"

    def _drain_inbox(self) -> None:
        if self._inbox:
            self._messages.extend(self._inbox)
            self._inbox.clear()
            self._awaiting_model = True

    def _last_answer(self) -> str:
        for message in reversed(self._messages):
            if message.role == "assistant" and not message.tool_calls:
                return message.text()
        return ""

    def _result(self, final: str, reason: StopReason) -> AgentResult:
        self._state = "done"
        return AgentResult(
            final_answer=final,
            stop_reason=reason,
            steps=self._steps,
            tool_calls=self._tool_calls,
            tool_errors=self._tool_errors,
            approvals=self._book.total,
            usage=self._usage,
            transcript=transcript_json(self._messages),
        )

    def _continued_input(self) -> AgentInput:
        self._drain_inbox()  # messages that arrived while handlers finished
        carry = CarryOver(
            messages=self._messages,
            state_files={name: backend.to_dict() for name, backend in self._states.items()},
            seen_paths=sorted(self._seen),
            rejected=dict(self._book.rejected),
            call_index=self._call_index,
            counters={
                "steps": self._steps,
                "tool_calls": self._tool_calls,
                "tool_errors": self._tool_errors,
                "approvals": self._book.total,
            },
            usage=self._usage,
            approval_seq=self._book.seq,
            awaiting_model=self._awaiting_model,
            end_requested=self._end_requested,
            transcript=self._transcript,
            context=self._context,
        )
        return self._input.model_copy(update={"carry": carry, "messages": [], "task": None})

    # ---------------------------------------------------------------- model

    def _visible(self) -> list[ToolName]:
        return descriptions.visible_tools(self._enabled, self._input.backend)

    async def _call_model(self) -> ModelResponse:
        visible = self._visible()
        spec = self._input.model
        if spec.max_output_tokens is None and self._input.limits.max_output_tokens is not None:
            spec = spec.model_copy(
                update={"max_output_tokens": self._input.limits.max_output_tokens}
            )
        request = ModelRequest(
            model=spec,
            system=descriptions.system_prompt(
                self._input.system_prompt, visible, self._input.backend
            ),
            messages=[],
            tools=descriptions.tool_specs(
                visible,
                self._input.tool_descriptions,
                video=descriptions.any_can_read_video(self._input.backend),
            ),
            call_index=self._call_index,
        )
        await self._maybe_summarize(request)
        response = (await self._model_turn(request, "respond")).response
        self._call_index += 1
        self._steps += 1
        return response

    async def _maybe_summarize(self, request: ModelRequest) -> None:
        """contract §7: at 85 % of the context window, a summary replaces older messages.

        The summary call does not count as a step and does not advance
        ``call_index`` (the scripted model's turn counter).
        """
        threshold = summarize_threshold(request.model)
        view = model_view(self._messages, self._context)
        if view_tokens(view, request.system) < threshold:
            return
        cut = cut_for_summary(self._messages, self._context, threshold)
        if cut <= self._context.start:
            return
        result = await self._model_turn(request.model_copy(update={"tools": []}), "summarize")
        summary = summary_message(result.response.message.text(), result.archived[-1:])
        self._context = self._context.model_copy(update={"start": cut, "summary": summary})
        self._transcript = None  # the view changed wholesale: send it afresh next time
        self._memory = None

    async def _model_turn(self, request: ModelRequest, purpose: Purpose) -> ModelTurnResult:
        """One model activity: the transcript by reference plus new messages when possible.

        The reference is an S3 object (:class:`TranscriptRef`) with a store, or,
        without one, the copy a local call keeps in the agent worker's memory
        (:class:`MemoryRef`); a worker that lost that copy says so and the call
        is made again with the whole conversation.
        """
        view = model_view(self._messages, self._context)
        ref = self._transcript
        if ref is not None and ref.count > len(view):
            ref = None
        memory = self._memory if ref is None else None
        if memory is not None and memory.count > len(view):
            memory = None
        known = ref.count if ref else memory.count if memory else 0
        local = self._input.model_call == "local_activity"
        turn = (LocalModelTurn if local else ModelTurn)(
            **request.model_dump(exclude={"messages"}),
            messages=view[known:],
            mode="turn",
            transcript=ref,
            memory=memory,
            purpose=purpose,
            archive=to_archive(self._messages, self._context),
        )
        limits = self._input.limits
        options: dict[str, Any] = {
            "result_type": ModelTurnResult,
            "start_to_close_timeout": timedelta(seconds=limits.model_timeout_seconds),
            "retry_policy": RetryPolicy(
                initial_interval=timedelta(seconds=1),
                backoff_coefficient=2.0,
                maximum_interval=timedelta(seconds=60),
                maximum_attempts=limits.model_max_attempts,
                non_retryable_error_types=["ModelRequestError"],
            ),
        }
        try:
            if local:
                result = await workflow.execute_local_activity(MODEL_ACTIVITY, turn, **options)
            else:
                result = await workflow.execute_activity(MODEL_ACTIVITY, turn, **options)
        except FailureError as error:
            if memory is None or not _failed_with(error, TRANSCRIPT_UNAVAILABLE):
                raise
            self._memory = None  # that worker restarted or another one ran the call
            return await self._model_turn(request, purpose)
        self._context = self._context.model_copy(update={"archived_upto": len(self._messages)})
        if purpose == "respond":
            self._transcript = result.transcript
            self._memory = result.memory
            self._model_time = result.completed_at
        response = result.response
        self._usage = Usage(
            input_tokens=self._usage.input_tokens + response.usage.input_tokens,
            output_tokens=self._usage.output_tokens + response.usage.output_tokens,
        )
        return result

    # ---------------------------------------------------------------- tools

    async def _run_tool_calls(self, calls: list[ToolCall], step: int) -> None:
        """Run one turn's calls concurrently; calls on the same path keep their order.

        ``step`` (the model call that produced ``calls``) makes the activities'
        tool-call ids unique per workflow (:func:`activity_call_id`).
        """
        chains: dict[str, asyncio.Task[ToolOutcome]] = {}
        tasks: list[asyncio.Task[ToolOutcome]] = []
        for index, call in enumerate(calls):
            key = self._order_key(call)
            previous = chains.get(key) if key is not None else None
            call_id = activity_call_id(step, index, call.id)
            task = asyncio.create_task(self._one_call(call, call_id, previous))
            if key is not None:
                chains[key] = task
            tasks.append(task)
        outcomes = await asyncio.gather(*tasks)
        frames: list[ContentBlock] = []
        for call, outcome in zip(calls, outcomes, strict=True):
            self._tool_calls += 1
            if outcome.status == "error":
                self._tool_errors += 1
            self._messages.append(
                Message(
                    role="tool",
                    content=outcome.content,
                    tool_call_id=call.id,
                    status=outcome.status,
                    name=call.name,
                )
            )
            frames.extend(outcome.media)
        if frames:
            # contract §6: providers need a turn's tool results contiguous, so the
            # video frames of the whole turn follow them as one user message.
            self._messages.append(Message(role="user", content=frames))

    @staticmethod
    def _order_key(call: ToolCall) -> str | None:
        if call.name == "execute":
            return "<shell>"
        field = PATH_FIELDS.get(call.name)
        if field is None or not isinstance(call.args, dict):
            return None
        raw = call.args.get(field)
        try:
            return validate_path(raw)
        except ValueError:
            return None

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
        self, call: ToolCall, call_id: str, previous: asyncio.Task[ToolOutcome] | None
    ) -> ToolOutcome:
        if previous is not None:
            await workflow.wait([previous])
        checked = self._check(call.name, call.args)
        if isinstance(checked, Rendered):
            return _rendered(checked)
        refused = self._gate(checked)
        if refused is not None:
            return _rendered(refused)
        note = ""
        trigger = approval_trigger(self._input.permissions, self._input.interrupt_on, checked)
        if trigger is not None:
            decided = await self._ask_human(call, checked, trigger)
            if isinstance(decided, ToolOutcome):
                return decided
            if decided is not checked:
                note = EDITED_NOTE.format(args=decided.args)
            checked = decided
        outcome = await self._execute(checked, call_id, edited=bool(note))
        if note:
            outcome = _with_note(outcome, note)
        return outcome

    async def _ask_human(
        self, call: ToolCall, checked: CheckedCall, trigger: ApprovalTrigger
    ) -> CheckedCall | ToolOutcome:
        """Wait for a decision; return the call to run or the final tool result."""
        signature = call_signature(checked.tool, checked.args)
        earlier = self._book.previous_rejection(signature)
        if earlier is not None:
            return ToolOutcome(content=repeated_rejection_text(earlier or None), status="error")
        approval = self._book.open(
            tool=checked.tool,
            args=checked.args,
            rule=trigger.rule,
            tool_call_id=call.id,
            now=self._now(),
            cwd=self._execute_cwd() if checked.tool == "execute" else None,
        )
        timeout, on_timeout = approval_deadline(self._input.approvals, trigger)
        decided = lambda: self._book.is_decided(approval.id)  # noqa: E731
        try:
            await workflow.wait_condition(
                decided, timeout=timedelta(seconds=timeout) if timeout is not None else None
            )
        except TimeoutError:
            if on_timeout == "reject":
                self._book.record(
                    Decision(id=approval.id, decision="reject", reason="approval timed out")
                )
            else:
                self._book.escalate(approval.id)
                await workflow.wait_condition(decided)
        decision = self._book.close(approval.id)
        if decision.decision == "approve":
            return checked
        if decision.decision == "respond":
            return ToolOutcome(content=decision.message or "", status="success")
        if decision.decision == "reject":
            self._book.remember_rejection(signature, decision.reason)
            return ToolOutcome(content=rejection_text(decision.reason), status="error")
        edited = self._check(checked.tool, decision.args)
        if isinstance(edited, Rendered):
            return _rendered(edited)
        refused = self._gate(edited)
        if refused is not None:
            return _rendered(refused)
        return edited

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
        self, call: CheckedCall, tool_call_id: str, *, edited: bool = False
    ) -> ToolOutcome:
        if call.tool == "edit_file" and call.path not in self._seen:
            return _rendered(not_read_before_edit(call.path or ""))
        ref = self._input.backend.backend_for(call.prefix)
        if call.tool == "delete" and not ref.can_delete:
            return _rendered(format_error(f"delete is not supported for {call.path}"))
        if fanout.needs_fanout(self._router, call.tool, call.args):

            async def run_target(prefix: str | None, args: dict[str, Any]) -> ToolOutcome:
                return await self._on_backend(
                    call.tool, prefix, args, tool_call_id, edited, want_raw=True
                )

            return _rendered(await fanout.fan_out(self._router, call.tool, call.args, run_target))
        local_args = dict(call.args)
        if call.path is not None and call.local_path is not None:
            local_args[PATH_FIELDS[call.tool]] = call.local_path
        outcome = await self._on_backend(call.tool, call.prefix, local_args, tool_call_id, edited)
        if outcome.status == "success" and call.path is not None:
            if call.tool in ("read_file", "write_file", "edit_file"):
                self._seen.add(call.path)
            elif call.tool == "delete":
                self._seen = {p for p in self._seen if not is_within(p, call.path)}
        return outcome

    async def _on_backend(
        self,
        tool: ToolName,
        prefix: str | None,
        local_args: dict[str, Any],
        tool_call_id: str,
        edited: bool = False,
        *,
        want_raw: bool = False,
    ) -> ToolOutcome:
        """Run one call with backend-local args on the backend serving route ``prefix``."""
        ref = self._input.backend.backend_for(prefix)
        request = ToolRequest(
            tool=tool,
            backend=ref.name,
            args=local_args,
            tool_call_id=tool_call_id,
            workflow_id=workflow.info().workflow_id,
            route_prefix=prefix or "/",
            permissions=self._input.permissions,
            policies=self._input.policies,
            reviewer_edited=edited,
            max_execute_timeout=self._input.limits.max_execute_timeout,
            want_raw=want_raw,
        )
        return await self._dispatch(ref, request)

    async def _dispatch(self, ref: BackendRef, request: ToolRequest) -> ToolOutcome:
        if ref.kind == "state":
            backend = self._states[ref.name]
            backend.set_now(self._now())
            return run_tool(backend, request, allow_video=False)
        options = tool_activity_options(
            request.tool,
            execute_timeout=request.args.get("timeout"),
            heartbeat_timeout=timedelta(seconds=self._input.limits.tool_heartbeat_timeout_seconds),
        )
        name = f"filegate.{request.tool}"
        try:
            if ref.kind == "local":
                # Local activities have no heartbeats: the start-to-close timeout
                # bounds them, and a dead agent worker loses the whole task anyway.
                del options["heartbeat_timeout"]
                return await self._one_local_at_a_time(
                    lambda: _start_local_tool(name, request, ref.name, options)
                )
            return await workflow.execute_activity(
                name, request, result_type=ToolOutcome, task_queue=ref.task_queue, **options
            )
        except FailureError as error:
            return outcome_for_activity_error(request.tool, error)

    async def _one_local_at_a_time(
        self, start: Callable[[], Awaitable[ToolOutcome]]
    ) -> ToolOutcome:
        """Run local tool activities one after another, in the order they were asked.

        Several local activities in flight at once can be resolved in different
        groups on replay than live (temporalio/sdk-python#1881), which hands a
        result to the wrong call; local tools are quick, so serial costs little.
        """

        claimed = False

        def claim() -> bool:
            # Claimed inside the condition: the SDK checks every waiting condition
            # in one pass, so "check, then set" would let two waiters through.
            nonlocal claimed
            if self._local_busy:
                return False
            self._local_busy = claimed = True
            return True

        try:
            await workflow.wait_condition(claim)
            return await start()
        finally:
            if claimed:  # also when cancelled between the claim and the start
                self._local_busy = False

    # ------------------------------------------------------------- handlers

    def _check_edit(self, tool: str, args: dict[str, Any]) -> str | None:
        checked = self._check(tool, args)
        if isinstance(checked, Rendered):
            return checked.text
        refused = self._gate(checked)
        return refused.text if refused is not None else None

    @workflow.query(name="pending_approvals")
    def pending_approvals(self) -> list[PendingApproval]:
        return [a for a in self._book.pending.values() if not self._book.is_decided(a.id)]

    @workflow.query(name="status")
    def status(self) -> AgentStatus:
        pending = self.pending_approvals()
        state = self._state
        if state == "running" and pending:
            state = "awaiting_approval"
        last = transcript_json(self._messages[-1:])
        return AgentStatus(
            step=self._steps,
            state=state,  # type: ignore[arg-type]
            pending_approvals=pending,
            last_message=last[0] if last else None,
            tool_calls=self._tool_calls,
            tool_errors=self._tool_errors,
        )

    @workflow.query(name="transcript")
    def transcript(self) -> list[dict[str, Any]]:
        return transcript_json(self._messages)

    @workflow.signal(name="decide")
    def decide_signal(self, decision: Decision) -> None:
        """Fire-and-forget decision; invalid ones are logged and dropped."""
        try:
            self._book.check(decision, self._check_edit)
        except ValueError as error:
            workflow.logger.warning("ignored decision %s: %s", decision.id, error)
            return
        self._book.record(decision)

    @workflow.update(name="decide")
    def decide_update(self, decision: Decision) -> DecisionAck:
        self._book.record(decision)
        return DecisionAck(id=decision.id, decision=decision.decision)

    @decide_update.validator
    def _validate_decide(self, decision: Decision) -> None:
        self._book.check(decision, self._check_edit)

    @workflow.signal(name="add_message")
    def add_message_signal(self, message: UserMessage) -> None:
        self._accept_message(message)

    @workflow.update(name="add_message")
    def add_message_update(self, message: UserMessage) -> int:
        self._accept_message(message)
        return len(self._inbox)

    @add_message_update.validator
    def _validate_add_message(self, message: UserMessage) -> None:
        if self._state == "done":
            raise ValueError("the agent thread has finished")
        if not message.end and not message.content.strip():
            raise ValueError("empty message")

    def _accept_message(self, message: UserMessage) -> None:
        if message.end:
            self._end_requested = True
        if message.content.strip():
            self._inbox.append(Message(role="user", content=message.content))


def _with_note(outcome: ToolOutcome, note: str) -> ToolOutcome:
    """Prefix the result with the reviewer-edit note (text or block content)."""
    if isinstance(outcome.content, str):
        return outcome.model_copy(update={"content": f"{note}\n{outcome.content}"})
    return outcome.model_copy(update={"content": [TextBlock(text=note), *outcome.content]})


async def _start_local_tool(
    name: str, request: ToolRequest, backend: str, options: dict[str, Any]
) -> ToolOutcome:
    """Schedule a local tool activity; a worker that does not host tools says so plainly.

    The error fails the workflow *task*, not the workflow: Temporal retries the
    task, so the run resumes once an agent worker that hosts the backend
    (``filegate worker --role agent --local-backend ...``) polls the queue.
    """
    try:
        return await workflow.execute_local_activity(
            name, request, result_type=ToolOutcome, **options
        )
    except ValueError as error:
        if "not registered" not in str(error):
            raise
        raise RuntimeError(
            f"backend {backend!r} is kind=local, but this agent worker hosts no file tools; "
            "start it with the backend (filegate worker --role agent --local-backend "
            "--backend KIND --root DIR --name NAME, or agent_worker(backends=...))"
        ) from error


def _failed_with(error: FailureError, error_type: str) -> bool:
    """Whether an activity (regular or local) failed with an ``ApplicationError`` of that type."""
    cause = failure_cause(error)
    return isinstance(cause, ApplicationError) and cause.type == error_type
