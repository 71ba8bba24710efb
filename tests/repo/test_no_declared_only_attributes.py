"""No class declares an attribute it does not assign: composition, not mixins.

A class body annotation without a value (``_input: AgentInput``) that none of
the class's own methods assigns (``self._input = ...``) is a promise that
some *other* class (a subclass mixing it in) will. Neither mypy nor
import-linter checks that contract, and such a class cannot be built or tested
alone. ``ModelTurns``, ``Reviews`` and ``ToolCalls`` were such mixins (issue
35): ``AgentWorkflow`` now holds a ``ModelTurns``, and ``FileTools`` its
``Routes``, ``ReviewDesk`` and ``ToolCalls``, each built with its
dependencies. Where the annotations *are* the fields (dataclasses, pydantic
models, TypedDicts, Protocols, NamedTuples) and for ``ClassVar``
declarations, the rule does not apply.

The known exceptions are listed with their reason; the list holds nothing
else, and an entry that no longer declares anything unassigned fails too, so
it is dropped when its class is fixed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

KNOWN: dict[str, str] = {}
"""Classes still allowed to declare attributes only a subclass assigns, and why."""

FIELD_BASES = {
    "BaseModel",
    "RootModel",
    "BaseSettings",
    "TypedDict",
    "Protocol",
    "NamedTuple",
}
"""Bases whose subclasses' annotations are their fields (matched by last name part)."""

FIELD_DECORATORS = {"dataclass", "define", "frozen", "attrs"}
"""Class decorators that turn annotations into fields (dataclasses, attrs)."""


def _library_modules(root: Path) -> list[Path]:
    skip = {"tests", "bench", "build", ".venv", ".git", "docs", "deploy"}
    return sorted(p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts[:1]))


def _last_name(node: ast.expr) -> str:
    """``pydantic.BaseModel`` -> ``BaseModel``; ``Protocol[T]`` -> ``Protocol``."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _is_classvar(annotation: ast.expr) -> bool:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.replace("typing.", "").startswith("ClassVar")
    return _last_name(annotation) == "ClassVar"


def _declared(cls: ast.ClassDef) -> list[str]:
    """Names annotated without a value in the class body (``ClassVar`` aside)."""
    return [
        stmt.target.id
        for stmt in cls.body
        if isinstance(stmt, ast.AnnAssign)
        and stmt.value is None
        and isinstance(stmt.target, ast.Name)
        and not _is_classvar(stmt.annotation)
    ]


def _targets(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.Tuple | ast.List):
        return [t for element in node.elts for t in _targets(element)]
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    return [node]


def _assigned(cls: ast.ClassDef) -> set[str]:
    """Attributes the class's own methods assign on their first argument (``self``)."""
    names: set[str] = set()
    for method in cls.body:
        if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if not method.args.args:
            continue
        me = method.args.args[0].arg
        for node in ast.walk(method):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = [t for target in node.targets for t in _targets(target)]
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                targets = [node.target]
            elif (  # object.__setattr__(self, "name", ...) / setattr(self, "name", ...)
                isinstance(node, ast.Call)
                and _last_name(node.func) in ("setattr", "__setattr__")
                and len(node.args) >= 2
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id == me
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                names.add(node.args[1].value)
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == me
                ):
                    names.add(target.attr)
    return names


def _classes(root: Path) -> list[tuple[str, ast.ClassDef]]:
    found = []
    for path in _library_modules(root):
        tree = ast.parse(path.read_text(), str(path))
        module = path.relative_to(root).as_posix()
        found += [(module, n) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    return found


def _field_classes(classes: list[tuple[str, ast.ClassDef]]) -> set[str]:
    """Class names whose annotations are fields: by decorator, or by a base that is
    (transitively, through the package's own classes, matched by name)."""
    fields = {
        cls.name
        for _, cls in classes
        if any(_last_name(d) in FIELD_DECORATORS for d in cls.decorator_list)
    }
    bases = {cls.name: {_last_name(b) for b in cls.bases} for _, cls in classes}
    changed = True
    while changed:
        changed = False
        for name, parents in bases.items():
            if name not in fields and parents & (FIELD_BASES | fields):
                fields.add(name)
                changed = True
    return fields


def _offenders(root: Path) -> dict[str, list[str]]:
    classes = _classes(root)
    fields = _field_classes(classes)
    offenders = {}
    for module, cls in classes:
        if cls.name in fields:
            continue
        unassigned = [name for name in _declared(cls) if name not in _assigned(cls)]
        if unassigned:
            offenders[f"{module}::{cls.name}"] = unassigned
    return offenders


@pytest.mark.slow
def test_no_class_declares_attributes_it_does_not_assign() -> None:
    offenders = _offenders(ROOT)
    new = {key: names for key, names in offenders.items() if key not in KNOWN}
    assert not new, (
        "classes declare attributes that only another class assigns (a mixin's "
        "contract nothing checks); hold a part that takes its dependencies in its "
        f"constructor instead: {new}"
    )
    fixed = sorted(set(KNOWN) - set(offenders))
    assert not fixed, f"no longer declare unassigned attributes; drop them from KNOWN: {fixed}"


def test_the_check_finds_a_planted_violation(tmp_path: Path) -> None:
    (tmp_path / "planted.py").write_text(
        "from typing import ClassVar\n"
        "from dataclasses import dataclass\n"
        "from pydantic import BaseModel\n"
        "\n"
        "class Mixin:\n"
        "    _input: int\n"
        "    _kept: str\n"
        "    LIMIT: ClassVar[int]\n"
        "    def __init__(self) -> None:\n"
        "        self._kept = ''\n"
        "\n"
        "class Whole:\n"
        "    _a: int\n"
        "    _b: int\n"
        "    _c: str\n"
        "    def __init__(self) -> None:\n"
        "        self._a, (self._b, *rest) = 1, (2, 3)\n"
        "        object.__setattr__(self, '_c', 'x')\n"
        "\n"
        "@dataclass\n"
        "class Fields:\n"
        "    name: str\n"
        "\n"
        "class Model(BaseModel):\n"
        "    name: str\n"
        "\n"
        "class Derived(Model):\n"
        "    other: int\n"
    )
    assert _offenders(tmp_path) == {"planted.py::Mixin": ["_input"]}


def test_no_exception_is_left() -> None:
    """Issue 35 composed the last mixins (FileTools' parts): a new exception needs a reason."""
    assert KNOWN == {}
