"""How the workflow schedules the tool activities and reads their failures.

The Temporal-typed half of the tool activity contract (the pure half, names,
timeouts and the request/outcome models, is :mod:`filegate.kernel.tool_types`):
retry policies and timeouts per tool, and the tool result for an activity that
failed for good. The workflow imports this module, so it needs nothing but
``temporalio.common``/``temporalio.exceptions`` and the kernel: no backends, no
threads, no S3 client.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, FailureError, TimeoutError, TimeoutType

from filegate.kernel import wire
from filegate.kernel.formatting import format_error
from filegate.kernel.limits import (
    DEFAULT_EXECUTE_TIMEOUT,
    DEFAULT_S3_OUTAGE_SECONDS,
    DEFAULT_SEARCH_TIMEOUT,
)
from filegate.kernel.registry import TOOLS
from filegate.kernel.tool_types import (
    EXECUTE_MARGIN,
    NON_RETRYABLE_ERROR_TYPES,
    SEARCH_MARGIN,
    ToolName,
    ToolOutcome,
)

HEARTBEAT_TIMEOUT = timedelta(seconds=2.5)
"""A worker that stops heartbeating this long is presumed dead and the call retried.

Every tool call heartbeats from its activity's event loop each
:data:`~filegate.kernel.tool_types.HEARTBEAT_INTERVAL` (1 s) while its thread
works, short or long, read or mutation (:func:`filegate.activities.tools.run_blocking`),
so this only has to cover a missed beat or two: a long grep or command keeps
beating and is never cut short by it, while a dead worker is noticed within
2.5 s and the call retried (on a replacement worker) about 0.5 s later. Keep
``Limits.tool_heartbeat_timeout_seconds`` (the workflow's default) equal."""
HEARTBEAT_THROTTLE = timedelta(seconds=1)
"""``max_heartbeat_throttle_interval`` of a tools worker: the SDK sends at most one
heartbeat per 0.8 x the timeout by default (2 s here), which would leave half a
second of slack; one a second keeps 1.5 s."""
RETRY_INITIAL_INTERVAL = timedelta(seconds=0.5)
"""First retry backoff of a file operation or execute (then doubling, six attempts:
the same 15 s window as 1 s x five attempts, but a call whose worker died is
picked up half a second after the heartbeat timeout rather than a second)."""
FILE_OP_TIMEOUT = timedelta(seconds=60)
"""start_to_close of a read or file operation."""
S3_OUTAGE_ROOM = timedelta(seconds=DEFAULT_S3_OUTAGE_SECONDS)
"""Added to the start_to_close of the tools that may wait for S3 inside their activity:
``execute`` (its large output is stored after the command ran) and ``read_file``
(``/large_tool_results/<id>`` is read from S3). The store waits out an S3 outage for
``FILEGATE_S3_OUTAGE_SECONDS`` in the tool thread, which cannot see the activity's
deadline; without this room Temporal would time the attempt out mid-wait and spend
an attempt on the outage. It costs no liveness: the activity heartbeats every
second while its thread waits, so a dead worker is still noticed within
:data:`HEARTBEAT_TIMEOUT`, and a command is still stopped at its own timeout. A
worker configured with a longer budget than the default outlives this room: the
attempt is then timed out and retried, and the journal hands back the command's
recorded result instead of running it again."""


def search_timeout_message(tool: str, seconds: float) -> str:
    """What the model reads when a glob/grep ran out of time (from the activity or server)."""
    return format_error(
        f"{tool} did not finish within {seconds:g} seconds and was stopped. The pattern or "
        "path is too broad: narrow the pattern or search a smaller directory, then try again.",
        "timeout",
    ).text


def tool_activity_options(
    tool: ToolName,
    *,
    execute_timeout: float | None = None,
    search_timeout: float = DEFAULT_SEARCH_TIMEOUT,
    heartbeat_timeout: timedelta = HEARTBEAT_TIMEOUT,
) -> dict[str, Any]:
    """Keyword arguments for ``workflow.execute_activity`` of one tool.

    Reads and file operations retry (they are idempotent, mutating ones through
    the journal); a search gets a hard limit and is not retried (it would just
    time out again); execute gets its command timeout plus a margin and, being
    journaled, may retry only to pick up a result or report "may have run".
    """
    retry = RetryPolicy(
        initial_interval=RETRY_INITIAL_INTERVAL,
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=6,
        non_retryable_error_types=list(NON_RETRYABLE_ERROR_TYPES),
    )
    if tool in TOOLS.searching:
        return {
            "start_to_close_timeout": timedelta(seconds=search_timeout + SEARCH_MARGIN),
            "heartbeat_timeout": heartbeat_timeout,
            "retry_policy": RetryPolicy(
                maximum_attempts=2, non_retryable_error_types=list(NON_RETRYABLE_ERROR_TYPES)
            ),
        }
    if tool in TOOLS.running:
        command = DEFAULT_EXECUTE_TIMEOUT if execute_timeout is None else execute_timeout
        return {
            "start_to_close_timeout": timedelta(seconds=command + EXECUTE_MARGIN) + S3_OUTAGE_ROOM,
            "heartbeat_timeout": heartbeat_timeout,
            "retry_policy": retry,
        }
    file_op = FILE_OP_TIMEOUT + S3_OUTAGE_ROOM if tool == "read_file" else FILE_OP_TIMEOUT
    return {
        "start_to_close_timeout": file_op,
        "heartbeat_timeout": heartbeat_timeout,
        "retry_policy": retry,
    }


def outcome_for_activity_error(
    tool: ToolName, error: FailureError, *, search_timeout: float = DEFAULT_SEARCH_TIMEOUT
) -> ToolOutcome:
    """The tool result for an activity that failed for good (the workflow never crashes).

    A regular activity fails with an ``ActivityError`` around the cause; a
    local one with the cause itself. A search the *server* timed out (the
    activity's own deadline normally answers first) gets the same "narrow your
    pattern" text as one the activity stopped itself.
    """
    cause = failure_cause(error)
    if (
        tool in TOOLS.searching
        and isinstance(cause, TimeoutError)
        and cause.type in (TimeoutType.START_TO_CLOSE, TimeoutType.SCHEDULE_TO_CLOSE)
    ):
        return ToolOutcome(
            content=search_timeout_message(tool, search_timeout), status="error", code="timeout"
        )
    reason = str(cause) if cause is not None else error.message
    return ToolOutcome(
        content=format_error(f"the {tool} tool failed: {reason}", "failed").text,
        status="error",
        code="failed",
    )


def failure_cause(error: FailureError) -> BaseException | None:
    """What made an activity fail: unwrapped from ``ActivityError`` (regular
    activities), or the error itself (local activities are not wrapped)."""
    return error.cause if isinstance(error, ActivityError) else error


PREVIEW_ACTIVITY = wire.PREVIEW_ACTIVITY
"""The read-only activity computing a pending call's ``ChangePreview``
(:mod:`filegate.activities.preview`), on the call's own route: the route's tools task
queue, or a local activity for ``kind="local"``."""
PREVIEW_TIMEOUT = timedelta(seconds=10)
"""start_to_close of one preview: it reads one file (or lists one tree), so a
slow one is abandoned rather than keeping the reviewer's card empty."""
PREVIEW_SCHEDULE_TIMEOUT = timedelta(seconds=30)
"""schedule_to_close of a preview: with no tools worker polling the route the
card shows "unavailable" after this long instead of waiting indefinitely."""


def preview_activity_options() -> dict[str, Any]:
    """Keyword arguments for scheduling ``filegate.preview`` (regular or local).

    Two attempts: a preview is advice for the reviewer, so a failure becomes an
    ``unavailable`` preview in the workflow rather than a long retry loop.
    """
    return {
        "start_to_close_timeout": PREVIEW_TIMEOUT,
        "schedule_to_close_timeout": PREVIEW_SCHEDULE_TIMEOUT,
        "retry_policy": RetryPolicy(
            initial_interval=RETRY_INITIAL_INTERVAL,
            maximum_attempts=2,
            non_retryable_error_types=list(NON_RETRYABLE_ERROR_TYPES),
        ),
    }
