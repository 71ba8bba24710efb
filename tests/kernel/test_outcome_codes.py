"""Every error a tool call ends in carries its code: callers act on the code, never the text.

Adapters used to learn what happened by matching the model's text (``"ermission
denied" in text``, patterns rebuilt from the formatters); a reworded sentence then
changed what a framework's user got. The code is set where the error is made.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from filegate.backends import StateBackend
from filegate.kernel.dispatch import run_tool
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.protocol import OutcomeCode, as_error_code
from filegate.kernel.tool_types import TOOL_ORDER, ToolOutcome, ToolRequest

DENY = FilesystemPermission(operations=["read", "write"], paths=["/secret/**"], mode="deny")
GATE = FilesystemPermission(operations=["write"], paths=["/gated/**"], mode="interrupt")


def _state() -> StateBackend:
    state = StateBackend()
    for path, text in {
        "/a.txt": "one\none\n",
        "/b.txt": "first\nlast line",
        "/dir/x.txt": "x\n",
        "/secret/k.txt": "token\n",
        "/gated/g.txt": "g\n",
    }.items():
        assert state.upload([(path, text.encode())])[0].error is None
    return state


def _run(tool: str, args: dict[str, Any], *, approved: bool = False) -> ToolOutcome:
    request = ToolRequest(
        tool=tool,  # type: ignore[arg-type]
        backend="b",
        args=args,
        tool_call_id="t",
        permissions=[DENY, GATE],
        approved=approved,
    )
    return run_tool(_state(), request)


@pytest.mark.parametrize(
    ("tool", "args", "code", "occurrences"),
    [
        ("read_file", {"file_path": "/missing.txt"}, "file_not_found", None),
        ("read_file", {"file_path": "/a.txt", "offset": 50}, "invalid_argument", None),
        ("read_file", {"file_path": "/secret/k.txt"}, "denied", None),
        ("ls", {"path": "/a.txt"}, "not_a_directory", None),
        ("write_file", {"file_path": "/gated/new.txt", "content": "x"}, "approval_required", None),
        ("edit_file", {"file_path": "/a.txt", "old_string": "one", "new_string": "2"},
         "multiple_matches", 2),
        ("edit_file", {"file_path": "/a.txt", "old_string": "zzz", "new_string": "2"},
         "no_match", None),
        ("edit_file", {"file_path": "/b.txt", "old_string": "last line\n", "new_string": "2"},
         "no_match", 1),
        ("edit_file", {"file_path": "/none.txt", "old_string": "a", "new_string": "b"},
         "file_not_found", None),
        ("delete", {"file_path": "/none.txt"}, "file_not_found", None),
        ("delete", {"file_path": "/secret"}, "denied", None),
        ("grep", {"pattern": "x", "max_count": 0}, "invalid_argument", None),
        ("execute", {"command": "true"}, "unsupported", None),
    ],
)  # fmt: skip
def test_each_error_names_its_code(
    tool: str, args: dict[str, Any], code: OutcomeCode, occurrences: int | None
) -> None:
    outcome = _run(tool, args)
    assert (outcome.status, outcome.code, outcome.occurrences) == ("error", code, occurrences)


def test_a_success_has_no_code_and_says_its_count() -> None:
    edited = _run("edit_file", {"file_path": "/a.txt", "old_string": "one", "new_string": "2",
                                "replace_all": True})  # fmt: skip
    assert (edited.status, edited.code, edited.occurrences) == ("success", None, 2)
    approved = _run("write_file", {"file_path": "/gated/new.txt", "content": "x"}, approved=True)
    assert (approved.status, approved.code) == ("success", None)


def test_a_refusal_is_the_oss_permission_denied_to_a_caller_with_backend_codes() -> None:
    assert as_error_code("denied") == as_error_code("rejected") == "permission_denied"
    assert as_error_code("approval_required") == "permission_denied"
    assert as_error_code("file_not_found") == "file_not_found"
    assert as_error_code("conflict") is None and as_error_code(None) is None


_PATHS = st.sampled_from(
    ["/", "/a.txt", "/b.txt", "/dir", "/dir/x.txt", "/secret", "/secret/k.txt", "/gated",
     "/gated/g.txt", "/none", "/none/deeper.txt"]
)  # fmt: skip
_TEXT = st.sampled_from(["", "one", "one\n", "last line\n", "x", "zzz", "token"])


@st.composite
def _calls(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    tool = draw(st.sampled_from(TOOL_ORDER))
    path = draw(_PATHS)
    if tool == "ls":
        return tool, {"path": path}
    if tool == "read_file":
        return tool, {"file_path": path, "offset": draw(st.integers(-1, 5)),
                      "limit": draw(st.integers(0, 3))}  # fmt: skip
    if tool == "write_file":
        return tool, {"file_path": path, "content": draw(_TEXT)}
    if tool == "edit_file":
        return tool, {"file_path": path, "old_string": draw(_TEXT), "new_string": draw(_TEXT),
                      "replace_all": draw(st.booleans())}  # fmt: skip
    if tool == "delete":
        return tool, {"file_path": path}
    if tool == "glob":
        return tool, {"pattern": draw(st.sampled_from(["*", "**/*.txt", "[", "x"])), "path": path}
    if tool == "grep":
        return tool, {"pattern": draw(_TEXT) or "x", "path": path,
                      "max_count": draw(st.integers(0, 3))}  # fmt: skip
    return tool, {"command": draw(_TEXT) or "true"}


@settings(max_examples=400, deadline=None)
@given(_calls(), st.booleans())
def test_no_error_without_a_code(call: tuple[str, dict[str, Any]], approved: bool) -> None:
    tool, args = call
    outcome = _run(tool, args, approved=approved)
    assert (outcome.status == "error") == (outcome.code is not None), (tool, args, outcome)
