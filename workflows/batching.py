"""Tool calls that wait together share one activity: ``filegate.tool_batch``.

Why: each activity has a fixed cost beyond its work. A local activity (a
``kind="local"`` backend, or a run co-hosted on its default backend's queue,
contract §8) costs the one worker process a workflow activation and an
activity task, about 2-3 ms of CPU (``bench/local_batch.py``), several times a
quick file operation. A regular activity on a tools worker's queue costs the
Temporal server several milliseconds of CPU for its schedule, dispatch and
completion events. The calls that reach the same place together (a turn's
calls on different paths, which :class:`~filegate.workflows.calls.PathOrder`
lets run at once) therefore share one activity:

- :class:`LocalCalls`: this worker's calls run one local activity at a time
  (temporalio/sdk-python#1881: several in flight can be resolved in different
  groups on replay than live, handing a result to the wrong call); the calls
  queued behind the head join it, and the batch runs them one after another
  in the order asked;
- :class:`RemoteCalls`: the calls for one task queue that are dispatched in the
  same workflow activation share one regular activity there, which runs them
  concurrently, as separate activities would.

In both, a call alone, ``execute`` (its timeout is its command's) and whatever
a batch hands back unfinished run as their own ``filegate.<tool>`` activity,
with that tool's retries and error mapping. Replay: a run recorded before
batching has no ``filegate-local-batch`` / ``filegate-remote-batch`` marker and
replays one call per activity, in the same order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import FailureError

from filegate.kernel import wire
from filegate.kernel.registry import TOOLS
from filegate.kernel.tool_types import (
    MAX_BATCH_CALLS,
    ToolBatch,
    ToolBatchResult,
    ToolOutcome,
    ToolRequest,
)
from filegate.workflows.unserved import WAIT_OPTION, not_picked_up

BATCH_PATCH = "filegate-local-batch"
"""Version marker of a run whose local calls may share one activity (see the module)."""
REMOTE_BATCH_PATCH = "filegate-remote-batch"
"""Version marker of a run whose calls on a task queue may share one activity."""

BATCH_AT_START_PATCH = "filegate-batch-at-start"
"""Version marker asked once, as a run's tools are built: its calls may share activities.

Runs recorded before it asked :data:`BATCH_PATCH` / :data:`REMOTE_BATCH_PATCH`
at their first batchable call, which often comes right after the model call
(a local activity). When that local activity ended in a later workflow task
than the one it started in, replaying the history did not see the marker
where the call asked for it and failed with a nondeterminism error
(``tests/workflows/test_recorded_histories.py``). Asked at the start, the marker comes
before any activity. Those older runs still ask the old markers, where they
asked them.
"""


def batching_at_start() -> bool:
    """Whether this run decided at its start that its calls may share activities."""
    return workflow.in_workflow() and workflow.patched(BATCH_AT_START_PATCH)


BATCH_RETRY = RetryPolicy(maximum_attempts=1)
"""A batch is not retried as a whole: a call that fails in it runs alone, with its own retries."""

StartLocal = Callable[[str, Any, Any, dict[str, Any]], Awaitable[Any]]
"""``(activity name, argument, result type, options) -> result``: schedules one local activity."""

T = TypeVar("T")


@dataclass(eq=False)
class _Waiting:
    """An activity waiting in this run, and its result once run for it."""

    alone: Callable[[], Awaitable[Any]]
    """Runs it as an activity of its own."""
    request: ToolRequest | None = None
    """Set for a call that may join a batch."""
    timeout: timedelta = timedelta()
    done: bool = False
    orphaned: bool = False
    """Its batch's leader was cancelled before running it: it runs alone."""
    result: Any = None
    failure: FailureError | None = None
    """Its batch waited for a worker in vain (a schedule-to-start timeout): the call
    fails with it too, rather than waiting in the same queue again alone."""


class LocalCalls:
    """Runs a run's local activities one at a time, batching the tool calls that wait together."""

    max_batch = MAX_BATCH_CALLS
    """Calls per batch at most (1: every call on its own activity, as before batching)."""

    def __init__(self, start: StartLocal, *, at_start: bool = False) -> None:
        """``at_start``: :func:`batching_at_start` (False: ask :data:`BATCH_PATCH` later)."""
        self._start = start
        self._at_start = at_start
        self._queue: list[_Waiting] = []
        self._busy = False

    async def call(self, name: str, request: ToolRequest, options: dict[str, Any]) -> ToolOutcome:
        """The outcome of one tool call: run in a batch, or on its own ``name`` activity."""

        async def alone() -> ToolOutcome:
            outcome: ToolOutcome = await self._start(name, request, ToolOutcome, options)
            return outcome

        batchable = request.tool in TOOLS.batched
        waiting = _Waiting(alone, request if batchable else None, options["start_to_close_timeout"])
        outcome: ToolOutcome = await self._wait(waiting)
        return outcome

    async def one(self, start: Callable[[], Awaitable[T]]) -> T:
        """Run ``start``'s local activity on its own, in its turn among the run's others."""
        result: T = await self._wait(_Waiting(start))
        return result

    async def _wait(self, me: _Waiting) -> Any:
        self._queue.append(me)
        claimed = False

        def ready() -> bool:
            # Claimed inside the condition: the SDK checks every waiting
            # condition in one pass, so "check, then set" would let two through.
            nonlocal claimed
            if me.done:
                return True
            if self._busy or not self._queue or self._queue[0] is not me:
                return False
            self._busy = claimed = True
            return True

        try:
            await workflow.wait_condition(ready)
            if not me.done:
                await self._lead()
            return me.result
        finally:
            if me in self._queue:  # cancelled while waiting
                self._queue.remove(me)
            if claimed:  # also when cancelled between the claim and the start
                self._busy = False

    async def _lead(self) -> None:
        """Run the head of the queue, with the calls waiting behind it when they may join."""
        batch = self._batchable()
        if len(batch) == 1 or not (self._at_start or workflow.patched(BATCH_PATCH)):
            batch = batch[:1]
        del self._queue[: len(batch)]
        try:
            if len(batch) == 1:
                await _run_alone(batch[0])
            else:
                await self._run_batch(batch)
        finally:
            # A cancelled leader: its followers wait at the front again, in order.
            self._queue[:0] = [w for w in batch[1:] if not w.done]

    def _batchable(self) -> list[_Waiting]:
        """The head, then the batchable calls behind it (none if the head is not batchable)."""
        batch = [self._queue[0]]
        if batch[0].request is None:
            return batch
        for waiting in self._queue[1 : self.max_batch]:
            if waiting.request is None:
                break
            batch.append(waiting)
        return batch

    async def _run_batch(self, batch: list[_Waiting]) -> None:
        """One ``filegate.tool_batch`` activity; what it leaves unfinished runs alone, in order."""
        options = {
            "start_to_close_timeout": sum((w.timeout for w in batch), timedelta()),
            "retry_policy": BATCH_RETRY,
        }
        unfinished = await _settle(
            lambda batch_input: self._start(
                wire.TOOL_BATCH_ACTIVITY, batch_input, ToolBatchResult, options
            ),
            batch,
            concurrent=False,
        )
        for waiting in unfinished:
            await _run_alone(waiting)


class RemoteCalls:
    """Runs a run's calls on tools workers' queues, one activity per queue per activation."""

    max_batch = MAX_BATCH_CALLS
    """Calls per batch at most (1: every call on its own activity, as before batching)."""

    def __init__(self, *, at_start: bool = False) -> None:
        """``at_start``: :func:`batching_at_start` (False: ask :data:`REMOTE_BATCH_PATCH` later)."""
        self._open: dict[str | None, list[_Waiting]] = {}
        self._at_start = at_start

    async def call(
        self, name: str, request: ToolRequest, options: dict[str, Any], task_queue: str | None
    ) -> ToolOutcome:
        """The outcome of one call on ``task_queue``: batched with the calls dispatched
        in the same activation, or on its own ``name`` activity."""

        async def alone() -> ToolOutcome:
            outcome: ToolOutcome = await workflow.execute_activity(
                name, request, result_type=ToolOutcome, task_queue=task_queue, **options
            )
            return outcome

        if request.tool not in TOOLS.batched or not (
            self._at_start or workflow.patched(REMOTE_BATCH_PATCH)
        ):
            return await alone()
        me = _Waiting(alone, request, options["start_to_close_timeout"])
        group = self._open.get(task_queue)
        if group is not None and len(group) < self.max_batch:
            group.append(me)
            await workflow.wait_condition(lambda: me.done or me.orphaned)
            if not me.done:  # its batch's leader was cancelled
                await _run_alone(me)
            if me.failure is not None:
                raise me.failure
            result: ToolOutcome = me.result
            return result
        group = self._open[task_queue] = [me]
        try:
            try:
                # Resumes in this activation, once the calls dispatched in it have joined.
                await workflow.wait_condition(lambda: True)
            finally:
                if self._open.get(task_queue) is group:
                    del self._open[task_queue]
            if len(group) == 1:
                await _run_alone(me)
            else:
                await self._run_batch(group, task_queue, options)
        finally:
            for waiting in group[1:]:  # a cancelled leader: its followers run alone
                waiting.orphaned = not waiting.done
        if me.failure is not None:
            raise me.failure
        result = me.result
        return result

    async def _run_batch(
        self, batch: list[_Waiting], task_queue: str | None, options: dict[str, Any]
    ) -> None:
        """One ``filegate.tool_batch`` activity on ``task_queue``; what it leaves
        unfinished runs alone, concurrently, as separate calls would. It waits for a
        worker as long as one call would (``schedule_to_start_timeout``, if any)."""
        # The run's priority and fairness (its tenant) ride on the batch as on each call.
        wait = {k: v for k, v in options.items() if k in (WAIT_OPTION, "priority")}
        unfinished = await _settle(
            lambda batch_input: workflow.execute_activity(
                wire.TOOL_BATCH_ACTIVITY,
                batch_input,
                result_type=ToolBatchResult,
                task_queue=task_queue,
                start_to_close_timeout=max(w.timeout for w in batch),
                heartbeat_timeout=options["heartbeat_timeout"],
                retry_policy=BATCH_RETRY,
                **wait,
            ),
            batch,
            concurrent=True,
        )
        await asyncio.gather(*(_run_alone(w) for w in unfinished))


async def _settle(
    start: Callable[[ToolBatch], Awaitable[ToolBatchResult]],
    batch: list[_Waiting],
    *,
    concurrent: bool,
) -> list[_Waiting]:
    """Run the batch activity, settle the calls it finished; the others, in order.

    All of them when the activity failed as a whole (or answered for a different
    number of calls); none when no worker took it in time (each call fails with
    that: alone, it would only wait in the same queue again)."""
    requests = [w.request for w in batch if w.request is not None]
    try:
        result = await start(ToolBatch(requests=requests, concurrent=concurrent))
    except FailureError as error:
        if not not_picked_up(error):
            return batch
        for waiting in batch:
            waiting.failure, waiting.done = error, True
        return []
    if len(result.outcomes) != len(batch):
        return batch
    for waiting, outcome in zip(batch, result.outcomes, strict=True):
        if outcome is not None:
            waiting.result, waiting.done = outcome, True
    return [w for w in batch if not w.done]


async def _run_alone(waiting: _Waiting) -> None:
    waiting.result = await waiting.alone()
    waiting.done = True
