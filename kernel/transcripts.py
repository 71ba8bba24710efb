"""Model-turn and transcript wire models: what the workflow and the model activity exchange.

The workflow sends a :class:`ModelTurn` (the transcript by reference plus only the
new messages) and gets a :class:`ModelTurnResult` back; the activity side that
stores transcripts and the payload codec are :mod:`filegate.activities.history`.
Pure pydantic models and constants, so the workflow can import them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from filegate.kernel import wire
from filegate.kernel.artifacts import ArtifactRef
from filegate.kernel.compact import DefaultsOmitted
from filegate.kernel.messages import Message, ModelRequest, ModelResponse
from filegate.kernel.scripts import ScriptRef

CONVERSATION_DIR = "/conversation_history/"
"""Virtual directory of archived conversation text (evicted messages, summarised transcripts)."""
Purpose = Literal["respond", "summarize"]
TRANSCRIPT_UNAVAILABLE = wire.TRANSCRIPT_UNAVAILABLE_ERROR
"""Error type of a model call whose transcript reference this worker cannot resolve."""


class TranscriptRef(BaseModel):
    """A stored model-facing transcript: where it is and how many messages it holds.

    ``depth`` 0: the object holds the whole transcript. Above 0 it is a segment:
    the messages added by one call, on top of the transcript its base ref (stored
    inside it) names, ``depth - 1`` segments deep (see ``activities.history.SNAPSHOT_EVERY``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    artifact: ArtifactRef
    count: int = Field(ge=0)
    depth: int = Field(default=0, ge=0)


class MemoryRef(BaseModel):
    """A transcript a local model call keeps in the agent worker's memory.

    Without S3, a local activity's input never enters history, but it is still
    converted to JSON and back on every call; with this ref the workflow sends
    only the messages after ``count``. A worker that does not hold it (another
    process, a restart) answers ``TranscriptUnavailable`` and the workflow sends
    the whole conversation once more.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    call_index: int
    count: int = Field(ge=0)


class TranscriptPage(BaseModel):
    """Messages ``[start, start + count)`` of a thread's transcript in the artifact store.

    A long thread's workflow keeps in memory, carries over continue-as-new and
    returns only the messages after its newest page; the object holds
    ``{"base": <the page before> | null, "start", "messages"}``, so the pages
    form a chain back to message 0 (``activities.pages.load_transcript``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    artifact: ArtifactRef
    start: int = Field(ge=0)
    count: int = Field(ge=1)

    @property
    def end(self) -> int:
        """Transcript index of the first message after this page."""
        return self.start + self.count


class PageOut(BaseModel):
    """Transcript messages from ``start`` for a summary call to store as the next page."""

    model_config = ConfigDict(extra="forbid")

    start: int = Field(ge=0)
    messages: list[Message]
    base: TranscriptPage | None = None
    """The newest page so far (it ends at ``start``); None for the first."""


class ModelTurn(ModelRequest):
    """Input of the model activity when the workflow can send deltas.

    A :class:`ModelRequest` (so tools reading history can decode it as one)
    whose ``messages`` are only those after ``transcript.count`` (all of them
    when ``transcript`` is None). ``archive`` maps names under
    ``/conversation_history/`` to text the activity must store there (the
    originals of evicted messages); each name is sent once. ``mode`` is
    required so a plain request never decodes as a turn.
    """

    mode: Literal["turn"]
    transcript: TranscriptRef | None = None
    memory: MemoryRef | None = None
    """Without a store: ``messages`` continue the transcript this worker kept."""
    purpose: Purpose = "respond"
    archive: dict[str, str] = Field(default_factory=dict)
    first_run_id: str = ""
    """The run chain's first run id (``workflow.info().first_execution_run_id``): with
    the workflow id from the activity's info it scopes the stored transcripts."""
    page_out: PageOut | None = None
    """Summary calls only: messages the workflow lets go once stored as a page."""

    def plain(self, messages: Sequence[Message]) -> ModelRequest:
        """The provider-facing request with the full ``messages``."""
        fields = self.model_dump(include=set(ModelRequest.model_fields) - {"messages"})
        return ModelRequest.model_validate({**fields, "messages": list(messages)})


class InlineOnly:
    """Marks a value whose payload never enters workflow history.

    A local activity's input goes from the workflow to the activity inside one
    worker; only the activity's result is recorded. The payload codec leaves such
    payloads inline (:data:`INLINE_METADATA`) instead of storing them in S3 and
    fetching them back a moment later.
    """


class LocalModelTurn(ModelTurn, InlineOnly):
    """A :class:`ModelTurn` sent to a local activity (decodes as a ModelTurn)."""


class ModelTurnResult(DefaultsOmitted):
    """The model's answer plus the ref to pass next time (None = keep sending by value)."""

    response: ModelResponse
    transcript: TranscriptRef | None = None
    archived: list[str] = Field(default_factory=list)
    """Virtual paths written under ``/conversation_history/`` by this call."""
    memory: MemoryRef | None = None
    """Set by a local call without a store: the transcript is kept in memory."""
    page: TranscriptPage | None = None
    """The page a summary call stored from ``ModelTurn.page_out`` (None: no store)."""
    script: ScriptRef | None = None
    """Set when this call got a large script inline: later calls name it by this ref
    (:mod:`filegate.kernel.scripts`). Absent from runs recorded before refs existed."""
    completed_at: str | None = None
    """When the activity got the answer (ISO 8601, UTC). Recorded with the result,
    so it is the same on replay; ``workflow.now()`` right after a local activity
    is not (the original run and a replay see different workflow-task times)."""


def conversation_key(name: str) -> str:
    """Artifact key (below the thread prefix) of ``/conversation_history/<name>``."""
    return CONVERSATION_DIR.strip("/") + "/" + name
