"""Transcripts stored as segments: each model call writes its new messages only.

A real S3 server (SeaweedFS); a second :class:`TranscriptStore` plays a worker
that has no copy in memory and must rebuild a transcript from the objects.
"""

from __future__ import annotations

import json
import uuid

import pytest
from minio import Minio

from filegate.activities.history import (
    SNAPSHOT_EVERY,
    TranscriptMismatch,
    TranscriptStore,
    transcript_key,
)
from filegate.backends.artifacts import ArtifactStore
from filegate.kernel.messages import Message
from filegate.kernel.transcripts import TranscriptRef

CALLS = SNAPSHOT_EVERY + 8


@pytest.fixture
def store(minio_client: Minio) -> ArtifactStore:
    return ArtifactStore(minio_client, "segments-test", namespace=f"ns-{uuid.uuid4().hex[:8]}")


def _turn(k: int) -> list[Message]:
    return [
        Message(role="assistant", content=f"step {k} " + "x" * 400),
        Message(role="tool", content=f"result {k}", tool_call_id=f"c{k}", status="success"),
    ]


def _thread(store: ArtifactStore, thread: str) -> tuple[list[Message], list[TranscriptRef]]:
    """CALLS model calls, each adding two messages: (every message, every call's ref)."""
    transcripts = TranscriptStore(store)
    messages = [Message(role="user", content="task")]
    refs: list[TranscriptRef] = []
    previous: TranscriptRef | None = None
    new = list(messages)
    for k in range(CALLS):
        full, previous = transcripts.extend(thread, previous, new, transcript_key(k, "respond"))
        assert full == messages
        refs.append(previous)
        new = _turn(k)
        messages += new
    return messages[: -len(new)], refs


def test_calls_store_their_new_messages_and_a_snapshot_every_n(store: ArtifactStore) -> None:
    thread = f"wf-{uuid.uuid4().hex[:8]}"
    messages, refs = _thread(store, thread)
    assert [r.depth for r in refs] == [k % SNAPSHOT_EVERY for k in range(CALLS)]
    assert [r.count for r in refs] == [1 + 2 * k for k in range(CALLS)]
    sizes = [r.artifact.size for r in refs]
    # A segment holds one call's two messages, whatever the transcript's length...
    segments = [s for r, s in zip(refs, sizes, strict=True) if r.depth > 0]
    assert max(segments) < 2 * min(segments) and max(segments) < 2_000
    # ...and a snapshot the whole transcript; whole copies every call would be far larger.
    snapshot = refs[SNAPSHOT_EVERY]
    assert snapshot.depth == 0 and snapshot.artifact.size > 20 * max(segments)
    assert sum(sizes) * 4 < sum(len(json.dumps([m.model_dump() for m in messages[: r.count]]))
                                for r in refs)  # fmt: skip

    # A worker without a copy in memory rebuilds any call's transcript from the objects.
    cold = TranscriptStore(store)
    for ref in (refs[-1], refs[SNAPSHOT_EVERY - 1], refs[SNAPSHOT_EVERY], refs[1]):
        assert cold.load(ref) == messages[: ref.count]


def test_a_retried_call_stores_the_same_segment(store: ArtifactStore) -> None:
    thread = f"wf-{uuid.uuid4().hex[:8]}"
    transcripts = TranscriptStore(store)
    _, first = transcripts.extend(thread, None, [Message(role="user", content="hi")], "t/0")
    again = [
        transcripts.extend(thread, first, _turn(0), "t/1")[1],
        TranscriptStore(store).extend(thread, first, _turn(0), "t/1")[1],
    ]
    assert again[0] == again[1] and again[0].depth == 1


def test_a_segment_whose_base_is_not_shallower_is_refused(store: ArtifactStore) -> None:
    thread = f"wf-{uuid.uuid4().hex[:8]}"
    transcripts = TranscriptStore(store)
    _, base = transcripts.extend(thread, None, [Message(role="user", content="hi")], "t/0")
    _, seg = transcripts.extend(thread, base, _turn(0), "t/1")
    looping = {"base": seg.model_dump(mode="json"), "messages": []}
    body = json.dumps(looping).encode()
    artifact = store.put(thread, "t/2", body, "application/json")
    forged = TranscriptRef(artifact=artifact, count=seg.count, depth=seg.depth)
    with pytest.raises(TranscriptMismatch, match="base of depth"):
        TranscriptStore(store).load(forged)
    short = TranscriptRef(artifact=seg.artifact, count=seg.count + 1, depth=seg.depth)
    with pytest.raises(TranscriptMismatch, match="holds 3 messages"):
        TranscriptStore(store).load(short)
