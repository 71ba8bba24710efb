"""Keeping workflow history small (contract §8): transcripts by reference, big payloads in S3.

Two mechanisms, both backed by the same :class:`~backends.artifacts.ArtifactStore`:

* **Transcript by reference.** The model activity's input carries a
  :class:`TranscriptRef` (key, message count, sha256) plus only the messages
  new since the previous call (:class:`ModelTurn`). The activity rebuilds the
  previous transcript (from memory, else from its objects), appends the new
  messages and stores them, usually as a segment that holds only the new
  messages and the previous ref (:data:`SNAPSHOT_EVERY`), under a key fixed by
  the workflow id and the call index (so a retried activity rewrites the same
  bytes and returns an equal ref). It hands the new ref back with the response
  (:class:`ModelTurnResult`). Without a store on
  the agent worker the activity answers ``transcript=None`` and the workflow
  keeps sending the whole conversation by value (unit tests without S3).
* **Payload codec.** :func:`filegate_data_converter` is the pydantic converter
  plus :class:`ArtifactPayloadCodec`, which swaps any payload over
  :data:`CODEC_THRESHOLD` bytes for a small reference (content-addressed, so
  encoding twice is harmless). It keeps file contents out of history (a read
  result, the model input carrying it, the continue-as-new carry and the
  workflow result with the whole transcript all become references), so
  history grows by a few KB per step whatever the transcript's length. The client
  and *every* worker must use the same converter: a process without the codec
  cannot read the references.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec

from filegate.kernel.artifacts import ArtifactRef
from filegate.kernel.messages import Message
from filegate.kernel.transcripts import (
    CONVERSATION_DIR,
    InlineOnly,
    Purpose,
    TranscriptRef,
    conversation_key,
)

if TYPE_CHECKING:
    from filegate.backends.artifacts import ArtifactStore

_log = logging.getLogger(__name__)

TRANSCRIPT_PREFIX = "transcript"
CODEC_THRESHOLD = 8 * 1024
"""Payloads above this many bytes leave history. Low on purpose: a file read (tool
result, then the model input that carries it) would otherwise pass through history
twice per step, so history would grow by tens of KB per step (bench/history.py)."""
CODEC_ENCODING = b"filegate/artifact-ref"
INLINE_METADATA = "filegate-inline"
"""Payload metadata key set on :class:`InlineOnly` values: the codec passes them as they are."""
CODEC_THREAD = "~payloads"
"""Pseudo workflow-id component under which codec objects live (no workflow id starts with ~
in practice, and ``~`` keeps them apart from real threads)."""

CODEC_S3_WAIT_SECONDS = 3.0
"""How long the codec waits for S3 before it keeps a payload inline instead.

The codec also encodes what a workflow task sends (an approved call's large
input scheduled by the task that accepted the decision). Waiting the whole
outage budget there outlived the workflow task, so a reviewer's decision
during an S3 outage was never acknowledged. A payload history can hold is
better kept inline for the outage than waited on."""
CODEC_INLINE_FALLBACK_BYTES = 1024 * 1024
"""Largest payload kept inline when S3 does not answer (Temporal refuses payloads
over 2 MiB by default); a larger one waits out the outage as every S3 call does."""

SNAPSHOT_EVERY = 32
"""A model call stores only its new messages, as a segment on the previous transcript
object, except every this many calls, when it stores the whole transcript again.
Storing the whole transcript on every call wrote O(n^2) bytes over a thread of n
calls; segments write each message about once (plus a full copy every 32 calls),
and a worker that has no copy in memory reads at most 32 objects to rebuild one."""

K = TypeVar("K")


class TranscriptMismatch(RuntimeError):
    """The stored transcript does not hold the message count its ref promises."""


def transcript_key(call_index: int, purpose: Purpose) -> str:
    """One object per model call: a retry rewrites it, a later call never does."""
    suffix = "-summary" if purpose == "summarize" else ""
    return f"{TRANSCRIPT_PREFIX}/{call_index:06d}{suffix}"


def messages_markdown(messages: Sequence[Message]) -> str:
    """A readable (and greppable) rendering of messages for ``/conversation_history/``."""
    parts: list[str] = []
    for n, message in enumerate(messages, 1):
        head = f"## {n}. {message.role}"
        if message.tool_call_id:
            head += f" (tool_call_id={message.tool_call_id}, status={message.status})"
        parts.append(head)
        text = message.text()
        if text:
            parts.append(text)
        for call in message.tool_calls or []:
            parts.append(f"tool call {call.id}: {call.name} {json.dumps(call.args)}")
        parts.append("")
    return "\n".join(parts)


class RecentTranscripts(Generic[K]):
    """The latest transcript of each of the last ``size`` threads, in process memory.

    Keyed by workflow id; an entry is only handed out for the exact ``key`` it
    was kept under (a stored object's ref, or a call number and message count),
    so a stale or foreign entry is never used. Thread-safe; copies in and out.
    """

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._entries: OrderedDict[str, tuple[K, list[Message]]] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, workflow_id: str, key: K, messages: Sequence[Message]) -> None:
        with self._lock:
            self._entries[workflow_id] = (key, list(messages))
            self._entries.move_to_end(workflow_id)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def recall(self, workflow_id: str, key: K) -> list[Message] | None:
        with self._lock:
            entry = self._entries.get(workflow_id)
        if entry is None or entry[0] != key:
            return None
        return list(entry[1])


def _dump(message: Message) -> dict[str, object]:
    return message.model_dump(mode="json", exclude_none=True)


def _parse(items: list[dict[str, object]]) -> list[Message]:
    return [Message.model_validate(m) for m in items]


class TranscriptStore:
    """Transcript objects and conversation archives of threads, in one artifact store.

    The latest transcript of each recent thread stays in memory too
    (:class:`RecentTranscripts`): the next model call of a thread usually lands on
    the same worker (always, for local activities), and then it need not fetch
    and parse the whole conversation again.

    Blocking (minio); call from a thread in async code.
    """

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store
        self._recent: RecentTranscripts[ArtifactRef] = RecentTranscripts()

    def load(self, ref: TranscriptRef) -> list[Message]:
        recalled = self._recent.recall(ref.artifact.workflow_id, ref.artifact)
        if recalled is not None and len(recalled) == ref.count:
            return recalled
        data = json.loads(self.store.get(ref.artifact))
        if isinstance(data, dict):  # a segment: new messages on top of its base
            base = TranscriptRef.model_validate(data["base"])
            if base.depth >= ref.depth:
                raise TranscriptMismatch(
                    f"transcript segment {ref.artifact.key} (depth {ref.depth}) "
                    f"names a base of depth {base.depth}"
                )
            messages = self.load(base) + _parse(data["messages"])
        else:
            messages = _parse(data)
        if len(messages) != ref.count:
            raise TranscriptMismatch(
                f"transcript {ref.artifact.key} holds {len(messages)} messages, "
                f"its ref says {ref.count}"
            )
        return messages

    def save(self, workflow_id: str, key: str, messages: Sequence[Message]) -> TranscriptRef:
        """Store the whole transcript under ``key`` (a snapshot, depth 0)."""
        artifact = self._put(workflow_id, key, [_dump(m) for m in messages])
        self._recent.keep(artifact.workflow_id, artifact, messages)
        return TranscriptRef(artifact=artifact, count=len(messages))

    def extend(
        self,
        workflow_id: str,
        previous: TranscriptRef | None,
        new: Sequence[Message],
        key: str,
    ) -> tuple[list[Message], TranscriptRef]:
        """Previous transcript + ``new``, stored under ``key``: (full list, its ref).

        Stored as a segment (``new`` and the previous ref) unless there is no
        previous transcript or it is :data:`SNAPSHOT_EVERY` - 1 segments deep.
        """
        full = self.load(previous) if previous is not None else []
        full.extend(new)
        if previous is None or previous.depth + 1 >= SNAPSHOT_EVERY:
            return full, self.save(workflow_id, key, full)
        segment = {"base": previous.model_dump(mode="json"), "messages": [_dump(m) for m in new]}
        artifact = self._put(workflow_id, key, segment)
        self._recent.keep(artifact.workflow_id, artifact, full)
        return full, TranscriptRef(artifact=artifact, count=len(full), depth=previous.depth + 1)

    def _put(self, workflow_id: str, key: str, body: object) -> ArtifactRef:
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        return self.store.put(workflow_id, key, data, "application/json")

    def archive(self, workflow_id: str, name: str, text: str) -> str:
        """Store ``text`` as ``/conversation_history/<name>``; returns that virtual path."""
        self.store.put(workflow_id, conversation_key(name), text.encode(), "text/markdown")
        return CONVERSATION_DIR + name


# --------------------------------------------------------------------------- payload codec


class ArtifactPayloadCodec(PayloadCodec):
    """Moves payloads over ``threshold`` bytes into the artifact store (by sha256)."""

    def __init__(self, store: ArtifactStore, threshold: int = CODEC_THRESHOLD) -> None:
        self.store = store
        self.threshold = threshold

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [await self._encode_one(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [await self._decode_one(p) for p in payloads]

    async def _encode_one(self, payload: Payload) -> Payload:
        if payload.ByteSize() <= self.threshold or INLINE_METADATA in payload.metadata:
            return payload
        data = payload.SerializeToString()
        digest = hashlib.sha256(data).hexdigest()
        if len(data) <= CODEC_INLINE_FALLBACK_BYTES:
            # Here, not at the top: the codec's module loads without minio.
            from filegate.backends.artifact_errors import ArtifactStoreDown
            from filegate.backends.s3 import S3_WAIT_UNTIL

            token = S3_WAIT_UNTIL.set(time.monotonic() + CODEC_S3_WAIT_SECONDS)
            try:
                ref = await asyncio.to_thread(self.store.put, CODEC_THREAD, digest, data)
            except ArtifactStoreDown:
                _log.warning(
                    "S3 at %s does not answer: a %d-byte payload stays in history",
                    self.store.endpoint,
                    len(data),
                )
                return payload
            finally:
                S3_WAIT_UNTIL.reset(token)
        else:
            ref = await asyncio.to_thread(self.store.put, CODEC_THREAD, digest, data)
        return Payload(
            metadata={"encoding": CODEC_ENCODING},
            data=ref.model_dump_json().encode(),
        )

    async def _decode_one(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != CODEC_ENCODING:
            return payload
        ref = ArtifactRef.model_validate_json(payload.data)
        data = await asyncio.to_thread(self.store.get, ref)
        restored = Payload()
        restored.ParseFromString(data)
        return restored


class InlineMarkingPayloadConverter(PydanticPayloadConverter):
    """The pydantic payload converter; marks :class:`InlineOnly` values for the codec."""

    def to_payloads(self, values: Sequence[Any]) -> list[Payload]:
        payloads = super().to_payloads(values)
        for value, payload in zip(values, payloads, strict=True):
            if isinstance(value, InlineOnly):
                payload.metadata[INLINE_METADATA] = b"1"
        return payloads


def filegate_data_converter(
    store: ArtifactStore | None, threshold: int = CODEC_THRESHOLD
) -> DataConverter:
    """The pydantic converter, plus the S3 payload codec when a store is given.

    Use the same converter on the client and on every worker of a namespace
    (the threshold may differ between processes: decoding only looks at the
    encoding marker).
    """
    if store is None:
        return pydantic_data_converter
    codec = ArtifactPayloadCodec(store, threshold)
    return dataclasses.replace(
        pydantic_data_converter,
        payload_converter_class=InlineMarkingPayloadConverter,
        payload_codec=codec,
    )
