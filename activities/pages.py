"""Transcript pages (:class:`~filegate.kernel.transcripts.TranscriptPage`): a long thread's
early messages in the artifact store, so the workflow neither holds nor carries them.

The workflow keeps every message in memory until the summarized part of its
transcript (messages the model no longer sees verbatim) grows past
``workflows.context.PAGE_OUT_CHARS``; the next summary call stores that part
as a page and the workflow lets it go. Without pages, a 10 000-step thread
carried its whole transcript (200 MB for 20 KB reads) over every
continue-as-new and into its result, and converting that payload inside a
workflow task took longer than the SDK's two-second deadlock limit.

Blocking (minio); call from a thread in async code.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from filegate.kernel.messages import Message
from filegate.kernel.transcripts import PageOut, TranscriptPage

if TYPE_CHECKING:
    from filegate.backends.artifacts import ArtifactStore

PAGE_PREFIX = "pages"


class ForeignPage(ValueError):
    """A page's base names another run chain's object (contract §11)."""


def _page_key(start: int) -> str:
    """One object per first message: a retried summary call rewrites the same bytes."""
    return f"{PAGE_PREFIX}/{start:09d}"


def store_page(store: ArtifactStore, scope: str, out: PageOut) -> TranscriptPage:
    """Store ``out`` under the run chain ``scope``; the page's ref."""
    if out.base is not None and out.base.artifact.workflow_id != scope:
        raise ForeignPage(f"transcript page {out.base.artifact.key} belongs to another run chain")
    body = {
        "base": out.base.model_dump(mode="json") if out.base is not None else None,
        "start": out.start,
        "messages": [m.model_dump(mode="json", exclude_none=True) for m in out.messages],
    }
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    artifact = store.put(scope, _page_key(out.start), data, "application/json")
    return TranscriptPage(artifact=artifact, start=out.start, count=len(out.messages))


def load_transcript(store: ArtifactStore, page: TranscriptPage | None) -> list[Message]:
    """Messages ``[0, page.end)``: ``page`` and every page before it, oldest first."""
    chunks: list[list[Message]] = []
    while page is not None:
        body = json.loads(store.get(page.artifact))
        messages = [Message.model_validate(m) for m in body["messages"]]
        if body["start"] != page.start or len(messages) != page.count:
            raise ValueError(f"transcript page {page.artifact.key} does not match its ref")
        chunks.append(messages)
        base = body["base"]
        page = TranscriptPage.model_validate(base) if base is not None else None
    return [m for chunk in reversed(chunks) for m in chunk]


def full_transcript(
    store: ArtifactStore | None, earlier: TranscriptPage | None, transcript: Sequence[Any]
) -> list[Any]:
    """A result's whole transcript (contract §10 JSON): its pages' messages, then
    ``transcript`` (``AgentResult.earlier_transcript`` and ``.transcript``)."""
    if earlier is None:
        return list(transcript)
    if store is None:
        raise ValueError("this transcript starts in transcript pages: it needs the artifact store")
    paged = [
        m.model_dump(mode="json", exclude_none=True, exclude={"name"})
        for m in load_transcript(store, earlier)
    ]
    return paged + list(transcript)
