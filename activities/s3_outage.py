"""How an activity that needs the artifact store rides out an S3 outage.

The store itself waits an outage out (:class:`~filegate.backends.s3.OutageWaiter`,
``FILEGATE_S3_OUTAGE_SECONDS``): a transport failure is retried in the worker
with backoff, it never uses up one of the activity's attempts. Why inside the
activity rather than as a retryable error the workflow would have to re-schedule
without counting: Temporal counts every failed attempt against the retry
policy, and only the workflow could tell an S3 wait apart, so every caller
(model turns, tool calls, the payload codec) would need its own loop. Waiting
where the S3 call is keeps one rule for all of them.

An activity has a start-to-close deadline, though; :func:`waiting_for_s3` bounds
the wait by it (minus what the activity needs after S3, e.g. the model call)
and turns the store's typed failures into errors the workflow understands:

- ``ArtifactStoreWaiting`` (retryable): this attempt's time ran out while S3 was
  still down; the next attempt waits on. Only then is an attempt spent.
- ``ArtifactStoreUnavailable`` (non-retryable): S3 gave no answer for the whole
  budget; the message names S3 and its endpoint.
- ``ArtifactStoreRefused`` (non-retryable): S3 answered with something no retry
  changes (NoSuchBucket, AccessDenied, InvalidAccessKeyId).

It also heartbeats while the activity waits, when the activity has a heartbeat
timeout (the model activity normally has none; tool calls heartbeat from
``activities.tools.run_blocking`` already).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from filegate.activities.history import (
    CODEC_INLINE_FALLBACK_BYTES,
    CODEC_THREAD,
    INLINE_METADATA,
    ArtifactPayloadCodec,
    needs_storing,
    payload_digest,
    reference_payload,
)
from filegate.backends.artifact_errors import ArtifactStoreDown, ArtifactStoreRefused
from filegate.backends.s3 import S3_WAIT_UNTIL
from filegate.kernel import wire

_log = logging.getLogger("filegate.s3")

S3_WAITING = "ArtifactStoreWaiting"
S3_UNAVAILABLE = wire.ARTIFACT_STORE_UNAVAILABLE_ERROR
S3_REFUSED = "ArtifactStoreRefused"

RESERVE_SHARE = 0.2
"""Share of the start-to-close timeout kept for the work after S3 (the model call)."""
MAX_RESERVE_SECONDS = 120.0
"""At most this much of it: a 600 s model call may wait up to 480 s for S3 per attempt."""


def _attempt_deadline(
    share: float = RESERVE_SHARE, max_reserve: float = MAX_RESERVE_SECONDS
) -> float | None:
    """``time.monotonic()`` instant at which this activity attempt stops waiting for
    S3; None outside an activity or without a start-to-close timeout."""
    if not activity.in_activity():
        return None
    info = activity.info()
    timeout = info.start_to_close_timeout
    if not timeout:
        return None
    total = timeout.total_seconds()
    left = total - (datetime.now(UTC) - info.started_time).total_seconds()
    return time.monotonic() + max(0.0, left - min(max_reserve, total * share))


async def _heartbeat(every: float) -> None:
    while True:
        await asyncio.sleep(every)
        activity.heartbeat()


@contextlib.asynccontextmanager
async def waiting_for_s3() -> AsyncIterator[None]:
    """Wait out S3 within this attempt's time; failures as typed ApplicationErrors."""
    token = S3_WAIT_UNTIL.set(_attempt_deadline())
    beat = None
    heartbeat_timeout = activity.info().heartbeat_timeout if activity.in_activity() else None
    if heartbeat_timeout:
        every = max(0.2, min(1.0, heartbeat_timeout.total_seconds() / 3))
        beat = asyncio.ensure_future(_heartbeat(every))
    try:
        yield
    except ArtifactStoreDown as exc:
        kind = S3_UNAVAILABLE if exc.budget_spent else S3_WAITING
        raise ApplicationError(str(exc), type=kind, non_retryable=exc.budget_spent) from exc
    except ArtifactStoreRefused as exc:
        raise ApplicationError(str(exc), type=S3_REFUSED, non_retryable=True) from exc
    finally:
        S3_WAIT_UNTIL.reset(token)
        if beat is not None:
            beat.cancel()


class ResultsThroughS3(Interceptor):
    """Store a large activity result in S3 inside the activity, not after it.

    Why: the SDK runs the payload codec on a result after the activity function
    returned, when the activity no longer heartbeats. With S3 down the codec's
    wait outlived the 2.5 s heartbeat timeout, so a tools worker's ``execute``
    or ``read_file`` that had done its work was timed out and retried, and after
    the attempts the model read "Heartbeat timeout" for a command that ran
    (issue 49). Here the result is stored while the activity still heartbeats,
    and waits out the outage within the attempt's time like any S3 call of the
    activity (:func:`waiting_for_s3`); the SDK then passes the small reference
    through the codec as it is.

    Past the attempt's time a regular activity keeps the result inline (one
    payload of at most 1 MiB per completion, which the server accepts); a local
    activity fails the attempt instead, to be retried: its result would go
    into the next workflow task completion beside others, where inline
    payloads add up past the server's message limit.
    """

    def __init__(self, codec: ArtifactPayloadCodec) -> None:
        self.codec = codec

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _StoreResult(next, self.codec)


class _StoreResult(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, codec: ArtifactPayloadCodec) -> None:
        super().__init__(next)
        self.codec = codec

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        result = await self.next.execute_activity(input)
        if isinstance(result, RawValue) or not inspect.iscoroutinefunction(input.fn):
            # A sync activity's heartbeat blocks the event loop (the SDK routes it
            # through the loop from the activity's thread): leave it to the codec.
            return result
        [payload] = activity.payload_converter().to_payloads([result])
        if not needs_storing(payload, self.codec.threshold):
            return RawValue(payload)  # converted once: the SDK passes it as it is
        data = payload.SerializeToString()
        store = self.codec.store
        may_stay = len(data) <= CODEC_INLINE_FALLBACK_BYTES and not activity.info().is_local
        try:
            async with waiting_for_s3():
                ref = await asyncio.to_thread(store.put, CODEC_THREAD, payload_digest(data), data)
        except ApplicationError as exc:
            if exc.type == S3_REFUSED or not may_stay:
                raise
            why = "did not answer within the attempt's time"
        except asyncio.CancelledError:
            # The work is done: a cancel (the run's, or a worker shutting down) must
            # not report it cancelled because S3 was slow to take the result.
            if not may_stay:
                raise
            why = "was still waited on when the activity was cancelled"
        else:
            return RawValue(reference_payload(ref))
        size = len(data)
        _log.warning("S3 at %s %s: a %d-byte result stays in history", store.endpoint, why, size)
        payload.metadata[INLINE_METADATA] = b"1"
        return RawValue(payload)
