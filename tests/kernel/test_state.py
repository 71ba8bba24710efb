"""StateBackend: pure, deterministic, serialisable in-workflow files."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from filegate.backends import BackendProtocol, StateBackend
from filegate.kernel.protocol import FileInfo

BINARY = bytes(range(256)) + b"\x00\xff\xfe"


def _populated(now: str = "2025-01-01T00:00:00Z") -> StateBackend:
    s = StateBackend(now=now)
    s.write("/src/app.py", "import os\nprint('hello')\n")
    s.write("/src/lib/util.py", "def hello():\n    return 'hello'\n")
    s.write("/README.md", "# hello\n")
    s.write("/.env", "SECRET=hello\n")
    s.upload([("/img/logo.png", BINARY)])
    return s


def _ops(s: StateBackend) -> None:
    """A fixed script of operations touching every mutating method."""
    s.set_now("t1")
    s.write("/a/b.txt", "one\ntwo\n")
    s.upload([("/bin/x", BINARY), ("/a/c.txt", b"caf\xc3\xa9\n")])
    s.set_now("t2")
    s.edit("/a/b.txt", "two", "TWO")
    s.write("/d/e.txt", "gone")
    s.delete("/d")
    s.write("/a/b.txt", "rewritten\n")


def test_satisfies_protocol_and_capabilities() -> None:
    s = StateBackend()
    assert isinstance(s, BackendProtocol)
    assert s.can_execute is False
    assert s.can_delete is True


def test_same_ops_give_same_state() -> None:
    first, second = StateBackend(), StateBackend()
    _ops(first)
    _ops(second)
    assert first.to_dict() == second.to_dict()
    assert first.to_dict()["files"]["/a/b.txt"] == {
        "content": "rewritten\n",
        "encoding": "utf-8",
        "created_at": "t1",
        "modified_at": "t2",
    }


def test_to_dict_is_canonical_whatever_the_insertion_order() -> None:
    paths = [f"/d{i % 3}/f{i}.txt" for i in range(20)]
    shuffled = paths[:]
    random.Random(7).shuffle(shuffled)
    a, b = StateBackend(), StateBackend()
    for p in paths:
        a.write(p, p)
    for p in shuffled:
        b.write(p, p)
    assert json.dumps(a.to_dict()) == json.dumps(b.to_dict())


def test_round_trip_through_json() -> None:
    s = _populated()
    _ops(s)
    snapshot = json.loads(json.dumps(s.to_dict()))
    restored = StateBackend.from_dict(snapshot)
    assert restored.to_dict() == s.to_dict()
    assert restored.download(["/bin/x", "/img/logo.png"])[0].content == BINARY
    assert restored.read("/a/c.txt").lines == ["café"]
    assert snapshot["files"]["/bin/x"]["encoding"] == "base64"


@pytest.mark.parametrize(
    "bad",
    [
        {"version": 99, "files": {}},
        {"version": 1, "files": []},
        {"version": 1, "files": {"/a/../b": {"content": "", "encoding": "utf-8"}}},
        {"version": 1, "files": {"/a//b": {"content": "", "encoding": "utf-8"}}},
        {"version": 1, "files": {"/a": {"content": "!!", "encoding": "base64"}}},
        {"version": 1, "files": {"/a": {"content": "x", "encoding": "latin-1"}}},
        {"version": 1, "files": {"/a": {"content": 3, "encoding": "utf-8"}}},
        {"version": 1, "files": {"/a": {"content": "x", "encoding": "utf-8", "created_at": 5}}},
    ],
)
def test_from_dict_rejects_malformed_state(bad: dict) -> None:
    with pytest.raises(ValueError):
        StateBackend.from_dict(bad)


def test_timestamps_come_only_from_set_now() -> None:
    s = StateBackend()
    s.write("/a.txt", "x")
    assert s.to_dict()["files"]["/a.txt"]["created_at"] is None
    assert s.ls("/").entries[0].modified_at is None
    s.set_now("2030-05-05T05:05:05Z")
    s.write("/a.txt", "y")
    record = s.to_dict()["files"]["/a.txt"]
    assert record["created_at"] is None  # creation time survives overwrites
    assert record["modified_at"] == "2030-05-05T05:05:05Z"
    s.set_now("later")
    s.edit("/a.txt", "y", "z")
    assert s.ls("/").entries == [FileInfo(path="/a.txt", size=1, modified_at="later")]
    # A failed edit does not touch the timestamp.
    s.set_now("even-later")
    assert s.edit("/a.txt", "nope", "q").code == "no_match"
    assert s.to_dict()["files"]["/a.txt"]["modified_at"] == "later"


def test_ls_is_non_recursive_with_implied_dirs() -> None:
    s = _populated()
    listing = s.ls("/")
    assert [e.path for e in listing.entries] == ["/.env", "/README.md", "/img/", "/src/"]
    assert [e.is_dir for e in listing.entries] == [False, False, True, True]
    assert listing.entries[1].size == len(b"# hello\n")
    assert [e.path for e in s.ls("/src").entries] == ["/src/app.py", "/src/lib/"]
    assert [e.path for e in s.ls("/src/lib/").entries] == ["/src/lib/util.py"]
    assert StateBackend().ls("/").entries == []


def test_read_windows_and_binary() -> None:
    s = StateBackend()
    s.write("/n.txt", "".join(f"line {i}\n" for i in range(1, 11)))
    window = s.read("/n.txt", offset=2, limit=3)
    assert window.lines == ["line 3", "line 4", "line 5"]
    assert (window.start_line, window.end_line, window.total_lines) == (3, 5, 10)
    assert window.next_offset == 5
    assert s.read("/n.txt", offset=8).next_offset is None
    assert s.read("/n.txt", offset=10).code == "invalid_argument"
    s.upload([("/b.bin", BINARY)])
    binary = s.read("/b.bin")
    assert binary.is_binary and binary.data == BINARY and binary.encoding == "base64"
    assert binary.size == len(BINARY)


def test_write_edit_and_upload_share_storage() -> None:
    s = StateBackend()
    s.upload([("/t.txt", b"alpha beta alpha\n")])
    assert s.edit("/t.txt", "alpha", "ALPHA").code == "multiple_matches"
    result = s.edit("/t.txt", "alpha", "ALPHA", replace_all=True)
    assert result.ok and result.occurrences == 2
    assert s.download(["/t.txt"])[0].content == b"ALPHA beta ALPHA\n"


def test_upload_download_binary_safe_and_ordered() -> None:
    s = StateBackend()
    payloads = [("/z/1.bin", BINARY), ("/a/2.txt", "ünïcødé\r\n".encode()), ("/m/3", b"")]
    assert [r.path for r in s.upload(payloads)] == ["/z/1.bin", "/a/2.txt", "/m/3"]
    downloaded = s.download(["/m/3", "/z/1.bin", "/missing", "/a/2.txt"])
    assert [d.path for d in downloaded] == ["/m/3", "/z/1.bin", "/missing", "/a/2.txt"]
    assert downloaded[0].content == b""
    assert downloaded[1].content == BINARY
    assert downloaded[2].code == "file_not_found" and downloaded[2].content is None
    assert downloaded[3].content == "ünïcødé\r\n".encode()


def test_delete_file_and_directory_prefix() -> None:
    s = _populated()
    s.write("/srcfile.txt", "not under /src")
    assert s.delete("/src").ok
    assert s.paths() == ["/.env", "/README.md", "/img/logo.png", "/srcfile.txt"]
    assert s.delete("/README.md").ok
    assert "/README.md" not in s.paths()


def test_glob_contract() -> None:
    s = _populated()
    s.write("/.github/ci.py", "x")
    assert s.glob("*.py").matches == ["/.github/ci.py", "/src/app.py", "/src/lib/util.py"]
    assert s.glob("**/*.py").matches == ["/src/app.py", "/src/lib/util.py"]
    assert s.glob("**/*.py", "/src/lib").matches == ["/src/lib/util.py"]
    assert s.glob("src/*.py").matches == ["/src/app.py"]
    assert s.glob("/*.md", "/src").matches == ["/README.md"]
    assert s.glob(".github/*.py").matches == ["/.github/ci.py"]
    assert s.glob("*").matches == [
        "/.github/ci.py", "/README.md", "/img/logo.png", "/src/app.py", "/src/lib/util.py"
    ]  # fmt: skip
    everything = ["/README.md", "/img/logo.png", "/src/app.py", "/src/lib/util.py"]
    assert s.glob("**").matches == everything
    assert s.glob("{*.md,*.png}").matches == ["/README.md", "/img/logo.png"]
    assert s.glob("*.nothing").matches == [] and s.glob("*.nothing").ok


def test_grep_literal_filter_and_budget() -> None:
    s = _populated()
    hits = s.grep("hello")
    assert [(m.path, m.line) for m in hits.matches] == [
        ("/README.md", 1),
        ("/src/app.py", 2),
        ("/src/lib/util.py", 1),
        ("/src/lib/util.py", 2),
    ]
    assert not hits.truncated
    assert s.grep("print('hello')").matches[0].text == "print('hello')"
    assert s.grep("h.llo").matches == []  # literal, not a regex
    assert [m.path for m in s.grep("hello", glob="*.py").matches] == [
        "/src/app.py",
        "/src/lib/util.py",
        "/src/lib/util.py",
    ]
    assert [m.line for m in s.grep("hello", path="/src/lib/util.py").matches] == [1, 2]
    capped = s.grep("hello", max_count=3)
    assert [(m.path, m.line) for m in capped.matches] == [
        ("/README.md", 1),
        ("/src/app.py", 2),
        ("/src/lib/util.py", 1),
    ]
    assert capped.truncated
    exact = s.grep("hello", max_count=4)
    assert len(exact.matches) == 4 and not exact.truncated
    # Like ripgrep: dotfiles only when the filter spells the dot or the path names them.
    assert s.grep("SECRET").matches == []
    assert [m.path for m in s.grep("SECRET", glob=".env").matches] == ["/.env"]
    assert [m.path for m in s.grep("SECRET", path="/.env").matches] == ["/.env"]
    assert s.grep("SECRET", path="/src").matches == []
    # A filter with a leading '/' is anchored at the virtual root.
    assert [m.path for m in s.grep("hello", path="/src", glob="/src/*.py").matches] == [
        "/src/app.py"
    ]


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda s: s.ls("../etc"), "invalid_path"),
        (lambda s: s.ls("/missing"), "file_not_found"),
        (lambda s: s.ls("/README.md"), "not_a_directory"),
        (lambda s: s.read("~/x"), "invalid_path"),
        (lambda s: s.read("/missing.txt"), "file_not_found"),
        (lambda s: s.read("/src"), "is_directory"),
        (lambda s: s.read("/README.md", limit=0), "invalid_argument"),
        (lambda s: s.write("C:\\x", "y"), "invalid_path"),
        (lambda s: s.write("/src", "y"), "is_directory"),
        (lambda s: s.write("/", "y"), "is_directory"),
        (lambda s: s.write("/README.md/inner.txt", "y"), "not_a_directory"),
        (lambda s: s.edit("/a/../b", "x", "y"), "invalid_path"),
        (lambda s: s.edit("/missing", "x", "y"), "file_not_found"),
        (lambda s: s.edit("/src", "x", "y"), "is_directory"),
        (lambda s: s.edit("/img/logo.png", "x", "y"), "binary_file"),
        (lambda s: s.edit("/README.md", "absent", "y"), "no_match"),
        (lambda s: s.edit("/README.md", "hello", "hello"), "unchanged"),
        (lambda s: s.edit("/README.md", "", "y"), "invalid_argument"),
        (lambda s: s.delete("/../x"), "invalid_path"),
        (lambda s: s.delete("/missing"), "file_not_found"),
        (lambda s: s.delete("/"), "invalid_argument"),
        (lambda s: s.glob("../*.py"), "invalid_path"),
        (lambda s: s.glob("*.py", "/missing"), "file_not_found"),
        (lambda s: s.glob(""), "invalid_path"),
        (lambda s: s.grep("x", path="/img/logo.png"), "binary_file"),
        (lambda s: s.grep("x", path="/../x"), "invalid_path"),
        (lambda s: s.grep("x", path="/missing"), "file_not_found"),
        (lambda s: s.grep("x", glob="../*"), "invalid_path"),
        (lambda s: s.grep("x", max_count=0), "invalid_argument"),
        (lambda s: s.execute("ls"), "unsupported"),
        (lambda s: s.upload([("../x", b"")])[0], "invalid_path"),
        (lambda s: s.upload([("/src", b"")])[0], "is_directory"),
        (lambda s: s.download(["../x"])[0], "invalid_path"),
        (lambda s: s.download(["/src"])[0], "is_directory"),
    ],
)
def test_error_values_not_exceptions(call, code: str) -> None:
    s = _populated()
    before = s.to_dict()
    result = call(s)
    assert result.code == code
    assert result.error
    assert s.to_dict() == before  # a failed call changes nothing


def test_error_paths_are_normalised_in_results() -> None:
    s = StateBackend()
    assert s.write("/./a//b.txt", "x").path == "/a/b.txt"
    assert s.read("a/b.txt").path == "/a/b.txt"
    assert s.paths() == ["/a/b.txt"]


_KERNEL = sorted(
    p.name for p in (Path(__file__).parents[2] / "kernel").glob("*.py") if p.name != "__init__.py"
)


@pytest.mark.parametrize("module", [f"kernel/{name}" for name in _KERNEL])
def test_in_workflow_modules_import_nothing_nondeterministic(module: str) -> None:
    """The kernel runs in the workflow sandbox: no clock, I/O or randomness."""
    import ast

    forbidden = {"time", "datetime", "random", "os", "uuid", "secrets", "pathlib", "io"}
    forbidden |= {"subprocess", "socket", "threading", "asyncio", "shutil", "tempfile"}
    tree = ast.parse((Path(__file__).parents[2] / module).read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported, "parsed no imports"
    assert not imported & forbidden


_names = st.sampled_from(["a", "b", "c.txt", ".d", "é"])
_paths = st.lists(_names, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts))
_op = st.one_of(
    st.tuples(st.just("write"), _paths, st.text(max_size=20)),
    st.tuples(st.just("upload"), _paths, st.binary(max_size=20)),
    st.tuples(st.just("delete"), _paths, st.none()),
    st.tuples(st.just("edit"), _paths, st.text(min_size=1, max_size=2)),
    st.tuples(st.just("now"), st.text(max_size=5), st.none()),
)


def _apply(s: StateBackend, ops: list[tuple[str, str, object]]) -> list[object]:
    answers: list[object] = []
    for name, path, arg in ops:
        if name == "write":
            answers.append(s.write(path, str(arg)))
        elif name == "upload":
            assert isinstance(arg, bytes)
            answers.append(s.upload([(path, arg)]))
        elif name == "delete":
            answers.append(s.delete(path))
        elif name == "edit":
            answers.append(s.edit(path, str(arg), str(arg) + "!", replace_all=True))
        else:
            s.set_now(path)
    return answers


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.lists(_op, max_size=25))
def test_property_replay_and_round_trip(ops: list[tuple[str, str, object]]) -> None:
    first, second = StateBackend(), StateBackend()
    assert _apply(first, ops) == _apply(second, ops)  # a replay answers identically
    snapshot = first.to_dict()
    assert snapshot == second.to_dict()
    restored = StateBackend.from_dict(json.loads(json.dumps(snapshot)))
    assert restored.to_dict() == snapshot
    for path in first.paths():
        assert restored.download([path])[0].content == first.download([path])[0].content
    # Files never sit below another file; every listed directory really holds files.
    paths = first.paths()
    assert not any(q.startswith(p + "/") for p in paths for q in paths)
