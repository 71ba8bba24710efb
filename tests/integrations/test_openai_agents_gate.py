"""``execute`` through the OpenAI Agents SDK adapter: the rules hold, or the run is refused.

The leak these reproduce: a deny rule on ``/secrets/**`` next to a backend
that can execute (a tools worker serving a host shell), and the model's
``execute {"command": "cat secrets/key.txt"}`` through the adapter returned
the secret. Now the configuration is refused before the model is first asked
(so before any tool runs), and the host workflow fails with one
non-retryable ``InvalidConfiguration`` error naming the rule and the backend,
whether the agent's tools are built in the workflow's ``run`` (the docs'
example) or in its ``@workflow.init``. Gating every command
(``interrupt_on.execute: always``) or serving the backend with the bubblewrap
sandbox (``sandboxed=True``) is accepted, and there the secret stays out of
the command's reach.

Same harness as ``tests/integrations/test_openai_agents.py``: a real Temporal dev server,
real tools workers, ``OpenAIAgentsPlugin``'s model activity calling a local
HTTP server that speaks the Responses API with canned answers. "Nowhere"
means: not in the workflow's result or failure, not in any byte of its
history (payloads included), and not in anything the "model" received.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    # The sandbox re-imports this module for the workflow below: share the rest.
    from agents import Agent, FunctionTool, RunConfig, RunContextWrapper, Runner
    from temporalio.openai_agents import OpenAIAgentsPlugin
    from temporalio.worker import Replayer, Worker

    from filegate.backends.bwrap import BwrapSandboxBackend
    from filegate.backends.local_shell import LocalShellBackend
    from filegate.devstack.servers import TemporalDevServer
    from filegate.integrations.openai_agents import (
        FileToolsRunner,
        filegate_instructions,
        filegate_tools,
    )
    from filegate.kernel.messages import Message
    from filegate.kernel.permissions import FilesystemPermission
    from filegate.workflows.file_tools import FileTools, FileToolsConfig
    from filegate.workflows.gate import ToolInterrupt
    from filegate.workflows.inputs import BackendRef, BackendSpec, Decision, PendingApproval
    from tests.integrations.test_openai_agents import (
        agent_input,
        assistant,
        decide,
        example,  # noqa: F401  (a fixture)
        function_call,
        plugin_client,
        responses_body,
        tool_outputs,
        tools_queue,
    )
    from tests.providers_http import FakeModelServer

SECRET = "TOPSECRET-" + uuid.uuid4().hex
DENY_SECRETS = FilesystemPermission(operations=["read"], paths=["/secrets/**"], mode="deny")
MODEL = "gpt-test"
CHECKED_IN = {"run": "in filegate_tools", "init": "in is_enabled"}
"""The frame that raised the refusal, by where the workflow builds its agent's tools."""


@workflow.defn
class AgentBuiltInInit:
    """The docs' example workflow with the whole agent built in ``@workflow.init``.

    Nothing may raise there (most exceptions would fail the workflow *task*,
    retried forever): the adapter leaves its check to the SDK's listing of
    the tools, in the run.
    """

    @workflow.init
    def __init__(self, task: str, files: FileToolsConfig) -> None:
        self.files = FileTools(files, messages=[Message(role="user", content=task)])
        runner = FileToolsRunner(self.files)
        self.agent = Agent(
            name="file-agent",
            instructions=filegate_instructions(runner),
            model=MODEL,
            tools=filegate_tools(runner),
        )

    @workflow.run
    async def run(self, task: str, files: FileToolsConfig) -> str:
        result = await Runner.run(self.agent, task, run_config=RunConfig(tracing_disabled=True))
        return str(result.final_output)


def plant(root: Path) -> Path:
    """A workspace with a secret under ``/secrets/`` and a harmless file under ``/src/``."""
    (root / "secrets").mkdir(parents=True)
    (root / "secrets" / "key.txt").write_text(SECRET)
    (root / "src").mkdir()
    (root / "src" / "ok.txt").write_text("fine\n")
    return root


def config(ref: BackendRef, **files: Any) -> FileToolsConfig:
    return FileToolsConfig(backend=BackendSpec(default=ref), permissions=[DENY_SECRETS], **files)


def shell_ref(queue: str, *, sandboxed: bool = False) -> BackendRef:
    return BackendRef(
        kind="remote", name="shell", task_queue=queue, can_execute=True, sandboxed=sandboxed
    )


def execute(call_id: str, command: str) -> dict[str, Any]:
    return function_call(call_id, "execute", command=command, timeout=None)


async def start(
    agent_client: Client, example: Any, built_in: str, files: FileToolsConfig, queue: str
) -> WorkflowHandle[Any, str]:
    """The agent run: the docs' example (tools built in ``run``) or :class:`AgentBuiltInInit`."""
    task = "read the key"
    workflow_id = f"agent-gate-{built_in}-{uuid.uuid4().hex[:8]}"
    if built_in == "run":
        return await agent_client.start_workflow(
            example.FileAgentWorkflow.run,
            agent_input(example, task, files.backend, **_settings(files)),
            id=workflow_id,
            task_queue=queue,
        )
    return await agent_client.start_workflow(
        AgentBuiltInInit.run, args=[task, files], id=workflow_id, task_queue=queue
    )


def _settings(files: FileToolsConfig) -> dict[str, Any]:
    return {"permissions": files.permissions, "interrupt_on": files.interrupt_on}


def agent_worker(agent_client: Client, example: Any, queue: str) -> Worker:
    workflows = [example.FileAgentWorkflow, AgentBuiltInInit]
    return Worker(agent_client, task_queue=queue, workflows=workflows)


async def history_bytes(handle: WorkflowHandle[Any, Any]) -> bytes:
    """Every event of the run's history as protobuf bytes: payloads raw, not base64."""
    history = await handle.fetch_history()
    return b"".join(event.SerializeToString() for event in history.events)


def received(server: FakeModelServer) -> str:
    return json.dumps([request.json for request in server.requests])


async def replay(example: Any, handle: WorkflowHandle[Any, Any]) -> None:
    replayer = Replayer(
        workflows=[example.FileAgentWorkflow, AgentBuiltInInit], plugins=[OpenAIAgentsPlugin()]
    )
    await replayer.replay_workflow(await handle.fetch_history())


# -- no server: where the check runs -----------------------------------------------------------


def offline_runner(files: FileToolsConfig) -> FileToolsRunner:
    """A runner built outside any workflow, as in ``@workflow.init``: no run task yet."""
    return FileToolsRunner(
        FileTools(
            files.model_copy(update={"approval_search_attributes": False}), register_handlers=False
        )
    )


def function_tools(runner: FileToolsRunner) -> list[FunctionTool]:
    return [tool for tool in filegate_tools(runner) if isinstance(tool, FunctionTool)]


def is_enabled(tool: FunctionTool) -> Any:
    check = tool.is_enabled
    assert callable(check)
    return check(RunContextWrapper(context=None), Agent(name="a"))


def test_tools_built_outside_the_run_check_the_config_when_the_sdk_lists_them() -> None:
    """Built outside a run (``@workflow.init``), the tools do not raise; the SDK's check
    that lists them, at the start of every turn and before the model call, does."""
    bad = offline_runner(config(shell_ref("q")))
    tools = function_tools(bad)
    assert "execute" in {t.name for t in tools}
    for tool in tools:
        with pytest.raises(ApplicationError) as refused:
            is_enabled(tool)
        assert refused.value.type == "InvalidConfiguration" and refused.value.non_retryable
        assert "rule 1 (deny read /secrets/**)" in refused.value.message
        assert "'shell'" in refused.value.message
    # Accepted (a gated execute too, run below: it needs a workflow to ask a human in).
    boxed = config(shell_ref("q", sandboxed=True))
    no_shell = config(shell_ref("q"), tools=["ls", "read_file"])
    for good in (boxed, no_shell):
        assert all(is_enabled(tool) is True for tool in function_tools(offline_runner(good)))


# -- end to end ------------------------------------------------------------------------------


@pytest.mark.services
@pytest.mark.parametrize("built_in", ["run", "init"])
async def test_a_host_shell_next_to_a_deny_rule_fails_the_run_before_the_model_is_asked(
    example: Any,
    temporal_server: TemporalDevServer,
    temporal_client: Client,
    tmp_path: Path,
    built_in: str,
) -> None:
    """The leak regression: the model's ``cat secrets/key.txt`` on a host shell next to
    ``deny read /secrets/**``. The run fails with ``InvalidConfiguration`` naming rule 1
    and the backend, before any model call (so before any tool); the secret is nowhere."""
    root = plant(tmp_path / "ws")
    with FakeModelServer() as server:
        server.queue(body=responses_body(execute("x", "cat secrets/key.txt")))
        server.queue(body=responses_body(assistant("done")))
        agent_client = await plugin_client(temporal_server, server)
        agent_queue = f"agent-{uuid.uuid4().hex[:8]}"
        async with (
            tools_queue(temporal_client, {"shell": LocalShellBackend(root)}) as queue,
            agent_worker(agent_client, example, agent_queue),
        ):
            files = config(shell_ref(queue))
            handle = await start(agent_client, example, built_in, files, agent_queue)
            with pytest.raises(WorkflowFailureError) as failed:
                await asyncio.wait_for(handle.result(), 60)
            history = await history_bytes(handle)

    cause = failed.value.cause
    assert isinstance(cause, ApplicationError), cause
    assert cause.type == "InvalidConfiguration" and cause.non_retryable, cause
    assert "rule 1 (deny read /secrets/**)" in cause.message and "'shell'" in cause.message
    # Where it was raised: building the tools in the run, or the SDK listing them.
    assert cause.failure is not None
    assert CHECKED_IN[built_in] in cause.failure.stack_trace
    assert server.requests == []  # refused before the model was first asked
    assert SECRET not in str(failed.value) and SECRET not in cause.message
    assert SECRET.encode() not in history
    assert SECRET not in received(server)
    await replay(example, handle)


async def approvals(handle: WorkflowHandle[Any, Any]) -> list[PendingApproval]:
    """The run's pending approvals, once there is one."""
    for _ in range(300):
        waiting = await handle.query("pending_approvals", result_type=list[PendingApproval])
        if waiting:
            return waiting
        await asyncio.sleep(0.05)
    raise AssertionError("no approval was ever pending")


@pytest.mark.services
@pytest.mark.parametrize("built_in", ["run", "init"])
async def test_gating_every_command_is_accepted_and_the_command_waits_for_a_human(
    example: Any,
    temporal_server: TemporalDevServer,
    temporal_client: Client,
    tmp_path: Path,
    built_in: str,
) -> None:
    """``interrupt_on.execute: always`` lets the rule stand next to the host shell: the run
    starts, the command waits for a reviewer (nothing ran before), a rejection reaches the
    model, and the run ends with the model's answer."""
    root = plant(tmp_path / "ws")
    with FakeModelServer() as server:
        server.queue(body=responses_body(execute("x", "cat secrets/key.txt")))
        server.queue(body=responses_body(assistant("not allowed, then")))
        agent_client = await plugin_client(temporal_server, server)
        agent_queue = f"agent-{uuid.uuid4().hex[:8]}"
        async with (
            tools_queue(temporal_client, {"shell": LocalShellBackend(root)}) as queue,
            agent_worker(agent_client, example, agent_queue),
        ):
            files = config(shell_ref(queue), interrupt_on={"execute": ToolInterrupt(always=True)})
            handle = await start(agent_client, example, built_in, files, agent_queue)
            (waiting,) = await approvals(handle)
            assert len(server.requests) == 1  # the model was asked; the command waits
            reason = "secrets stay put"
            rejection = Decision(id=waiting.id, decision="reject", reason=reason, reviewer="ana")
            await decide(handle, rejection)
            answer = await asyncio.wait_for(handle.result(), 60)
            history = await history_bytes(handle)

    assert waiting.tool == "execute" and waiting.args["command"] == "cat secrets/key.txt"
    assert answer == "not allowed, then"
    out = tool_outputs(server, 1)["x"]
    assert "rejected this tool call" in out and reason in out
    assert SECRET.encode() not in history and SECRET not in received(server)
    await replay(example, handle)


WALK = (
    "python3 -c 'import pathlib; "
    'print([p.read_text() for p in pathlib.Path(".").rglob("*") if p.is_file()])\''
)
"""A script printing every file it can read under the cwd (the workspace)."""


@pytest.mark.services
async def test_on_the_sandbox_the_rule_is_compiled_into_the_commands_view(
    example: Any,
    temporal_server: TemporalDevServer,
    temporal_client: Client,
    tmp_path: Path,
    _bwrap_ok: None,
) -> None:
    """``sandboxed=True`` on a bubblewrap tools worker: the run goes on, and every command
    runs in a view where ``/secrets`` is an empty directory, while the rest of the
    workspace (at ``/workspace``, the cwd) is there."""
    root = plant(tmp_path / "ws")
    commands = {
        "rel": "cat secrets/key.txt",
        "abs": "cat /workspace/secrets/key.txt",
        "ok": "cat src/ok.txt",
        "walk": WALK,
    }
    with FakeModelServer() as server:
        server.queue(body=responses_body(*(execute(i, c) for i, c in commands.items())))
        server.queue(body=responses_body(assistant("done")))
        agent_client = await plugin_client(temporal_server, server)
        agent_queue = f"agent-{uuid.uuid4().hex[:8]}"
        box = BwrapSandboxBackend(root, check=False)
        async with (
            tools_queue(temporal_client, {"shell": box}) as queue,
            agent_worker(agent_client, example, agent_queue),
        ):
            files = config(shell_ref(queue, sandboxed=True))
            handle = await start(agent_client, example, "run", files, agent_queue)
            answer = await asyncio.wait_for(handle.result(), 60)
            history = await history_bytes(handle)

    assert answer == "done"
    outputs = tool_outputs(server, 1)
    assert set(outputs) == set(commands)
    assert "No such file" in outputs["rel"] and "No such file" in outputs["abs"]
    assert "fine" in outputs["ok"] and "fine" in outputs["walk"]
    assert SECRET.encode() not in history and SECRET not in received(server)
    assert (root / "secrets" / "key.txt").read_text() == SECRET  # hidden, not touched
    await replay(example, handle)
