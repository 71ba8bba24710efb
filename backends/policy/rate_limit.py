"""The ``rate_limit`` policy kind and its thread-safe token bucket.

A wrapper-level, per-process bucket. On the tools worker, Temporal's
task-queue limit (``Worker(max_task_queue_activities_per_second=...)``) is
preferred where one limit per task queue fits: the server enforces it across
all workers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from filegate.backends.policy.base import Policy, Refusal, names_operation
from filegate.kernel.protocol import (
    PROTOCOL_METHODS,
)


class TokenBucket:
    """Thread-safe token bucket; ``clock``/``sleep`` are injectable for tests.

    Tokens may go negative: each caller reserves the next free slot under the
    lock and sleeps outside it, so concurrent callers are spaced in order.
    """

    def __init__(
        self,
        rate: float,
        burst: int = 1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._stamp = clock()
        self._lock = threading.Lock()

    def reserve(self, max_wait: float | None = None) -> float | None:
        """Take a token; return how long to wait before using it.

        None (and nothing taken) when the wait would exceed ``max_wait``.
        """
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            wait = max(0.0, (1.0 - self._tokens) / self.rate)
            if max_wait is not None and wait > max_wait:
                return None
            self._tokens -= 1.0
            return wait

    def acquire(self, max_wait: float | None = None) -> bool:
        """Block until a token is available; False when that would exceed ``max_wait``."""
        wait = self.reserve(max_wait)
        if wait is None:
            return False
        if wait > 0:
            self._sleep(wait)
        return True


class RateLimitPolicy(Policy):
    """Space calls to ``calls_per_second`` with bursts up to ``burst``.

    One token per protocol call (a 10-file upload is one call). Blocks the
    calling thread; with ``max_wait_seconds`` set, a call that would wait
    longer is refused with ``code="timeout"`` instead.
    """

    def __init__(
        self,
        name: str,
        bucket: TokenBucket,
        max_wait_seconds: float | None = None,
        operations: Sequence[str] | None = None,
    ) -> None:
        super().__init__(name)
        self.bucket = bucket
        self.max_wait_seconds = max_wait_seconds
        self.operations = frozenset(operations if operations is not None else PROTOCOL_METHODS)

    def admit(self, operation: str) -> Refusal | None:
        if not names_operation(self.operations, operation) or self.bucket.acquire(
            self.max_wait_seconds
        ):
            return None
        return Refusal(
            policy=self.name,
            rule="rate_limit",
            code="timeout",
            message=(
                f"{operation} refused by policy '{self.name}': rate limit of "
                f"{self.bucket.rate:g}/s exceeded. Wait and retry."
            ),
        )
