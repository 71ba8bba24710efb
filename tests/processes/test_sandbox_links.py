# ruff: noqa: F811  (pytest fixtures imported from tests.sandbox_fixtures)
"""Links a sandboxed command makes with the sandbox's own path (issue 54).

Inside the sandbox the root is ``/workspace``, so tools that write absolute
links (``ln -s $(pwd)/...``, virtualenvs, build outputs) make links such as
``latest.csv -> /workspace/data/x.csv``. The file tools run on the host, where
the old code followed that target to the host's ``/workspace`` and refused it as
leaving the root, although the command itself read it fine. Now the target leads
below the root, and is judged there by the same rules: a link to the sandbox path
of a protected file stays refused, and one that climbs out stays outside.
Real bubblewrap; every call through the tool path (``run_tool``).
"""

from __future__ import annotations

from pathlib import Path

from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.kernel.dispatch import run_tool
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.tool_types import ToolRequest
from tests.processes.test_view_strength import execute, rule
from tests.sandbox_fixtures import _bwrap_ok, root, sb  # noqa: F401  (fixtures)


def _call(
    box: BwrapSandboxBackend, request: dict[str, object], rules: list[FilesystemPermission]
) -> str:
    made = ToolRequest.model_validate(
        {"backend": "box", "tool_call_id": "1:1:t", "permissions": rules, **request}
    )
    return run_tool(box, made).text


def test_a_link_made_with_the_sandbox_path_reads_through_the_file_tools(
    sb: BwrapSandboxBackend, root: Path
) -> None:
    made = execute(
        sb, "mkdir -p data && echo a,b > data/x.csv && ln -s /workspace/data/x.csv latest.csv "
        "&& cat latest.csv", [],
    )  # fmt: skip
    assert "a,b" in made, made
    read = _call(sb, {"tool": "read_file", "args": {"file_path": "/latest.csv"}}, [])
    assert "a,b" in read and "Error" not in read, read
    listed = _call(sb, {"tool": "ls", "args": {"path": "/"}}, [])
    assert "latest.csv" in listed, listed
    wrote = _call(
        sb, {"tool": "write_file", "args": {"file_path": "/data/y.csv", "content": "c\n"}}, []
    )
    assert "Error" not in wrote, wrote
    execute(sb, "ln -s /workspace/data dirlink", [])
    found = _call(sb, {"tool": "read_file", "args": {"file_path": "/dirlink/y.csv"}}, [])
    assert "c" in found and "Error" not in found, found


def test_a_link_to_the_sandbox_path_of_a_protected_file_stays_refused(
    sb: BwrapSandboxBackend, root: Path
) -> None:
    (root / "secrets").mkdir()
    (root / "secrets" / "key").write_text("TOP-SECRET\n")
    deny = [rule("deny", ["read"], "/secrets/**")]
    execute(sb, "ln -s /workspace/secrets/key k; ln -s /workspace/../../etc/hostname out", [])
    read = _call(sb, {"tool": "read_file", "args": {"file_path": "/k"}}, deny)
    assert read.startswith("Error") and "TOP-SECRET" not in read, read
    listed = _call(sb, {"tool": "ls", "args": {"path": "/"}}, deny)
    assert "/k" not in listed.split(), listed  # a listing does not describe it either
    climbed = _call(sb, {"tool": "read_file", "args": {"file_path": "/out"}}, [])
    assert climbed.startswith("Error"), climbed  # above the root: outside, as before


def test_a_loop_of_sandbox_path_links_is_refused_not_raised(
    sb: BwrapSandboxBackend, root: Path
) -> None:
    """A loop (the link race property test drew one, re-pointing links mid-turn) is a
    refusal like any unresolvable path, never an exception out of the gate."""
    execute(sb, "ln -s /workspace/b a; ln -s /workspace/a b", [])
    for tool, args in (
        ("read_file", {"file_path": "/a/key.txt"}),
        ("grep", {"pattern": "x", "path": "/a"}),
        ("ls", {"path": "/b"}),
    ):
        text = _call(sb, {"tool": tool, "args": args}, [rule("deny", ["read"], "/secret/**")])
        assert text.startswith("Error"), (tool, text)
    assert sb.resolve_path("/a/key.txt") is None or sb.resolve_path("/a/key.txt") == "/a/key.txt"


def test_a_link_through_a_missing_directory_and_up_is_answered_not_raised(
    sb: BwrapSandboxBackend, root: Path
) -> None:
    """``L1 -> ./keep/inner/..`` while ``inner`` is gone (the link race property test drew
    it, a delete racing two reads): the walk used to hand the gate
    ``/pub/keep/inner/../key.txt``, whose ``..`` raised out of the rules instead of an
    answer. Now the walk gives way to the resolution's own answer, judged by the rules:
    a protected file stays refused, and nothing raises."""
    (root / "pub" / "keep").mkdir(parents=True)
    (root / "pub" / "keep" / "key.txt").write_text("PROTECTED\n")
    execute(sb, "cd pub && ln -s /workspace/pub/L1 L0 && ln -s ./keep/inner/.. L1", [])
    rules = [rule("deny", ["read"], "/pub/keep/**")]
    for tool, args in (
        ("read_file", {"file_path": "/pub/L0/key.txt"}),
        ("read_file", {"file_path": "/pub/L1/key.txt"}),
        ("grep", {"pattern": "PROTECTED", "path": "/pub/L0"}),
    ):
        text = _call(sb, {"tool": tool, "args": args}, rules)
        assert "PROTECTED" not in text, (tool, text)
        assert text.startswith("Error") or "No matches" in text, (tool, text)
