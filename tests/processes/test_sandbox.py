"""The whole backend protocol through the bubblewrap sandbox (real ``bwrap``).

Every file operation here runs inside a fresh sandbox; the host side only
checks results and, where useful, the real files under the root.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.backends.filesystem.host_files import named_for_call
from filegate.backends.sandbox import UPLOAD_CHUNK_BYTES, BaseSandbox
from filegate.kernel.protocol import BackendProtocol, ExecuteResult


def test_capabilities(sb: BwrapSandboxBackend) -> None:
    assert isinstance(sb, BackendProtocol)
    assert sb.can_execute and sb.can_delete


# -- ls ----------------------------------------------------------------------


def test_ls_lists_one_level_dirs_with_slash(sb: BwrapSandboxBackend, root: Path) -> None:
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "b.txt").write_bytes(b"12345")
    (root / "sub" / "inner.txt").write_text("x")
    result = sb.ls("/")
    assert result.ok, result.error
    assert [e.path for e in result.entries] == ["/b.txt", "/sub/"]
    by_path = {e.path: e for e in result.entries}
    assert by_path["/b.txt"].size == 5 and not by_path["/b.txt"].is_dir
    assert by_path["/sub/"].is_dir and by_path["/sub/"].size is None
    assert by_path["/b.txt"].modified_at and by_path["/b.txt"].modified_at.startswith("20")
    assert [e.path for e in sb.ls("/sub").entries] == ["/sub/deep/", "/sub/inner.txt"]


def test_ls_errors(sb: BwrapSandboxBackend, root: Path) -> None:
    (root / "f.txt").write_text("x")
    assert sb.ls("/missing").code == "file_not_found"
    assert sb.ls("/f.txt").code == "not_a_directory"
    bad = sb.ls("../etc")
    assert bad.code == "invalid_path" and "traversal" in (bad.error or "")


# -- read --------------------------------------------------------------------


def test_read_pagination(sb: BwrapSandboxBackend) -> None:
    sb.write("/ten.txt", "".join(f"line {i}\n" for i in range(1, 11)))
    page = sb.read("/ten.txt", offset=3, limit=4)
    assert page.ok, page.error
    assert page.lines == ["line 4", "line 5", "line 6", "line 7"]
    assert (page.start_line, page.end_line, page.total_lines, page.next_offset) == (4, 7, 10, 7)
    last = sb.read("/ten.txt", offset=7, limit=100)
    assert last.lines == ["line 8", "line 9", "line 10"] and last.next_offset is None
    assert sb.read("/ten.txt", offset=-5, limit=1).lines == ["line 1"]
    past = sb.read("/ten.txt", offset=10)
    assert past.code == "invalid_argument" and "10 lines" in (past.error or "")
    assert sb.read("/ten.txt", limit=0).code == "invalid_argument"


def test_read_text_details_and_binary(sb: BwrapSandboxBackend, root: Path) -> None:
    (root / "crlf.txt").write_bytes(b"a\r\nb\r\n")
    assert sb.read("/crlf.txt").lines == ["a", "b"]
    (root / "empty.txt").write_bytes(b"")
    empty = sb.read("/empty.txt")
    assert empty.ok and empty.total_lines == 0 and empty.lines == []
    blob = bytes(range(256))
    (root / "blob.bin").write_bytes(blob)
    binary = sb.read("/blob.bin")
    assert binary.is_binary and binary.data == blob and binary.encoding == "base64"
    (root / "pic.png").write_bytes(b"looks like text")
    assert sb.read("/pic.png").data == b"looks like text"  # media extension wins


def test_read_errors(sb: BwrapSandboxBackend, root: Path) -> None:
    (root / "d").mkdir()
    assert sb.read("/nope.txt").code == "file_not_found"
    assert sb.read("/d").code == "is_directory"
    assert sb.read("/").code == "is_directory"
    assert sb.read("~/x").code == "invalid_path"


def test_read_over_size_limit(_bwrap_ok: None, root: Path) -> None:
    """File operations run on the host (backends.bwrap): text is read as a window,
    a whole binary file over the limit is refused."""
    small = BwrapSandboxBackend(root, max_file_bytes=100, check=False)
    (root / "big.txt").write_text("x" * 101)
    assert small.read("/big.txt").lines == ["x" * 101]
    (root / "big.bin").write_bytes(b"\x00" * 101)
    result = small.read("/big.bin")
    assert result.code == "too_large" and "100-byte" in (result.error or "")


# -- write / edit ------------------------------------------------------------


def test_write_creates_parents_and_overwrites(sb: BwrapSandboxBackend, root: Path) -> None:
    assert sb.write("/a/b/c.txt", "one").ok
    assert (root / "a" / "b" / "c.txt").read_text() == "one"
    assert sb.write("/a/b/c.txt", "two\n").ok
    assert (root / "a" / "b" / "c.txt").read_text() == "two\n"
    assert not [n for n in os.listdir(root / "a" / "b") if n.endswith(".filegate-tmp")]


def test_a_retried_call_takes_over_its_staging_file(sb: BwrapSandboxBackend, root: Path) -> None:
    """As on the Filesystem backend: the journal's call token names the staging file."""
    (root / ".big.txt.feed42.filegate-tmp").write_bytes(b"half of an earlier attempt")
    content = "y" * (UPLOAD_CHUNK_BYTES + 10)  # two chunks: staged, then renamed
    with named_for_call("feed42"):
        assert sb.write("/big.txt", content).ok
    assert sorted(os.listdir(root)) == ["big.txt"]
    assert (root / "big.txt").read_text() == content


def test_write_keeps_mode_and_refuses_dirs(sb: BwrapSandboxBackend, root: Path) -> None:
    script = root / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert sb.write("/run.sh", "#!/bin/sh\necho hi\n").ok
    assert script.stat().st_mode & 0o777 == 0o755
    (root / "dir").mkdir()
    assert sb.write("/dir", "x").code == "is_directory"
    assert sb.write("/", "x").code == "is_directory"
    (root / "file").write_text("x")
    assert sb.write("/file/child.txt", "x").code == "not_a_directory"


def test_edit_success_and_errors(sb: BwrapSandboxBackend, root: Path) -> None:
    sb.write("/e.txt", "alpha beta alpha\nend")
    ok = sb.edit("/e.txt", "beta", "BETA")
    assert ok.ok and ok.occurrences == 1
    assert (root / "e.txt").read_text() == "alpha BETA alpha\nend"
    many = sb.edit("/e.txt", "alpha", "x")
    assert many.code == "multiple_matches" and many.occurrences == 2
    assert "2 times" in (many.error or "")
    every = sb.edit("/e.txt", "alpha", "x", replace_all=True)
    assert every.ok and every.occurrences == 2
    assert (root / "e.txt").read_text() == "x BETA x\nend"
    assert sb.edit("/e.txt", "zzz", "y").code == "no_match"
    hint = sb.edit("/e.txt", "end\n", "fin\n")
    assert hint.code == "no_match" and "trailing newline" in (hint.error or "")
    assert sb.edit("/e.txt", "x", "x").code == "unchanged"
    assert sb.edit("/missing.txt", "a", "b").code == "file_not_found"
    (root / "bin.dat").write_bytes(b"\x00\x01abc")
    assert sb.edit("/bin.dat", "abc", "d").code == "binary_file"


# -- delete ------------------------------------------------------------------


def test_delete_file_dir_and_errors(sb: BwrapSandboxBackend, root: Path) -> None:
    sb.write("/d/x/y.txt", "y")
    sb.write("/f.txt", "f")
    assert sb.delete("/f.txt").ok and not (root / "f.txt").exists()
    assert sb.delete("/d").ok and not (root / "d").exists()
    assert sb.delete("/d").code == "file_not_found"
    assert sb.delete("/").code == "invalid_argument"
    assert root.is_dir()


# -- glob --------------------------------------------------------------------


def test_glob_contract_basics(sb: BwrapSandboxBackend) -> None:
    for path in ["/a.py", "/src/b.py", "/src/deep/c.py", "/src/d.txt", "/.hidden/e.py", "/.f.py"]:
        assert sb.write(path, "x").ok
    # A basename pattern looks inside dot-directories too (contract §1).
    assert sb.glob("*.py").matches == ["/.hidden/e.py", "/a.py", "/src/b.py", "/src/deep/c.py"]
    assert sb.glob("**/*.py").matches == ["/a.py", "/src/b.py", "/src/deep/c.py"]
    assert sb.glob("src/**/*.py").matches == ["/src/b.py", "/src/deep/c.py"]
    assert sb.glob("/*.py").matches == ["/a.py"]
    assert sb.glob("*.py", path="/src").matches == ["/src/b.py", "/src/deep/c.py"]
    assert sb.glob("*.{py,txt}", path="/src").matches == [
        "/src/b.py",
        "/src/d.txt",
        "/src/deep/c.py",
    ]
    assert sb.glob(".hidden/*.py").matches == ["/.hidden/e.py"]
    assert sb.glob(".f.py").matches == ["/.f.py"]
    assert sb.glob("*.rs").matches == []
    assert sb.glob("../*.py").code == "invalid_path"
    assert sb.glob("*.py", path="/nope").code == "file_not_found"


# -- grep --------------------------------------------------------------------


def test_grep_is_literal(sb: BwrapSandboxBackend, root: Path) -> None:
    sb.write("/r.txt", "a.*b\naxxb\nplain a.*b again\n")
    sb.write("/sub/s.md", "nothing\na.*b\n")
    sb.write("/.env", "a.*b secret\n")
    result = sb.grep("a.*b")
    assert result.ok, result.error
    assert [(m.path, m.line, m.text) for m in result.matches] == [
        ("/r.txt", 1, "a.*b"),
        ("/r.txt", 3, "plain a.*b again"),
        ("/sub/s.md", 2, "a.*b"),
    ]
    assert [m.path for m in sb.grep("a.*b", glob="*.md").matches] == ["/sub/s.md"]
    assert [m.path for m in sb.grep("a.*b", glob=".env").matches] == ["/.env"]
    assert [m.line for m in sb.grep("a.*b", path="/r.txt").matches] == [1, 3]
    assert [m.path for m in sb.grep("a.*b", path="/sub").matches] == ["/sub/s.md"]
    capped = sb.grep("a.*b", max_count=2)
    assert len(capped.matches) == 2 and capped.truncated
    assert sb.grep("nope").matches == []
    assert sb.grep("x", path="/missing").code == "file_not_found"
    (root / "blob.bin").write_bytes(b"a.*b\x00")
    assert "/blob.bin" not in {m.path for m in sb.grep("a.*b").matches}
    assert sb.grep("a.*b", path="/blob.bin").code == "binary_file"
    assert sb.grep("x", max_count=0).code == "invalid_argument"


def test_grep_unicode_and_quotes(sb: BwrapSandboxBackend) -> None:
    sb.write("/u.txt", "naïve 'quoted' \"double\" $(whoami) `id`\nzweite Zeile ü\n")
    hits = sb.grep("'quoted' \"double\" $(whoami) `id`")
    assert [(m.line, m.text) for m in hits.matches] == [
        (1, "naïve 'quoted' \"double\" $(whoami) `id`")
    ]
    assert [m.line for m in sb.grep("ü").matches] == [2]


# -- upload / download -------------------------------------------------------

NASTY_NAMES = [
    "/plain.bin",
    "/with space/file name.bin",
    '/quote\'s/"double".bin',
    "/ünïcødé/日本語.bin",
    "/$(touch pwned)/`id`;rm -rf x.bin",
    "/-dash/--flag.bin",
]


def test_upload_download_binary_round_trip(sb: BwrapSandboxBackend, root: Path) -> None:
    all_bytes = bytes(range(256))
    shuffled = bytearray(all_bytes * 4)
    random.Random(7).shuffle(shuffled)
    payloads = [all_bytes, bytes(shuffled), b"", b"line1\nline2\r\n\x00end\n", all_bytes[::-1]]
    files = [(name, payloads[i % len(payloads)]) for i, name in enumerate(NASTY_NAMES)]
    uploaded = sb.upload(files)
    assert [r.path for r in uploaded] == [name for name, _ in files]
    assert all(r.ok for r in uploaded), [r.error for r in uploaded]
    for name, data in files:
        assert (root / name.lstrip("/")).read_bytes() == data  # really on disk, same bytes
    downloaded = sb.download([name for name, _ in files])
    assert [(r.path, r.content) for r in downloaded] == files
    assert not (root / "pwned").exists()


def test_upload_larger_than_one_chunk(sb: BwrapSandboxBackend, root: Path) -> None:
    data = random.Random(1).randbytes(UPLOAD_CHUNK_BYTES * 2 + 123)
    assert sb.upload([("/big/blob.bin", data)])[0].ok
    assert (root / "big" / "blob.bin").read_bytes() == data
    assert sb.download(["/big/blob.bin"])[0].content == data
    assert os.listdir(root / "big") == ["blob.bin"]  # no staging file left behind


def test_download_errors_keep_order(sb: BwrapSandboxBackend, root: Path) -> None:
    (root / "d").mkdir()
    (root / "ok.txt").write_text("ok")
    results = sb.download(["/missing", "/ok.txt", "/d", "../x"])
    assert [r.path for r in results][:3] == ["/missing", "/ok.txt", "/d"]
    assert [r.code for r in results] == ["file_not_found", None, "is_directory", "invalid_path"]
    assert results[1].content == b"ok"


def test_text_with_newlines_round_trips(sb: BwrapSandboxBackend) -> None:
    content = "first\n\nthird with 'quotes' and \"more\"\n\ttab\u2028sep\nno newline at end"
    assert sb.write("/multi line.txt", content).ok
    assert sb.download(["/multi line.txt"])[0].content == content.encode("utf-8")
    read = sb.read("/multi line.txt")
    assert read.lines == content.split("\n") and read.total_lines == 5


# -- symlinks ----------------------------------------------------------------


def test_symlinks_inside_work_outside_refused(
    sb: BwrapSandboxBackend, root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host secret")
    (root / "real.txt").write_text("inside")
    (root / "inner-link").symlink_to("real.txt")
    (root / "escape-file").symlink_to(outside / "secret.txt")
    (root / "escape-dir").symlink_to(outside)
    (root / "escape-rel").symlink_to("../outside/secret.txt")
    assert sb.read("/inner-link").lines == ["inside"]
    for link in ["/escape-file", "/escape-dir/secret.txt", "/escape-rel"]:
        result = sb.read(link)
        assert result.code == "invalid_path" and "escapes" in (result.error or ""), link
    assert sb.write("/escape-dir/new.txt", "x").code == "invalid_path"
    assert sb.upload([("/escape-file", b"x")])[0].code == "invalid_path"
    assert sb.ls("/escape-dir").code == "invalid_path"
    assert [e.path for e in sb.ls("/").entries] == ["/inner-link", "/real.txt"]
    assert sb.glob("*").matches == ["/real.txt"]  # walks never follow symlinks
    assert sb.delete("/escape-file").ok  # removes the link itself
    assert (outside / "secret.txt").read_text() == "host secret"
    assert sorted(os.listdir(outside)) == ["secret.txt"]


# -- execute -----------------------------------------------------------------


def test_execute_cwd_env_and_virtual_paths(
    sb: BwrapSandboxBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FILEGATE_HOST_ONLY", "leak")
    sb.write("/notes/n.txt", "from the API\n")
    result = sb.execute("pwd; cat notes/n.txt; cat /workspace/notes/n.txt; env")
    assert result.ok and result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[:3] == ["/workspace", "from the API", "from the API"]
    env = dict(line.split("=", 1) for line in lines[3:] if "=" in line)
    assert "FILEGATE_HOST_ONLY" not in env
    assert env["PATH"] and env["HOME"] == "/workspace"
    assert set(env) <= {"PATH", "HOME", "LANG", "PWD", "SHLVL", "_", "OLDPWD"}


def test_execute_writes_show_up_in_files(sb: BwrapSandboxBackend) -> None:
    assert sb.execute("mkdir -p out && printf 'a\\nb\\n' > out/r.txt").exit_code == 0
    assert sb.read("/out/r.txt").lines == ["a", "b"]


def test_execute_stderr_exit_code_and_cap(sb: BwrapSandboxBackend) -> None:
    result = sb.execute("echo out; echo oops >&2; exit 7")
    assert result.exit_code == 7
    assert result.output == "out\n[stderr] oops"
    big = sb.execute("head -c 300000 /dev/zero | tr '\\0' 'x'")
    assert big.truncated and big.exit_code == 0
    assert len(big.output.encode()) < 100_000 + 200 and "truncated" in big.output
    assert sb.execute("true", timeout=0).code == "invalid_argument"
    assert sb.execute("true", timeout=-1).code == "invalid_argument"


@pytest.mark.slow
def test_execute_timeout_reports_124(sb: BwrapSandboxBackend) -> None:
    result = sb.execute("sleep 300 & echo started; sleep 300", timeout=1)
    assert result.code == "timeout" and result.exit_code == 124  # contract §1
    assert "started" in result.output


def test_execute_custom_env(_bwrap_ok: None, root: Path) -> None:
    sb = BwrapSandboxBackend(root, env={"GREETING": "hi there"}, check=False)
    assert sb.execute('printf %s "$GREETING"').output == "hi there"
    with pytest.raises(ValueError):
        BwrapSandboxBackend(root, env={"A=B": "x"}, check=False)


class _HelperInBwrap(BaseSandbox):
    """The helper-based file operations of :class:`BaseSandbox`, run in bwrap.

    bwrap's own file operations run on the host; sandboxes whose workspace is
    not a host directory still use the helper, tested here in a real sandbox."""

    def __init__(self, box: BwrapSandboxBackend) -> None:
        super().__init__()
        self.box = box

    def run_in_sandbox(self, command: str, timeout: float, max_output_bytes: int) -> ExecuteResult:
        return self.box.run_in_sandbox(command, timeout, max_output_bytes)


@pytest.mark.slow
def test_oversized_helper_reply_is_an_error_value(sb: BwrapSandboxBackend) -> None:
    helper = _HelperInBwrap(sb)
    for i in range(20):
        assert helper.write(f"/many/{'long-name-' * 5}{i}.txt", "x").ok
    helper._reply_cap = 300  # far below what listing 20 long names needs
    result = helper.glob("*.txt")
    assert result.code == "too_large" and "narrow" in (result.error or "")
    assert helper.ls("/many").code == "too_large"
