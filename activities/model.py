"""The model-call activity: one activity name, a provider chosen by the worker's profile.

``ModelSpec.provider`` names one of the agent worker's model profiles
(:mod:`~filegate.activities.providers.profiles`); the profile, not the request,
decides the provider kind, endpoint and key variable.

Temporal owns retries of the model call. The artifact store waits out an S3
outage itself, within the attempt's time (:mod:`~filegate.activities.s3_outage`).
Providers raise ``ModelRetryable`` ApplicationErrors for
rate limits, 5xx and network failures (with ``next_retry_delay`` when the server
sent retry-after) and non-retryable ``ModelRequestError`` for everything a retry
cannot fix. API keys come only from the worker's environment, through its profiles.

The activity takes either a plain :class:`ModelRequest` (whole conversation by
value) or a :class:`~filegate.kernel.transcripts.ModelTurn` (transcript reference plus
new messages, contract §8 "history stays small"). :class:`ModelActivities` holds
the agent worker's artifact store; without one a ``ModelTurn`` is answered by
value and the workflow keeps sending whole conversations.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError

from filegate.activities.history import (
    RecentTranscripts,
    TranscriptStore,
    messages_markdown,
    transcript_key,
)
from filegate.activities.identity import run_scope
from filegate.activities.pages import ForeignPage, store_page
from filegate.activities.providers import (
    AnthropicMessagesProvider,
    OpenAIChatProvider,
    ScriptedProvider,
)
from filegate.activities.providers.common import request_error
from filegate.activities.providers.model_output import limit_turn
from filegate.activities.providers.profiles import ModelProfile, ModelProfiles
from filegate.activities.s3_outage import waiting_for_s3
from filegate.activities.script_refs import ScriptShelf
from filegate.activities.telemetry import model_call_span
from filegate.kernel import wire
from filegate.kernel.messages import Message, ModelRequest, ModelResponse, Usage
from filegate.kernel.registry import TOOLS
from filegate.kernel.scripts import ScriptRef
from filegate.kernel.transcripts import (
    TRANSCRIPT_UNAVAILABLE,
    MemoryRef,
    ModelTurn,
    ModelTurnResult,
    TranscriptPage,
)

if TYPE_CHECKING:
    from filegate.backends.artifacts import ArtifactStore


class ModelProvider(Protocol):
    async def complete(self, request: ModelRequest) -> ModelResponse: ...


ProviderFactory = Callable[[ModelProfile], ModelProvider]

PROVIDERS: dict[str, ProviderFactory] = {
    "scripted": ScriptedProvider,
    "openai": OpenAIChatProvider,
    "anthropic": AnthropicMessagesProvider,
}
"""Provider kinds; each builds a provider bound to one profile of the worker."""

FOREIGN_TRANSCRIPT = wire.FOREIGN_TRANSCRIPT_ERROR
"""A transcript reference outside the calling run chain (contract §11): refused."""

SUMMARY_PROMPT = (
    "Summarize the conversation above for your own later use. Keep: the user's intent "
    "and constraints, the files and other artifacts produced or changed (with paths), "
    "decisions taken, and the next steps. Answer with the summary only."
)


def register_provider(kind: str, factory: ProviderFactory) -> None:
    """Replace how a provider kind is built (a worker calls this before it starts polling)."""
    PROVIDERS[kind] = factory


def get_provider(profile: ModelProfile) -> ModelProvider:
    """The provider for ``profile``, bound to its endpoint and key variable."""
    try:
        factory = PROVIDERS[profile.kind]
    except KeyError:
        known = ", ".join(sorted(PROVIDERS))
        raise request_error(f"unknown model provider {profile.kind!r}; known: {known}") from None
    return factory(profile)


def _scripted_summary(messages: list[Message]) -> str:
    """The scripted model's summary: deterministic, built from the messages themselves.

    A script's turns are counted by ``call_index``; summaries must not consume
    one, so the scripted provider is never asked for them.
    """
    intent = next((m.text() for m in messages if m.role == "user" and m.text()), "")
    touched: list[str] = []
    for message in messages:
        for call in message.tool_calls or []:
            path = call.args.get(TOOLS.path_fields.get(call.name, ""))
            changed = call.name in TOOLS.writing or call.name in TOOLS.editing
            if changed and path and path not in touched:
                touched.append(str(path))
    return (
        f"Summary of {len(messages)} earlier messages. Intent: {intent[:300]}. "
        f"Artifacts: {', '.join(touched) or 'none'}. Next steps: continue from the latest "
        "messages."
    )


async def complete(request: ModelRequest, profile: ModelProfile) -> ModelResponse:
    return await get_provider(profile).complete(request)


async def summarize(request: ModelRequest, profile: ModelProfile) -> ModelResponse:
    """Ask the model for a summary of ``request.messages`` (no tools offered)."""
    if profile.kind == "scripted":
        text = _scripted_summary(request.messages)
        return ModelResponse(
            message=Message(role="assistant", content=text),
            usage=Usage(output_tokens=len(text) // 4),
            stop_reason="end_turn",
        )
    prompt = Message(role="user", content=SUMMARY_PROMPT)
    asked = request.model_copy(update={"messages": [*request.messages, prompt], "tools": []})
    return await complete(asked, profile)


class ModelActivities:
    """The ``filegate.model`` activity bound to the agent worker's artifact store and
    model profiles (None: the built-in defaults; the worker's wiring resolves the
    configured ones, so this class never reads the environment)."""

    def __init__(
        self, store: ArtifactStore | None = None, profiles: ModelProfiles | None = None
    ) -> None:
        if profiles is None:
            profiles = ModelProfiles.defaults()
        self.profiles = profiles
        self.transcripts = TranscriptStore(store) if store is not None else None
        self.in_memory: RecentTranscripts[MemoryRef] = RecentTranscripts()
        """Transcripts of local calls without a store (see :class:`MemoryRef`)."""
        self.scripts = ScriptShelf(store)
        """Scripted runs' scripts by reference (:mod:`filegate.kernel.scripts`)."""

    @activity.defn(name=wire.MODEL_ACTIVITY)
    async def call_model(
        self, request: ModelTurn | ModelRequest
    ) -> ModelResponse | ModelTurnResult:
        """Ask the configured model for the next assistant message (or a summary);
        a ``chat {model}`` span when the worker traces."""
        profile = self.profiles.resolve(request.model)
        model = request.model.name or request.model.provider
        with model_call_span(model, profile.kind) as answered:
            if isinstance(request, ModelTurn):
                result = await self._turn(request, profile)
                answered(result.response)
                return result
            response = self._recordable(await complete(request, profile), request)
            answered(response)
            return response

    def _recordable(self, response: ModelResponse, request: ModelRequest) -> ModelResponse:
        """The answer capped as the workflow may record it (``model_output.limit_turn``):
        through the S3 codec when this worker has a store, else inline in history."""
        return limit_turn(
            response,
            request.tool_limits,
            stored=self.transcripts is not None,
            call_index=request.call_index,
        )

    async def _turn(self, turn: ModelTurn, profile: ModelProfile) -> ModelTurnResult:
        async with waiting_for_s3():  # an S3 outage is waited out, not an attempt spent
            result = await self._answer(turn, profile)
        return result.model_copy(
            update={
                "response": self._recordable(result.response, turn),
                "completed_at": datetime.now(UTC).isoformat(),
            }
        )

    async def _answer(self, turn: ModelTurn, profile: ModelProfile) -> ModelTurnResult:
        transcripts = self.transcripts
        if transcripts is None:
            if turn.transcript is not None:
                raise ApplicationError(
                    "this agent worker has no artifact store but was sent a transcript "
                    "reference; configure S3 on every agent worker",
                    type=TRANSCRIPT_UNAVAILABLE,
                )
            return await self._answer_in_memory(turn, profile)
        workflow_id = run_scope(turn.first_run_id)
        if turn.transcript is not None and turn.transcript.artifact.workflow_id != workflow_id:
            raise ApplicationError(
                f"transcript {turn.transcript.artifact.key} belongs to another run chain",
                type=FOREIGN_TRANSCRIPT,
                non_retryable=True,
            )
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
            page = await self._page(turn, workflow_id)
            response = await summarize(request, profile)
            return ModelTurnResult(response=response, archived=archived, page=page)
        script = await self._script(request, profile, workflow_id, local=False)
        response = await complete(request, profile)
        return ModelTurnResult(response=response, transcript=ref, archived=archived, script=script)

    async def _answer_in_memory(self, turn: ModelTurn, profile: ModelProfile) -> ModelTurnResult:
        """No store: the conversation comes by value, or as a delta on one kept here."""
        info = activity.info()
        workflow_id = run_scope(turn.first_run_id)
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
            return ModelTurnResult(response=await summarize(turn.plain(messages), profile))
        request = turn.plain(messages)
        script = await self._script(request, profile, workflow_id, local=info.is_local)
        response = await complete(request, profile)
        if not info.is_local:  # the next call may run anywhere
            return ModelTurnResult(response=response, script=script)
        memory = MemoryRef(call_index=turn.call_index, count=len(messages))
        self.in_memory.keep(workflow_id, memory, messages)
        return ModelTurnResult(response=response, memory=memory, script=script)

    async def _page(self, turn: ModelTurn, scope: str) -> TranscriptPage | None:
        """Store the messages a summary call brings as the next transcript page."""
        if turn.page_out is None or self.transcripts is None:
            return None
        try:
            return await asyncio.to_thread(store_page, self.transcripts.store, scope, turn.page_out)
        except ForeignPage as exc:
            raise ApplicationError(str(exc), type=FOREIGN_TRANSCRIPT, non_retryable=True) from None

    async def _script(
        self, request: ModelRequest, profile: ModelProfile, scope: str, *, local: bool
    ) -> ScriptRef | None:
        """A scripted call's script made ready (:class:`ScriptShelf`); the ref to hand back."""
        if profile.kind != "scripted":
            return None
        return await self.scripts.prepare(request, scope, local=local)


call_model = ModelActivities(profiles=ModelProfiles.defaults()).call_model
"""``filegate.model`` without an artifact store, on the default profiles:
conversations travel by value."""
