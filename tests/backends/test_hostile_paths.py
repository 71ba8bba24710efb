"""Property: no file operation ever reads or writes outside the root.

Each example gets a fresh root seeded with symlinks that point outside (to a
sentinel directory holding a secret, absolute and relative, files and dirs)
and runs one operation with a generated hostile path. Afterwards the sentinel
must be byte-identical, nothing may have appeared next to the root, no result
may carry the secret, and the operation must have answered with a value (no
exception). Links that could reach the real system root are deliberately not
planted: a bug here must not be able to damage the machine running the test.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from itertools import count
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from filegate.backends.filesystem import FilesystemBackend

SECRET = "S3NT1NEL-SECRET-7f3a9c"

HOSTILE_PARTS = [
    "..", "~", ".", "", "...", "a..b.txt", "x~", "\\", "..\\..", "C:", "\x00", "//",
    "esc_dir", "esc_file", "rel_up", "to_parent", "abs_tmp", "sub", "sub/rel_up", "secret.txt",
    "sentinel", "ok.txt", "*", "**", "{esc_dir,sub}", ".hidden",
]  # fmt: skip

component = st.one_of(
    st.sampled_from(HOSTILE_PARTS),
    st.text(min_size=1, max_size=12),
    st.text(alphabet="é中\u202e\U0001f600.~-_ab", min_size=1, max_size=8),
    st.integers(min_value=200, max_value=300).map(lambda n: "n" * n),  # over NAME_MAX
)
hostile_path = st.builds(
    lambda lead, parts, sep: lead + sep.join(parts),
    st.sampled_from(["/", "", "~", "//", "./", "../", "\\"]),
    st.lists(component, min_size=0, max_size=6),
    st.sampled_from(["/", "/", "\\", "//"]),
)

OPERATIONS = ["read", "write", "edit", "delete", "upload", "download", "ls", "glob", "grep"]


def _snapshot(directory: Path) -> dict[str, bytes | str]:
    """Every entry below ``directory``: file bytes, link targets, dir markers."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, directory)
            if os.path.islink(full):
                out[rel] = "link:" + os.readlink(full)
            elif os.path.isdir(full):
                out[rel] = "dir"
            else:
                out[rel] = Path(full).read_bytes()
    return out


class Arena:
    """A base dir with the sentinel outside and a fresh root per example."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.sentinel = base / "sentinel"
        (self.sentinel / "inner").mkdir(parents=True)
        (self.sentinel / "secret.txt").write_text(f"{SECRET}\n")
        (self.sentinel / "inner" / "deep.txt").write_text(f"deep {SECRET}\n")
        (base / "roots").mkdir()
        self.expected_sentinel = _snapshot(self.sentinel)
        self._ids = count()

    def fresh_root(self) -> Path:
        root = self.base / "roots" / f"r{next(self._ids)}"
        (root / "sub").mkdir(parents=True)
        (root / "ok.txt").write_text("harmless a\n")
        (root / "sub" / "a..b.txt").write_text("dots a\n")
        (root / "esc_dir").symlink_to(self.sentinel)
        (root / "esc_file").symlink_to(self.sentinel / "secret.txt")
        (root / "sub" / "rel_up").symlink_to(Path("..", "..", "..", "sentinel"))
        (root / "to_parent").symlink_to("..")
        (root / "abs_tmp").symlink_to(self.base)
        return root

    def check(self, root: Path) -> None:
        assert _snapshot(self.sentinel) == self.expected_sentinel
        assert sorted(os.listdir(self.base)) == ["roots", "sentinel"]
        assert os.listdir(self.base / "roots") == [root.name]


@pytest.fixture(scope="module")
def arena() -> Iterator[Arena]:
    base = Path(tempfile.mkdtemp(prefix="filegate-hostile-"))
    try:
        yield Arena(base)
    finally:
        shutil.rmtree(base)


def _run(fs: FilesystemBackend, op: str, path: str, other: str) -> list[object]:
    if op == "read":
        return [fs.read(path, offset=0, limit=50)]
    if op == "write":
        return [fs.write(path, "written a\n")]
    if op == "edit":
        return [fs.edit(path, "a", "EDITED")]
    if op == "delete":
        return [fs.delete(path)]
    if op == "upload":
        return list(fs.upload([(path, b"uploaded"), (other, b"second")]))
    if op == "download":
        return list(fs.download([path, other]))
    if op == "ls":
        return [fs.ls(path)]
    if op == "glob":
        return [fs.glob(other or "*", path), fs.glob("**", path)]
    return [fs.grep(SECRET[:6], path=path, glob=other or None), fs.grep("a", path=path)]


def _leaks(result: object) -> bool:
    dumped = result.model_dump() if hasattr(result, "model_dump") else result
    data = getattr(result, "data", None) or getattr(result, "content", None)
    if isinstance(data, bytes) and SECRET.encode() in data:
        return True
    return SECRET in repr(dumped)


@pytest.mark.slow
@settings(
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(op=st.sampled_from(OPERATIONS), path=hostile_path, other=hostile_path)
def test_no_operation_escapes_the_root(arena: Arena, op: str, path: str, other: str) -> None:
    root = arena.fresh_root()
    fs = FilesystemBackend(root)
    try:
        results = _run(fs, op, path, other)
        for result in results:
            assert not _leaks(result), (op, path, other, result)
            assert getattr(result, "error", None) is None or getattr(result, "code", None)
        arena.check(root)
    finally:
        shutil.rmtree(root)


def test_the_arena_really_offers_an_escape(arena: Arena) -> None:
    """Guard against a vacuous property: the planted links do reach the secret."""
    root = arena.fresh_root()
    try:
        assert SECRET in (root / "esc_file").read_text()
        assert SECRET in (root / "esc_dir" / "secret.txt").read_text()
        assert SECRET in (root / "sub" / "rel_up" / "secret.txt").read_text()
        assert SECRET in (root / "abs_tmp" / "sentinel" / "secret.txt").read_text()
        assert SECRET in (root / "to_parent" / ".." / "sentinel" / "secret.txt").read_text()
        fs = FilesystemBackend(root)
        assert fs.read("/ok.txt").lines == ["harmless a"]
    finally:
        shutil.rmtree(root)
