"""A copy of Filegate that another uid can run, for tests that drop to one.

A checkout in a home directory sits under a 0700 directory, so a uid the test
switches to cannot read the package, the venv's interpreter or the wheel's
binaries there. The copy lives in a world-readable temporary directory: the
package's sources (no venv, tests or caches) and the programs asked for, hard
linked where the file system allows and copied otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import filegate
from filegate.processes.executables import find_executable

_SKIPPED = shutil.ignore_patterns(
    ".venv", ".git", "tests", "bench", "docs", "__pycache__", "*.egg-info", ".*_cache",
    ".hypothesis", "node_modules",
)  # fmt: skip


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def python_for(uid: int) -> str | None:
    """An interpreter (3.11 or later, stdlib is enough) that ``uid`` may run, or None."""
    candidates = [sys.executable, getattr(sys, "_base_executable", ""), "/usr/bin/python3",
                  "/usr/local/bin/python3"]  # fmt: skip
    for candidate in dict.fromkeys(c for c in candidates if c):
        probe = subprocess.run(
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", candidate, "-I",
             "-c", "import sys; assert sys.version_info >= (3, 11)"],
            capture_output=True, timeout=30, check=False, cwd="/",
        )  # fmt: skip
        if probe.returncode == 0:
            return candidate
    return None


@contextmanager
def readable_copy(*programs: str) -> Iterator[dict[str, str]]:
    """The environment additions (``PYTHONPATH``, ``PATH``) that run the copy; removed on exit."""
    home = Path(tempfile.mkdtemp(prefix="filegate-readable-"))
    try:
        home.chmod(0o755)
        shutil.copytree(Path(filegate.__file__).parent, home / "filegate", ignore=_SKIPPED)
        bin_dir = home / "bin"
        bin_dir.mkdir()
        for name in programs:
            found = find_executable(name)
            assert found is not None, f"no {name} to copy"
            _link_or_copy(Path(found), bin_dir / name)
        for path in [home / "filegate", *(home / "filegate").rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield {"PYTHONPATH": str(home), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    finally:
        shutil.rmtree(home, ignore_errors=True)
