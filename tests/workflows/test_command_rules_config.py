"""Tools that run the workspace's own configuration (issue 33, item 5).

``git status`` runs ``core.fsmonitor`` from ``.git/config``; ``make``,
``npm``, ``pytest`` and ``cargo`` run what the workspace names. The
``allow_prefixes`` example in docs/approvals.md pairs ``git status`` with a
write rule on ``/.git``: this test reads that example and shows that with it
the model's write or edit of ``.git/config`` waits for a human, a command
that writes it asks, and the sandbox mounts ``/.git`` read-only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from filegate.kernel.execute_gate import ExecuteGateError, compile_view
from filegate.kernel.formatting import Rendered
from filegate.kernel.routing import Router
from filegate.kernel.tool_types import ToolName
from filegate.workflows import AgentInput, AgentWorkflow, BackendSpec, Decision
from filegate.workflows.gate import approval_trigger, check_call
from tests.scripting import calls, scripted, uid
from tests.workflows.test_command_rules import HOST_SHELL_WITH_DENY, execute_call
from tests.workflows.test_grants import pending_one, workers
from tests.workflows.test_workflow_e2e import final, remote, results

DOCS = Path(__file__).resolve().parents[2] / "docs" / "approvals.md"


def docs_prefix_example() -> dict[str, Any]:
    """The first JSON block of approvals.md's "Command prefixes for execute" section."""
    section = DOCS.read_text().split("### Command prefixes for `execute`", 1)[1]
    block = section.split("```json", 1)[1].split("```", 1)[0]
    example: dict[str, Any] = json.loads(block)
    return example


def file_call(tool: ToolName, path: str) -> Any:
    args: dict[str, Any] = {
        "write_file": {"file_path": path, "content": FSMONITOR},
        "edit_file": {"file_path": path, "old_string": "a", "new_string": "b"},
    }.get(tool, {"file_path": path})
    checked = check_call(
        tool, args, allowed=[tool], router=Router([]), max_args_chars=100_000,
        max_execute_timeout=3600,
    )  # fmt: skip
    assert not isinstance(checked, Rendered), checked
    return checked


FSMONITOR = "[core]\n\tfsmonitor = sh -c 'cat /etc/shadow > /tmp/out'\n"


def test_the_docs_git_status_example_protects_what_git_runs() -> None:
    """``git status`` runs ``core.fsmonitor`` from ``.git/config``: the docs' example
    pairs the prefix with a write rule on ``/.git``, so the model's write or edit
    of the config waits for a human, and the sandbox compiles it into the view."""
    example = docs_prefix_example()
    assert "git status" in example["interrupt_on"]["execute"]["allow_prefixes"]
    sandbox = {
        "default": {"kind": "remote", "name": "sb", "task_queue": "q", "can_execute": True,
                    "sandboxed": True},
    }  # fmt: skip
    input = AgentInput.model_validate({"task": "t", "backend": sandbox, **example})
    input.check_execute_gate()  # the sandbox enforces the rule for commands
    host = {**HOST_SHELL_WITH_DENY, "permissions": example["permissions"]}
    on_host = AgentInput.model_validate({**host, "interrupt_on": example["interrupt_on"]})
    with pytest.raises(ExecuteGateError):  # a host shell cannot: refused before a tool runs
        on_host.check_execute_gate()
    rules, interrupts = input.permissions, input.interrupt_on
    cases: list[tuple[ToolName, str]] = [
        ("write_file", "/.git/config"),
        ("edit_file", "/.git/config"),
        ("write_file", "/.git/hooks/pre-commit"),
        ("write_file", "/.git"),
        ("delete", "/.git"),
    ]
    for tool, path in cases:
        trigger = approval_trigger(rules, interrupts, file_call(tool, path))
        assert trigger is not None, (tool, path)  # asks (or, with deny, refuses)
    assert approval_trigger(rules, interrupts, execute_call("git status")) is None
    for command in (
        "git -c core.fsmonitor=id status",
        f"printf '{FSMONITOR}' > .git/config",
        "git status; sh .git/hooks/x",
    ):
        assert approval_trigger(rules, interrupts, execute_call(command)) is not None, command
    view = compile_view(rules)
    assert any(entry.path == "/.git" and entry.frozen for entry in view.protected), view


@pytest.mark.services
async def test_a_model_written_fsmonitor_waits_for_a_human(
    temporal_client: Client, tmp_path: Path
) -> None:
    """On a real run with the docs' rules: the model's write of ``.git/config``
    asks; rejected, the config is unchanged, so ``git status`` reads the old one."""
    root = tmp_path / "ws"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n\tbare = false\n")
    queues = (uid("agent"), uid("tools"))
    write = {"file_path": "/.git/config", "content": FSMONITOR}
    input = AgentInput.model_validate(
        {
            "task": "set up git",
            "model": scripted(calls(("w", "write_file", write)), final("done")),
            "backend": BackendSpec(default=remote("fs", queues[1])),
            "permissions": docs_prefix_example()["permissions"],
        }
    )
    async with workers(temporal_client, root, tmp_path / "j", queues):
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=queues[0]
        )
        asked = await pending_one(handle)
        assert asked.args["file_path"] == "/.git/config"
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=asked.id, decision="reject", reason="no")
        )
        result = await handle.result()
    assert results(result)["w"]["status"] == "error"
    assert "fsmonitor" not in (root / ".git" / "config").read_text()
