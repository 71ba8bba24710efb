"""What the published conformance suites' tests share: a tools worker on a thread, and
strict xfails over inherited tests.

Why a thread: these suites' tests block the test's event loop while they wait
for an operation (the langchain suite's sync calls) or run on anyio's loop
while pytest-asyncio's session fixtures run on another; a worker on a loop of
its own serves both (a Temporal client may be used from any loop).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import types
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from temporalio.client import Client

from filegate.activities.history import filegate_data_converter
from filegate.backends.artifacts import ArtifactStore
from filegate.devstack.servers import TemporalDevServer

WorkerBuilder = Callable[[Client, str], AbstractAsyncContextManager[Any]]
"""Builds the tools worker for a client and a task queue."""


class ThreadedWorker:
    """A tools worker (``build(client, queue)``) and its client on a loop thread of their own."""

    def __init__(
        self, server: TemporalDevServer, store: ArtifactStore, prefix: str, build: WorkerBuilder
    ) -> None:
        self.queue = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.client: Client | None = None
        self._thread = threading.Thread(
            target=self.loop.run_until_complete,
            args=(self._serve(server, store, build),),
            daemon=True,
        )
        self._thread.start()
        if not self._ready.wait(60) or self.client is None:
            raise RuntimeError(f"the tools worker did not start: {self._error!r}")

    async def _serve(
        self, server: TemporalDevServer, store: ArtifactStore, build: WorkerBuilder
    ) -> None:
        try:
            self.client = await Client.connect(
                server.address,
                namespace=server.namespace,
                data_converter=filegate_data_converter(store),
            )
            async with build(self.client, self.queue):
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            raise

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


def xfail_deviations(deviations: dict[str, str]) -> Callable[[type[Any]], type[Any]]:
    """Override each listed inherited test with a strict-xfail copy (the base class stays
    as it is, so another subclass of the suite is not marked)."""

    def mark(cls: type[Any]) -> type[Any]:
        for name, reason in deviations.items():
            inherited = getattr(cls, name)
            clone = types.FunctionType(
                inherited.__code__,
                inherited.__globals__,
                inherited.__name__,
                inherited.__defaults__,
                inherited.__closure__,
            )
            copied = functools.update_wrapper(clone, inherited)
            setattr(cls, name, pytest.mark.xfail(reason=reason, strict=True)(copied))
        return cls

    return mark
