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
import contextlib
import contextvars
import dataclasses
import hashlib
import json
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

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

CODEC_S3_WAIT_SECONDS = 1.0
"""How long one encoding task (one workflow task's completion, one client call) waits
for a silent S3 in all, before it keeps what is left inline instead.

The codec encodes what a workflow task sends (an approved call's large input,
scheduled by the task that accepted the decision), and an agent run's workflow
task times out after 3 s (``WORKFLOW_TASK_TIMEOUT``): a wait as long as that,
or one per payload, outlived the task, so a decision taken during an S3 outage
was never acknowledged (issue 49). The wait is one allowance shared by every
payload of the task (spent only while S3 is silent), and each put is abandoned
when it runs out, even when S3 hangs rather than refuses. Activity results do
not come through here: they are stored by
:class:`~filegate.activities.s3_outage.ResultsThroughS3` inside the activity,
which may wait the whole outage."""
CODEC_INLINE_FALLBACK_BYTES = 1024 * 1024
"""Largest payload kept inline when S3 does not answer (Temporal refuses payloads
over 2 MiB by default); a larger one waits out the outage as every S3 call does."""
CODEC_INLINE_BUDGET_BYTES = 1024 * 1024
"""At most this many bytes one encoding task keeps inline while S3 is away.

Why per task and not only per payload: the server refuses a whole workflow
task completion over its gRPC message limit (4 MiB on the dev server and by
default, ``bench/grpc_limit.py``), and a refused completion *terminates* the
run (``GrpcMessageTooLarge``). Several payloads of up to 1 MiB each kept inline
in one completion crossed it. Past the budget the task fails with
:class:`InlineBudgetSpent`; Temporal retries a failed workflow task, so the run
waits for S3 instead of losing anything."""

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


class InlineBudgetSpent(RuntimeError):
    """S3 does not answer and this encoding task already keeps its inline budget.

    Raised inside a workflow task's completion it fails that task, which Temporal
    retries: the run waits for S3 rather than sending a completion the server
    would refuse and terminate the run for."""


ALLOWANCE_SECONDS = 10.0
"""An encoding task's allowance is renewed once it is this old. A workflow task's
completion is encoded in well under a second (its own asyncio task), but a
client's task may encode call after call for hours (a UI handler, a session
loop): without renewal one outage long ago would keep it from S3 for good."""


@dataclasses.dataclass
class _Allowance:
    """What one encoding task may still spend: seconds waiting on a slow or silent S3
    (a put answered within :data:`CODEC_FREE_PUT_SECONDS` spends none), bytes inline."""

    created: float
    wait: float = CODEC_S3_WAIT_SECONDS
    inline: int = CODEC_INLINE_BUDGET_BYTES


_ALLOWANCES: weakref.WeakKeyDictionary[asyncio.Task[Any], _Allowance] = weakref.WeakKeyDictionary()
"""Per asyncio task: the SDK encodes a workflow task's completion (and a client
call's arguments) sequentially in one task, so the task is the unit a budget
must bound."""

CODEC_FREE_PUT_SECONDS = 0.1
"""A put that answers within this long spends none of a task's wait: an answering S3
never pushes a long-lived client task (a session loop) inline."""


def reference_payload(ref: ArtifactRef) -> Payload:
    """The small payload that stands in history for one stored payload."""
    return Payload(metadata={"encoding": CODEC_ENCODING}, data=ref.model_dump_json().encode())


def payload_digest(data: bytes) -> str:
    """The content address of a serialized payload (encoding twice is harmless)."""
    return hashlib.sha256(data).hexdigest()


def needs_storing(payload: Payload, threshold: int) -> bool:
    """True for a payload that leaves history: over ``threshold`` and not marked inline."""
    return payload.ByteSize() > threshold and INLINE_METADATA not in payload.metadata


def _allowance() -> _Allowance:
    task = asyncio.current_task()
    assert task is not None  # the codec is only called from coroutines
    now = time.monotonic()
    allowance = _ALLOWANCES.get(task)
    if allowance is None or now - allowance.created > ALLOWANCE_SECONDS:
        allowance = _ALLOWANCES[task] = _Allowance(now)
    return allowance


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
        if not needs_storing(payload, self.threshold):
            return payload
        data = payload.SerializeToString()
        if len(data) > CODEC_INLINE_FALLBACK_BYTES:
            # It cannot stay in history, and its upload alone may take longer than any
            # allowance (13 MB on a loaded machine): it waits out S3 as every S3 call does.
            stored = await asyncio.to_thread(
                self.store.put, CODEC_THREAD, payload_digest(data), data
            )
            return reference_payload(stored)
        allowance = _allowance()
        began = time.monotonic()
        ref = await self._put_until(data, began + allowance.wait)
        # A healthy put costs nothing; a slow, hung or refused one costs its time, so
        # a slow S3 is bounded per task like a silent one.
        allowance.wait -= max(0.0, time.monotonic() - began - CODEC_FREE_PUT_SECONDS)
        if ref is not None:
            return reference_payload(ref)
        if len(data) > allowance.inline:
            kept = CODEC_INLINE_BUDGET_BYTES - allowance.inline
            raise InlineBudgetSpent(
                f"S3 at {self.store.endpoint} does not answer and a {len(data)}-byte payload "
                f"cannot stay inline (this task keeps {kept} bytes inline already): a "
                "workflow task is retried until S3 answers; anything else, try again then"
            )
        allowance.inline -= len(data)
        _log.warning(
            "S3 at %s does not answer: a %d-byte payload stays in history",
            self.store.endpoint,
            len(data),
        )
        return payload

    async def _put_until(self, data: bytes, deadline: float) -> ArtifactRef | None:
        """Store ``data`` unless S3 does not answer by ``deadline`` (refused or hung).

        The put runs on a daemon thread of its own: one abandoned on a hung S3 stays
        blocked until urllib3 gives up, and must neither hold a pool's thread (later
        puts would find none free after S3 is back) nor keep the process from exiting.
        """
        # Here, not at the top: the codec's module loads without minio.
        from filegate.backends.artifact_errors import ArtifactStoreDown
        from filegate.backends.s3 import S3_WAIT_UNTIL

        left = deadline - time.monotonic()
        if left <= 0:
            return None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ArtifactRef] = loop.create_future()
        token = S3_WAIT_UNTIL.set(deadline)
        try:
            context = contextvars.copy_context()
        finally:
            S3_WAIT_UNTIL.reset(token)

        def settle(result: ArtifactRef | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(cast("ArtifactRef", result))

        def put() -> None:
            outcome: tuple[ArtifactRef | None, BaseException | None]
            try:
                outcome = (self.store.put(CODEC_THREAD, payload_digest(data), data), None)
            except BaseException as exc:  # handed to the waiting coroutine
                outcome = (None, exc)
            with contextlib.suppress(RuntimeError):  # its loop closed meanwhile: nobody waits
                loop.call_soon_threadsafe(settle, *outcome)

        threading.Thread(
            target=context.run, args=(put,), name="filegate-codec-put", daemon=True
        ).start()
        try:
            return await asyncio.wait_for(future, left)
        except (ArtifactStoreDown, TimeoutError):
            return None

    async def _decode_one(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != CODEC_ENCODING:
            return payload
        ref = ArtifactRef.model_validate_json(payload.data)
        data = await asyncio.to_thread(self.store.get, ref)
        restored = Payload()
        restored.ParseFromString(data)
        return restored


class SharedPayloadConverter(PydanticPayloadConverter):
    """The pydantic payload converter, built once per class; its instances share that state.

    Why: the SDK makes a new payload converter for every workflow activation, twice
    (its command-aware data converter, to decode the activation and to encode the
    completion), and a new :class:`PydanticPayloadConverter` builds its serializer
    and its encoding converters anew and starts with an empty ``TypeAdapter`` cache:
    a converter built and used once for a 20 KB ``ToolOutcome`` round trip took
    34.7 us, 19.3 us shared (issue 55; a few per agent step). What it holds is
    stateless converters and thread-safe caches, so every instance of a class may
    share the first one's.
    """

    _built: ClassVar[dict[type, dict[str, Any]]] = {}

    def __init__(self) -> None:
        state = SharedPayloadConverter._built.get(type(self))
        if state is None:
            super().__init__()
            SharedPayloadConverter._built[type(self)] = dict(self.__dict__)
        else:
            self.__dict__.update(state)


class InlineMarkingPayloadConverter(SharedPayloadConverter):
    """The pydantic payload converter; marks :class:`InlineOnly` values for the codec."""

    def to_payloads(self, values: Sequence[Any]) -> list[Payload]:
        payloads = super().to_payloads(values)
        for value, payload in zip(values, payloads, strict=True):
            if isinstance(value, InlineOnly):
                payload.metadata[INLINE_METADATA] = b"1"
        return payloads


SHARED_DATA_CONVERTER = dataclasses.replace(
    pydantic_data_converter, payload_converter_class=SharedPayloadConverter
)
"""The pydantic data converter with :class:`SharedPayloadConverter`: Filegate's without S3."""


def filegate_data_converter(
    store: ArtifactStore | None, threshold: int = CODEC_THRESHOLD
) -> DataConverter:
    """The pydantic converter, plus the S3 payload codec when a store is given.

    Use the same converter on the client and on every worker of a namespace
    (the threshold may differ between processes: decoding only looks at the
    encoding marker).
    """
    if store is None:
        return SHARED_DATA_CONVERTER
    codec = ArtifactPayloadCodec(store, threshold)
    return dataclasses.replace(
        pydantic_data_converter,
        payload_converter_class=InlineMarkingPayloadConverter,
        payload_codec=codec,
    )
