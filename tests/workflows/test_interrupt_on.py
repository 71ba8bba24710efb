"""``AgentInput.interrupt_on``: explicit per-tool approval rules (contract §5).

Pure tests pin the rule model (shorthands, predicates, validation) and how
explicit entries merge with approvals generated from interrupt rules; the end
to end runs use the real Temporal dev server: an ``execute`` on a LocalShell
tools worker waits for approval (rejected once, approved once), predicate
approvals fire only when the predicate matches, and an explicit entry
replaces the generated approvals of its tool only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.client import Client

from filegate.backends.local_shell import LocalShellBackend
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.tool_types import ToolName
from filegate.workflows import AgentInput, AgentWorkflow, ApprovalConfig, BackendSpec, Decision
from filegate.workflows.approvals.pending import approval_deadline
from filegate.workflows.gate import ArgPredicate, CheckedCall, ToolInterrupt, approval_trigger
from filegate.workflows.inputs import RuleTimeout
from tests.roots import made
from tests.scripting import calls, scripted, uid
from tests.workflows.test_workflow_e2e import (
    final,
    pending,
    remote,
    results,
    running_agent,
    running_tools,
)

# --------------------------------------------------------------------------- the rule model


def agent_input(**fields: Any) -> AgentInput:
    """AgentInput from plain JSON-like fields, as a client would send it."""
    return AgentInput.model_validate(fields)


def checked(tool: Any, **args: Any) -> CheckedCall:
    path = args.get("file_path", args.get("path"))
    return CheckedCall(tool, args, path, None, path)


def test_shorthands_and_single_predicate() -> None:
    assert ToolInterrupt.model_validate(True).always is True
    assert ToolInterrupt.model_validate(False).fires("execute", {"command": "ls"}) is False
    one = ToolInterrupt.model_validate({"when": {"arg": "content", "contains": "TODO"}})
    assert len(one.when) == 1 and one.when[0].kind == "contains"


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"always": True, "when": [{"arg": "command", "contains": "rm"}]},
        {"when": [{"arg": "command"}]},
        {"when": [{"arg": "command", "contains": "rm", "regex": "rm"}]},
        {"when": [{"arg": "command", "regex": "("}]},
        {"when": [{"arg": "command", "glob": ""}]},
        {"always": True, "timeout_seconds": 0},
        {"always": True, "surprise": 1},
    ],
)
def test_invalid_entries_are_refused(raw: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ToolInterrupt.model_validate(raw)


def test_unknown_tool_name_is_refused_by_agent_input() -> None:
    with pytest.raises(ValidationError):
        agent_input(task="t", interrupt_on={"rm": True})


@pytest.mark.parametrize(
    ("predicate", "tool", "args", "fires"),
    [
        # glob on the path argument: a permission-style glob on the virtual path
        ({"arg": "file_path", "glob": "/etc/**"}, "write_file", {"file_path": "/etc/a/b"}, True),
        ({"arg": "file_path", "glob": "/etc/**"}, "write_file", {"file_path": "/etc/.env"}, True),
        ({"arg": "file_path", "glob": "/etc/**"}, "write_file", {"file_path": "/etcx"}, False),
        ({"arg": "file_path", "glob": "/etc/*"}, "write_file", {"file_path": "/etc/a/b"}, False),
        ({"arg": "file_path", "glob": "etc/**"}, "write_file", {"file_path": "/etc/a"}, False),
        # glob on any other argument: whole-text match, '*' crosses '/'
        ({"arg": "command", "glob": "rm *"}, "execute", {"command": "rm -rf /tmp/x"}, True),
        ({"arg": "command", "glob": "rm *"}, "execute", {"command": "echo rm x"}, False),
        ({"arg": "content", "contains": "TODO"}, "write_file", {"content": "a TODO b"}, True),
        ({"arg": "content", "contains": "TODO"}, "write_file", {"content": "todo"}, False),
        ({"arg": "replace_all", "equals": True}, "edit_file", {"replace_all": True}, True),
        ({"arg": "replace_all", "equals": True}, "edit_file", {"replace_all": False}, False),
        ({"arg": "timeout", "equals": None}, "execute", {"timeout": None}, True),
        ({"arg": "timeout", "equals": None}, "execute", {}, False),
        ({"arg": "command", "regex": r"\bcurl\b"}, "execute", {"command": "x; curl y"}, True),
        ({"arg": "command", "regex": r"\bcurl\b"}, "execute", {"command": "curly"}, False),
        ({"arg": "command", "contains": "x"}, "execute", {"command": 3}, False),
    ],
)
def test_predicates(
    predicate: dict[str, Any], tool: str, args: dict[str, Any], fires: bool
) -> None:
    assert ArgPredicate.model_validate(predicate).matches(tool, args) is fires


def test_round_trip_keeps_unset_apart_from_null() -> None:
    """The input travels through history as JSON: ``equals: null`` and an explicit
    ``timeout_seconds: null`` must stay given, unset fields must stay unset."""
    raw = {
        "task": "t",
        "interrupt_on": {
            "execute": {"always": True, "timeout_seconds": None},
            "write_file": {"when": [{"arg": "content", "equals": None}]},
            "edit_file": {"when": {"arg": "file_path", "glob": "/etc/**"}},
        },
    }
    again = AgentInput.model_validate_json(agent_input(**raw).model_dump_json())
    assert again.interrupt_on == agent_input(**raw).interrupt_on
    assert again.interrupt_on["execute"].deadline_overrides() == {"timeout_seconds": None}
    assert again.interrupt_on["edit_file"].deadline_overrides() == {}
    assert again.interrupt_on["write_file"].when[0].kind == "equals"


def test_all_predicates_must_match() -> None:
    entry = ToolInterrupt.model_validate(
        {"when": [{"arg": "file_path", "glob": "/etc/**"}, {"arg": "content", "contains": "x"}]}
    )
    assert entry.fires("write_file", {"file_path": "/etc/a", "content": "x"})
    assert not entry.fires("write_file", {"file_path": "/etc/a", "content": "y"})
    assert not entry.fires("write_file", {"file_path": "/home/a", "content": "x"})


DOCS_RULES = [
    FilesystemPermission(operations=["read", "write"], paths=["/docs/**"], mode="interrupt")
]


def test_explicit_entry_replaces_generated_for_its_tool_only() -> None:
    only_todo: dict[ToolName, ToolInterrupt] = {
        "write_file": ToolInterrupt.model_validate({"when": {"arg": "content", "contains": "TODO"}})
    }
    plain = checked("write_file", file_path="/docs/a.txt", content="fine")
    todo = checked("write_file", file_path="/docs/a.txt", content="TODO")
    read = checked("read_file", file_path="/docs/a.txt")

    generated = approval_trigger(DOCS_RULES, {}, plain)
    assert generated is not None and generated.rule["source"] == "permissions"
    assert generated.rule_index == 0 and generated.rule["mode"] == "interrupt"
    assert "/docs/**" in generated.rule["description"]

    assert approval_trigger(DOCS_RULES, only_todo, plain) is None
    explicit = approval_trigger(DOCS_RULES, only_todo, todo)
    assert explicit is not None and explicit.rule["source"] == "interrupt_on"
    assert explicit.rule_index is None
    assert explicit.rule["description"] == 'interrupt_on[write_file]: when content contains "TODO"'
    still = approval_trigger(DOCS_RULES, only_todo, read)
    assert still is not None and still.rule["source"] == "permissions"

    off: dict[ToolName, ToolInterrupt] = {"read_file": ToolInterrupt.model_validate(False)}
    assert approval_trigger(DOCS_RULES, off, read) is None


def test_per_tool_timeout_overrides_defaults() -> None:
    config = ApprovalConfig(
        timeout_seconds=60,
        on_timeout="escalate",
        per_rule=[RuleTimeout(rule_index=0, timeout_seconds=5, on_timeout="reject")],
    )
    call = checked("execute", command="ls")

    def on_execute(entry: ToolInterrupt) -> dict[ToolName, ToolInterrupt]:
        return {"execute": entry}

    plain = approval_trigger([], on_execute(ToolInterrupt.model_validate(True)), call)
    timed = approval_trigger([], on_execute(ToolInterrupt(always=True, timeout_seconds=2)), call)
    forever = approval_trigger(
        [], on_execute(ToolInterrupt(always=True, timeout_seconds=None)), call
    )
    generated = approval_trigger(DOCS_RULES, {}, checked("read_file", file_path="/docs/x"))
    assert plain and timed and forever and generated
    assert approval_deadline(config, plain) == (60, "escalate")
    assert approval_deadline(config, timed) == (2, "escalate")
    assert approval_deadline(config, forever) == (None, "escalate")
    assert approval_deadline(config, generated) == (5, "reject")


# --------------------------------------------------------------------------- end to end

pytest_services = pytest.mark.services


@pytest_services
async def test_execute_approval_rejected_then_approved(
    temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    model = scripted(
        calls(("x1", "execute", {"command": "echo first > first.txt"})),
        calls(("x2", "execute", {"command": "echo second > second.txt && cat second.txt"})),
        final(),
    )
    async with (
        running_agent(temporal_client) as agent_queue,
        running_tools(
            temporal_client, {"shell": LocalShellBackend(str(root))}, tmp_path / "journal"
        ) as tools_queue,
    ):
        spec = BackendSpec(default=remote("shell", tools_queue, execute=True, shell=str(root)))
        input = agent_input(
            task="go", model=model, backend=spec, interrupt_on={"execute": {"always": True}}
        )
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=agent_queue
        )
        [first] = await pending(handle, 1)
        assert first.tool == "execute" and first.args["command"] == "echo first > first.txt"
        assert first.cwd == str(root)
        assert first.rule is not None and first.rule["source"] == "interrupt_on"
        assert first.rule["description"] == "interrupt_on[execute]: always"
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=first.id, decision="reject", reason="no")
        )
        [second] = await pending(handle, 1)
        assert second.id != first.id and second.cwd == str(root)
        assert "second.txt" in second.args["command"]
        assert not (root / "first.txt").exists()  # rejected: never ran
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=second.id, decision="approve")
        )
        result = await handle.result()
    out = results(result)
    assert out["x1"]["status"] == "error" and "rejected" in out["x1"]["content"]
    assert "no" in out["x1"]["content"]
    assert out["x2"]["status"] == "success" and "second" in out["x2"]["content"]
    assert not (root / "first.txt").exists()
    assert (root / "second.txt").read_text() == "second\n"
    assert result.approvals == 2


@pytest_services
async def test_execute_cwd_defaults_to_root(temporal_client: Client, tmp_path: Path) -> None:
    """A default backend that does not declare its shell location shows '/'."""
    model = scripted(calls(("x", "execute", {"command": "true"})), final())
    async with (
        running_agent(temporal_client) as agent_queue,
        running_tools(
            temporal_client, {"shell": LocalShellBackend(made(tmp_path / "ws"))}, tmp_path / "j"
        ) as tools_queue,
    ):
        input = agent_input(
            task="go",
            model=model,
            backend=BackendSpec(default=remote("shell", tools_queue, execute=True)),
            interrupt_on={"execute": True},
        )
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=agent_queue
        )
        [approval] = await pending(handle, 1)
        assert approval.cwd == "/"
        await handle.signal(
            AgentWorkflow.decide_signal,
            Decision(id=approval.id, decision="respond", message="skipped"),
        )
        result = await handle.result()
    assert results(result)["x"]["content"].endswith("answered it instead]\nskipped")


@pytest_services
@pytest.mark.parametrize(
    ("when", "asked", "unasked"),
    [
        ({"arg": "file_path", "glob": "/etc/**"}, "/etc/app/app.conf", "/home/notes.txt"),
        ({"arg": "content", "contains": "TODO"}, "/todo.txt", "/done.txt"),
    ],
)
async def test_predicate_write_approval(
    temporal_client: Client, when: dict[str, str], asked: str, unasked: str
) -> None:
    model = scripted(
        calls(
            ("a", "write_file", {"file_path": asked, "content": "TODO: tune\n"}),
            ("u", "write_file", {"file_path": unasked, "content": "done\n"}),
            ("l", "ls", {"path": "/"}),
        ),
        final(),
    )
    input = agent_input(task="go", model=model, interrupt_on={"write_file": {"when": when}})
    async with running_agent(temporal_client) as queue:
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=queue
        )
        [approval] = await pending(handle, 1)
        assert approval.args["file_path"] == asked and approval.cwd is None
        assert approval.rule is not None and when["arg"] in approval.rule["description"]
        status = await handle.query(AgentWorkflow.status)
        assert status.state == "awaiting_approval"
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=approval.id, decision="approve")
        )
        result = await handle.result()
    out = results(result)
    assert out["a"]["status"] == "success" and out["u"]["status"] == "success"
    assert result.approvals == 1


@pytest_services
async def test_explicit_entry_replaces_generated(temporal_client: Client) -> None:
    model = scripted(
        calls(
            ("plain", "write_file", {"file_path": "/docs/a.txt", "content": "fine\n"}),
            ("todo", "write_file", {"file_path": "/docs/b.txt", "content": "TODO\n"}),
        ),
        calls(("read", "read_file", {"file_path": "/docs/a.txt"})),
        final(),
    )
    input = agent_input(
        task="go",
        model=model,
        permissions=DOCS_RULES,
        interrupt_on={"write_file": {"when": {"arg": "content", "contains": "TODO"}}},
    )
    async with running_agent(temporal_client) as queue:
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=queue
        )
        [write] = await pending(handle, 1)
        assert write.args["file_path"] == "/docs/b.txt"
        assert write.rule is not None and write.rule["source"] == "interrupt_on"
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=write.id, decision="approve")
        )
        [read] = await pending(handle, 1)
        assert read.tool == "read_file"
        assert read.rule is not None and read.rule["source"] == "permissions"
        assert read.rule["index"] == 0
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=read.id, decision="approve")
        )
        result = await handle.result()
    out = results(result)
    assert out["plain"]["status"] == "success" and out["todo"]["status"] == "success"
    assert "fine" in out["read"]["content"]
    assert result.approvals == 2


@pytest_services
async def test_per_tool_timeout_rejects(temporal_client: Client) -> None:
    """A short interrupt_on timeout beats the (unbounded) workflow default."""
    model = scripted(calls(("w", "write_file", {"file_path": "/a.txt", "content": "x"})), final())
    input = agent_input(
        task="go",
        model=model,
        interrupt_on={"write_file": {"always": True, "timeout_seconds": 1, "on_timeout": "reject"}},
    )
    async with running_agent(temporal_client) as queue:
        result = await temporal_client.execute_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=queue
        )
    out = results(result)
    assert out["w"]["status"] == "error" and "timed out" in out["w"]["content"]
