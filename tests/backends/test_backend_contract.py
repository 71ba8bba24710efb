"""One behaviour contract (contract §1), run against every backend.

Files are created only through ``write``/``upload`` so the same test body
works for disk, in-workflow state and composite routing. The composite runs
twice: once with the files on its default backend, once with them behind a
route (``/mem``, given without a trailing slash), so prefixes are exercised.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.local_shell import LocalShellBackend
from filegate.kernel.protocol import BackendProtocol


@dataclass
class Subject:
    backend: BackendProtocol
    base: str  # virtual prefix under which the test's files live ("" = root)

    def p(self, path: str) -> str:
        """``path`` (absolute) under the subject's base."""
        if not self.base:
            return path
        return self.base if path == "/" else self.base + path

    def rel(self, paths: list[str]) -> list[str]:
        """Results with the base stripped, for base-independent expectations."""
        return [path[len(self.base) :] if self.base else path for path in paths]


def _state() -> BackendProtocol:
    try:
        from filegate.kernel.state import StateBackend
    except ImportError:
        pytest.skip("backends.state not importable yet")
    return StateBackend()


def _composite(default: BackendProtocol, routes: dict[str, BackendProtocol]) -> BackendProtocol:
    try:
        from filegate.backends.composite import CompositeBackend
    except ImportError:
        pytest.skip("backends.composite not importable yet")
    return CompositeBackend(default, routes)


FACTORIES: dict[str, Callable[[Path], Subject]] = {
    "filesystem": lambda tmp: Subject(FilesystemBackend(tmp / "root"), ""),
    "filesystem-python-grep": lambda tmp: Subject(
        FilesystemBackend(tmp / "root", use_ripgrep=False), ""
    ),
    "local_shell": lambda tmp: Subject(LocalShellBackend(tmp / "root"), ""),
    "state": lambda tmp: Subject(_state(), ""),
    "composite-default": lambda tmp: Subject(
        _composite(FilesystemBackend(tmp / "root"), {"/mem": _state()}), ""
    ),
    "composite-route": lambda tmp: Subject(
        _composite(_state(), {"/mem": FilesystemBackend(tmp / "root")}), "/mem"
    ),
}


@pytest.fixture(params=sorted(FACTORIES))
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> Subject:
    (tmp_path / "root").mkdir()
    return FACTORIES[request.param](tmp_path)


def write_all(s: Subject, files: dict[str, str]) -> None:
    for path, content in files.items():
        result = s.backend.write(s.p(path), content)
        assert result.ok, result.error


# -- glob -------------------------------------------------------------------

GLOB_TREE = {
    "/top.py": "t",
    "/README.md": "r",
    "/.env": "SECRET=1",
    "/src/main.py": "m",
    "/src/a..b.txt": "dots",
    "/src/util/helpers.py": "h",
    "/src/util/.hidden.py": "hidden",
    "/src/.cache/c.py": "cache",
    "/.config/settings.py": "cfg",
    "/docs/guide.md": "g",
    "/docs/api/ref.md": "ref",
    "/data/img.txt": "i",
    "/.github/workflows/ci.yml": "ci",
}

GLOB_CASES: list[tuple[str, str, list[str]]] = [
    # (pattern, search root, expected) — all relative to the subject's base
    # A basename pattern looks inside dot-directories too; `**` never enters them.
    ("*.py", "/", ["/.config/settings.py", "/src/.cache/c.py", "/src/main.py",
                   "/src/util/helpers.py", "/top.py"]),
    ("**/*.py", "/", ["/src/main.py", "/src/util/helpers.py", "/top.py"]),
    ("*.yml", "/", ["/.github/workflows/ci.yml"]),
    ("**/*.yml", "/", []),
    ("workflows/*.yml", "/.github", ["/.github/workflows/ci.yml"]),
    ("src/*.py", "/", ["/src/main.py"]),
    ("src/**/*.py", "/", ["/src/main.py", "/src/util/helpers.py"]),
    ("*.py", "/src", ["/src/.cache/c.py", "/src/main.py", "/src/util/helpers.py"]),
    ("util/*.py", "/src", ["/src/util/helpers.py"]),
    ("**", "/docs", ["/docs/api/ref.md", "/docs/guide.md"]),
    ("*.{md,txt}", "/", ["/README.md", "/data/img.txt", "/docs/api/ref.md", "/docs/guide.md",
                         "/src/a..b.txt"]),
    ("{src,docs}/*", "/", ["/docs/guide.md", "/src/a..b.txt", "/src/main.py"]),
    (".env", "/", ["/.env"]),
    (".*", "/", ["/.env", "/src/util/.hidden.py"]),
    (".config/*.py", "/", ["/.config/settings.py"]),
    ("**/.cache/*.py", "/", ["/src/.cache/c.py"]),
    ("a..b.txt", "/", ["/src/a..b.txt"]),
    ("docs", "/", []),  # directories are never returned
    ("docs/api", "/", []),
    ("*.rs", "/", []),
]  # fmt: skip


@pytest.mark.parametrize(("pattern", "root", "expected"), GLOB_CASES)
def test_glob_contract(subject: Subject, pattern: str, root: str, expected: list[str]) -> None:
    write_all(subject, GLOB_TREE)
    result = subject.backend.glob(pattern, subject.p(root))
    assert result.ok, result.error
    assert subject.rel(result.matches) == expected
    assert not result.truncated


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("/src/*.py", ["/src/main.py"]),  # anchored: the search root is ignored
        ("/*.py", ["/top.py"]),  # anchored top level only, not "any depth"
        ("/src/**/*.py", ["/src/main.py", "/src/util/helpers.py"]),
    ],
)
def test_glob_leading_slash_anchors_at_root(
    subject: Subject, pattern: str, expected: list[str]
) -> None:
    write_all(subject, GLOB_TREE)
    result = subject.backend.glob(subject.p("") + pattern, subject.p("/docs"))
    assert result.ok, result.error
    assert subject.rel(result.matches) == expected


@pytest.mark.parametrize("pattern", ["../*.py", "src/../../x", "~/x", "{a,..}/x"])
def test_glob_refuses_traversal(subject: Subject, pattern: str) -> None:
    write_all(subject, GLOB_TREE)
    result = subject.backend.glob(pattern, subject.p("/"))
    assert not result.ok
    assert result.code in ("invalid_path", "invalid_argument")
    assert result.matches == []


# -- grep -------------------------------------------------------------------

GREP_TREE = {
    "/g/a.txt": "foo.bar\nfoo\nxfooy\nnothing here\n",
    "/g/b.py": "foo\n",
    "/g/.hidden.txt": "foo\n",
    "/g/.dot/inner.txt": "foo\n",
    "/g/sub/c.txt": "a.*b\nfo+\nhéllo wörld\r\n",
}


def grep_rows(s: Subject, **kwargs: object) -> tuple[list[tuple[str, int, str]], bool]:
    literal = str(kwargs.pop("literal"))
    result = s.backend.grep(literal, **kwargs)  # type: ignore[arg-type]
    assert result.ok, result.error
    rows = [(m.path[len(s.base) :] if s.base else m.path, m.line, m.text) for m in result.matches]
    return rows, result.truncated


@pytest.fixture
def grep_subject(subject: Subject) -> Subject:
    write_all(subject, GREP_TREE)
    up = subject.backend.upload([(subject.p("/g/bin.dat"), b"foo\x00\xff\xfe binary")])
    assert up[0].ok, up[0].error
    return subject


def test_grep_is_literal_and_skips_hidden_and_binary(grep_subject: Subject) -> None:
    s = grep_subject
    rows, truncated = grep_rows(s, literal="foo", path=s.p("/g"))
    assert rows == [
        ("/g/a.txt", 1, "foo.bar"),
        ("/g/a.txt", 2, "foo"),
        ("/g/a.txt", 3, "xfooy"),
        ("/g/b.py", 1, "foo"),
    ]
    assert not truncated
    assert grep_rows(s, literal=".*", path=s.p("/g"))[0] == [("/g/sub/c.txt", 1, "a.*b")]
    assert grep_rows(s, literal="fo+", path=s.p("/g"))[0] == [("/g/sub/c.txt", 2, "fo+")]
    assert grep_rows(s, literal="f.o", path=s.p("/g"))[0] == []
    assert grep_rows(s, literal="wörld", path=s.p("/g"))[0] == [("/g/sub/c.txt", 3, "héllo wörld")]


def test_grep_glob_filter(grep_subject: Subject) -> None:
    s = grep_subject
    assert grep_rows(s, literal="foo", path=s.p("/g"), glob="*.py")[0] == [("/g/b.py", 1, "foo")]
    assert grep_rows(s, literal="foo", path=s.p("/g"), glob=".hidden.txt")[0] == [
        ("/g/.hidden.txt", 1, "foo")
    ]
    assert grep_rows(s, literal="foo", path=s.p("/g"), glob=".dot/*.txt")[0] == [
        ("/g/.dot/inner.txt", 1, "foo")
    ]
    assert grep_rows(s, literal="foo", path=s.p("/g"), glob="sub/*")[0] == []
    assert grep_rows(s, literal="a.*b", path=s.p("/g"), glob="sub/*")[0] == [
        ("/g/sub/c.txt", 1, "a.*b")
    ]


@pytest.mark.parametrize(
    ("max_count", "kept", "truncated"), [(1, 1, True), (3, 3, True), (4, 4, False), (50, 4, False)]
)
def test_grep_max_count_budget(
    grep_subject: Subject, max_count: int, kept: int, truncated: bool
) -> None:
    s = grep_subject
    everything, _ = grep_rows(s, literal="foo", path=s.p("/g"))
    rows, cut = grep_rows(s, literal="foo", path=s.p("/g"), max_count=max_count)
    assert rows == everything[:kept]
    assert cut is truncated


def test_grep_explicit_file_and_missing_path(grep_subject: Subject) -> None:
    s = grep_subject
    rows, _ = grep_rows(s, literal="foo", path=s.p("/g/a.txt"))
    assert [r[1] for r in rows] == [1, 2, 3]
    missing = s.backend.grep("foo", path=s.p("/nope"))
    assert not missing.ok and missing.code == "file_not_found"
    binary = s.backend.grep("foo", path=s.p("/g/bin.dat"))
    assert binary.matches == []
    assert binary.ok or binary.code == "binary_file"
    bad = s.backend.grep("foo", path="/../etc")
    assert bad.code == "invalid_path"


# -- read -------------------------------------------------------------------


def test_read_pagination(subject: Subject) -> None:
    s = subject
    write_all(s, {"/r.txt": "".join(f"line{i}\n" for i in range(1, 11))})
    first = s.backend.read(s.p("/r.txt"), offset=0, limit=3)
    assert first.ok, first.error
    assert (first.lines, first.total_lines, first.start_line, first.end_line) == (
        ["line1", "line2", "line3"], 10, 1, 3,
    )  # fmt: skip
    assert first.next_offset == 3
    middle = s.backend.read(s.p("/r.txt"), offset=first.next_offset, limit=4)
    assert middle.lines == ["line4", "line5", "line6", "line7"]
    assert (middle.start_line, middle.end_line, middle.next_offset) == (4, 7, 7)
    last = s.backend.read(s.p("/r.txt"), offset=9, limit=5)
    assert last.lines == ["line10"]
    assert last.next_offset is None and last.end_line == 10
    everything = s.backend.read(s.p("/r.txt"))
    assert len(everything.lines) == 10 and everything.next_offset is None
    past = s.backend.read(s.p("/r.txt"), offset=10)
    assert not past.ok and past.code == "invalid_argument"
    assert "10" in (past.error or "")
    negative = s.backend.read(s.p("/r.txt"), offset=-3, limit=1)
    assert negative.lines == ["line1"]
    zero = s.backend.read(s.p("/r.txt"), offset=0, limit=0)
    assert not zero.ok and zero.code == "invalid_argument"


def test_read_line_endings_and_empty_file(subject: Subject) -> None:
    s = subject
    write_all(
        s,
        {"/nl.txt": "a\nb\n", "/nonl.txt": "a\nb", "/crlf.txt": "a\r\nb\r\n", "/empty.txt": "",
         "/blank.txt": "\n\n", "/a..b.txt": "dots"},
    )  # fmt: skip
    for name in ("/nl.txt", "/nonl.txt", "/crlf.txt"):
        result = s.backend.read(s.p(name))
        assert (result.lines, result.total_lines) == (["a", "b"], 2), name
    blank = s.backend.read(s.p("/blank.txt"))
    assert (blank.lines, blank.total_lines) == (["", ""], 2)
    empty = s.backend.read(s.p("/empty.txt"))
    assert empty.ok and empty.lines == [] and empty.total_lines == 0 and not empty.is_binary
    assert s.backend.read(s.p("/empty.txt"), offset=1).code == "invalid_argument"
    assert s.backend.read(s.p("/a..b.txt")).lines == ["dots"]


# -- write / edit / delete / ls --------------------------------------------


def test_write_creates_parents_and_overwrites(subject: Subject) -> None:
    s = subject
    assert s.backend.write(s.p("/deep/er/x.txt"), "one").ok
    assert s.backend.write(s.p("/deep/er/x.txt"), "two").ok
    assert s.backend.read(s.p("/deep/er/x.txt")).lines == ["two"]
    assert s.backend.write(s.p("/deep/er"), "not a dir").code == "is_directory"
    assert s.backend.write(s.p("/deep/er/x.txt/y"), "under a file").code == "not_a_directory"


def test_edit_errors_and_success(subject: Subject) -> None:
    s = subject
    write_all(s, {"/e.txt": "alpha beta\nbeta gamma"})
    path = s.p("/e.txt")
    miss = s.backend.edit(path, "delta", "x")
    assert miss.code == "no_match"
    hint = s.backend.edit(path, "beta gamma\n", "x")
    assert hint.code == "no_match" and "newline" in (hint.error or "")
    multi = s.backend.edit(path, "beta", "BETA")
    assert multi.code == "multiple_matches" and multi.occurrences == 2
    assert "2" in (multi.error or "") and "replace_all" in (multi.error or "")
    same = s.backend.edit(path, "alpha", "alpha")
    assert same.code == "unchanged"
    assert s.backend.read(path).lines == ["alpha beta", "beta gamma"]  # errors changed nothing
    one = s.backend.edit(path, "alpha", "ALPHA")
    assert one.ok and one.occurrences == 1
    every = s.backend.edit(path, "beta", "B", replace_all=True)
    assert every.ok and every.occurrences == 2
    assert s.backend.read(path).lines == ["ALPHA B", "B gamma"]
    assert s.backend.edit(s.p("/missing.txt"), "a", "b").code == "file_not_found"
    s.backend.upload([(s.p("/bin.dat"), b"\x00\x01 a")])
    assert s.backend.edit(s.p("/bin.dat"), "a", "b").code == "binary_file"


def test_ls_is_sorted_and_non_recursive(subject: Subject) -> None:
    s = subject
    write_all(s, {"/l/b.txt": "bb", "/l/a.txt": "a", "/l/sub/x.txt": "x", "/l/.h": "h"})
    result = s.backend.ls(s.p("/l"))
    assert result.ok, result.error
    assert s.rel([e.path for e in result.entries]) == ["/l/.h", "/l/a.txt", "/l/b.txt", "/l/sub/"]
    by_path = {e.path: e for e in result.entries}
    assert by_path[s.p("/l/sub/")].is_dir
    assert not by_path[s.p("/l/b.txt")].is_dir and by_path[s.p("/l/b.txt")].size == 2
    assert s.backend.ls(s.p("/l/a.txt")).code == "not_a_directory"
    assert s.backend.ls(s.p("/nope")).code == "file_not_found"


def test_delete_is_recursive(subject: Subject) -> None:
    s = subject
    if not s.backend.can_delete:
        pytest.skip("backend cannot delete")  # capability, not a missing feature
    write_all(s, {"/d/a.txt": "a", "/d/e/f.txt": "f", "/keep.txt": "k"})
    assert s.backend.delete(s.p("/d")).ok
    assert s.backend.read(s.p("/d/e/f.txt")).code == "file_not_found"
    assert s.backend.ls(s.p("/d")).code == "file_not_found"
    assert s.backend.read(s.p("/keep.txt")).lines == ["k"]
    assert s.backend.delete(s.p("/d")).code == "file_not_found"
    assert s.backend.write(s.p("/single.txt"), "x").ok
    assert s.backend.delete(s.p("/single.txt")).ok
    assert s.backend.read(s.p("/single.txt")).code == "file_not_found"


# -- binary, errors ----------------------------------------------------------


def test_binary_round_trip(subject: Subject) -> None:
    s = subject
    blob = bytes(range(256)) * 8
    uploads = s.backend.upload(
        [(s.p("/bin/x.bin"), blob), (s.p("/bin/t.txt"), "héllo\n".encode()),
         (s.p("/../escape"), b"no")]
    )  # fmt: skip
    assert [u.ok for u in uploads] == [True, True, False]
    assert uploads[2].code == "invalid_path"
    downloads = s.backend.download([s.p("/bin/t.txt"), s.p("/missing"), s.p("/bin/x.bin")])
    assert [d.content for d in downloads] == ["héllo\n".encode(), None, blob]
    assert downloads[1].code == "file_not_found"
    assert s.rel([d.path for d in downloads]) == ["/bin/t.txt", "/missing", "/bin/x.bin"]
    read = s.backend.read(s.p("/bin/x.bin"))
    assert read.ok and read.is_binary and read.encoding == "base64" and read.data == blob
    assert s.backend.read(s.p("/bin/t.txt")).lines == ["héllo"]


@pytest.mark.parametrize("bad", ["/../etc/passwd", "~/x", "/a/../../b", "C:\\x", "/a\x00b"])
def test_invalid_paths_are_error_values(subject: Subject, bad: str) -> None:
    b = subject.backend
    results = [
        b.read(bad), b.write(bad, "x"), b.edit(bad, "a", "b"), b.ls(bad), b.delete(bad),
        b.grep("x", path=bad), b.glob("*", bad), b.download([bad])[0], b.upload([(bad, b"x")])[0],
    ]  # fmt: skip
    for result in results:
        assert result.code == "invalid_path", result


def test_missing_and_directory_errors(subject: Subject) -> None:
    s = subject
    write_all(s, {"/dir/f.txt": "f"})
    assert s.backend.read(s.p("/nope.txt")).code == "file_not_found"
    assert s.backend.read(s.p("/dir")).code == "is_directory"
    assert s.backend.read(s.p("/dir/f.txt/x")).code in ("not_a_directory", "file_not_found")
    assert s.backend.edit(s.p("/dir"), "a", "b").code == "is_directory"


def test_execute_capability(subject: Subject) -> None:
    result = subject.backend.execute("echo contract")
    if subject.backend.can_execute:
        assert result.ok and result.exit_code == 0 and "contract" in result.output
    else:
        assert result.code == "unsupported"


# -- reference names (deepagents) ---------------------------------------------


def test_reference_method_names(subject: Subject) -> None:
    """upload_files/download_files, grep(max_count=...), edit(path, old, new, replace_all)."""
    uploaded = subject.backend.upload_files([(subject.p("/ref/a.txt"), b"one\none\n")])  # type: ignore[attr-defined]
    assert [r.ok for r in uploaded] == [True]
    (got,) = subject.backend.download_files([subject.p("/ref/a.txt")])  # type: ignore[attr-defined]
    assert got.content == b"one\none\n"
    assert subject.backend.download([subject.p("/ref/a.txt")])[0].content == got.content
    hits = subject.backend.grep("one", path=subject.p("/ref"), max_count=1)
    assert len(hits.matches) == 1 and hits.truncated
    edited = subject.backend.edit(
        path=subject.p("/ref/a.txt"), old="one", new="two", replace_all=True
    )
    assert edited.ok and edited.occurrences == 2


def test_every_shipped_backend_has_the_reference_names() -> None:
    from filegate.backends.bwrap import BwrapSandboxBackend
    from filegate.backends.composite import CompositeBackend
    from filegate.backends.policy import PolicyBackend
    from filegate.backends.sandbox import BaseSandbox
    from filegate.backends.store import StoreBackend
    from filegate.kernel.protocol import PROTOCOL_ALIASES, PROTOCOL_METHODS, ReferenceNames
    from filegate.kernel.state import StateBackend

    shipped = [FilesystemBackend, LocalShellBackend, StateBackend, CompositeBackend]
    shipped += [StoreBackend, BaseSandbox, BwrapSandboxBackend, PolicyBackend]
    for cls in shipped:
        assert issubclass(cls, ReferenceNames), cls
    assert set(PROTOCOL_ALIASES.values()) <= set(PROTOCOL_METHODS)
    assert all(hasattr(ReferenceNames, name) for name in PROTOCOL_ALIASES)
