"""The model-call activity: one activity name, a provider chosen by ModelSpec.provider.

Temporal owns retries. Providers raise ``ModelRetryable`` ApplicationErrors for
rate limits, 5xx and network failures (with ``next_retry_delay`` when the server
sent retry-after) and non-retryable ``ModelRequestError`` for everything a retry
cannot fix. API keys come only from the worker's environment.

The activity takes either a plain :class:`ModelRequest` (whole conversation by
value) or a :class:`~filegate.kernel.transcripts.ModelTurn` (transcript reference plus
new messages, contract §8 "history stays small"). :class:`ModelActivities` holds
the agent worker's artifact store; without one a ``ModelTurn`` is answered by
value and the workflow keeps sending whole conversations.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from filegate.activities.history import (
    RecentTranscripts,
    TranscriptStore,
    messages_markdown,
    transcript_key,
)
from filegate.activities.providers import (
    AnthropicMessagesProvider,
    OpenAIChatProvider,
    ScriptedProvider,
)
from filegate.activities.providers.common import request_error
from filegate.kernel.messages import Message, ModelRequest, ModelResponse, Usage
from filegate.kernel.transcripts import (
    TRANSCRIPT_UNAVAILABLE,
    MemoryRef,
    ModelTurn,
    ModelTurnResult,
)
from temporalio import activity
from temporalio.exceptions import ApplicationError

if TYPE_CHECKING:
    from filegate.backends.artifacts import ArtifactStore


class ModelProvider(Protocol):
    async def complete(self, request: ModelRequest) -> ModelResponse: ...


PROVIDERS: dict[str, ModelProvider] = {
    "scripted": ScriptedProvider(),
    "openai": OpenAIChatProvider(),
    "anthropic": AnthropicMessagesProvider(),
}
"""Providers are stateless (clients are per call), so one instance each is enough."""

SUMMARY_PROMPT = (
    "Summarize the conversation above for your own later use. Keep: the user's intent "
    "and constraints, the files and other artifacts produced or changed (with paths), "
    "decisions taken, and the next steps. Answer with the summary only."
)


def register_provider(name: str, provider: ModelProvider) -> None:
    """Plug in another provider (a worker calls this before it starts polling)."""
    PROVIDERS[name] = provider


def get_provider(name: str) -> ModelProvider:
    try:
        return PROVIDERS[name]
    except KeyError:
        known = ", ".join(sorted(PROVIDERS))
        raise request_error(f"unknown model provider {name!r}; known: {known}") from None


def scripted_summary(messages: list[Message]) -> str:
    """The scripted model's summary: deterministic, built from the messages themselves.

    A script's turns are counted by ``call_index``; summaries must not consume
    one, so the scripted provider is never asked for them.
    """
    intent = next((m.text() for m in messages if m.role == "user" and m.text()), "")
    touched: list[str] = []
    for message in messages:
        for call in message.tool_calls or []:
            path = call.args.get("file_path")
            if call.name in ("write_file", "edit_file") and path and path not in touched:
                touched.append(str(path))
    return (
        f"Summary of {len(messages)} earlier messages. Intent: {intent[:300]}. "
        f"Artifacts: {', '.join(touched) or 'none'}. Next steps: continue from the latest "
        "messages."
    )


async def complete(request: ModelRequest) -> ModelResponse:
    return await get_provider(request.model.provider).complete(request)


async def summarize(request: ModelRequest) -> ModelResponse:
    """Ask the model for a summary of ``request.messages`` (no tools offered)."""
    if request.model.provider == "scripted":
        text = scripted_summary(request.messages)
        return ModelResponse(
            message=Message(role="assistant", content=text),
            usage=Usage(output_tokens=len(text) // 4),
            stop_reason="end_turn",
        )
    prompt = Message(role="user", content=SUMMARY_PROMPT)
    asked = request.model_copy(update={"messages": [*request.messages, prompt], "tools": []})
    return await complete(asked)


class ModelActivities:
    """The ``filegate.model`` activity bound to the agent worker's artifact store."""

    def __init__(self, store: ArtifactStore | None = None) -> None:
        self.transcripts = TranscriptStore(store) if store is not None else None
        self.in_memory: RecentTranscripts[MemoryRef] = RecentTranscripts()
        """Transcripts of local calls without a store (see :class:`MemoryRef`)."""

    @activity.defn(name="filegate.model")
    async def call_model(
        self, request: ModelTurn | ModelRequest
    ) -> ModelResponse | ModelTurnResult:
        """Ask the configured model for the next assistant message (or a summary)."""
        if isinstance(request, ModelTurn):
            return await self._turn(request)
        return await complete(request)

    async def _turn(self, turn: ModelTurn) -> ModelTurnResult:
        result = await self._answer(turn)
        return result.model_copy(update={"completed_at": datetime.now(UTC).isoformat()})

    async def _answer(self, turn: ModelTurn) -> ModelTurnResult:
        transcripts = self.transcripts
        if transcripts is None:
            if turn.transcript is not None:
                raise ApplicationError(
                    "this agent worker has no artifact store but was sent a transcript "
                    "reference; configure S3 on every agent worker",
                    type=TRANSCRIPT_UNAVAILABLE,
                )
            return await self._answer_in_memory(turn)
        workflow_id = activity.info().workflow_id or "detached"
        archived = [
            await asyncio.to_thread(transcripts.archive, workflow_id, name, text)
            for name, text in sorted(turn.archive.items())
        ]
        key = transcript_key(turn.call_index, turn.purpose)
        full, ref = await asyncio.to_thread(
            transcripts.extend, workflow_id, turn.transcript, turn.messages, key
        )
        request = turn.plain(full)
        if turn.purpose == "summarize":
            name = f"summary-{turn.call_index:06d}.md"
            archived.append(
                await asyncio.to_thread(
                    transcripts.archive, workflow_id, name, messages_markdown(full)
                )
            )
            return ModelTurnResult(response=await summarize(request), archived=archived)
        return ModelTurnResult(response=await complete(request), transcript=ref, archived=archived)

    async def _answer_in_memory(self, turn: ModelTurn) -> ModelTurnResult:
        """No store: the conversation comes by value, or as a delta on one kept here."""
        info = activity.info()
        workflow_id = info.workflow_id or "detached"
        messages = list(turn.messages)
        if turn.memory is not None:
            kept = self.in_memory.recall(workflow_id, turn.memory)
            if kept is None:
                raise ApplicationError(
                    f"this worker no longer holds the transcript of {workflow_id} "
                    f"(call {turn.memory.call_index}); send it by value",
                    type=TRANSCRIPT_UNAVAILABLE,
                    non_retryable=True,
                )
            messages = kept + messages
        if turn.purpose == "summarize":
            return ModelTurnResult(response=await summarize(turn.plain(messages)))
        response = await complete(turn.plain(messages))
        if not info.is_local:
            return ModelTurnResult(response=response)  # the next call may run anywhere
        memory = MemoryRef(call_index=turn.call_index, count=len(messages))
        self.in_memory.keep(workflow_id, memory, messages)
        return ModelTurnResult(response=response, memory=memory)


call_model = ModelActivities().call_model
"""``filegate.model`` without an artifact store: conversations travel by value."""
