"""The pool of interruptible tool threads (activities/tool_threads.py).

Threads are reused between calls, a call never waits behind another, and a
stopped call takes its thread with it so that no interruption reaches a later
call.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from filegate.activities.tool_threads import BUSY_NAME, IDLE_NAME, Job, ToolThreads


async def _run(pool: ToolThreads, fn: Callable[[], Any]) -> tuple[Job[Any], asyncio.Future[Any]]:
    job: Job[Any] = Job(fn, asyncio.get_running_loop())
    runner = pool.submit(job)
    if runner is not None:
        await asyncio.to_thread(runner.start)
    return job, job.future


def _ident() -> tuple[int, str]:
    me = threading.current_thread()
    return me.ident or 0, me.name


async def test_sequential_calls_share_one_thread_named_by_its_state() -> None:
    pool = ToolThreads()
    seen = set()
    for _ in range(20):
        _, future = await _run(pool, _ident)
        ident, name = await future
        seen.add(ident)
        assert name == BUSY_NAME
    assert len(seen) == 1
    [thread] = [t for t in threading.enumerate() if t.ident in seen]
    assert thread.is_alive() and thread.name == IDLE_NAME


async def test_concurrent_calls_each_get_a_thread() -> None:
    pool = ToolThreads()
    barrier = threading.Barrier(6, timeout=10)

    def meet() -> int:
        barrier.wait()  # only returns once all six run at the same time
        return threading.get_ident()

    futures = [(await _run(pool, meet))[1] for _ in range(6)]
    idents = await asyncio.wait_for(asyncio.gather(*futures), 15)
    assert len(set(idents)) == 6
    # All six are idle now; six more calls reuse them without a new thread.
    again = [(await _run(pool, threading.get_ident))[1] for _ in range(6)]
    assert set(await asyncio.gather(*again)) <= set(idents)


async def test_a_stopped_call_retires_its_thread_and_spares_the_others() -> None:
    pool = ToolThreads()
    started = threading.Event()
    victim: list[threading.Thread] = []

    def spin() -> None:
        victim.append(threading.current_thread())
        started.set()
        while True:
            time.sleep(0.001)

    job, future = await _run(pool, spin)
    assert await asyncio.to_thread(started.wait, 5)

    def nap() -> int:
        time.sleep(0.3)
        return threading.get_ident()

    _, beside = await _run(pool, nap)
    assert await job.stop() is True
    assert not victim[0].is_alive()  # retired with its call
    assert not future.done()  # the caller gave up on it: no result is delivered
    assert await beside != victim[0].ident  # the call beside it finished normally
    _, later = await _run(pool, threading.get_ident)
    assert await later != victim[0].ident


async def test_a_call_stopped_before_it_ran_never_runs() -> None:
    pool = ToolThreads()
    ran = threading.Event()
    job: Job[None] = Job(ran.set, asyncio.get_running_loop())
    assert await job.stop() is True
    runner = pool.submit(job)
    assert runner is not None
    await asyncio.to_thread(runner.start)
    await asyncio.sleep(0.2)
    assert not ran.is_set() and not job.future.done()


async def test_idle_threads_end_after_their_wait() -> None:
    pool = ToolThreads(idle_seconds=0.2)
    _, future = await _run(pool, _ident)
    ident, _ = await future
    deadline = time.monotonic() + 5
    while any(t.ident == ident for t in threading.enumerate()) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not any(t.ident == ident for t in threading.enumerate())
    # The pool starts a fresh thread for the next call.
    _, future = await _run(pool, _ident)
    assert (await future)[0] != 0
