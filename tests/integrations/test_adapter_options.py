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
    assert adapter(**WHERE, operation_timeout=20).operation_timeout == timedelta(seconds=20)
    assert adapter(**WHERE, operation_timeout=1.5).operation_timeout == timedelta(seconds=1.5)
    given = timedelta(minutes=2)
    assert adapter(**WHERE, operation_timeout=given).operation_timeout == given
    with pytest.raises(
        TypeError, match="operation_timeout must be a timedelta or seconds, not str"
    ):
        adapter(**WHERE, operation_timeout="20")
    with pytest.raises(ValueError, match="operation_timeout must be positive, not 0"):
        adapter(**WHERE, operation_timeout=0)
    with pytest.raises(TypeError, match="not bool"):
        adapter(**WHERE, operation_timeout=True)
