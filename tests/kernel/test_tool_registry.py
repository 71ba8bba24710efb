"""The tool registry is the one definition of a tool (issue 35 item 1).

Every per-tool set the kernel, the workflows and the activities read derives
from :data:`filegate.kernel.registry.TOOLS`; the maps that hold code (handlers,
descriptions, stubs, activity methods) cover exactly its tools. A ninth tool is
one registry entry: the subprocess test adds a toy one before anything else
imports the registry and finds it in every derived table.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import get_args

import pytest

from filegate.activities import stubs
from filegate.activities.tools import FileToolActivities
from filegate.kernel import dispatch, permissions, tool_types
from filegate.kernel.registry import TOOLS, ToolDef, ToolRegistry
from filegate.kernel.tool_args import LsArgs, ToolName
from filegate.workflows import gate, tool_descriptions
from filegate.workflows.approvals import reviews


def test_the_registry_names_every_tool_once_in_the_offered_order() -> None:
    assert TOOLS.order == get_args(ToolName)
    assert all(TOOLS[name].activity == f"filegate.{name}" for name in TOOLS.order)


def test_the_derived_tables_are_the_tables_the_code_had() -> None:
    """The sets as they were written by hand before the registry (behaviour unchanged)."""
    assert {"write_file", "edit_file", "delete", "execute"} == TOOLS.mutating
    assert {"glob", "grep"} == TOOLS.searching
    assert set(TOOLS.order) - {"execute"} == TOOLS.batched
    assert {"read_file", "write_file", "edit_file"} == permissions.TOOLS.exact
    assert {"ls", "glob", "grep", "delete"} == permissions.TOOLS.tree
    assert permissions.TOOLS.operations == {
        "ls": "read", "read_file": "read", "glob": "read", "grep": "read",
        "write_file": "write", "edit_file": "write", "delete": "write",
    }  # fmt: skip
    assert {"read_file", "write_file", "edit_file", "delete"} == gate.TOOLS.needing_path
    assert gate.TOOLS.path_fields == {
        "ls": "path", "read_file": "file_path", "write_file": "file_path",
        "edit_file": "file_path", "delete": "file_path", "glob": "path", "grep": "path",
    }  # fmt: skip
    assert {"write_file", "edit_file", "delete", "execute"} == reviews.TOOLS.previewed
    assert {"execute"} == TOOLS.offloaded
    # What the gate, bookkeeping, grants and cards once found by comparing tool names.
    assert (TOOLS.writing, TOOLS.editing) == ({"write_file"}, {"edit_file"})
    assert (TOOLS.removing, TOOLS.running) == ({"delete"}, {"execute"})
    assert TOOLS.narrowing == {"glob": "pattern", "grep": "glob"}
    assert (TOOLS.pattern_reaching, TOOLS.root_results) == ({"glob"}, {"grep"})


def test_every_map_holding_code_covers_exactly_the_registrys_tools() -> None:
    tools = set(TOOLS.order)
    # read_file has its own path in run_tool (media blocks); every other tool a handler.
    assert set(dispatch._HANDLERS) | {"read_file"} == tools
    assert set(tool_descriptions.BUILTIN_DESCRIPTIONS) == tools
    assert set(stubs.STUBS) == tools
    assert set(tool_types.TOOL_ARGS) == tools
    activities = FileToolActivities.__dict__
    for tool in TOOLS:
        method = activities[tool.name]
        assert method.__temporal_activity_definition.name == tool.activity  # type: ignore[attr-defined]


class StatArgs(LsArgs):
    """A toy tool's arguments (any pydantic model will do)."""


def test_a_scratch_registry_derives_its_tables_from_its_entries() -> None:
    toy = ToolDef("stat", StatArgs, "path", "read", "exact", needs_path=True)  # type: ignore[arg-type]
    registry = ToolRegistry([*TOOLS, toy])
    assert registry.order[-1] == "stat" and registry.args["stat"] is StatArgs
    assert registry.activity_names["stat"] == "filegate.stat"
    assert registry.path_fields["stat"] == "path" and registry.operations["stat"] == "read"
    assert "stat" in registry.exact and "stat" in registry.needing_path
    assert "stat" in registry.batched and "stat" not in registry.mutating
    with pytest.raises(ValueError, match="defined twice"):
        ToolRegistry([*TOOLS, TOOLS["ls"]])
    with pytest.raises(ValueError, match="needs an operation"):
        ToolRegistry([ToolDef("odd", StatArgs, "path", None, None)])  # type: ignore[arg-type]


TOY_TOOL = r"""
import json
from filegate.kernel import registry
from filegate.kernel.tool_args import LsArgs

class TouchArgs(LsArgs):
    pass

toy = registry.ToolDef("touch", TouchArgs, "path", "write", "exact", needs_path=True,
                       mutates=True, previewed=True, offloaded=True, effect="edits")
registry.TOOLS = registry.ToolRegistry([*registry.TOOLS, toy])

from filegate.kernel import permissions, tool_types
from filegate.workflows import gate
from filegate.workflows.approvals import reviews
from filegate.activities import tools
from filegate.workflows import batching, calls
print(json.dumps({
    "edits": "touch" in calls.TOOLS.editing,  # read-before-edit, as the run books it
    "order": "touch" in tool_types.TOOL_ORDER,
    "activity": tool_types.TOOL_ACTIVITY_NAMES.get("touch"),
    "args": tool_types.TOOL_ARGS.get("touch") is TouchArgs,
    "mutating": "touch" in tools.TOOLS.mutating,  # what the journal's reader bound
    "batched": "touch" in batching.TOOLS.batched,
    "operation": permissions.TOOLS.operations.get("touch"),
    "exact": "touch" in permissions.TOOLS.exact,
    "path_field": gate.TOOLS.path_fields.get("touch"),
    "needs_path": "touch" in gate.TOOLS.needing_path,
    "previewed": "touch" in reviews.TOOLS.previewed,
    "offloaded": "touch" in tools.TOOLS.offloaded,  # where the offload decision reads it
}))
"""


@pytest.mark.slow
def test_a_ninth_tool_is_one_registry_entry() -> None:
    """Added before the rest of Filegate is imported, a toy tool is in every derived table."""
    done = subprocess.run(
        [sys.executable, "-c", TOY_TOOL], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "edits": True, "order": True, "activity": "filegate.touch", "args": True, "mutating": True,
        "batched": True, "operation": "write", "exact": True, "path_field": "path",
        "needs_path": True, "previewed": True, "offloaded": True,
    }  # fmt: skip
