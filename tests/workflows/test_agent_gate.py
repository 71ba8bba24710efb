"""The workflow's pure call checks and approval bookkeeping (no Temporal needed)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from filegate.kernel.formatting import Rendered
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.routing import Router
from filegate.kernel.tool_types import TOOL_ORDER, ToolName
from filegate.workflows.approvals.pending import ApprovalBook, call_signature, stamped
from filegate.workflows.gate import CheckedCall, check_call, deny_gate
from filegate.workflows.inputs import Decision

ALL: list[ToolName] = list(TOOL_ORDER)
ROUTER = Router(["/memories"])


def check(tool: str, args: Any, allowed: list[ToolName] = ALL) -> CheckedCall | Rendered:
    return check_call(
        tool, args, allowed=allowed, router=ROUTER, max_args_chars=1000, max_execute_timeout=3600
    )


def error_text(result: CheckedCall | Rendered) -> str:
    assert isinstance(result, Rendered) and result.is_error, result
    return result.text


def test_unknown_or_hidden_tool_is_an_error() -> None:
    assert "unknown tool 'rm'" in error_text(check("rm", {}))
    assert "unknown tool 'execute'" in error_text(check("execute", {"command": "ls"}, ["ls"]))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ("not a dict", "JSON object"),
        ({"file_path": "/a", "content": "x" * 2000}, "too large"),
        ({"file_path": 3, "content": "x"}, "file_path"),
        ({"content": "x"}, "file_path"),
        ({"file_path": "/a", "content": "x", "extra": 1}, "extra"),
        ({"file_path": "/a/../../etc/passwd", "content": "x"}, "traversal"),
        ({"file_path": "~/x", "content": "x"}, "traversal"),
    ],
)
def test_bad_write_args(args: Any, needle: str) -> None:
    assert needle in error_text(check("write_file", args))


def test_execute_timeout_bounds() -> None:
    assert "between 0 and 3600" in error_text(check("execute", {"command": "ls", "timeout": -1}))
    assert "between 0 and 3600" in error_text(check("execute", {"command": "ls", "timeout": 0}))
    assert "between 0 and 3600" in error_text(check("execute", {"command": "ls", "timeout": 4000}))
    ok = check("execute", {"command": "ls", "timeout": 10})
    assert isinstance(ok, CheckedCall) and ok.path is None


def test_edit_with_identical_strings_is_refused() -> None:
    args = {"file_path": "/a", "old_string": "x", "new_string": "x"}
    assert "identical" in error_text(check("edit_file", args))


def test_paths_are_normalised_and_routed() -> None:
    call = check("read_file", {"file_path": "memories//./notes.md"})
    assert isinstance(call, CheckedCall)
    assert call.path == "/memories/notes.md" and call.args["file_path"] == call.path
    assert call.prefix == "/memories/" and call.local_path == "/notes.md"
    root = check("ls", {"path": "."})
    assert isinstance(root, CheckedCall) and root.path == "/" and root.prefix is None
    near = check("ls", {"path": "/memories2/x"})
    assert isinstance(near, CheckedCall) and near.prefix is None


RULES = [
    FilesystemPermission(operations=["write"], paths=["/secrets/**"], mode="deny"),
    FilesystemPermission(operations=["read"], paths=["/private/**"], mode="deny"),
]


def gate(tool: str, args: dict[str, Any], has_descendants: bool = True) -> Rendered | None:
    call = check(tool, args)
    assert isinstance(call, CheckedCall)
    return deny_gate(RULES, call, has_descendants=has_descendants)


def test_deny_gate_exact_bulk_and_delete() -> None:
    assert gate("write_file", {"file_path": "/secrets/.env", "content": "x"}) is not None
    assert gate("read_file", {"file_path": "/secrets/.env"}) is None
    assert gate("read_file", {"file_path": "/private/a"}) is not None
    assert gate("ls", {"path": "/private/sub"}) is not None  # whole subtree denied
    assert gate("ls", {"path": "/"}) is None  # result filter hides the denied part
    blocked = gate("delete", {"file_path": "/"})
    assert blocked is not None and "/secrets/**" in blocked.text
    assert gate("delete", {"file_path": "/other/file.txt"}, has_descendants=False) is None


def test_approval_book_checks_decisions() -> None:
    book = ApprovalBook()
    approval = book.open(
        tool="write_file", args={"file_path": "/d/a"}, rule=None, tool_call_id="c", now="t"
    )
    aid = approval.id
    assert re.fullmatch(r"[0-9a-f]{16}", aid), aid  # random, not a1, a2, ...

    def no_edit(tool: str, args: dict[str, Any]) -> str | None:
        return "denied" if args.get("file_path") == "/bad" else None

    with pytest.raises(ValueError, match="no pending approval"):
        book.check(Decision(id="a1", decision="approve"), no_edit)
    with pytest.raises(ValueError, match="needs args"):
        book.check(Decision(id=aid, decision="edit"), no_edit)
    with pytest.raises(ValueError, match="denied"):
        book.check(Decision(id=aid, decision="edit", args={"file_path": "/bad"}), no_edit)
    with pytest.raises(ValueError, match="needs a message"):
        book.check(Decision(id=aid, decision="respond"), no_edit)
    with pytest.raises(ValueError, match="reserved"):
        book.check(Decision(id=aid, decision="approve", via="timeout"), no_edit)
    decision = stamped(Decision(id=aid, decision="reject", reason="no", reviewer="ana"), "cli")
    book.check(decision, no_edit)
    book.record(decision, "2025-01-01T00:00:00")
    with pytest.raises(ValueError, match="already decided"):
        book.check(decision, no_edit)
    [record] = book.decided
    assert (record.id, record.decision, record.reviewer, record.via) == (
        aid,
        "reject",
        "ana",
        "cli",
    )
    assert record.tool_call_id == "c" and record.decided_at == "2025-01-01T00:00:00"
    assert book.close(aid) == decision and not book.pending
    signature = call_signature("write_file", {"file_path": "/d/a"})
    assert book.previous_rejection(signature) is None
    book.remember_rejection(signature, None)
    assert book.previous_rejection(signature) == ""
    assert call_signature("t", {"b": 1, "a": 2}) == call_signature("t", {"a": 2, "b": 1})


def test_approval_ids_are_random_and_decisions_say_who() -> None:
    ids = {
        ApprovalBook().open(tool="ls", args={}, rule=None, tool_call_id="c", now="t").id
        for _ in range(50)
    }
    assert len(ids) == 50
    seeded = iter(["00" * 16, "00" * 16, "ab" * 16])  # a collision is drawn again
    book = ApprovalBook(random_hex=lambda: next(seeded))
    first = book.open(tool="ls", args={}, rule=None, tool_call_id="c", now="t")
    second = book.open(tool="ls", args={}, rule=None, tool_call_id="d", now="t")
    assert (first.id, second.id) == ("0" * 16, "ab" * 8)
    assert stamped(Decision(id="x", decision="approve"), "signal").by() == "unknown via signal"
    kept = stamped(Decision(id="x", decision="approve", reviewer="bo", via="ui"), "api")
    assert kept.by() == "bo via ui"
    with pytest.raises(ValueError):
        Decision(id="x", decision="approve", via="model")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Decision(id="x", decision="approve", reviewer="r" * 201)


def test_order_key_comes_from_the_checked_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 14: the workflow validates a call's path once; the order key reuses it."""
    from filegate.kernel import paths
    from filegate.workflows import gate
    from filegate.workflows.calls import ToolCalls

    seen: list[Any] = []

    def counted(path: Any) -> Any:
        seen.append(path)
        return paths.validate_path(path)

    monkeypatch.setattr(gate, "validate_path", counted)
    checked = check("write_file", {"file_path": "memories//a/./b.md", "content": "x"})
    assert isinstance(checked, CheckedCall)
    assert ToolCalls._order_key(checked) == "/memories/a/b.md"
    assert len(seen) == 1
    assert ToolCalls._order_key(check("execute", {"command": "ls"})) == "<shell>"
    assert ToolCalls._order_key(check("write_file", {"file_path": "../x", "content": ""})) is None
