"""Tool outcomes as the tools worker makes them, for tests of what callers read from them."""

from __future__ import annotations

from typing import Any

from filegate.kernel.dispatch import render_mutation
from filegate.kernel.protocol import DeleteResult, EditResult, ExecuteResult, WriteResult
from filegate.kernel.tool_types import ToolName, ToolOutcome, ToolRequest


def ran_as_activity(result: WriteResult | EditResult | DeleteResult | ExecuteResult) -> ToolOutcome:
    """The outcome a ``filegate.<tool>`` activity returns for this backend result (and the
    journal rebuilds after a crash): the kernel's one renderer, with its code and facts."""
    tool: ToolName
    args: dict[str, Any]
    if isinstance(result, ExecuteResult):
        tool, args = "execute", {"command": "true"}
    elif isinstance(result, EditResult):
        tool = "edit_file"
        args = {"file_path": result.path or "/x", "old_string": "a", "new_string": "b"}
    elif isinstance(result, WriteResult):
        tool, args = "write_file", {"file_path": result.path or "/x", "content": ""}
    else:
        tool, args = "delete", {"file_path": result.path or "/x"}
    request = ToolRequest(tool=tool, backend="b", args=args, tool_call_id="t")
    return render_mutation(request, result)
