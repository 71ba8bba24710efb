"""The execute gate through the Deep Agents adapter (issue 25, items 1 and 4).

The leak this reproduces: ``FilegateBackend`` carried a deny rule on
``/secrets/**`` with every call, and the file tools honoured it, but
``execute("cat secrets/key.txt")`` printed the secret, on a host shell and
in the bwrap sandbox alike. Now the constructor refuses rules a command
could bypass (:func:`filegate.kernel.execute_gate.check_execute_gate`), the
sandbox runs each command in the view the rules compile to, and a request
that slipped past the constructor is refused by the tools worker. A backend
that does not execute is a plain deepagents ``BackendProtocol``, so
deepagents' own ``FilesystemMiddleware(permissions=...)`` takes it.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

pytest.importorskip("deepagents")

with workflow.unsafe.imports_passed_through():
    from deepagents import FilesystemMiddleware, create_deep_agent
    from deepagents import FilesystemPermission as DeepagentsPermission
    from deepagents.backends.protocol import BackendProtocol, SandboxBackendProtocol

    from filegate.activities.stubs import tool_request
    from filegate.backends.bwrap import BwrapSandboxBackend
    from filegate.integrations.deepagents import (
        ExecuteGateFailure,
        FilegateBackend,
        FilegateFileBackend,
        Operation,
        OperationResult,
        OperationWorkflow,
        tools_worker,
    )
    from filegate.integrations.deepagents.backend import BackendOptions
    from filegate.integrations.deepagents.worker import sandbox_runner
    from filegate.kernel.execute_gate import ExecuteGateError
    from tests.integrations.test_deepagents_adapter import BACKEND, tools_queue  # noqa: F401
    from tests.workflows.test_execute_gate import DENY_DOCS, DENY_SECRETS, SECRET, WALK, plant, rule

SANDBOX = "sandbox"


@workflow.defn(sandboxed=True)
class GateInWorkflow:
    """Builds the adapter with a rule a host shell bypasses, as a workflow's graph would."""

    @workflow.run
    async def run(self, catch: bool) -> dict[str, Any]:
        try:
            FilegateBackend(backend=BACKEND, task_queue="unused", permissions=[DENY_SECRETS])
        except ExecuteGateError as refused:
            if not catch:
                raise
            return {"rule": refused.rule_number, "type": type(refused).__name__}
        return {}


@pytest_asyncio.fixture
async def sandbox_queue(
    temporal_client: Client, tmp_path: Path, _bwrap_ok: None
) -> AsyncIterator[tuple[str, Path]]:
    """A tools worker serving a planted root in the bwrap sandbox (``/workspace`` inside)."""
    root = plant(tmp_path / "sandbox-root")
    queue = f"dag-{uuid.uuid4().hex[:8]}"
    backends = {SANDBOX: BwrapSandboxBackend(root, check=False)}
    async with tools_worker(temporal_client, queue, backends, tmp_path / "journal"):
        yield queue, root


async def _operation(client: Client, op: Operation) -> OperationResult:
    result: OperationResult = await client.execute_workflow(
        OperationWorkflow.run,
        op,
        id=f"gate-op-{uuid.uuid4().hex[:8]}",
        task_queue=op.task_queue,
        execution_timeout=timedelta(seconds=60),
    )
    return result


@pytest.mark.services
async def test_the_sandbox_runs_each_command_in_the_view_the_rules_compile_to(
    temporal_client: Client, sandbox_queue: tuple[str, Path]
) -> None:
    queue, root = sandbox_queue
    bare = FilegateBackend(backend=SANDBOX, task_queue=queue, client=temporal_client)
    try:  # the control: without rules the sandbox shows the secret
        assert SECRET in (await bare.aexecute("cat secrets/key.txt")).output
    finally:
        bare.close()
    backend = FilegateBackend(
        backend=SANDBOX,
        task_queue=queue,
        client=temporal_client,
        mount="/workspace",
        sandboxed=True,
        permissions=[DENY_SECRETS, DENY_DOCS],
    )
    try:
        for command in ("cat /workspace/secrets/key.txt", "cat secrets/key.txt", WALK):
            done = await backend.aexecute(command)
            assert SECRET not in done.output, command  # printed the secret before the gate
        ok = await backend.aexecute("cat src/ok.txt")
        assert (ok.exit_code, ok.output) == (0, "fine")
        frozen = await backend.aexecute("echo x > docs/a.md")
        assert frozen.exit_code not in (0, None), frozen
        assert (root / "docs" / "a.md").read_text() == "doc\n"
        read = await backend.aread("/workspace/secrets/key.txt")  # the file tools agree
        assert read.error is not None and "permission denied" in read.error.lower()
    finally:
        backend.close()


def test_the_constructor_refuses_rules_a_command_could_bypass() -> None:
    where: dict[str, Any] = {"backend": BACKEND, "task_queue": "unused"}
    allow_all = rule("allow", ["read", "write"], "/**")
    with pytest.raises(ExecuteGateError) as host:
        FilegateBackend(**where, permissions=[allow_all, DENY_SECRETS])
    assert (host.value.rule_number, host.value.pattern) == (2, "/secrets/**")
    assert "permission rule 2" in str(host.value) and repr(BACKEND) in str(host.value)
    assert "sandboxed=True" in str(host.value)  # the adapter's own remedies
    assert not isinstance(host.value, ApplicationError)  # outside a workflow: plain
    with pytest.raises(ExecuteGateError, match="permission rule 1"):
        FilegateBackend(**where, permissions=[rule("interrupt", ["write"], "/docs/**")])
    with pytest.raises(ExecuteGateError, match="cannot be expressed as mounts") as sandbox:
        FilegateBackend(**where, sandboxed=True, permissions=[rule("deny", ["read"], "/**/*.env")])
    assert sandbox.value.rule_number == 1

    compiled = [DENY_SECRETS, DENY_DOCS, rule("deny", ["read"], "/config/token.txt")]
    assert FilegateBackend(**where, sandboxed=True, permissions=compiled).sandboxed
    assert FilegateBackend(**where, permissions=[allow_all]).can_execute  # allow protects nothing
    files_only = FilegateBackend(**where, can_execute=False, permissions=[DENY_SECRETS])
    assert files_only.calls.permissions == [DENY_SECRETS]


@pytest.mark.services
async def test_the_worker_refuses_a_host_shell_command_that_bypassed_the_constructor(
    temporal_client: Client, tools_queue: str, workspace: Path
) -> None:
    plant(workspace)
    where: dict[str, Any] = {
        "backend": BACKEND,
        "task_queue": tools_queue,
        "client": temporal_client,
    }
    with pytest.raises(ExecuteGateError) as refused:
        FilegateBackend(**where, permissions=[DENY_SECRETS])
    assert refused.value.rule_number == 1 and "permission rule 1" in str(refused.value)

    backend = FilegateBackend(**where)
    try:
        ok = await backend.aexecute("cat src/ok.txt")  # no rule: the host shell runs it
        assert (ok.exit_code, ok.output) == (0, "fine")
        backend.calls.permissions = [DENY_SECRETS]  # past the constructor's check
        done = await backend.aexecute("cat secrets/key.txt")
        assert SECRET not in done.output and "execute refused" in done.output
    finally:
        backend.close()

    # The typed request straight to the worker, no adapter object at all.
    request = tool_request(
        "execute",
        {"command": "cat secrets/key.txt"},
        backend=BACKEND,
        tool_call_id="",
        permissions=[DENY_SECRETS],
    )
    result = await _operation(temporal_client, Operation(task_queue=tools_queue, tool=request))
    assert result.outcome is not None
    assert SECRET not in result.outcome.content and "execute refused" in result.outcome.content


@pytest.mark.services
async def test_inside_a_workflow_the_constructor_fails_that_workflow(
    temporal_client: Client,
) -> None:
    queue = f"dag-wf-{uuid.uuid4().hex[:8]}"
    worker = Worker(
        temporal_client,
        task_queue=queue,
        workflows=[GateInWorkflow],
        workflow_runner=sandbox_runner(),
    )
    options: dict[str, Any] = {"task_queue": queue, "execution_timeout": timedelta(seconds=30)}
    async with worker:
        caught = await temporal_client.execute_workflow(
            GateInWorkflow.run, True, id=f"gate-{uuid.uuid4().hex[:8]}", **options
        )
        assert caught == {"rule": 1, "type": ExecuteGateFailure.__name__}
        with pytest.raises(WorkflowFailureError) as failed:  # not a workflow task retried forever
            await temporal_client.execute_workflow(
                GateInWorkflow.run, False, id=f"gate-{uuid.uuid4().hex[:8]}", **options
            )
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "InvalidConfiguration" and cause.non_retryable
    assert "permission rule 1 (deny read /secrets/**)" in cause.message


def test_without_execute_the_backend_is_no_sandbox_so_deepagents_rules_apply() -> None:
    where: dict[str, Any] = {"backend": BACKEND, "task_queue": "unused"}
    rules = [DeepagentsPermission(operations=["read"], paths=["/secrets/**"], mode="deny")]
    files = FilegateBackend(**where, can_execute=False)
    assert type(files) is FilegateFileBackend and isinstance(files, BackendProtocol)
    assert not isinstance(files, SandboxBackendProtocol)
    assert not hasattr(files, "execute") and not hasattr(files, "aexecute")
    assert not files.can_execute and not files.sandboxed
    FilesystemMiddleware(backend=files, permissions=rules)  # no NotImplementedError

    # Why: deepagents refuses its rules next to any backend that executes.
    shell = FilegateBackend(**where, sandboxed=True)
    assert isinstance(shell, SandboxBackendProtocol) and shell.can_execute
    with pytest.raises(NotImplementedError, match="command execution"):
        FilesystemMiddleware(backend=shell, permissions=rules)

    with pytest.raises(ValueError, match="sandboxed needs can_execute"):
        FilegateBackend(**where, can_execute=False, sandboxed=True)

    class Custom(FilegateBackend):
        pass

    with pytest.raises(TypeError, match="subclass FilegateFileBackend"):
        Custom(**where, can_execute=False)


def test_backend_options_name_every_argument_of_the_file_backend() -> None:
    """``FilegateBackend``'s typed ``**options`` and ``FilegateFileBackend.__init__`` agree."""
    import inspect

    params = inspect.signature(FilegateFileBackend.__init__).parameters
    assert set(BackendOptions.__annotations__) == set(params) - {"self"}
    required = {name for name, p in params.items() if p.default is inspect.Parameter.empty}
    assert BackendOptions.__required_keys__ == required - {"self"}


@pytest.mark.services
async def test_an_agent_with_deepagents_permissions_runs_on_the_file_backend(
    temporal_client: Client, tools_queue: str, workspace: Path
) -> None:
    """create_deep_agent(permissions=...) over Filegate files: reads work, rules hold, no shell."""
    folder = str(Path(__file__).resolve().parents[2] / "docs" / "examples")
    if folder not in sys.path:
        sys.path.append(folder)
    from deepagents_agent import ScriptedModel, _call  # type: ignore[import-not-found]
    from langchain_core.messages import AIMessage

    plant(workspace)
    backend = FilegateBackend(
        backend=BACKEND,
        task_queue=tools_queue,
        client=temporal_client,
        can_execute=False,
        permissions=[DENY_SECRETS],
    )
    script = [
        _call("read_file", {"file_path": "/secrets/key.txt"}, "1"),
        _call("read_file", {"file_path": "/src/ok.txt"}, "2"),
        _call("execute", {"command": "cat secrets/key.txt"}, "3"),
        AIMessage(content="done"),
    ]
    agent = create_deep_agent(
        model=ScriptedModel(responses=script),
        backend=backend,
        permissions=[DeepagentsPermission(operations=["read"], paths=["/secrets/**"], mode="deny")],
    )
    try:
        state = await agent.ainvoke({"messages": [{"role": "user", "content": "Look around."}]})
    finally:
        backend.close()
    texts = {
        m.tool_call_id: str(m.content)
        for m in state["messages"]
        if type(m).__name__ == "ToolMessage"
    }
    assert set(texts) == {"1", "2", "3"}
    assert SECRET not in "".join(texts.values())
    assert "denied" in texts["1"].lower()
    assert "fine" in texts["2"]
    assert "not support" in texts["3"].lower()  # no execute: deepagents says so
