"""The public ``interrupt_fires`` gives the workflow gate's answer (contract §5).

``filegate.backends.interrupt_fires`` is what a caller outside the workflow
asks to learn whether a call will wait for a human. It must say what the
workflow does, not a wider guess: the workflow checks the call
(``check_call``), runs the deny gate, then ``approval_trigger``. These tests
compare the two over many generated rule lists and calls, and pin the cases
where the predicate used to disagree (an earlier deny covering a search's
subtree, calls the gate refuses before anyone is asked).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from filegate.backends import interrupt_fires
from filegate.kernel.formatting import Rendered
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.routing import Router
from filegate.kernel.tool_types import TOOL_ORDER, ToolName
from filegate.workflows.gate import approval_trigger, check_call, deny_gate

ALL: list[ToolName] = list(TOOL_ORDER)

PATTERNS = [
    "/**",
    "/secrets/**",
    "/secrets",
    "/secrets/*.key",
    "/secrets/pub/**",
    "/src/**",
    "/src/*.py",
    "/**/*.env",
    "/{secrets,src}/**",
    "/a/*/b/**",
    "/*",
    "/s/.env",
]
PATHS: list[str | None] = [
    None,
    "",
    ".",
    " ",
    "/",
    "/secrets",
    "/secrets/",
    "/secrets/a.key",
    "/secrets/pub",
    "/secrets/pub/x",
    "/src",
    "/src/app.py",
    "/a/x/b",
    "/s/.env",
    "secrets/a.key",
    "/./secrets//pub/",
    "/../etc",
    "~",
    "/elsewhere",
]
GLOB_PATTERNS = [
    "*.py",
    "**/*",
    "**/*.key",
    "/secrets/**",
    "/secrets/*.key",
    "/{secrets,src}/*",
    "/src/app.py",
    "pub/**",
    "../secrets/*",
    "*.py/",
    "",
]
GREP_GLOBS: list[str | None] = [None, "*.py", "**/*.key", "/secrets/**", "pub/*"]
TOOLS = ["ls", "read_file", "write_file", "edit_file", "delete", "glob", "grep"]


@st.composite
def rule_lists(draw: st.DrawFn) -> list[FilesystemPermission]:
    rule = st.builds(
        lambda ops, paths, mode: FilesystemPermission(operations=ops, paths=paths, mode=mode),
        st.sampled_from([["read"], ["write"], ["read", "write"]]),
        st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=2, unique=True),
        st.sampled_from(["allow", "deny", "interrupt"]),
    )
    return draw(st.lists(rule, min_size=1, max_size=4))


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """Schema-valid calls of every path-taking tool (the gate's other refusals included)."""
    tool = draw(st.sampled_from(TOOLS))
    path = draw(st.sampled_from(PATHS))
    if tool == "ls":
        return tool, {} if path is None else {"path": path}
    if tool == "glob":
        return tool, {"pattern": draw(st.sampled_from(GLOB_PATTERNS)), "path": path}
    if tool == "grep":
        return tool, {"pattern": "needle", "path": path, "glob": draw(st.sampled_from(GREP_GLOBS))}
    file_path = path if path is not None else ""
    if tool == "write_file":
        return tool, {"file_path": file_path, "content": "x"}
    if tool == "edit_file":
        return tool, {"file_path": file_path, "old_string": "a", "new_string": "b"}
    return tool, {"file_path": file_path}


def gate_asks(rules: list[FilesystemPermission], tool: str, args: dict[str, Any]) -> bool:
    """Does the workflow wait for a human on this call (no ``interrupt_on`` entries)?"""
    checked = check_call(
        tool,
        dict(args),
        allowed=ALL,
        router=Router([]),
        max_args_chars=100_000,
        max_execute_timeout=3600,
    )
    if isinstance(checked, Rendered):
        return False
    if deny_gate(rules, checked) is not None:
        return False
    return approval_trigger(rules, {}, checked) is not None


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(rules=rule_lists(), call=calls())
def test_the_public_predicate_agrees_with_the_workflow_gate(
    rules: list[FilesystemPermission], call: tuple[str, dict[str, Any]]
) -> None:
    tool, args = call
    assert interrupt_fires(rules, tool, args) is gate_asks(rules, tool, args), (rules, tool, args)


def _rule(mode: str, *paths: str, ops: tuple[str, ...] = ("read",)) -> FilesystemPermission:
    return FilesystemPermission(operations=list(ops), paths=list(paths), mode=mode)  # type: ignore[arg-type]


DENY_THEN_ASK = [_rule("deny", "/secrets/**"), _rule("interrupt", "/secrets/**")]


@pytest.mark.parametrize(
    ("rules", "tool", "args"),
    [
        (DENY_THEN_ASK, "ls", {"path": "/secrets"}),
        (DENY_THEN_ASK, "glob", {"pattern": "**/*.py", "path": "/secrets"}),
        (DENY_THEN_ASK, "glob", {"pattern": "/secrets/**/*.py", "path": "/"}),
        (DENY_THEN_ASK, "grep", {"pattern": "x", "path": "/secrets"}),
        ([_rule("deny", "/secrets/**"), _rule("interrupt", "/**")], "ls", {"path": "/secrets"}),
    ],
    ids=["ls", "glob-below", "glob-re-rooted", "grep", "interrupt-everything"],
)
def test_an_earlier_deny_covering_the_search_asks_no_one(
    rules: list[FilesystemPermission], tool: str, args: dict[str, Any]
) -> None:
    """The issue's case: the search runs unasked and the result filter leaves nothing."""
    assert gate_asks(rules, tool, args) is False
    assert interrupt_fires(rules, tool, args) is False


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("read_file", {"file_path": ""}),
        ("read_file", {"file_path": " "}),
        ("write_file", {"file_path": "."}),
        ("delete", {}),
        ("glob", {"pattern": "/secrets/*", "path": "~"}),
        ("ls", {"path": "/../secrets"}),
    ],
)
def test_a_call_the_gate_refuses_first_never_waits(tool: str, args: dict[str, Any]) -> None:
    rules = [_rule("interrupt", "/**", ops=("read", "write"))]
    assert interrupt_fires(rules, tool, args) is False


def test_a_search_that_can_reach_the_interrupt_still_waits() -> None:
    rules = [_rule("deny", "/secrets/a/**"), _rule("interrupt", "/secrets/**")]
    assert interrupt_fires(rules, "ls", {"path": "/secrets"}) is True
    assert gate_asks(rules, "ls", {"path": "/secrets"}) is True
    # grep's path may be the one file searched: an interrupt on it still asks.
    literal = [_rule("deny", "/s/**"), _rule("interrupt", "/s/k")]
    assert interrupt_fires(literal, "grep", {"pattern": "x", "path": "/s/k"}) is (
        gate_asks(literal, "grep", {"pattern": "x", "path": "/s/k"})
    )
