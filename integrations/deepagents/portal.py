"""The event loop thread behind the adapter's sync methods."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class Portal:
    """A private event loop on a daemon thread, for the sync methods.

    Why not ``asyncio.run`` per call: the caller may already run an event loop
    (a sync tool inside an async app), where ``asyncio.run`` refuses; and one
    long-lived loop keeps the client's connections warm between calls.
    """

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="filegate-deepagents", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a sync FilegateBackend method was called from its own loop")
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()
