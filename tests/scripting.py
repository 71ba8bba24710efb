"""Building scripted-model turns in tests (contract §10 script format)."""

from __future__ import annotations

from typing import Any


def calls(*items: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    """One model turn making the tool calls ``(id, tool name, args)``."""
    return {"tool_calls": [{"id": i, "name": n, "args": a} for i, n, a in items]}
