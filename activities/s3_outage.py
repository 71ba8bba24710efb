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
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from temporalio import activity
from temporalio.exceptions import ApplicationError

from filegate.backends.artifact_errors import ArtifactStoreDown, ArtifactStoreRefused
from filegate.backends.s3 import S3_WAIT_UNTIL
from filegate.kernel import wire

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
