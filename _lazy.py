"""Lazy package exports (PEP 562): a name's module is imported on first use.

Why: the workflow sandbox re-imports ``filegate`` and ``filegate.workflows`` on
every run, and the kernel must be importable without loading minio or
``temporalio.worker``. A package ``__init__`` that imported its submodules
eagerly would pull all of them in with any one.

Why the exports are read from the facade's own ``if TYPE_CHECKING:`` imports:
those imports are what type checkers and readers see, so they are the one list
of the package's names. A second list for the loader drifted from the first
(a name mypy accepted that failed at run time), so there is none.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from collections.abc import Callable
from typing import Any


@functools.cache
def _exports(package: str, source_file: str) -> dict[str, tuple[str, str]]:
    """Each exported name -> (module, name there), from the ``TYPE_CHECKING`` imports.

    Cached, and this module passes through the workflow sandbox, so a facade's
    source is parsed once per process, not on every run's re-import. Read through
    the facade's loader (zip imports too; ``io.open_code``, which the sandbox allows).
    """
    source = sys.modules[package].__spec__.loader.get_source(package)  # type: ignore[union-attr]
    if source is None:
        raise ImportError(f"{package}: its exports are read from its source, which is missing")
    tree = ast.parse(source, source_file)
    where: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.ImportFrom):
                raise TypeError(f"{source_file}: export names with `from ... import`")
            module = "." * statement.level + (statement.module or "")
            target = importlib.util.resolve_name(module, package)
            for alias in statement.names:
                where[alias.asname or alias.name] = (target, alias.name)
    if not where:
        raise TypeError(f"{source_file}: no exports under `if TYPE_CHECKING:`")
    return where


def attach(
    package: str, source_file: str
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` for ``package``, whose
    ``__init__`` is ``source_file``: every name its ``if TYPE_CHECKING:`` block
    imports, loaded from that module on first use."""
    where = _exports(package, source_file)

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, original = where[name]
        # ``__import__``, not ``importlib.import_module``: the workflow sandbox
        # hooks ``__import__``, so a name first touched inside
        # ``imports_passed_through()`` resolves to the host's module, not to a
        # fresh copy loaded into the sandbox for every run.
        return getattr(__import__(module, fromlist=[original]), original)

    def __dir__() -> list[str]:
        return sorted(where)

    return __getattr__, __dir__, sorted(where)
