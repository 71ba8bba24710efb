"""Lazy package exports (PEP 562): a name's module is imported on first use.

Why: the workflow sandbox re-imports ``filegate`` and ``filegate.workflows`` on
every run, and the kernel must be importable without loading minio or
``temporalio.worker``. A package ``__init__`` that imported its submodules
eagerly would pull all of them in with any one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any


def attach(
    package: str, exports: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` for ``package``.

    ``exports`` maps a module path (absolute, or relative to ``package`` when
    it starts with a dot) to the names it provides.
    """
    where: dict[str, str] = {}
    for module, names in exports.items():
        target = package + module if module.startswith(".") else module
        for name in names:
            where[name] = target

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # ``__import__``, not ``importlib.import_module``: the workflow sandbox
        # hooks ``__import__``, so a name first touched inside
        # ``imports_passed_through()`` resolves to the host's module, not to a
        # fresh copy loaded into the sandbox for every run.
        return getattr(__import__(module, fromlist=[name]), name)

    def __dir__() -> list[str]:
        return sorted(where)

    return __getattr__, __dir__, sorted(where)
