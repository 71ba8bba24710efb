"""A remote tool call that no tools worker takes: a bounded wait, then one clear answer.

A call on a ``kind="remote"`` backend is an activity on the backend's task
queue. Temporal keeps it there until a worker polling that queue takes it, and
without a bound a call to a queue nobody polls (a typo in ``task_queue``, a
tools worker that was never started or is down) waited in silence: minutes in
a workflow of one's own, with nothing in the workflow, its logs or the
model's transcript to say why.

So every remote tool activity (and the ``filegate.tool_batch`` activity that
carries several) is scheduled with a *schedule-to-start* timeout of
``Limits.tool_worker_wait_seconds`` (:data:`~filegate.kernel.limits.DEFAULT_TOOL_WORKER_WAIT`,
60 s, per attempt). Temporal does not retry that timeout (another attempt would
wait in the same queue), so the call then ends with an error result the model
reads (:func:`unserved_outcome`) naming the queue and the backend and saying
no worker polls it, and the workflow logs one warning line. The host
workflow carries on: its model can tell the user, try later, or stop.
Local activities (``kind="local"``, co-hosted calls) run on the worker
running the workflow and never wait for another one.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import FailureError, TimeoutError, TimeoutType

from filegate.activities.contract import failure_cause
from filegate.kernel.formatting import format_error
from filegate.kernel.tool_types import ToolName, ToolOutcome
from filegate.workflows.inputs import BackendRef, Limits

__all__ = ["not_picked_up", "unserved_outcome", "worker_wait_options"]

WAIT_OPTION = "schedule_to_start_timeout"
"""The ``execute_activity`` keyword that bounds the wait for a worker."""


def worker_wait_options(limits: Limits) -> dict[str, timedelta]:
    """The wait-for-a-worker bound of a remote activity (none when the limit is None)."""
    seconds = limits.tool_worker_wait_seconds
    return {} if seconds is None else {WAIT_OPTION: timedelta(seconds=seconds)}


def not_picked_up(error: BaseException) -> bool:
    """Whether an activity failed because no worker took it from its queue in time."""
    cause = failure_cause(error) if isinstance(error, FailureError) else error
    return isinstance(cause, TimeoutError) and cause.type == TimeoutType.SCHEDULE_TO_START


def _unserved_text(tool: ToolName, ref: BackendRef, seconds: float) -> str:
    """What the model (and the host) read for a call no worker took: one line."""
    return format_error(
        f"the {tool} call got no tools worker: none took it from task queue "
        f"{ref.task_queue!r} (backend {ref.name!r}) within {seconds:g} s, so no worker "
        "polls that queue (or every one is busy). Tell the user the tools worker for "
        f"this backend is not running (`filegate worker --role tools --task-queue "
        f"{ref.task_queue} --name {ref.name}`); calls on it will wait again.",
        "unserved",
    ).text


def unserved_outcome(tool: ToolName, ref: BackendRef, limits: Limits) -> ToolOutcome:
    """The error result of a call no worker took (see the module), logged once."""
    seconds = limits.tool_worker_wait_seconds or 0.0
    text = _unserved_text(tool, ref, seconds)
    workflow.logger.warning(
        "no tools worker took a %s call from task queue %r within %g s",
        tool,
        ref.task_queue,
        seconds,
    )
    return ToolOutcome(content=text, status="error", code="unserved")
