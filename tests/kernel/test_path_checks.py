"""One path check per side: ValidPath marks, and the request's virtual_path contract."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest

from filegate.backends.filesystem import FilesystemBackend
from filegate.kernel.dispatch import InvalidToolRequest, parse_args, run_tool
from filegate.kernel.paths import ValidPath, validate_path
from filegate.kernel.tool_types import ToolRequest


def _req(args: dict[str, str], virtual: str | None, prefix: str = "/memories/") -> ToolRequest:
    return ToolRequest(
        tool="read_file",
        backend="b",
        args=args,
        tool_call_id="c",
        route_prefix=prefix,
        virtual_path=virtual,
    )


def test_valid_path_is_only_made_by_validate_path() -> None:
    marked = validate_path("/a//b/")
    assert type(marked) is ValidPath and marked == "/a/b" and validate_path(marked) is marked
    with pytest.raises(TypeError):
        ValidPath("../x")
    for plain in (
        copy.deepcopy(marked),
        pickle.loads(pickle.dumps(marked)),
        marked + "/..",
        marked[1:],
    ):
        assert type(plain) is str


def test_direct_backend_callers_are_still_checked(tmp_path: Path) -> None:
    assert FilesystemBackend(tmp_path).read("../x").code == "invalid_path"


def test_virtual_path_must_match_the_local_path() -> None:
    args = parse_args(_req({"file_path": "/notes.md"}, "/memories/notes.md"))
    assert type(args.file_path) is ValidPath  # type: ignore[attr-defined]
    for bad in (
        _req({"file_path": "/other.md"}, "/memories/notes.md"),
        _req({"file_path": "/notes.md"}, "/memories//notes.md"),
        _req({"file_path": "/notes.md"}, "/elsewhere/notes.md"),
        _req({"file_path": "/../notes.md"}, "/memories/../notes.md"),
        _req({"file_path": "/notes.md"}, "/memories/notes.md", prefix="/memories"),
    ):
        with pytest.raises(InvalidToolRequest):
            parse_args(bad)


def test_old_requests_without_virtual_path_still_work(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("alpha\n")
    out = run_tool(FilesystemBackend(tmp_path), _req({"file_path": "/notes.md"}, None))
    assert out.status == "success"
    missing = run_tool(FilesystemBackend(tmp_path), _req({"file_path": "/nope.md"}, None))
    assert "/memories/nope.md" in str(missing.content)
    with pytest.raises(InvalidToolRequest):
        parse_args(_req({"file_path": "/x"}, None, prefix="/../"))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("src\\app.py", "/src/app.py"), ("\\a\\\\b\\", "/a/b"), ("/a\\./b", "/a/b")],
)
def test_backslashes_become_slashes(raw: str, expected: str) -> None:
    assert validate_path(raw) == expected  # contract §1, as in the reference


@pytest.mark.parametrize("raw", ["..\\x", "a\\..\\..\\b", "C:\\x", "\\\\server\\share", "~\\x"])
def test_backslashes_do_not_open_a_way_out(raw: str) -> None:
    with pytest.raises(ValueError):
        validate_path(raw)


def test_a_backslash_path_reaches_the_file(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("print(1)\n")
    out = run_tool(FilesystemBackend(tmp_path), _req({"file_path": "src\\app.py"}, None, "/"))
    assert out.status == "success" and "print(1)" in str(out.content)


def test_no_error_text_rewriter_is_left() -> None:
    """Errors carry ``error_path`` (kernel.protocol); nothing edits message text any more."""
    from bench.path_checks import REWRITERS, string_rewriters

    assert len(REWRITERS) == 3 and string_rewriters() == 0
