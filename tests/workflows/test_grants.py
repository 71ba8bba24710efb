# ruff: noqa: F811  (the ``stack`` fixture imported from tests.worker.test_policy_worker)
"""Grants (remembered approvals): the book, and the workflow paths that use it.

The unit tests pin the scope rules (default pattern, narrowing, execute's
exact command), expiry, revocation and what crosses continue-as-new. The
workflow tests run on the session Temporal server: an ``AgentWorkflow`` whose
later calls run unasked under a grant (and a deny rule before the interrupt
still denies), a ``FileTools`` host of our own with ``execute`` grants, a
worker restart and a continue-as-new that keep the grant, the tools worker's
audit log naming it, and expiry at workflow time (time-skipping server).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from filegate.backends.filesystem import FilesystemBackend
from filegate.kernel.permissions import FilesystemPermission
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import (
    AgentInput,
    AgentWorkflow,
    BackendSpec,
    Decision,
    FileToolsConfig,
    PendingApproval,
    UserMessage,
)
from filegate.workflows.approvals.grant_models import Grant, GrantRequest
from filegate.workflows.approvals.grants import (
    INACTIVE_KEPT,
    GrantBook,
    GrantRevocation,
    check_remember,
    grant_scope,
)
from filegate.workflows.runner import agent_runner
from tests.scripting import calls, scripted, uid
from tests.worker.test_policy_worker import Stack, audit_lines, stack  # noqa: F401  (stack: a fixture)
from tests.workflows.test_execute_gate import ToolListWorkflow, _load_example
from tests.workflows.test_workflow_e2e import (
    eventually,
    final,
    remote,
    results,
    running_agent,
)

DOCS = FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="interrupt")
SECRET = FilesystemPermission(operations=["write"], paths=["/docs/secret/**"], mode="deny")
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def rule_of(index: int, rule: FilesystemPermission) -> dict[str, Any]:
    """A pending approval's ``rule`` as the workflow records it (workflows/gate.py)."""
    return {"source": "permissions", **rule.model_dump(mode="json"), "index": index}


def approval(
    tool: str = "write_file", args: dict[str, Any] | None = None, rule: Any = None
) -> PendingApproval:
    return PendingApproval(
        id="a" * 16,
        tool=tool,
        args=args if args is not None else {"file_path": "/docs/a.md", "content": "x"},
        rule=rule if rule is not None else rule_of(1, DOCS),
        requested_at=T0.isoformat(),
        tool_call_id="c1",
    )


def approve(pattern: str | None = None, seconds: float | None = None) -> Decision:
    return Decision(
        id="a" * 16,
        decision="approve",
        reviewer="ana",
        via="cli",
        remember=GrantRequest(pattern=pattern, duration_seconds=seconds),
    )


def book() -> GrantBook:
    counter = iter(range(1000))
    return GrantBook(random_hex=lambda: f"{next(counter):08x}" + "0" * 24)


# --------------------------------------------------------------------------- scope


def test_the_default_scope_is_the_rules_pattern_or_the_exact_command() -> None:
    docs = approval().rule
    assert grant_scope("write_file", {"file_path": "/docs/a.md"}, docs, None) == (
        "path",
        "/docs/**",
    )
    # A search root the rule's pattern does not match: the root itself, escaped.
    assert grant_scope("ls", {"path": "/docs"}, docs, None) == ("path", "/docs")
    assert grant_scope("ls", {"path": "/d[1]"}, docs, None) == ("path", "/d\\[1\\]")
    always = {"source": "interrupt_on", "tool": "write_file", "always": True}
    assert grant_scope("write_file", {"file_path": "/x"}, always, None) == ("path", "/**")
    when = {"source": "interrupt_on", "when": [{"arg": "file_path", "glob": "/src/**"}]}
    assert grant_scope("write_file", {"file_path": "/src/a"}, when, None) == ("path", "/src/**")
    contains = {"source": "interrupt_on", "when": [{"arg": "content", "contains": "TODO"}]}
    assert grant_scope("write_file", {"file_path": "/a.txt"}, contains, None) == (
        "path",
        "/a.txt",
    )
    execute = {"source": "interrupt_on", "tool": "execute", "always": True}
    assert grant_scope("execute", {"command": "make test"}, execute, None) == (
        "command",
        "make test",
    )


def test_a_reviewer_pattern_must_lie_under_the_rules() -> None:
    docs = approval().rule
    args = {"file_path": "/docs/a.md"}
    assert grant_scope("write_file", args, docs, "/docs/*.md") == ("path", "/docs/*.md")
    assert grant_scope("write_file", args, docs, "/docs/sub/") == ("path", "/docs/sub")
    for broader in ("/**", "/other/**", "/{docs,etc}/*"):
        with pytest.raises(ValueError, match="broader than the rule's scope"):
            grant_scope("write_file", args, docs, broader)
    for invalid in ("docs/**", "/docs/../etc", "/~/x"):
        with pytest.raises(ValueError, match="remember pattern"):
            grant_scope("write_file", args, docs, invalid)
    pytest_only = {"source": "interrupt_on", "when": [{"arg": "command", "glob": "pytest*"}]}
    command = {"command": "pytest -q"}
    assert grant_scope("execute", command, pytest_only, "pytest -q *") == (
        "command_glob",
        "pytest -q *",
    )
    with pytest.raises(ValueError, match="must start with 'pytest'"):
        grant_scope("execute", command, pytest_only, "py*")


def test_remember_goes_with_approve_and_a_book() -> None:
    asked = approval()
    check_remember(approve(), asked, book())
    edit = approve().model_copy(update={"decision": "edit", "args": {}})
    with pytest.raises(ValueError, match="remember goes with approve, not edit"):
        check_remember(edit, asked, book())
    with pytest.raises(ValueError, match="keeps no grants"):
        check_remember(approve(), asked, None)
    with pytest.raises(ValueError, match="broader"):
        check_remember(approve("/**"), asked, book())


# --------------------------------------------------------------------------- the book


def test_a_grant_answers_its_rules_question_within_its_pattern_until_it_ends() -> None:
    grants = book()
    grant = grants.remember(approve(seconds=60), approval(), T0)
    assert grant.id == "g-00000000" and grant.rule == "permissions:1"
    assert grant.summary() == f"write_file /docs/** by ana via cli, until {grant.expires_at}"
    docs, other_rule = rule_of(1, DOCS), rule_of(0, DOCS)
    used = grants.use("write_file", {"file_path": "/docs/b.md"}, docs, T0)
    assert used is not None and used.approves
    assert used.note == f"[allowed by grant g-00000000 ({grant.summary()})]"
    assert used.approved_by == "ana via cli (grant g-00000000)"
    assert grants.use("write_file", {"file_path": "/src/b.md"}, docs, T0) is None
    assert grants.use("edit_file", {"file_path": "/docs/b.md"}, docs, T0) is None
    assert grants.use("write_file", {"file_path": "/docs/b.md"}, other_rule, T0) is None
    late = T0 + timedelta(seconds=60)
    assert grants.use("write_file", {"file_path": "/docs/b.md"}, docs, late) is None
    [listed] = grants.listing(late)
    assert (listed.status, listed.uses, listed.last_used_at) == ("expired", 1, T0.isoformat())


def test_execute_grants_match_the_command_and_are_no_human_approval() -> None:
    rule = {"source": "interrupt_on", "tool": "execute", "always": True}
    grants = book()
    exact = approval("execute", {"command": "make test"}, rule)
    grants.remember(approve(), exact, T0)
    used = grants.use("execute", {"command": "make test"}, rule, T0)
    assert used is not None and not used.approves and "execute 'make test'" in used.note
    assert "make test" not in used.approved_by  # the audit log never holds command text
    assert grants.use("execute", {"command": "make test && rm -rf /"}, rule, T0) is None
    grants.remember(approve("echo *"), exact, T0)
    echo = grants.use("execute", {"command": "echo hi"}, rule, T0)
    assert echo is not None and not echo.approves
    assert "execute matching 'echo *'" in echo.note


def test_revoking_and_what_crosses_continue_as_new() -> None:
    grants = book()
    for _ in range(INACTIVE_KEPT + 3):
        grants.remember(approve(), approval(), T0)
    live = grants.remember(approve(), approval(), T0)
    with pytest.raises(ValueError, match="no grant with id 'g-nope'"):
        grants.check_revoke(GrantRevocation(id="g-nope"))
    for grant in grants.grants[: INACTIVE_KEPT + 3]:
        grants.revoke(GrantRevocation(id=grant.id, reviewer="bo", via="ui"), T0)
    first = grants.grants[0].id
    with pytest.raises(ValueError, match=f"grant {first} was already revoked by bo via ui"):
        grants.check_revoke(GrantRevocation(id=first))
    carried = grants.carried(T0)
    assert len(carried) == INACTIVE_KEPT + 1 and carried[-1].id == live.id
    assert first not in {g.id for g in carried}  # the oldest inactive ones are dropped
    again = GrantBook(carried)
    used = again.use("write_file", {"file_path": "/docs/x"}, rule_of(1, DOCS), T0)
    assert used is not None and used.grant.id == live.id
    assert Grant.model_validate(carried[0].model_dump(mode="json")) == carried[0]


# --------------------------------------------------------------------------- in workflows


async def pending_one(handle: WorkflowHandle[Any, Any]) -> PendingApproval:
    [one] = await eventually(
        lambda: handle.query(AgentWorkflow.pending_approvals),
        lambda p: len(p) == 1 and not p[0].preview_pending,
    )
    return one


async def approve_remembering(
    handle: WorkflowHandle[Any, Any], pattern: str | None = None, seconds: float | None = None
) -> Grant:
    asked = await pending_one(handle)
    decision = Decision(
        id=asked.id,
        decision="approve",
        reviewer="ana",
        via="cli",
        remember=GrantRequest(pattern=pattern, duration_seconds=seconds),
    )
    ack = await handle.execute_update(AgentWorkflow.decide_update, decision)
    assert ack.grant is not None
    return ack.grant


async def idle(handle: WorkflowHandle[Any, Any], step: int) -> None:
    await eventually(
        lambda: handle.query(AgentWorkflow.status),
        lambda s: s.state == "idle" and s.step == step,
    )


def docs_agent(queue: str, *turns: dict[str, Any], **fields: Any) -> AgentInput:
    return AgentInput(
        task="write the docs",
        model=scripted(*turns),
        backend=BackendSpec(default=remote("fs", queue)),
        permissions=[SECRET, DOCS],
        **fields,
    )


def write(call_id: str, path: str) -> tuple[str, str, dict[str, Any]]:
    return (call_id, "write_file", {"file_path": path, "content": f"{call_id}\n"})


@asynccontextmanager
async def workers(client: Client, root: Path, journal: Path, queues: tuple[str, str]) -> Any:
    agent_q, tools_q = queues
    async with (
        agent_worker(client, agent_q),
        tools_worker(client, tools_q, {"fs": FilesystemBackend(root)}, journal),
    ):
        yield


@pytest.mark.services
async def test_an_agent_runs_granted_calls_unasked_until_revoked(
    temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    queues = (uid("agent"), uid("tools"))
    model_turns = (
        calls(write("w1", "/docs/a.md")),
        calls(write("w2", "/docs/b.md"), write("w3", "/docs/secret/k.md")),
        final("first"),
        calls(write("w4", "/docs/c.md")),
        final("second"),
    )
    input = docs_agent(queues[1], *model_turns, wait_for_messages=True)
    async with workers(temporal_client, root, tmp_path / "j", queues):
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=queues[0]
        )
        grant = await approve_remembering(handle)
        assert (grant.tool, grant.pattern, grant.created_by) == (
            "write_file",
            "/docs/**",
            "ana via cli",
        )
        await idle(handle, 3)
        [listed] = await handle.query(AgentWorkflow.grants)
        assert (listed.id, listed.uses, listed.status) == (grant.id, 1, "active")
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(AgentWorkflow.revoke_update, GrantRevocation(id="g-0"))
        revoked = await handle.execute_update(
            AgentWorkflow.revoke_update, GrantRevocation(id=grant.id, reviewer="bo", via="cli")
        )
        assert revoked.status == "revoked" and revoked.revoked_by == "bo via cli"
        await handle.execute_update(AgentWorkflow.add_message_update, UserMessage(content="more"))
        again = await pending_one(handle)  # revoked: asked again
        assert again.args["file_path"] == "/docs/c.md"
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=again.id, decision="reject", reason="no")
        )
        await idle(handle, 5)
        await handle.signal(AgentWorkflow.add_message_signal, UserMessage(end=True))
        result = await handle.result()
    out = results(result)
    assert out["w2"]["content"].startswith(f"[allowed by grant {grant.id} (write_file /docs/**")
    # The deny rule comes first: the grant's pattern covers the path, the deny still wins.
    assert out["w3"]["status"] == "error" and "denied" in out["w3"]["content"].lower()
    assert not (root / "docs" / "secret").exists()
    assert (root / "docs" / "b.md").read_text() == "w2\n"
    assert out["w4"]["status"] == "error" and not (root / "docs" / "c.md").exists()
    assert result.approvals == 2  # w1 and w4 asked; w2 ran on the grant


@pytest.mark.services
async def test_a_grant_survives_a_worker_restart_and_replays(
    temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    queues = (uid("agent"), uid("tools"))
    turns = (calls(write("w1", "/docs/a.md")), final("one"), calls(write("w2", "/docs/b.md")))
    input = docs_agent(queues[1], *turns, final("two"), wait_for_messages=True)
    async with workers(temporal_client, root, tmp_path / "j", queues):
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=queues[0]
        )
        grant = await approve_remembering(handle, "/docs/*.md")
        await idle(handle, 2)
    # Both workers are gone; a new pair picks the thread up, grant and all.
    async with workers(temporal_client, root, tmp_path / "j", queues):
        await handle.execute_update(AgentWorkflow.add_message_update, UserMessage(content="b"))
        await idle(handle, 4)
        await handle.signal(AgentWorkflow.add_message_signal, UserMessage(end=True))
        result = await handle.result()
    assert results(result)["w2"]["content"].startswith(f"[allowed by grant {grant.id}")
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(await handle.fetch_history())


@pytest.mark.services
async def test_continue_as_new_carries_the_grants(temporal_client: Client, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    queues = (uid("agent"), uid("tools"))
    turns = (calls(write("w1", "/docs/a.md")), calls(write("w2", "/docs/b.md")), final())
    input = docs_agent(queues[1], *turns, continue_as_new_after_steps=1)
    workflow_id = uid("wf")
    async with workers(temporal_client, root, tmp_path / "j", queues):
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=queues[0]
        )
        grant = await approve_remembering(handle)
        result = await handle.result()
        runs = [e async for e in temporal_client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    assert len(runs) == 3
    assert results(result)["w2"]["content"].startswith(f"[allowed by grant {grant.id}")
    assert result.approvals == 1


ContinuingWorkflow = _load_example("file_tools_host").ContinuingWorkflow


@asynccontextmanager
async def host_worker(client: Client) -> AsyncIterator[str]:
    queue = uid("host")
    async with Worker(
        client,
        task_queue=queue,
        workflows=[ToolListWorkflow, ContinuingWorkflow],
        workflow_runner=agent_runner(),
    ):
        yield queue


async def decide_host(
    handle: WorkflowHandle[Any, Any], command: str, decision: dict[str, Any]
) -> dict[str, Any]:
    """Decide the host's pending approval of ``command`` (by name: no typed stubs)."""
    [asked] = await eventually(
        lambda: handle.query("pending_approvals", result_type=list[dict[str, Any]]),
        lambda p: len(p) == 1 and not p[0].get("preview_pending"),
    )
    assert asked["args"].get("command", asked["args"].get("file_path")) == command
    ack: dict[str, Any] = await handle.execute_update(
        "decide", {"id": asked["id"], "reviewer": "ana", "via": "cli", **decision},
        result_type=dict[str, Any],
    )  # fmt: skip
    return ack


@pytest.mark.services
async def test_a_file_tools_host_carries_grants_across_continue_as_new(
    temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    writes = [
        {
            "id": f"w{n}",
            "name": "write_file",
            "args": {"file_path": f"/docs/{n}.md", "content": "x"},
        }
        for n in (1, 2)
    ]
    async with (
        tools_worker(temporal_client, tools_q := uid("tools"), {"fs": FilesystemBackend(root)},
                     tmp_path / "j"),
        host_worker(temporal_client) as host_q,
    ):  # fmt: skip
        config = FileToolsConfig(
            backend=BackendSpec(default=remote("fs", tools_q)), permissions=[DOCS]
        )
        handle = await temporal_client.start_workflow(
            ContinuingWorkflow.run, args=[config, writes, None], id=uid("host"), task_queue=host_q
        )
        ack = await decide_host(handle, "/docs/1.md", {"decision": "approve", "remember": {}})
        texts = await handle.result()
    assert texts[0].startswith(f"[allowed by grant {ack['grant']['id']}")
    assert (root / "docs" / "2.md").read_text() == "x"


@pytest.mark.services
async def test_the_audit_log_names_the_grant(stack: Stack) -> None:
    review = FilesystemPermission(operations=["write"], paths=["/review/**"], mode="interrupt")
    input = AgentInput(
        task="go",
        model=scripted(
            calls(write("a", "/review/a.txt")), calls(write("b", "/review/b.txt")), final()
        ),
        backend=BackendSpec(default=remote("files", stack.tools_queue)),
        permissions=[review],
    )
    handle = await stack.client.start_workflow(
        AgentWorkflow.run, input, id=uid("wf-audit"), task_queue=stack.agent_queue
    )
    grant = await approve_remembering(handle)
    await handle.result()
    records = {r["tool_call_id"]: r for r in audit_lines(stack)}
    assert records["1:0:a"]["approved_by"] == "ana via cli"
    assert records["2:0:b"]["approved_by"] == f"ana via cli (grant {grant.id})"
    assert records["2:0:b"]["outcome"] == "ok"


@pytest.mark.slow
async def test_a_grant_expires_at_workflow_time(time_env: WorkflowEnvironment) -> None:
    turns = (
        calls(write("w1", "/docs/a.md")),
        calls(write("w2", "/docs/b.md")),
        final("one"),
        calls(write("w3", "/docs/c.md")),
        final("two"),
    )
    input = AgentInput(
        task="go", model=scripted(*turns), permissions=[DOCS], wait_for_messages=True
    )
    async with running_agent(time_env.client) as queue:
        handle = await time_env.client.start_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=queue
        )
        grant = await approve_remembering(handle, seconds=60)
        await idle(handle, 3)
        await time_env.sleep(120)
        await handle.execute_update(AgentWorkflow.add_message_update, UserMessage(content="c"))
        asked = await pending_one(handle)  # expired: asked again
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=asked.id, decision="approve")
        )
        await idle(handle, 5)
        await handle.signal(AgentWorkflow.add_message_signal, UserMessage(end=True))
        result = await handle.result()
        [listed] = await handle.query(AgentWorkflow.grants)  # as of the run's last task
    assert listed.status == "expired" and listed.uses == 1
    out = results(result)
    assert out["w2"]["content"].startswith(f"[allowed by grant {grant.id} (write_file /docs/** by")
    assert "until 20" in out["w2"]["content"]
    assert out["w3"]["content"].startswith("[This call was approved by unknown")
