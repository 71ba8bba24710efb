"""Adapter options a user types first (issue 54): ``operation_timeout`` in seconds.

``FilegateWorkspace(operation_timeout=20)`` raised a raw ``AttributeError``
on its first call (``int`` has no ``total_seconds``); now a number is
seconds, and anything else is one line where the adapter is built.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("deepagents")
pytest.importorskip("pydantic_ai")

from filegate.integrations.deepagents import FilegateBackend
from filegate.integrations.pydantic_ai import FilegateWorkspace

WHERE: dict[str, Any] = {"backend": "b", "task_queue": "q"}


@pytest.mark.parametrize("adapter", [FilegateWorkspace, FilegateBackend])
def test_seconds_are_taken_and_nonsense_is_one_line(adapter: Any) -> None:
    assert adapter(**WHERE, operation_timeout=20).calls.operation_timeout == timedelta(seconds=20)
    assert adapter(**WHERE, operation_timeout=1.5).calls.operation_timeout == timedelta(seconds=1.5)
    given = timedelta(minutes=2)
    assert adapter(**WHERE, operation_timeout=given).calls.operation_timeout == given
    with pytest.raises(
        TypeError, match="operation_timeout must be a timedelta or seconds, not str"
    ):
        adapter(**WHERE, operation_timeout="20")
    with pytest.raises(ValueError, match="operation_timeout must be positive, not 0"):
        adapter(**WHERE, operation_timeout=0)
    with pytest.raises(TypeError, match="not bool"):
        adapter(**WHERE, operation_timeout=True)


@pytest.mark.services
@pytest.mark.parametrize("adapter", [FilegateWorkspace, FilegateBackend])
async def test_a_mistyped_queue_is_one_line_in_seconds_not_an_hour(
    adapter: Any, temporal_client: Any
) -> None:
    """The default operation timeout is 70 minutes: the old adapters waited that long,
    silently, on a queue no worker polls. It fails once the first look finds nobody."""
    import asyncio
    import time
    import uuid

    from filegate.operations import UNSERVED_CHECK_AFTER, OperationTimedOut

    queue = f"typo-{uuid.uuid4().hex[:8]}"
    built = adapter(backend="b", task_queue=queue, client=temporal_client)
    began = time.monotonic()
    reading = built.read_bytes("/notes.md") if adapter is FilegateWorkspace else built.aread("/x")
    with pytest.raises(OperationTimedOut) as caught:
        await asyncio.wait_for(reading, 40)  # the old adapters: 70 minutes
    took = time.monotonic() - began
    assert UNSERVED_CHECK_AFTER.total_seconds() <= took < 30, took
    assert caught.value.unpolled == queue and "\n" not in str(caught.value)
    assert str(caught.value).startswith(f"no worker polls task queue '{queue}'")
