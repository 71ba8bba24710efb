"""One wire vocabulary (issue 35 item 5): every name a client or the server sees is
written once, in :mod:`filegate.kernel.wire` (the tools' activity names in the
tool registry), and the decorators, the CLI and the UI use those constants.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from temporalio import workflow

from filegate.activities.model import ModelActivities
from filegate.activities.preview import PreviewActivities
from filegate.activities.tools import FileToolActivities
from filegate.activities.transfer import TransferActivities
from filegate.kernel import wire
from filegate.kernel.registry import TOOLS
from filegate.workflows import AgentWorkflow

ROOT = Path(__file__).resolve().parents[2]
NAMES = {value for key, value in vars(wire).items() if key.isupper() and isinstance(value, str)}


def test_the_agent_workflows_handlers_are_named_from_the_wire_module() -> None:
    defn = workflow._Definition.from_class(AgentWorkflow)
    assert defn is not None and defn.name == wire.WORKFLOW_TYPE
    handlers = {*defn.queries, *defn.signals, *defn.updates}
    assert handlers <= NAMES, handlers - NAMES
    assert {wire.PENDING_QUERY, wire.STATUS_QUERY, wire.DECIDE_UPDATE} <= handlers


def test_every_activity_is_named_by_the_wire_module_or_the_registry() -> None:
    known = NAMES | set(TOOLS.activity_names.values())
    for cls in (FileToolActivities, ModelActivities, PreviewActivities, TransferActivities):
        for attr in vars(cls).values():
            defn = getattr(attr, "__temporal_activity_definition", None)
            if defn is not None:
                assert defn.name in known, (cls.__name__, defn.name)


@pytest.mark.slow
def test_no_module_spells_a_wire_name_in_a_decorator_or_handler_call() -> None:
    """A literal in ``name=`` of a Temporal decorator or in a ``set_*_handler`` call
    would be a second definition of a wire name."""
    found = []
    for path in ROOT.glob("**/*.py"):
        if any(part in {".venv", "build", "tests", "bench"} for part in path.parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            callee = ast.unparse(node.func)
            literal_name = any(
                kw.arg == "name" and isinstance(kw.value, ast.Constant) for kw in node.keywords
            )
            temporal = callee.startswith(("workflow.", "activity.defn"))
            handler = callee.startswith("workflow.set_") and callee.endswith("_handler")
            first_literal = bool(node.args) and isinstance(node.args[0], ast.Constant)
            if (temporal and literal_name) or (handler and first_literal):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert not found, "\n".join(found)


def _package_trees() -> list[tuple[Path, ast.AST]]:
    skip = {".venv", "build", "tests", "bench", "docs"}
    return [
        (path, ast.parse(path.read_text(), str(path)))
        for path in ROOT.glob("**/*.py")
        if not skip & set(path.relative_to(ROOT).parts)
    ]


@pytest.mark.slow
def test_error_types_are_spelled_only_in_the_wire_module() -> None:
    """An error type is a wire name too: callers, retry policies and other releases
    match on it. No ``ApplicationError(..., type="...")`` or non-retryable list
    spells one, and no module but wire assigns one to a constant of its own."""
    errors = {v for k, v in vars(wire).items() if k.endswith("_ERROR") and isinstance(v, str)}
    assert {"InvalidConfiguration", "ModelRequestError", "TranscriptUnavailable"} <= errors
    found = []
    for path, tree in _package_trees():
        if path.name == "wire.py":
            continue
        where = path.relative_to(ROOT)
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg in ("type", "non_retryable_error_types"):
                literals = [
                    c.value for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                ]  # fmt: skip
                found += [f"{where}: {node.arg}={v!r}" for v in literals if v in errors]
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and node.value.value in errors
            ):
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)
