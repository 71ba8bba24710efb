"""How Filegate tunes a worker besides its workflows and activities: poll counts, the
sticky timeout and the heartbeat throttle, each with the reason for its value.

Why its own module: every role and the plugin apply it, and the constants are
the evidence behind ``bench/agent_recovery.py`` and ``bench/throughput.py``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

from temporalio.worker import PollerBehaviorSimpleMaximum, Worker, WorkerConfig

from filegate.activities.contract import HEARTBEAT_THROTTLE

STICKY_SCHEDULE_TO_START = timedelta(seconds=2)
"""How long a workflow task waits on a run's sticky queue (the worker that ran it
last) before the server hands it to any worker of the task queue (SDK default:
10 s). After an agent worker dies, its runs move again once this passes, so it
is most of the time an agent worker's death costs (``bench/agent_recovery.py``).
The trade-off under load: a live worker that cannot take its sticky task within
2 s loses the cached run, and whichever worker takes the task replays the run's
history first (a cost that grows with the history, bounded by continue-as-new)."""

WORKFLOW_TASK_POLLERS = 20
ACTIVITY_TASK_POLLERS = 50
"""Long polls each worker keeps open (the SDK default is 5). With many agents
in flight, tasks that find no waiting poll are written to the server's backlog
and read back; enough polls keep them matched in memory, which raised
``bench/throughput.py`` by a fifth. Override with ``max_concurrent_*_polls``."""


_SDK_DEFAULTS = {
    name: p.default for name, p in inspect.signature(Worker.__init__).parameters.items()
}
"""``Worker``'s defaults: only options left at them are tuned (a user's own setting wins)."""

_POLL_COUNTS = {
    "workflow_task_poller_behavior": "max_concurrent_workflow_task_polls",
    "activity_task_poller_behavior": "max_concurrent_activity_task_polls",
}
"""The older count option that, when set, replaces the poller behavior (the SDK reads it first)."""


@dataclass(frozen=True)
class WorkerTuning:
    """Worker options Filegate sets besides workflows and activities (None: the SDK's);
    the defaults' reasons are at the constants they come from. An option the
    worker sets itself (any value but the SDK's default) wins."""

    workflow_task_polls: int | None = WORKFLOW_TASK_POLLERS
    activity_task_polls: int | None = ACTIVITY_TASK_POLLERS
    sticky_schedule_to_start: timedelta | None = STICKY_SCHEDULE_TO_START
    heartbeat_throttle: timedelta | None = HEARTBEAT_THROTTLE

    @classmethod
    def for_roles(cls, *, agent: bool, tools: bool) -> WorkerTuning:
        """An agent's workflow polls and sticky timeout, a tools worker's activity polls
        and heartbeat throttle (a dead tools worker is noticed fast)."""
        full = cls()
        return cls(
            workflow_task_polls=full.workflow_task_polls if agent else None,
            sticky_schedule_to_start=full.sticky_schedule_to_start if agent else None,
            activity_task_polls=full.activity_task_polls if tools else None,
            heartbeat_throttle=full.heartbeat_throttle if tools else None,
        )

    def apply(self, config: WorkerConfig) -> None:
        """Set these values on ``config`` where it holds the SDK's default."""
        options = cast(dict[str, Any], config)
        polls = (self.workflow_task_polls, self.activity_task_polls)
        tuned: dict[str, Any] = {
            key: PollerBehaviorSimpleMaximum(maximum=n) if n else None
            for key, n in zip(_POLL_COUNTS, polls, strict=True)
        }
        tuned["sticky_queue_schedule_to_start_timeout"] = self.sticky_schedule_to_start
        tuned["max_heartbeat_throttle_interval"] = self.heartbeat_throttle
        for key, value in tuned.items():
            keys = (key, _POLL_COUNTS.get(key, key))
            if value is not None and all(options.get(k) == _SDK_DEFAULTS[k] for k in keys):
                options[key] = value


NO_TUNING = WorkerTuning(None, None, None, None)
"""Leave every option to the SDK (or to the plugin that tunes the worker as a whole)."""


__all__ = [
    "ACTIVITY_TASK_POLLERS",
    "NO_TUNING",
    "STICKY_SCHEDULE_TO_START",
    "WORKFLOW_TASK_POLLERS",
    "WorkerTuning",
]
