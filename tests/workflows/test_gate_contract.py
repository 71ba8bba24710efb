"""Gate contract points from issue 18: deny wins over a later interrupt for searches,
and an exact tool without a path fails validation before any approval."""

from __future__ import annotations

from typing import Any

import pytest

from filegate.kernel.dispatch import run_tool
from filegate.kernel.formatting import Rendered
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.routing import Router
from filegate.kernel.state import StateBackend
from filegate.kernel.tool_types import TOOL_ARGS, ToolRequest
from filegate.workflows.gate import CheckedCall, ToolInterrupt, approval_trigger, check_call

RULES = [
    FilesystemPermission(operations=["read"], paths=["/secrets/**"], mode="deny"),
    FilesystemPermission(operations=["read"], paths=["/**"], mode="interrupt"),
]


def _check(tool: str, args: dict[str, Any]) -> CheckedCall | Rendered:
    return check_call(
        tool,
        args,
        allowed=list(TOOL_ARGS),
        router=Router([]),
        max_args_chars=100_000,
        max_execute_timeout=600.0,
    )


def _asks(tool: str, args: dict[str, Any]) -> bool:
    call = _check(tool, args)
    assert isinstance(call, CheckedCall), call
    return approval_trigger(RULES, {}, call) is not None


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("ls", {"path": "/secrets"}),
        ("glob", {"pattern": "*.py", "path": "/secrets"}),
        ("glob", {"pattern": "/secrets/**/*.py"}),
        ("glob", {"pattern": "secrets/**"}),
        ("grep", {"pattern": "x", "glob": "/secrets/**"}),
    ],
)
def test_a_search_whose_every_answer_is_denied_asks_nobody(tool: str, args: dict[str, Any]) -> None:
    assert not _asks(tool, args)


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("ls", {"path": "/"}),
        ("glob", {"pattern": "{secrets,pub}/*"}),
        # The path may be the one file grep searches, and that file is an interrupt.
        ("grep", {"pattern": "x", "path": "/secrets"}),
        ("grep", {"pattern": "x", "path": "/pub/a.txt", "glob": "/secrets/**"}),
    ],
)
def test_a_search_with_answers_to_approve_still_asks(tool: str, args: dict[str, Any]) -> None:
    assert _asks(tool, args)


def test_the_activity_runs_the_unasked_search_and_shows_nothing() -> None:
    state = StateBackend()
    assert state.write("/secrets/key.txt", "hunter2\n").ok
    request = ToolRequest(
        tool="ls", backend="s", args={"path": "/secrets"}, tool_call_id="c", permissions=RULES
    )
    out = run_tool(state, request)  # not approved: the workflow asked nobody
    assert out.status == "success" and "key.txt" not in str(out.content)
    glob = request.model_copy(update={"tool": "glob", "args": {"pattern": "/secrets/**"}})
    out = run_tool(state, glob)
    assert out.status == "success" and "key.txt" not in str(out.content)


@pytest.mark.parametrize("tool", ["read_file", "write_file", "edit_file", "delete"])
@pytest.mark.parametrize("empty", ["", "  ", "."])
def test_an_exact_tool_without_a_path_fails_validation(tool: str, empty: str) -> None:
    args: dict[str, Any] = {"file_path": empty}
    if tool == "write_file":
        args["content"] = "x"
    if tool == "edit_file":
        args.update(old_string="a", new_string="b")
    checked = _check(tool, args)
    assert isinstance(checked, Rendered) and checked.is_error
    assert "needs a file path" in checked.text


def test_no_path_means_no_approval_even_with_interrupt_on() -> None:
    always = {"write_file": ToolInterrupt(always=True)}
    no_path = CheckedCall("write_file", {"file_path": None, "content": "x"}, None, None, None)
    assert approval_trigger(RULES, always, no_path) is None  # type: ignore[arg-type]
