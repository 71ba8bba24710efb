"""Internals carry a leading underscore (issue 35 item 5).

A module-level function that nothing outside its own module names (no other
module of the package, no test, bench, example or doc) is an internal: it is
spelled ``_name``, so a reader of the module sees at once what the rest of the
code may rely on and what may change freely. Classes and constants are left
out: a class name can be a wire name (an error type), and a constant is a
documented value whatever reads it.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {
    ".venv", "build", ".git", "__pycache__", "node_modules",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis",
}  # fmt: skip
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".html", ".js", ".txt", ""}
PACKAGE_EXCLUDED = ("tests", "bench", "docs", "deploy")

EXCEPTIONS = {
    # Each op_<name> is looked up by its name in the script's dispatch (run inside the sandbox).
    "backends/sandbox_helper_script.py": "the sandbox helper dispatches its op_* functions by name",
    # The model provider registry is an extension point: a program registers its own provider.
    "activities/model.py:register_provider": "an extension point for providers of your own",
    "activities/model.py:get_provider": "an extension point for providers of your own",
}


def _files() -> list[Path]:
    out = []
    for path in ROOT.rglob("*"):
        parts = set(path.relative_to(ROOT).parts)
        if parts & SKIP_DIRS or any(p.endswith(".egg-info") for p in parts):
            continue
        if path.is_file() and path.suffix in TEXT_SUFFIXES:
            out.append(path)
    return out


def _public_functions(tree: ast.Module) -> list[str]:
    return [
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and not node.name.startswith("_")
        and node.name != "main"
    ]


def _declared_all(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return {
                elt.value
                for elt in getattr(node.value, "elts", [])
                if isinstance(elt, ast.Constant) and isinstance(elt.value, str)
            }
    return set()


def unmarked_internals(root: Path = ROOT) -> list[str]:
    """``module:function`` for every public function no other file names."""
    words: dict[Path, set[str]] = {}
    for path in _files():
        try:
            words[path] = set(re.findall(r"\w+", path.read_text(errors="replace")))
        except OSError:
            continue
    seen: Counter[str] = Counter()
    for found in words.values():
        seen.update(found)
    found_internal = []
    for path in sorted(words):
        rel = path.relative_to(root).as_posix()
        if path.suffix != ".py" or rel.split("/")[0] in PACKAGE_EXCLUDED:
            continue
        if rel in EXCEPTIONS:
            continue
        tree = ast.parse(path.read_text(), rel)
        declared = _declared_all(tree)
        for name in _public_functions(tree):
            if name in declared or f"{rel}:{name}" in EXCEPTIONS:
                continue
            if seen[name] - (name in words[path]) == 0:
                found_internal.append(f"{rel}:{name}")
    return found_internal


def test_functions_only_their_module_names_are_underscored() -> None:
    internals = unmarked_internals()
    assert not internals, (
        "functions no other module, test or doc names: give them a leading underscore "
        "(or list why not in EXCEPTIONS):\n" + "\n".join(internals)
    )


def test_the_exceptions_still_exist() -> None:
    for key in EXCEPTIONS:
        module, _, name = key.partition(":")
        source = (ROOT / module).read_text()
        assert not name or re.search(rf"^(async )?def {name}\b", source, re.M), key


def reached_internals(root: Path = ROOT) -> list[str]:
    """``module: filegate.x._name`` for every underscored name a package module takes
    from another Filegate module, by ``from ... import`` or through a module alias."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if set(path.relative_to(root).parts) & SKIP_DIRS or rel.split("/")[0] in PACKAGE_EXCLUDED:
            continue
        tree = ast.parse(path.read_text(), rel)
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("filegate"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{rel}: {node.module}.{alias.name}")
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("filegate") and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append(f"{rel}: {aliases[node.value.id]}.{node.attr}")
    return found


def test_no_module_reaches_into_another_modules_internals() -> None:
    """An adapter, the CLI or a layer below takes only what a module offers:
    what it underscores may change without a look at its callers."""
    reached = reached_internals()
    assert not reached, "\n".join(reached)
