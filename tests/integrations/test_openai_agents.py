"""The OpenAI Agents SDK adapter: schemas and outputs, then agents under Temporal end to end.

The end-to-end tests run the workflow of ``docs/examples/openai_agents_example.py``
(the example the docs show: ``FileTools`` built in ``@workflow.init``, its tools
handed to an SDK ``Agent``) on the session's real Temporal dev server, with real
Filegate tools workers on temporary roots and ``OpenAIAgentsPlugin``'s model
activity calling a local HTTP server that speaks the Responses API (the SDK's
default for OpenAI models) or Chat Completions. The server's answers are
canned; what the tools did is checked where it happened: on disk, in the
approval handlers' answers, and in the tool outputs the SDK sent back to the
"model". Every recorded history replays.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import json
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from agents import FunctionTool, OpenAIProvider, ToolOutputImage, ToolOutputText
from agents.tool_context import ToolContext
from openai import AsyncOpenAI
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.worker import Replayer, Worker

from filegate.backends.filesystem import FilesystemBackend
from filegate.devstack.servers import TemporalDevServer
from filegate.integrations.openai_agents import (
    FileToolsRunner,
    ToolRunner,
    _parse_arguments,
    agents_data_converter,
    filegate_instructions,
    filegate_tools,
    strict_parameters,
    to_sdk_output,
)
from filegate.kernel.messages import RAW_ARGS_KEY, MediaBlock, TextBlock, ToolCall, ToolSpec
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.protocol import BackendProtocol
from filegate.kernel.tool_types import TOOL_ARGS, TOOL_ORDER, ToolName, ToolOutcome
from filegate.wiring.roles import file_tools
from filegate.worker import tools_worker
from filegate.workflows import FileTools, FileToolsConfig, ToolResult
from filegate.workflows.inputs import (
    BackendRef,
    BackendSpec,
    DecidedApproval,
    Decision,
    DecisionAck,
    PendingApproval,
    RouteSpec,
)
from filegate.workflows.tool_descriptions import tool_schema
from tests.providers_http import FakeModelServer


@pytest.fixture(scope="module")
def example() -> Any:
    """The docs' example module, importable by name (the workflow sandbox re-imports it)."""
    examples = Path(__file__).resolve().parents[2] / "docs" / "examples"
    if str(examples) not in sys.path:
        sys.path.insert(0, str(examples))
    return importlib.import_module("openai_agents_example")


# -- schemas, arguments and outputs (no server) ---------------------------------------------


def offline(backend: BackendSpec | BackendRef, **config: Any) -> FileToolsRunner:
    """A runner over a FileTools built outside any workflow: enough for the offer
    (no handlers registered, no run info read)."""
    spec = backend if isinstance(backend, BackendSpec) else BackendSpec(default=backend)
    files = FileToolsConfig(backend=spec, approval_search_attributes=False, **config)
    return FileToolsRunner(FileTools(files, register_handlers=False))


def tools_of(runner: ToolRunner) -> dict[str, FunctionTool]:
    return {t.name: t for t in filegate_tools(runner) if isinstance(t, FunctionTool)}


def test_every_tool_is_offered_strict_with_filegate_descriptions() -> None:
    runner = offline(BackendRef(kind="remote", name="ws", task_queue="q", can_execute=True))
    tools = tools_of(runner)
    assert list(tools) == list(TOOL_ORDER)
    for spec in runner.tools.specs():
        tool = tools[spec.name]
        assert tool.description == spec.description
        assert tool.strict_json_schema
        schema = tool.params_json_schema
        # Strict mode: every property required, nothing undeclared, no defaults left.
        assert schema["required"] == list(schema["properties"])
        assert schema["additionalProperties"] is False
        assert '"default":' not in json.dumps(schema)


def test_visibility_and_the_prompt_follow_the_backend() -> None:
    """A backend without execute offers no execute tool, and no prompt mentions it; the
    prompt is FileTools' own (with the shell's view of the routes when there is one)."""
    runner = offline(BackendRef(kind="remote", name="ws", task_queue="q"))
    assert "execute" not in tools_of(runner)
    assert "execute" not in filegate_instructions(runner)
    assert filegate_instructions(runner) == runner.tools.system_prompt()
    assert filegate_instructions(runner, " Be brief. ").endswith("\n\nBe brief.")
    whitelisted = offline(BackendRef(kind="local", name="ws"), tools=["ls", "write_file"])
    assert list(tools_of(whitelisted)) == ["ls", "read_file", "write_file"]
    assert "execute" not in tools_of(offline(BackendRef()))  # the State backend: no shell
    composite = BackendSpec(
        default=BackendRef(kind="remote", name="ws", task_queue="q", can_execute=True),
        routes=[RouteSpec(prefix="/mem/", backend=BackendRef())],
    )
    prompt = filegate_instructions(offline(composite))
    assert prompt == offline(composite).tools.system_prompt() and "/mem/" in prompt


async def test_calls_run_one_at_a_time_in_the_order_they_started() -> None:
    """The SDK starts a turn's calls together; they reach FileTools one by one, in order,
    even when a later call would finish first."""
    events: list[str] = []

    class Slow:
        def specs(self) -> list[ToolSpec]:
            return []

        async def run(self, call: ToolCall) -> ToolResult:
            events.append(f"start {call.id}")
            await asyncio.sleep(0.03 if call.id == "first" else 0)
            events.append(f"end {call.id}")
            return ToolResult(
                tool_call_id=call.id, name=call.name, outcome=ToolOutcome(content=call.id)
            )

    runner = FileToolsRunner(cast(FileTools, Slow()))
    outcomes = await asyncio.gather(
        *(runner.run("ls", {}, call_id) for call_id in ("first", "second", "third"))
    )
    assert [o.content for o in outcomes] == ["first", "second", "third"]
    assert events == [
        f"{edge} {c}" for c in ("first", "second", "third") for edge in ("start", "end")
    ]


@pytest.mark.parametrize("name", TOOL_ORDER)
async def test_null_means_the_default(name: ToolName) -> None:
    """Optional fields become nullable; a null sent back validates to Filegate's default."""
    original: dict[str, Any] = tool_schema(name)
    strict = strict_parameters(original)
    optional = set(original["properties"]) - set(original.get("required", []))
    for field in optional:
        assert {"type": "null"} in strict["properties"][field]["anyOf"]
    required = {f: _sample(original["properties"][f]) for f in original.get("required", [])}
    sent = {**required, **dict.fromkeys(optional)}

    class Recorder:
        def __init__(self) -> None:
            self.args: dict[str, Any] | None = None

        def specs(self) -> list[ToolSpec]:
            return [ToolSpec(name=name, description="d", parameters=original)]

        async def run(self, tool: str, args: dict[str, Any], call_id: str) -> str:
            self.args = args
            return "ok"

    recorder = Recorder()
    (tool,) = tools_of(recorder).values()
    context = ToolContext(
        context=None, tool_name=name, tool_call_id="call_1", tool_arguments=json.dumps(sent)
    )
    assert await tool.on_invoke_tool(context, json.dumps(sent)) == "ok"
    assert recorder.args == required
    model = TOOL_ARGS[name]
    assert model.model_validate(recorder.args) == model.model_validate(required)


def _sample(prop: dict[str, Any]) -> Any:
    return {"string": "/x", "integer": 1, "number": 1.0, "boolean": True}[prop["type"]]


def test_unparsable_arguments_reach_filegate_as_raw_text() -> None:
    assert _parse_arguments('{"file_path": "/a"', frozenset()) == {
        RAW_ARGS_KEY: '{"file_path": "/a"'
    }
    assert _parse_arguments("[1]", frozenset()) == {RAW_ARGS_KEY: "[1]"}
    assert _parse_arguments("", frozenset()) == {}


def test_outputs_keep_images_and_frames() -> None:
    png = base64.b64encode(b"\x89PNG fake").decode()
    image = MediaBlock(type="image", base64=png, mime_type="image/png", path="/a.png")
    assert to_sdk_output("plain") == "plain"
    assert to_sdk_output(ToolOutcome(content="text", status="error")) == "text"
    out = to_sdk_output(ToolOutcome(content=[TextBlock(text="Image /a.png"), image], media=[image]))
    assert isinstance(out, list)
    assert out[0] == ToolOutputText(text="Image /a.png")
    assert out[1] == out[2] == ToolOutputImage(image_url=f"data:image/png;base64,{png}")


# -- end to end: the docs' example under the plugin, a real tools worker ---------------------


def responses_body(*output: dict[str, Any]) -> dict[str, Any]:
    """A Responses API answer (``POST /v1/responses``), as much as the SDK reads."""
    return {
        "id": f"resp_{uuid.uuid4().hex[:8]}",
        "object": "response",
        "created_at": 1_700_000_000,
        "model": "gpt-test",
        "status": "completed",
        "output": list(output),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 20,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 25,
        },
    }


def function_call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(args),
        "status": "completed",
    }


def assistant(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{uuid.uuid4().hex[:8]}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def tool_outputs(server: FakeModelServer, request: int) -> dict[str, str]:
    """The function outputs the SDK sent in request ``request``, by call id."""
    items = server.requests[request].json["input"]
    return {
        item["call_id"]: item["output"]
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


@pytest.mark.services
async def test_example_agent_writes_and_reads_a_file(
    example: Any, temporal_server: TemporalDevServer, temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "workspace"
    root.mkdir()
    content = f"hello from the agent {uuid.uuid4().hex[:6]}\n"
    with FakeModelServer() as server:
        server.queue(
            body=responses_body(
                function_call("call_w", "write_file", file_path="/notes/hello.txt", content=content)
            )
        )
        server.queue(
            body=responses_body(
                function_call(
                    "call_r", "read_file", file_path="/notes/hello.txt", offset=None, limit=None
                )
            )
        )
        server.queue(body=responses_body(assistant("Wrote and read /notes/hello.txt.")))
        workflow_id = f"file-agent-{uuid.uuid4().hex[:8]}"
        answer = await example.run_example(
            temporal_server.address,
            root,
            "Write /notes/hello.txt, then read it back.",
            namespace=temporal_server.namespace,
            model_base_url=f"{server.url}/v1",
            api_key="test-key",
            model="gpt-test",
            workflow_id=workflow_id,
        )

    assert answer == "Wrote and read /notes/hello.txt."
    assert (root / "notes" / "hello.txt").read_text() == content
    assert [r.path for r in server.requests] == ["/v1/responses"] * 3

    first = server.requests[0].json
    assert first["model"] == "gpt-test"
    assert "virtual filesystem" in first["instructions"]
    offered = {t["name"]: t for t in first["tools"]}
    assert list(offered) == ["ls", "read_file", "write_file", "edit_file", "delete", "glob", "grep"]
    assert all(t["strict"] for t in offered.values())

    # What the tools really returned, as the model got it.
    assert "hello.txt" in tool_outputs(server, 1)["call_w"]
    read = tool_outputs(server, 2)["call_r"]
    assert content.strip() in read and read.lstrip().startswith("1")

    await replay(example, temporal_client.get_workflow_handle(workflow_id))


@pytest.mark.services
async def test_one_turn_keeps_order_and_refusals_reach_the_model(
    example: Any, temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    """Five calls in one model turn: the read sees the write before it; an edit of an
    unread file, a bad path and broken JSON come back as errors the model reads, and the
    run goes on."""
    root = tmp_path / "workspace"
    (root / "src").mkdir(parents=True)
    (root / "src" / "old.txt").write_text("untouched\n")
    with FakeModelServer() as server:
        server.queue(
            body=responses_body(
                function_call("w", "write_file", file_path="/a.txt", content="first\n"),
                function_call("r", "read_file", file_path="/a.txt", offset=None, limit=None),
                function_call(
                    "e",
                    "edit_file",
                    file_path="/src/old.txt",
                    old_string="untouched",
                    new_string="changed",
                    replace_all=None,
                ),
                function_call("p", "ls", path="../etc"),
                {**function_call("j", "glob"), "arguments": '{"pattern": '},
            )
        )
        server.queue(body=responses_body(assistant("done")))
        answer = await example.run_example(
            temporal_server.address,
            root,
            "Do several things at once.",
            namespace=temporal_server.namespace,
            model_base_url=f"{server.url}/v1",
            api_key="test-key",
            model="gpt-test",
        )

    assert answer == "done"
    outputs = tool_outputs(server, 1)
    assert set(outputs) == {"w", "r", "e", "p", "j"}
    assert "first" in outputs["r"]
    assert outputs["e"].startswith("Error") and "has not been read" in outputs["e"]
    assert (root / "src" / "old.txt").read_text() == "untouched\n"
    assert outputs["p"].startswith("Error")
    assert outputs["j"].startswith("Error") and "not valid JSON" in outputs["j"]
    assert (root / "a.txt").read_text() == "first\n"


# -- the example's workflow with approvals, a local backend, routes ----------------------------


async def plugin_client(
    temporal_server: TemporalDevServer, server: FakeModelServer, *, use_responses: bool = True
) -> Client:
    """A client carrying the plugin, its model activity calling ``server``."""
    openai_client = AsyncOpenAI(base_url=f"{server.url}/v1", api_key="test-key", max_retries=0)
    provider = OpenAIProvider(openai_client=openai_client, use_responses=use_responses)
    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=30)),
        model_provider=provider,
    )
    return await Client.connect(
        temporal_server.address,
        namespace=temporal_server.namespace,
        data_converter=agents_data_converter(pydantic_data_converter),
        plugins=[plugin],
    )


def workspace(root: Path, name: str = "workspace") -> dict[str, BackendProtocol]:
    return {name: FilesystemBackend(str(root), virtual_mode=True)}


@asynccontextmanager
async def tools_queue(client: Client, backends: dict[str, BackendProtocol]) -> AsyncIterator[str]:
    """A Filegate tools worker for ``backends`` on a fresh task queue (its name yielded)."""
    queue = f"tools-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as journal:
        async with tools_worker(client, queue, backends, journal):
            yield queue


def remote(queue: str, name: str = "workspace") -> BackendRef:
    return BackendRef(kind="remote", name=name, task_queue=queue)


def agent_input(example: Any, task: str, backend: BackendSpec | BackendRef, **files: Any) -> Any:
    """The example workflow's input: ``task`` on ``backend``, ``files`` the other settings."""
    spec = backend if isinstance(backend, BackendSpec) else BackendSpec(default=backend)
    config = FileToolsConfig(backend=spec, **files)
    return example.FileAgentInput(task=task, files=config, model="gpt-test")


async def pending(handle: WorkflowHandle[Any, Any], count: int) -> list[PendingApproval]:
    """The workflow's pending approvals, once there are ``count`` of them with their
    previews (an approval is listed first, its preview attached when computed)."""
    for _ in range(300):
        waiting = await handle.query("pending_approvals", result_type=list[PendingApproval])
        if len(waiting) == count and all(a.preview is not None for a in waiting):
            return waiting
        await asyncio.sleep(0.05)
    raise AssertionError(f"never {count} pending approvals; last: {waiting!r}")


async def decide(handle: WorkflowHandle[Any, Any], decision: Decision) -> DecisionAck:
    """Decide as a reviewer does: a refusal saying the preview is not shown yet
    (seen once, on a freshly restarted worker) is answered by deciding again."""
    for _ in range(50):
        try:
            return await handle.execute_update("decide", decision, result_type=DecisionAck)
        except WorkflowUpdateFailedError as error:
            if "preview is not ready" not in str(error.cause):
                raise
            await asyncio.sleep(0.1)
    raise AssertionError("the preview never became ready")


async def replay(example: Any, handle: WorkflowHandle[Any, Any]) -> None:
    """The recorded history replays on a fresh worker: the adapter is deterministic."""
    history = await handle.fetch_history()
    replayer = Replayer(workflows=[example.FileAgentWorkflow], plugins=[OpenAIAgentsPlugin()])
    await replayer.replay_workflow(history)


@pytest.mark.services
# The SDK leaves a no-op coroutine unawaited when a worker evicts a run mid-turn.
@pytest.mark.filterwarnings("ignore:coroutine 'noop_coroutine' was never awaited")
async def test_a_write_waits_for_a_reviewer_across_a_worker_restart(
    example: Any, temporal_server: TemporalDevServer, temporal_client: Client, tmp_path: Path
) -> None:
    """An ``interrupt`` rule makes the writes wait in ``on_invoke_tool``, listed with their
    change preview by Filegate's own approval handlers. The agent worker stops while the
    first waits; a fresh worker with no cached runs takes the ``decide`` update (approve),
    then the second write is rejected, and the model reads both answers."""
    root = tmp_path / "workspace"
    root.mkdir()
    task = "write the two docs"
    with FakeModelServer() as server:
        for call_id, name in (("ok", "a.md"), ("no", "b.md")):
            write = function_call(call_id, "write_file", file_path=f"/docs/{name}", content=name)
            server.queue(body=responses_body(write))
        server.queue(body=responses_body(assistant("one written, one refused")))
        agent_client = await plugin_client(temporal_server, server)
        agent_queue = f"agent-{uuid.uuid4().hex[:8]}"
        rule = FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="interrupt")

        def agent_worker() -> Worker:
            # No cached runs: the second worker must rebuild the waiting run from history.
            workflows = [example.FileAgentWorkflow]
            return Worker(
                agent_client, task_queue=agent_queue, workflows=workflows, max_cached_workflows=0
            )

        async with tools_queue(temporal_client, workspace(root)) as queue:
            async with agent_worker():
                handle = await agent_client.start_workflow(
                    example.FileAgentWorkflow.run,
                    agent_input(example, task, remote(queue), permissions=[rule]),
                    id=f"gated-{uuid.uuid4().hex[:8]}",
                    task_queue=agent_queue,
                )
                (first,) = await pending(handle, 1)
            assert not (root / "docs").exists()  # nothing runs before the decision
            assert first.tool == "write_file" and first.args["file_path"] == "/docs/a.md"
            assert first.task == task  # the card quotes the task
            assert first.preview is not None and first.preview.kind == "new_file"
            assert first.preview.diff is not None and "+a.md" in first.preview.diff
            async with agent_worker():
                approved = await decide(
                    handle, Decision(id=first.id, decision="approve", reviewer="ana")
                )
                (second,) = await pending(handle, 1)
                assert second.args["file_path"] == "/docs/b.md"
                reason = "b is not part of the plan"
                await decide(
                    handle, Decision(id=second.id, decision="reject", reason=reason, reviewer="bo")
                )
                answer = await handle.result()
                decided = await handle.query("decided_approvals", result_type=list[DecidedApproval])

    assert answer == "one written, one refused"
    assert not approved.changed_since_preview
    assert (root / "docs" / "a.md").read_text() == "a.md"
    assert not (root / "docs" / "b.md").exists()
    ok = tool_outputs(server, 1)["ok"]
    assert "approved by ana" in ok and "Successfully wrote /docs/a.md" in ok
    no = tool_outputs(server, 2)["no"]
    assert "rejected this tool call" in no and reason in no
    assert [(d.id, d.decision) for d in decided] == [(first.id, "approve"), (second.id, "reject")]
    await replay(example, handle)


@pytest.mark.services
async def test_a_local_backend_runs_its_tools_on_the_agent_worker(
    example: Any, temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    """``kind="local"``: the plugin's worker also hosts the file tools, as local activities.

    The permission rules apply as in ``AgentWorkflow``: a denied read never reaches the
    backend and the denied subtree is filtered out of searches; a denied write is refused;
    a read after a write in the same turn sees it.
    """
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "data.txt").write_text("alpha\nbeta\n")
    (root / "secret").mkdir()
    (root / "secret" / "key.txt").write_text("beta key\n")
    rules = [
        FilesystemPermission(operations=["read"], paths=["/secret/**"], mode="deny"),
        FilesystemPermission(operations=["write"], paths=["/data.txt"], mode="deny"),
    ]
    read = {"offset": None, "limit": None}
    with FakeModelServer() as server:
        server.queue(
            body=responses_body(
                function_call(
                    "g",
                    "grep",
                    pattern="beta",
                    path=None,
                    glob=None,
                    output_mode="content",
                    max_count=None,
                ),
                function_call("l", "ls", path=None),
                function_call("s", "read_file", file_path="/secret/key.txt", **read),
                function_call("d", "write_file", file_path="/data.txt", content="gone"),
                function_call("w", "write_file", file_path="/new.txt", content="fresh\n"),
                function_call("r", "read_file", file_path="/new.txt", **read),
            )
        )
        server.queue(body=responses_body(assistant("found it")))
        agent_client = await plugin_client(temporal_server, server)
        queue = f"agent-{uuid.uuid4().hex[:8]}"
        with tempfile.TemporaryDirectory() as journal:
            tools = file_tools(workspace(root), journal, None, None).activities()
            worker = Worker(
                agent_client,
                task_queue=queue,
                workflows=[example.FileAgentWorkflow],
                activities=tools,
            )
            async with worker:
                local = BackendRef(kind="local", name="workspace")
                handle = await agent_client.start_workflow(
                    example.FileAgentWorkflow.run,
                    agent_input(example, "find beta", local, permissions=rules),
                    id=f"local-{uuid.uuid4().hex[:8]}",
                    task_queue=queue,
                )
                assert await handle.result() == "found it"

    outputs = tool_outputs(server, 1)
    assert "data.txt" in outputs["g"] and "beta" in outputs["g"] and "alpha" not in outputs["g"]
    assert "key.txt" not in outputs["g"]  # the denied subtree is filtered out of results
    assert "data.txt" in outputs["l"]
    assert outputs["s"].startswith("Error") and "beta key" not in outputs["s"]
    assert outputs["d"].startswith("Error")
    assert (root / "data.txt").read_text() == "alpha\nbeta\n"
    assert "fresh" in outputs["r"] and (root / "new.txt").read_text() == "fresh\n"
    history = [e.event_type for e in (await handle.fetch_history()).events]
    assert EventType.EVENT_TYPE_MARKER_RECORDED in history  # local activities leave markers
    await replay(example, handle)


@pytest.mark.services
async def test_routes_reach_a_second_tools_worker(
    example: Any, temporal_server: TemporalDevServer, temporal_client: Client, tmp_path: Path
) -> None:
    """A composite backend: ``/memories/`` is served by another tools worker on its own
    task queue; a listing and a search over ``/`` fan out to both."""
    main_root, mem_root = tmp_path / "main", tmp_path / "mem"
    main_root.mkdir()
    mem_root.mkdir()
    with FakeModelServer() as server:
        server.queue(
            body=responses_body(
                function_call("m", "write_file", file_path="/memories/note.md", content="keep\n"),
                function_call("a", "write_file", file_path="/a.txt", content="here\n"),
            )
        )
        server.queue(
            body=responses_body(
                function_call("l", "ls", path="/"),
                function_call(
                    "g",
                    "grep",
                    pattern="e",
                    path=None,
                    glob=None,
                    output_mode="files_with_matches",
                    max_count=None,
                ),
            )
        )
        server.queue(body=responses_body(assistant("remembered")))
        agent_client = await plugin_client(temporal_server, server)
        agent_queue = f"agent-{uuid.uuid4().hex[:8]}"
        async with AsyncExitStack() as stack:
            main_q = await stack.enter_async_context(
                tools_queue(temporal_client, workspace(main_root, "main"))
            )
            mem_q = await stack.enter_async_context(
                tools_queue(temporal_client, workspace(mem_root, "mem"))
            )
            await stack.enter_async_context(
                Worker(agent_client, task_queue=agent_queue, workflows=[example.FileAgentWorkflow])
            )
            spec = BackendSpec(
                default=remote(main_q, "main"),
                routes=[RouteSpec(prefix="/memories/", backend=remote(mem_q, "mem"))],
            )
            handle = await agent_client.start_workflow(
                example.FileAgentWorkflow.run,
                agent_input(example, "remember", spec),
                id=f"routes-{uuid.uuid4().hex[:8]}",
                task_queue=agent_queue,
            )
            answer = await handle.result()

    assert answer == "remembered"
    assert (mem_root / "note.md").read_text() == "keep\n"
    assert (main_root / "a.txt").read_text() == "here\n"
    assert not (main_root / "memories").exists()
    outputs = tool_outputs(server, 2)
    listing = outputs["l"].splitlines()
    assert "/memories/" in listing and "/a.txt" in listing
    found = outputs["g"].splitlines()
    assert "/memories/note.md" in found and "/a.txt" in found
    await replay(example, handle)


def chat_completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    """A Chat Completions answer (``POST /v1/chat/completions``)."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:8]}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    }


@pytest.mark.services
async def test_chat_completions_servers_work_too(
    example: Any, temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    """``use_responses=False``, for servers that speak only Chat Completions."""
    root = tmp_path / "workspace"
    root.mkdir()
    arguments = json.dumps({"file_path": "/out.txt", "content": "via chat\n"})
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "write_file", "arguments": arguments},
    }
    with FakeModelServer() as server:
        server.queue(
            body=chat_completion(
                {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
            )
        )
        server.queue(body=chat_completion({"role": "assistant", "content": "written"}, "stop"))
        agent_client = await plugin_client(temporal_server, server, use_responses=False)
        queue = f"agent-{uuid.uuid4().hex[:8]}"
        with tempfile.TemporaryDirectory() as journal:
            tools = file_tools(workspace(root), journal, None, None).activities()
            async with Worker(
                agent_client,
                task_queue=queue,
                workflows=[example.FileAgentWorkflow],
                activities=tools,
            ):
                answer = await agent_client.execute_workflow(
                    example.FileAgentWorkflow.run,
                    agent_input(example, "write", BackendRef(kind="local", name="workspace")),
                    id=f"chat-{uuid.uuid4().hex[:8]}",
                    task_queue=queue,
                )

    assert answer == "written"
    assert (root / "out.txt").read_text() == "via chat\n"
    assert [r.path for r in server.requests] == ["/v1/chat/completions"] * 2
    (tool,) = [t for t in server.requests[0].json["tools"] if t["function"]["name"] == "write_file"]
    assert tool["function"]["strict"] is True
    (reply,) = [m for m in server.requests[1].json["messages"] if m["role"] == "tool"]
    assert reply["tool_call_id"] == "c1" and "Successfully wrote /out.txt" in reply["content"]


def test_the_docs_show_the_workflow_the_tests_run() -> None:
    """Every line of the guide's workflow block is in the example, in order."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    guide = (docs / "openai-agents.md").read_text()
    shown = guide.split("```python\n", 1)[1].split("```", 1)[0]
    example_lines = iter((docs / "examples" / "openai_agents_example.py").read_text().splitlines())
    for line in filter(str.strip, shown.splitlines()):
        assert any(line == candidate for candidate in example_lines), line
