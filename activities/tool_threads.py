"""Long-lived threads for interruptible tool calls.

A tool call that may have to be stopped (a search past its budget, a cancelled
activity) runs on a thread of its own, so that an asynchronous exception can
stop exactly that call and the processes it started. Creating a thread per
call cost about a millisecond of worker CPU, a tenth of a tools worker's time
under load (``bench/throughput.py``), so the threads are kept and reused:

- a thread runs one job at a time and waits :data:`IDLE_SECONDS` for the next
  before it ends;
- a job that is stopped takes its thread with it: the thread is *retired*
  (it ends after the exception unwinds), so an interruption can never land in
  a later job;
- a thread is named :data:`BUSY_NAME` while it runs a job and
  :data:`IDLE_NAME` while it waits, so "no tool call is running" stays easy to
  check.

Only :meth:`Job.stop` raises into a thread, and only while that thread runs
that job (checked under the thread's lock).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
logger = logging.getLogger(__name__)

IDLE_SECONDS = 60.0
"""How long an idle tool thread waits for another job before it ends."""
BUSY_NAME = "filegate-tool"
IDLE_NAME = "filegate-tool-idle"
STOP_GRACE = 5.0
"""Seconds to wait for an interrupted thread to unwind before giving up on it."""


class Interrupted(BaseException):
    """Raised inside a tool thread to stop it. A BaseException so that a backend's
    ``except Exception`` (errors are values there) cannot swallow it."""


def _raise_in_thread(thread_id: int) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(Interrupted)
    )


def kill_children(native_id: int) -> None:
    """Kill processes the given thread started, with their process groups.

    ``/proc/self/task/<tid>/children`` lists exactly the children of one
    thread, so concurrent activities never kill each other's processes.
    """
    try:
        with open(f"/proc/self/task/{native_id}/children") as handle:
            pids = [int(pid) for pid in handle.read().split()]
    except OSError:
        return
    own_group = os.getpgid(0)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group == pid and group != own_group:
                os.killpg(group, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)


class Job(Generic[T]):
    """One blocking call, its future on the event loop, and the thread running it."""

    def __init__(self, fn: Callable[[], T], loop: asyncio.AbstractEventLoop) -> None:
        self.fn = fn
        self.loop = loop
        self.future: asyncio.Future[T] = loop.create_future()
        self._lock = threading.Lock()
        self._stopped = False
        self._runner: _Runner | None = None

    def settle(self, result: Any, error: BaseException | None) -> None:
        """Hand the outcome to the event loop (from the job's thread)."""
        with contextlib.suppress(RuntimeError):  # loop already closed
            self.loop.call_soon_threadsafe(self._settle, result, error)

    def _settle(self, result: Any, error: BaseException | None) -> None:
        if self.future.done():
            return
        if error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(result)

    async def stop(self) -> bool:
        """Interrupt the call and kill its processes; True once nothing of it runs."""
        with self._lock:
            self._stopped = True
            runner = self._runner
        if runner is None or not runner.interrupt(self):
            return True  # never started, or already finished
        deadline = time.monotonic() + STOP_GRACE
        while runner.alive and time.monotonic() < deadline:
            runner.kill_children()
            runner.interrupt_again()
            await asyncio.sleep(0.01)
        if runner.alive:
            logger.warning("tool thread did not stop within %.1fs", STOP_GRACE)
            return False
        return True


class _Runner:
    """One pooled thread: takes jobs until it idles out or a job of it is stopped."""

    def __init__(self, pool: ToolThreads, first: Job[Any]) -> None:
        self._pool = pool
        self._first: Job[Any] | None = first
        self._lock = threading.Lock()
        self._job: Job[Any] | None = None
        self._retired = False
        self.thread = threading.Thread(target=self._main, name=IDLE_NAME, daemon=True)

    def start(self) -> None:
        self.thread.start()

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def interrupt(self, job: Job[Any]) -> bool:
        """Raise :class:`Interrupted` in this thread if it is running ``job``."""
        with self._lock:
            if self._job is not job:
                return False
            self._retired = True
            ident = self.thread.ident
            if ident is not None:
                _raise_in_thread(ident)
            return True

    def interrupt_again(self) -> None:
        """Raise once more into a retired thread that has not ended yet."""
        ident = self.thread.ident
        if self._retired and ident is not None and self.alive:
            _raise_in_thread(ident)

    def kill_children(self) -> None:
        native_id = self.thread.native_id
        if native_id is not None:
            kill_children(native_id)

    def _take(self, job: Job[Any]) -> bool:
        """Make ``job`` this thread's current one; False if it was stopped before it ran."""
        with self._lock, job._lock:
            if job._stopped:
                return False
            job._runner = self
            self._job = job
            return True

    def _main(self) -> None:
        try:
            job, self._first = self._first, None
            while job is not None:
                if not self._take(job):
                    self._pool.ready()
                    job = self._pool.next_job()
                    continue
                self.thread.name = BUSY_NAME
                try:
                    result, error = job.fn(), None
                except Interrupted:
                    return
                except BaseException as exc:
                    result, error = None, exc
                with self._lock:
                    self._job = None
                    retired = self._retired
                if retired:
                    return
                self.thread.name = IDLE_NAME
                # Free before the result goes out: the caller's next call may come at once.
                self._pool.ready()
                job.settle(result, error)
                job = self._pool.next_job()
        except Interrupted:
            pass  # retired: a stop() raced the end of its job


class ToolThreads:
    """The pool: a job goes to an idle thread, or to a new one when none waits."""

    def __init__(self, idle_seconds: float = IDLE_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        self._jobs: queue.SimpleQueue[Job[Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        """Threads waiting for a job that no submitted job has been promised to yet."""

    def submit(self, job: Job[Any]) -> _Runner | None:
        """Hand ``job`` to an idle thread, or return a new, unstarted one that will run it.

        Starting a thread waits for it to run, so the caller starts it off the
        event loop.
        """
        with self._lock:
            if self._idle == 0:
                return _Runner(self, job)
            self._idle -= 1
        self._jobs.put(job)
        return None

    def ready(self) -> None:
        """A thread is free: the next submitted job may be promised to it."""
        with self._lock:
            self._idle += 1

    def next_job(self) -> Job[Any] | None:
        """The next job for a free thread, or None once it has waited long enough (it ends)."""
        while True:
            try:
                return self._jobs.get(timeout=self.idle_seconds)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:  # nobody was promised this thread: end it
                        self._idle -= 1
                        return None
                # A job was promised to a waiting thread (maybe this one): wait on.
