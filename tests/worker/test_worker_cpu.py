"""The CPU savings of the agent and tools workers keep their behaviour.

- :class:`workflows.runner.CompiledOnceFinder` compiles a module once per
  version of its file, however often the sandbox re-imports it;
- :func:`workflows.tool_descriptions.tool_specs` shares one frozen spec per offer;
- the filesystem backend's kernel path resolution agrees with ``realpath``,
  symlinks out of the root included.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.filesystem.host_files import resolve_host as _resolve
from filegate.workflows import tool_descriptions as td
from filegate.workflows.runner import CompiledOnceFinder, _CompiledOnceLoader


@pytest.fixture
def package(tmp_path: Path) -> Iterator[tuple[Path, CompiledOnceFinder]]:
    """A throwaway package ``cpkg`` on sys.path, found through a CompiledOnceFinder."""
    pkg = tmp_path / "cpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("VALUE = 1\n")
    finder = CompiledOnceFinder(["cpkg"])
    sys.path.insert(0, str(tmp_path))
    sys.meta_path.insert(0, finder)
    try:
        yield pkg, finder
    finally:
        sys.meta_path.remove(finder)
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == "cpkg" or n.startswith("cpkg.")]:
            del sys.modules[name]


def _fresh_import(name: str) -> object:
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def test_re_imports_reuse_the_compiled_code(package: tuple[Path, CompiledOnceFinder]) -> None:
    pkg, _ = package
    first = _fresh_import("cpkg.mod")
    assert isinstance(first.__spec__.loader, _CompiledOnceLoader)  # type: ignore[attr-defined]
    path = str(pkg / "mod.py")
    cached = [key for key in _CompiledOnceLoader.codes if key[0] == path]
    assert len(cached) == 1
    second = _fresh_import("cpkg.mod")
    assert second is not first and second.VALUE == 1  # type: ignore[attr-defined]
    assert [key for key in _CompiledOnceLoader.codes if key[0] == path] == cached


def test_an_edited_module_is_compiled_again(package: tuple[Path, CompiledOnceFinder]) -> None:
    pkg, _ = package
    assert _fresh_import("cpkg.mod").VALUE == 1  # type: ignore[attr-defined]
    source = pkg / "mod.py"
    source.write_text("VALUE = 22\n")
    later = time.time() + 5
    os.utime(source, (later, later))
    assert _fresh_import("cpkg.mod").VALUE == 22  # type: ignore[attr-defined]


def test_other_packages_are_left_to_the_usual_finders(
    package: tuple[Path, CompiledOnceFinder],
) -> None:
    _, finder = package
    assert finder.find_spec("json", None) is None
    assert finder.find_spec("cpkg_absent", None) is None


def test_tool_specs_are_shared_and_read_only() -> None:
    visible = list(td.TOOL_ORDER)
    first = td.tool_specs(visible, {"ls": "List things."})
    again = td.tool_specs(list(visible), {"ls": "List things."})
    assert first == again and all(a is b for a, b in zip(first, again, strict=True))
    assert next(s for s in first if s.name == "ls").description.startswith("List things.")
    other = td.tool_specs(visible, {})
    assert next(s for s in other if s.name == "ls").description != "List things."
    with pytest.raises(ValidationError):
        first[0].name = "renamed"


def test_kernel_resolution_matches_realpath(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "dir").mkdir(parents=True)
    (root / "dir" / "file.txt").write_text("x")
    (root / "link").symlink_to(root / "dir")
    (tmp_path / "outside.txt").write_text("secret")
    (root / "escape").symlink_to(tmp_path / "outside.txt")
    (root / "dangling").symlink_to(root / "nowhere")
    for rel in ("dir/file.txt", "link/file.txt", "link/../dir", "escape", "dangling", "new/x"):
        host = str(root / rel)
        assert _resolve(host) == os.path.realpath(host), rel

    fs = FilesystemBackend(str(root), virtual_mode=True)
    assert fs.read("/link/file.txt").error is None
    escaped = fs.read("/escape")
    assert escaped.error is not None and "secret" not in str(escaped)
