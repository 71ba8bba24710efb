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

This module holds the workflow class, its loop and its handlers: a thin loop
over a model (:mod:`~filegate.workflows.turns`) and
:class:`~filegate.workflows.file_tools.FileTools`, the public tool kit any
workflow can use (the offer, the gated call path, the approvals). That the
loop needs nothing else from the tool side is what shows the kit complete.

Sandbox: everything this module uses from ``kernel``/``activities.contract``/
``workflows`` is pure and imported once, passed through from the host, with
the pure third-party matchers it relies on (``wcmatch``, ``bracex``) passed
through too, so the sandbox never re-imports them per workflow run
(:data:`filegate.workflows.runner.SANDBOX_PASSTHROUGH` lists them).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, cast

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from filegate.kernel import wire
from filegate.kernel.network_rules import NetworkAnswer, NetworkAsk

with workflow.unsafe.imports_passed_through():
    # Pure third-party pattern matchers used by the State backend, the Router
    # and the permission rules: pass them through explicitly (not only as
    # transitive imports) so a later sandboxed import finds the host modules.
    import bracex  # noqa: F401
    import wcmatch.fnmatch
    import wcmatch.glob  # noqa: F401

    from filegate.kernel.messages import Message, check_model_spec
    from filegate.workflows.approvals.grants import (
        GRANTS_QUERY,
        REVOKE_UPDATE,
        Grant,
        GrantRevocation,
    )
    from filegate.workflows.approvals.pending import InlineAnswer, InlinePage, InlineStatus
    from filegate.workflows.approvals.turn_decisions import (
        DECIDE_TURN,
        TurnDecision,
        TurnDecisionAck,
    )
    from filegate.workflows.file_tools import FileTools, tool_messages
    from filegate.workflows.inputs import (
        AgentInput,
        AgentResult,
        AgentStatus,
        CarryOver,
        DecidedApproval,
        Decision,
        DecisionAck,
        FileToolsState,
        PendingApproval,
        StopReason,
        UserMessage,
    )
    from filegate.workflows.turns import ModelTurns


def _transcript_json(messages: list[Message]) -> list[dict[str, Any]]:
    """contract §10 transcript: role/content plus tool_calls, tool_call_id, status when set."""
    out: list[dict[str, Any]] = []
    for message in messages:
        item = message.model_dump(mode="json", exclude_none=True, exclude={"name"})
        out.append(item)
    return out


TRANSCRIPT_PAGE_BYTES = 1024 * 1024
"""Most bytes (as JSON) one ``transcript_page`` answer holds past its first message (the
next page follows): a quarter of the server's 4 MiB message limit."""
PAGE_FALLBACK_CLIP = 2000
"""Characters per string of a first message that alone would overflow a page."""


def _clipped(value: Any, clip: int) -> Any:
    """``value`` with every string longer than ``clip`` cut to it (a marker appended)."""
    if isinstance(value, str):
        return value if len(value) <= clip else value[:clip] + "..."
    if isinstance(value, dict):
        return {key: _clipped(item, clip) for key, item in value.items()}
    if isinstance(value, list):
        return [_clipped(item, clip) for item in value]
    return value


@workflow.defn(name=wire.WORKFLOW_TYPE)
class AgentWorkflow:
    """One agent thread: model turns, gated tool calls, human approvals."""

    @workflow.init
    def __init__(self, input: AgentInput) -> None:
        self._input = input
        carry = input.carry or CarryOver()
        self._messages: list[Message] = list(carry.messages)
        # The model side of the loop: its own state, the conversation shared.
        self._turns = ModelTurns(input, input.carry, self._messages)
        # The tools quote the conversation on approval cards: they share the list
        # (never rebound here). The handlers are declared below, typed.
        # CarryOver holds FileToolsState's fields under the same names.
        carried = {name: getattr(carry, name) for name in FileToolsState.model_fields}
        self._tools = FileTools(
            input,
            FileToolsState.model_construct(**carried),
            messages=self._messages,
            register_handlers=False,
        )
        self._inbox: list[Message] = []
        self._end_requested = carry.end_requested
        self._state = "running"
        self._awaiting_model = carry.awaiting_model
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
            turns = self._turns
            if turns.steps >= input.limits.max_steps:
                return self._result(self._last_answer(), "max_steps")
            limit = input.limits.max_total_tokens
            if limit is not None and turns.usage.input_tokens + turns.usage.output_tokens >= limit:
                return self._result(self._last_answer(), "token_limit")
            if steps_this_run >= input.continue_as_new_after_steps or (
                steps_this_run > 0 and workflow.info().is_continue_as_new_suggested()
            ):
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(self._continued_input())
            response = await turns.call_model(self._tools.visible())
            steps_this_run += 1
            reply = response.message.model_copy(update={"role": "assistant"})
            self._messages.append(reply)
            if reply.tool_calls:
                self._tools.stamp(turns.model_time)
                results = await self._tools.run_turn(reply.tool_calls, step=turns.steps)
                self._messages.extend(tool_messages(results))
                continue
            final = reply.text()
            self._awaiting_model = False
            if not input.wait_for_messages:
                return self._result(final, "final_answer")

    def _check_config(self) -> None:
        try:
            check_model_spec(self._input.model)
        except ValueError as error:
            raise ApplicationError(
                str(error), type=wire.INVALID_CONFIGURATION_ERROR, non_retryable=True
            ) from None
        self._tools.check_config()

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
        return self._turns.context.paged_answer  # the latest one in the transcript pages

    def _result(self, final: str, reason: StopReason) -> AgentResult:
        self._state = "done"
        return AgentResult(
            final_answer=final,
            stop_reason=reason,
            steps=self._turns.steps,
            tool_calls=self._tools.counts["tool_calls"],
            tool_errors=self._tools.counts["tool_errors"],
            approvals=self._tools.counts["approvals"],
            usage=self._turns.usage,
            transcript=_transcript_json(self._messages),
            earlier_transcript=self._turns.context.page,
        )

    def _continued_input(self) -> AgentInput:
        self._drain_inbox()  # messages that arrived while handlers finished
        tools = self._tools.state()
        carry = CarryOver(
            **{name: getattr(tools, name) for name in FileToolsState.model_fields},
            **self._turns.carried(),
            messages=self._messages,
            awaiting_model=self._awaiting_model,
            end_requested=self._end_requested,
        )
        carry.counters["steps"] = self._turns.steps
        return self._input.model_copy(update={"carry": carry, "messages": [], "task": None})

    # ------------------------------------------------------------- handlers

    # The approval handlers are FileTools' (ApprovalHandlers, which any host
    # workflow registers dynamically); declared here so Python clients have typed
    # references (``AgentWorkflow.decide_update``).

    @workflow.query(name=wire.PENDING_QUERY)
    def pending_approvals(self) -> list[PendingApproval]:
        return self._tools.approvals.pending()

    @workflow.query(name=wire.DECIDED_QUERY)
    def decided_approvals(self) -> list[DecidedApproval]:
        return self._tools.approvals.decided()

    @workflow.query(name=wire.STATUS_QUERY)
    def status(self) -> AgentStatus:
        pending = self.pending_approvals()
        state = self._state
        if state == "running" and pending:
            state = "awaiting_approval"
        last = _transcript_json(self._messages[-1:])
        return InlineStatus(  # inline: see InlineAnswer
            step=self._turns.steps,
            state=state,  # type: ignore[arg-type]
            pending_approvals=pending,
            decided=self.decided_approvals(),
            last_message=last[0] if last else None,
            tool_calls=self._tools.counts["tool_calls"],
            tool_errors=self._tools.counts["tool_errors"],
        )

    @workflow.query(name=wire.TRANSCRIPT_QUERY)
    def transcript(self) -> list[dict[str, Any]]:
        return InlineAnswer(_transcript_json(self._messages))  # never by reference

    @workflow.query(name=wire.TRANSCRIPT_PAGE_QUERY)
    def transcript_page(self, start: int, clip: int) -> dict[str, Any]:
        """``{"total", "start", "messages"}``: the messages from ``start`` on, each string
        in them clipped to ``clip`` characters, as many as fit :data:`TRANSCRIPT_PAGE_BYTES`
        (at least one).

        Why not the whole transcript: it is answered inline (never through S3),
        and a run of many large reads outgrew the server's 4 MiB message limit,
        so every ``transcript`` query failed and ``filegate run`` showed neither
        progress nor the approval the run was waiting for. A follower asks for
        what it has not shown yet, clipped to what it prints.
        """
        start = max(0, min(start, len(self._messages)))
        page: list[dict[str, Any]] = []
        size = 0
        for message in self._messages[start:]:  # one at a time: a page stops early
            [item] = _transcript_json([message])
            item = _clipped(item, max(1, clip))
            item_size = len(json.dumps(item, ensure_ascii=False).encode())
            if not page and item_size > TRANSCRIPT_PAGE_BYTES:  # many long strings
                item = _clipped(item, PAGE_FALLBACK_CLIP)
            elif page and size + item_size > TRANSCRIPT_PAGE_BYTES:
                break
            size += item_size
            page.append(item)
        return InlinePage(total=len(self._messages), start=start, messages=page)

    @workflow.signal(name=wire.DECIDE_UPDATE)
    async def decide_signal(self, decision: Decision) -> None:
        """Fire-and-forget decision; invalid ones are logged and dropped."""
        await self._tools.approvals.signal(decision)

    async def _decide(self, decision: Decision) -> DecisionAck:
        return await self._tools.approvals.update(decision)

    # Cast: the SDK's ``update(name=...)`` typing keeps an async handler's coroutine
    # as the result type; clients awaiting ``decide_update`` get a DecisionAck.
    decide_update = cast(
        "workflow.UpdateMethodMultiParam[[AgentWorkflow, Decision], DecisionAck]",
        workflow.update(name=wire.DECIDE_UPDATE)(_decide),
    )
    del _decide

    @decide_update.validator
    def _validate_decide(self, decision: Decision) -> None:
        self._tools.approvals.validate(decision)

    async def _decide_turn(self, decision: TurnDecision) -> TurnDecisionAck:
        return await self._tools.approvals.update_turn(decision)

    # Every pending call of one model turn, decided in one update (approvals/turn_decisions.py).
    decide_turn_update = cast(
        "workflow.UpdateMethodMultiParam[[AgentWorkflow, TurnDecision], TurnDecisionAck]",
        workflow.update(name=DECIDE_TURN)(_decide_turn),
    )
    del _decide_turn

    @decide_turn_update.validator
    def _validate_decide_turn(self, decision: TurnDecision) -> None:
        self._tools.approvals.validate_turn(decision)

    # Remembered approvals (workflows/approvals/grants.py): FileTools' handlers, typed here.

    @workflow.update(name=wire.NETWORK_ASK_UPDATE)
    async def ask_network_update(self, asked: NetworkAsk) -> NetworkAnswer:
        """A tools worker's question about a command's connection (an ``interrupt``
        network rule): answered by the rules, a grant, or a reviewer's decision."""
        return await self._tools.network.ask(asked)

    @ask_network_update.validator
    def _validate_ask_network(self, asked: NetworkAsk) -> None:
        self._tools.network.validate(asked)

    @workflow.query(name=GRANTS_QUERY)
    def grants(self) -> list[Grant]:
        return self._tools.grants.listing()

    @workflow.update(name=REVOKE_UPDATE)
    def revoke_update(self, revocation: GrantRevocation) -> Grant:
        return self._tools.grants.revoke(revocation)

    @revoke_update.validator
    def _validate_revoke(self, revocation: GrantRevocation) -> None:
        self._tools.grants.validate_revoke(revocation)

    @workflow.signal(name=wire.ADD_MESSAGE_UPDATE)
    def add_message_signal(self, message: UserMessage) -> None:
        self._accept_message(message)

    @workflow.update(name=wire.ADD_MESSAGE_UPDATE)
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
