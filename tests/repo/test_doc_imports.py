"""Every import the docs show goes through a facade, and every name resolves.

Why: README.md, docs/ and docs/examples are the documented surface. A user
who copies ``from filegate.kernel.messages import ...`` depends on where a
class happens to live today, and the next move (issue 35 moves modules into
subpackages) breaks their program. The facades (:data:`FACADES`) name what
users need and hide where it lives; this test keeps the docs on them and
fails when a documented name stops resolving.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FACADES = frozenset(
    {
        "filegate",
        "filegate.activities",
        "filegate.backends",
        "filegate.workflows",
        "filegate.integrations.deepagents",
        "filegate.integrations.openai_agents",
        "filegate.integrations.pydantic_ai",
    }
)
"""The packages whose ``__init__`` is a documented facade (lazy ``attach`` exports)."""


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _python_of(path: Path) -> list[str]:
    if path.suffix == ".py":
        return [path.read_text()]
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def _imports(source: str) -> list[tuple[str, list[str]]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("filegate"):
            found.append((node.module or "", [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.startswith("filegate")]
    return found


def _shown() -> list[tuple[str, str, list[str]]]:
    sources = [*_documents(), *sorted((ROOT / "docs" / "examples").glob("*.py"))]
    shown = []
    for path in sources:
        for block in _python_of(path):
            for module, names in _imports(block):
                shown.append((str(path.relative_to(ROOT)), module, names))
    return shown


def test_the_docs_show_imports() -> None:
    """The check below sees the docs' imports (a broken parser would pass vacuously)."""
    modules = {module for _, module, _ in _shown()}
    assert {"filegate", "filegate.workflows", "filegate.backends"} <= modules


@pytest.mark.parametrize(
    ("where", "module", "names"), _shown(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_a_documented_import_uses_a_facade_and_resolves(
    where: str, module: str, names: list[str]
) -> None:
    assert module in FACADES, (
        f"{where} imports from {module}: import from a facade ({', '.join(sorted(FACADES))}), "
        "exporting the name there if it is missing"
    )
    loaded = importlib.import_module(module)
    missing = [name for name in names if not hasattr(loaded, name)]
    assert not missing, f"{where}: {module} has no {missing}"
    exported = set(getattr(loaded, "__all__", []))
    assert set(names) <= exported, f"{where}: {module} does not export {set(names) - exported}"


def test_a_deep_import_in_a_doc_is_refused(tmp_path: Path) -> None:
    [(module, names)] = _imports("from filegate.kernel.messages import ToolCall\n")
    assert module not in FACADES and names == ["ToolCall"]
