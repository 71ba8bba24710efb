"""The calls a run makes on its own worker's backends: in order, a turn's in one activity.

Where the workflow and the tools share a worker (``kind="local"``, or a run
co-hosted on its default backend's queue, contract §8), a call is a local
activity. Each local activity costs that one process a workflow activation
and an activity task, about 2-3 ms of CPU, several times what a quick file
operation costs (``bench/local_batch.py``), and that process is what bounds a
co-hosted worker's throughput.

So the calls that reach this worker together (a turn's calls on different
paths, which :class:`~filegate.workflows.calls.PathOrder` lets run at once)
run as one ``filegate.tool_batch`` local activity, one after another in the
order asked. A call alone, ``execute`` (its timeout is its command's), and
whatever a batch hands back unfinished run as their own ``filegate.<tool>``
local activity, as before. Only one local activity is in flight at a time
(temporalio/sdk-python#1881: several in flight can be resolved in different
groups on replay than live, handing a result to the wrong call).

Replay: a run recorded before batching has no ``filegate-local-batch`` marker,
and replays one call per activity, in the same order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from filegate.kernel.tool_types import (
    BATCHED_TOOLS,
    MAX_BATCH_CALLS,
    TOOL_BATCH_ACTIVITY,
    ToolBatch,
    ToolBatchResult,
    ToolOutcome,
    ToolRequest,
)
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import FailureError

BATCH_PATCH = "filegate-local-batch"
"""Version marker of a run whose local calls may share one activity (see the module)."""

BATCH_RETRY = RetryPolicy(maximum_attempts=1)
"""A batch is not retried as a whole: a call that fails in it runs alone, with its own retries."""

StartLocal = Callable[[str, Any, Any, dict[str, Any]], Awaitable[Any]]
"""``(activity name, argument, result type, options) -> result``: schedules one local activity."""

T = TypeVar("T")


@dataclass(eq=False)
class _Waiting:
    """A local activity queued in this run, and its result once run for it."""

    alone: Callable[[], Awaitable[Any]]
    """Runs it as a local activity of its own."""
    request: ToolRequest | None = None
    """Set for a call that may join a batch."""
    timeout: timedelta = timedelta()
    done: bool = False
    result: Any = None


class LocalCalls:
    """Runs a run's local activities one at a time, batching the tool calls that wait together."""

    def __init__(self, start: StartLocal) -> None:
        self._start = start
        self._queue: list[_Waiting] = []
        self._busy = False

    async def call(self, name: str, request: ToolRequest, options: dict[str, Any]) -> ToolOutcome:
        """The outcome of one tool call: run in a batch, or on its own ``name`` activity."""

        async def alone() -> ToolOutcome:
            outcome: ToolOutcome = await self._start(name, request, ToolOutcome, options)
            return outcome

        batchable = request.tool in BATCHED_TOOLS
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
        if len(batch) == 1 or not workflow.patched(BATCH_PATCH):
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
        for waiting in self._queue[1:MAX_BATCH_CALLS]:
            if waiting.request is None:
                break
            batch.append(waiting)
        return batch

    async def _run_batch(self, batch: list[_Waiting]) -> None:
        """One ``filegate.tool_batch`` activity; what it leaves unfinished runs alone, in order."""
        requests = [w.request for w in batch if w.request is not None]
        try:
            result: ToolBatchResult = await self._start(
                TOOL_BATCH_ACTIVITY,
                ToolBatch(requests=requests),
                ToolBatchResult,
                {
                    "start_to_close_timeout": sum((w.timeout for w in batch), timedelta()),
                    "retry_policy": BATCH_RETRY,
                },
            )
            outcomes = result.outcomes
        except FailureError:
            outcomes = []
        if len(outcomes) != len(batch):
            outcomes = [None] * len(batch)
        for waiting, outcome in zip(batch, outcomes, strict=True):
            if outcome is None:
                await _run_alone(waiting)
            else:
                waiting.result, waiting.done = outcome, True


async def _run_alone(waiting: _Waiting) -> None:
    waiting.result = await waiting.alone()
    waiting.done = True
