"""Model turns of the agent workflow: requests, summaries, transcripts by reference.

:class:`ModelTurns` is a part the workflow holds (``AgentWorkflow._turns``), not a
mixin: it owns the model loop's state (the summary bookkeeping, the transcript
and script references, the step and call counters, the usage) and takes what it
needs from the workflow in its constructor: the input, the carried-over state
and the conversation (a list it shares with the workflow and the tools). The
module keeps no global state, so the sandbox may pass it through. Each step's
model call is one ``filegate.model``
activity (local by default) carrying the transcript by reference plus the new
messages (:class:`~filegate.kernel.transcripts.ModelTurn`); at 85 % of the
context window a summary call replaces older messages first.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError, FailureError

from filegate.activities.contract import failure_cause
from filegate.kernel import wire
from filegate.kernel.messages import Message, ModelRequest, ModelResponse, ModelSpec, Usage
from filegate.kernel.scripts import SCRIPT_UNAVAILABLE, ScriptRef
from filegate.kernel.tool_types import ToolName
from filegate.kernel.transcripts import (
    TRANSCRIPT_UNAVAILABLE,
    LocalModelTurn,
    MemoryRef,
    ModelTurn,
    ModelTurnResult,
    PageOut,
    Purpose,
    TranscriptPage,
    TranscriptRef,
)
from filegate.workflows import tool_descriptions as descriptions
from filegate.workflows.context import (
    PAGE_OUT_CHARS,
    ContextState,
    TokenTally,
    cut_for_summary,
    last_answer,
    message_chars,
    model_view,
    summarize_threshold,
    summary_message,
    to_archive,
)
from filegate.workflows.inputs import AgentInput, CarryOver

MODEL_ACTIVITY = wire.MODEL_ACTIVITY


class ModelTurns:
    """The model side of the agent loop; ``AgentWorkflow`` holds one and delegates.

    Built from the run's ``input``, the ``carry`` of a continued run (``None``
    on a first run) and ``messages``: the conversation, shared in place with
    the workflow (which appends to it) and with ``FileTools`` (which quotes it
    on approval cards); this class only ever deletes the messages a summary
    stored as a transcript page. The public attributes are the state the
    workflow reads back for its result, its queries and the next run's carry.
    """

    def __init__(self, input: AgentInput, carry: CarryOver | None, messages: list[Message]) -> None:
        carry = carry or CarryOver()
        self._input = input
        self._messages = messages
        self._tally = TokenTally()
        self._memory: MemoryRef | None = None
        self.call_index: int = carry.call_index
        """The scripted model's turn counter (summary calls do not advance it)."""
        self.steps: int = carry.counters.get("steps", 0)
        self.usage: Usage = carry.usage.model_copy()
        self.context: ContextState = carry.context.model_copy()
        self.transcript: TranscriptRef | None = carry.transcript
        self.script: ScriptRef | None = carry.script
        self.model_time: str | None = None
        """When the last ``respond`` call completed (stamped on the tool calls it asked for)."""

    def carried(self) -> dict[str, Any]:
        """This side's fields of the next run's :class:`CarryOver` (``steps`` goes in
        its counters)."""
        return {
            "call_index": self.call_index,
            "usage": self.usage,
            "transcript": self.transcript,
            "context": self.context,
            "script": self.script,
        }

    async def call_model(self, visible: list[ToolName]) -> ModelResponse:
        """One step's model call, offering the ``visible`` tools."""
        request = ModelRequest(
            model=self._model_spec(by_reference=self.script is not None),
            system=descriptions.system_prompt(
                self._input.system_prompt,
                visible,
                self._input.backend,
                extend=self._input.system_prompt_mode == "extend",
            ),
            messages=[],
            tools=descriptions.tool_specs(
                visible,
                self._input.tool_descriptions,
                video=descriptions.any_can_read_video(self._input.backend),
            ),
            call_index=self.call_index,
            tool_limits=self._input.limits.tool_call_limits(),
            script=self.script,
        )
        view = await self._maybe_summarize(request)
        response = (await self._model_turn(request, "respond", view)).response
        self.call_index += 1
        self.steps += 1
        return response

    def _model_spec(self, *, by_reference: bool) -> ModelSpec:
        """The input's model spec with the run's output cap; without its inline script
        when the request names the script by reference (:mod:`filegate.kernel.scripts`)."""
        spec = self._input.model
        update: dict[str, Any] = {}
        if spec.max_output_tokens is None and self._input.limits.max_output_tokens is not None:
            update["max_output_tokens"] = self._input.limits.max_output_tokens
        if by_reference:
            update["options"] = {k: v for k, v in spec.options.items() if k != "script"}
        return spec.model_copy(update=update) if update else spec

    async def _maybe_summarize(self, request: ModelRequest) -> list[Message]:
        """contract §7: at 85 % of the context window, a summary replaces older messages.

        Returns the model view to send next (computed once per turn; again only
        when a summary changed it). The summary call does not count as a step
        and does not advance ``call_index`` (the scripted model's turn counter).
        """
        threshold = summarize_threshold(request.model)
        view = model_view(self._messages, self.context)
        if self._tally.view_tokens(view, request.system) < threshold:
            return view
        cut = cut_for_summary(self._messages, self.context, threshold)
        if cut <= self.context.start:
            return view
        summarize = request.model_copy(update={"tools": []})
        page_out, summarized = self._page_out(cut)
        result = await self._model_turn(summarize, "summarize", view, page_out)
        summary = summary_message(result.response.message.text(), result.archived[-1:])
        update: dict[str, Any] = {"start": cut, "summary": summary, "summarized_chars": summarized}
        update.update(self._let_go(result.page, page_out))
        self.context = self.context.model_copy(update=update)
        self.transcript = None  # the view changed wholesale: send it afresh next time
        self._memory = None
        return model_view(self._messages, self.context)

    def _page_out(self, cut: int) -> tuple[PageOut | None, int]:
        """The summarized messages to store as a page once there are enough of them
        (:data:`~filegate.workflows.context.PAGE_OUT_CHARS`), and how many characters
        the messages before ``cut`` hold (each message is measured once)."""
        context = self.context
        offset = context.offset
        summarized = context.summarized_chars + sum(
            message_chars(m) for m in self._messages[context.start - offset : cut - offset]
        )
        if not context.paging or summarized < PAGE_OUT_CHARS:
            return None, summarized
        page = PageOut(start=offset, messages=self._messages[: cut - offset], base=context.page)
        return page, summarized

    def _let_go(self, page: TranscriptPage | None, page_out: PageOut | None) -> dict[str, Any]:
        """Drop the messages a summary call stored as ``page``; the context fields to update."""
        if page is None:  # without a store on the agent worker, keep them all from now on
            return {"paging": False} if page_out is not None else {}
        answer = last_answer(self._messages[: page.count], self.context.paged_answer)
        del self._messages[: page.count]  # in place: FileTools shares the list
        return {"offset": page.end, "page": page, "summarized_chars": 0, "paged_answer": answer}

    async def _model_turn(
        self,
        request: ModelRequest,
        purpose: Purpose,
        view: list[Message],
        page_out: PageOut | None = None,
    ) -> ModelTurnResult:
        """One model activity: the transcript by reference plus new messages when possible.

        The reference is an S3 object (:class:`TranscriptRef`) with a store, or,
        without one, the copy a local call keeps in the agent worker's memory
        (:class:`MemoryRef`); a worker that lost that copy says so and the call
        is made again with the whole conversation. ``view`` is this turn's
        :func:`model_view` of the messages.
        """
        ref = self.transcript
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
            archive=to_archive(self._messages, self.context),
            first_run_id=workflow.info().first_execution_run_id,
            page_out=page_out,
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
                non_retryable_error_types=[wire.MODEL_REQUEST_ERROR],
            ),
        }
        try:
            if local:
                result = await workflow.execute_local_activity(MODEL_ACTIVITY, turn, **options)
            else:
                result = await workflow.execute_activity(MODEL_ACTIVITY, turn, **options)
        except FailureError as error:
            if request.script is not None and _failed_with(error, SCRIPT_UNAVAILABLE):
                self.script = None  # no worker holds it: send it inline once more
                inline = self._model_spec(by_reference=False)
                request = request.model_copy(update={"model": inline, "script": None})
                return await self._model_turn(request, purpose, view, page_out)
            if memory is None or not _failed_with(error, TRANSCRIPT_UNAVAILABLE):
                raise
            self._memory = None  # that worker restarted or another one ran the call
            return await self._model_turn(request, purpose, view, page_out)
        upto = self.context.offset + len(self._messages)
        self.context = self.context.model_copy(update={"archived_upto": upto})
        if purpose == "respond":
            self.transcript = result.transcript
            self._memory = result.memory
            self.model_time = result.completed_at
        if result.script is not None:
            self.script = result.script  # later calls name the script by this
        response = result.response
        self.usage = Usage(
            input_tokens=self.usage.input_tokens + response.usage.input_tokens,
            output_tokens=self.usage.output_tokens + response.usage.output_tokens,
        )
        return result


def _failed_with(error: FailureError, error_type: str) -> bool:
    """Whether an activity (regular or local) failed with an ``ApplicationError`` of that type."""
    cause = failure_cause(error)
    return isinstance(cause, ApplicationError) and cause.type == error_type
