"""A facade's exports are its ``if TYPE_CHECKING:`` imports, loaded on first use.

Why: the names a type checker sees and the names the package serves at run time
are one list (``filegate._lazy``). These tests build a scratch package to show a
new import there is exported, an alias keeps its module's name, nothing is
imported before it is asked for, and a statement the loader cannot read is refused.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from filegate._lazy import attach

FACADES = [
    "filegate",
    "filegate.activities",
    "filegate.activities.providers",
    "filegate.backends",
    "filegate.backends.filesystem",
    "filegate.backends.policy",
    "filegate.cli",
    "filegate.integrations.deepagents",
    "filegate.integrations.pydantic_ai",
    "filegate.workflows",
]

FACADE = """\
from typing import TYPE_CHECKING

from filegate._lazy import attach

if TYPE_CHECKING:
    from .inner import Thing
    from .inner import helper as renamed

__getattr__, __dir__, __all__ = attach(__name__, __file__)
"""


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    package = tmp_path / "scratch_facade"
    package.mkdir()
    (package / "inner.py").write_text("class Thing: ...\n\ndef helper() -> int:\n    return 7\n")
    sys.path.insert(0, str(tmp_path))
    yield package
    sys.path.remove(str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("scratch_facade")]:
        del sys.modules[name]


def test_a_type_checking_import_is_exported_and_loaded_on_first_use(scratch: Path) -> None:
    (scratch / "__init__.py").write_text(FACADE)
    facade = importlib.import_module("scratch_facade")
    assert facade.__all__ == ["Thing", "renamed"]
    assert "scratch_facade.inner" not in sys.modules
    assert facade.renamed() == 7
    assert facade.Thing.__module__ == "scratch_facade.inner"
    with pytest.raises(AttributeError, match="has no attribute 'helper'"):
        _ = facade.helper


@pytest.mark.parametrize(
    ("written", "instead", "refusal"),
    [
        ("    from .inner import Thing\n", "    import os\n", "export names with `from"),
        ("if TYPE_CHECKING:", "if typing.TYPE_CHECKING:", "no exports under"),
    ],
)
def test_a_facade_the_loader_cannot_read_is_refused_at_import(
    scratch: Path, written: str, instead: str, refusal: str
) -> None:
    source = FACADE.replace(written, instead).replace("from typing", "import typing\nfrom typing")
    (scratch / "__init__.py").write_text(source)
    with pytest.raises(TypeError, match=refusal):
        importlib.import_module("scratch_facade")


@pytest.mark.parametrize("facade", FACADES)
def test_each_facade_serves_each_name_it_imports_for_type_checkers(facade: str) -> None:
    package = importlib.import_module(facade)
    assert package.__file__ is not None
    exported = attach(facade, package.__file__)[2]
    assert set(exported) <= set(package.__all__)
    for name in exported:
        getattr(package, name)  # loads it: a name its module lacks raises here
