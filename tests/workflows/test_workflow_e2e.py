"""AgentWorkflow end to end on a real Temporal dev server with in-process workers.

Scripted model runs exercise every tool on State, Filesystem, LocalShell and
a composite spread over two task queues; the permission gate and the four
approval decisions (signal and update); durability of a pending approval
across worker restarts; and replay of the recorded histories.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.local_shell import LocalShellBackend
from filegate.kernel import wire
from filegate.kernel.messages import RAW_ARGS_KEY, ModelRequest, ModelSpec
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.protocol import BackendProtocol
from filegate.kernel.tool_types import ToolBatch, ToolRequest
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import (
    AgentInput,
    AgentResult,
    AgentWorkflow,
    ApprovalConfig,
    BackendRef,
    BackendSpec,
    Decision,
    Limits,
    RouteSpec,
    UserMessage,
)
from filegate.workflows.inputs import RuleTimeout
from filegate.workflows.runner import sandboxed_runner
from tests.scripting import calls, scripted, uid

pytestmark = pytest.mark.services

REPLAY_IDS: list[str] = []
"""Workflow ids of completed runs, replayed by test_replay_histories."""


def final(text: str = "done") -> dict[str, Any]:
    return {"content": text}


def results(result: AgentResult) -> dict[str, dict[str, Any]]:
    """Tool results of a transcript keyed by tool call id."""
    return {m["tool_call_id"]: m for m in result.transcript if m["role"] == "tool"}


def remote(name: str, queue: str, *, execute: bool = False, shell: str | None = None) -> BackendRef:
    return BackendRef(
        kind="remote", name=name, task_queue=queue, can_execute=execute, shell_path=shell
    )


@asynccontextmanager
async def running_agent(client: Client) -> AsyncIterator[str]:
    queue = uid("agent")
    async with agent_worker(client, queue):
        yield queue


@asynccontextmanager
async def running_tools(
    client: Client, backends: dict[str, BackendProtocol], journal: Path
) -> AsyncIterator[str]:
    queue = uid("tools")
    async with tools_worker(client, queue, backends, journal):
        yield queue


async def run_agent(client: Client, queue: str, input: AgentInput) -> AgentResult:
    workflow_id = uid("wf")
    result = await client.execute_workflow(
        AgentWorkflow.run, input, id=workflow_id, task_queue=queue
    )
    REPLAY_IDS.append(workflow_id)
    return result


async def eventually(
    probe: Callable[[], Any], check: Callable[[Any], bool], timeout: float = 30.0
) -> Any:
    """Poll ``probe`` until ``check`` accepts its value."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await probe()
        if check(value):
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met in {timeout}s; last value: {value!r}")
        await asyncio.sleep(0.1)


async def pending(handle: WorkflowHandle[Any, Any], count: int) -> list[Any]:
    """``count`` pending approvals, each showing its preview (an approve or edit
    sent while a preview is computed is refused: contract §5)."""
    return await eventually(
        lambda: handle.query(AgentWorkflow.pending_approvals),
        lambda p: len(p) == count and not any(a.preview_pending for a in p),
    )


# --------------------------------------------------------------------------- every tool


async def test_state_backend_every_tool(temporal_client: Client) -> None:
    model = scripted(
        calls(
            ("w1", "write_file", {"file_path": "/notes/a.txt", "content": "hello\nworld\n"}),
            ("w2", "write_file", {"file_path": "/notes/b.md", "content": "# t\nhello again\n"}),
        ),
        calls(
            ("l1", "ls", {"path": "/notes"}),
            ("r1", "read_file", {"file_path": "/notes/a.txt"}),
            ("g1", "glob", {"pattern": "*.txt"}),
            ("s1", "grep", {"pattern": "hello", "output_mode": "content"}),
        ),
        calls(
            (
                "e1",
                "edit_file",
                {"file_path": "/notes/a.txt", "old_string": "world", "new_string": "there"},
            )
        ),
        calls(
            ("r2", "read_file", {"file_path": "/notes/a.txt"}),
            ("d1", "delete", {"file_path": "/notes/b.md"}),
            ("l2", "ls", {"path": "/notes"}),
            ("x1", "execute", {"command": "ls"}),
        ),
        final("all done"),
    )
    async with running_agent(temporal_client) as queue:
        result = await run_agent(temporal_client, queue, AgentInput(task="go", model=model))
    assert result.stop_reason == "final_answer"
    assert result.final_answer == "all done"
    assert result.steps == 5 and result.tool_calls == 11
    out = results(result)
    assert out["l1"]["content"].splitlines() == ["/notes/a.txt", "/notes/b.md"]
    assert "1  hello" in out["r1"]["content"] and "2  world" in out["r1"]["content"]
    assert out["g1"]["content"] == "/notes/a.txt"
    assert "/notes/a.txt:" in out["s1"]["content"] and "2: hello again" in out["s1"]["content"]
    assert out["e1"]["status"] == "success"
    assert "there" in out["r2"]["content"] and "world" not in out["r2"]["content"]
    assert out["d1"]["status"] == "success"
    assert out["l2"]["content"] == "/notes/a.txt"
    # execute is not visible on State: an unknown-tool error, and the run goes on.
    assert out["x1"]["status"] == "error" and "unknown tool" in out["x1"]["content"]
    assert result.tool_errors == 1
    roles = [m["role"] for m in result.transcript]
    assert roles[0] == "user" and roles[-1] == "assistant"


async def test_filesystem_backend_every_tool(temporal_client: Client, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\nTODO: fix\n")
    model = scripted(
        calls(
            (
                "e0",
                "edit_file",
                {"file_path": "/src/app.py", "old_string": "TODO", "new_string": "DONE"},
            ),
            ("l1", "ls", {"path": "/"}),
            ("g1", "glob", {"pattern": "**/*.py"}),
            ("s1", "grep", {"pattern": "TODO"}),
        ),
        calls(
            ("r1", "read_file", {"file_path": "/src/app.py"}),
            (
                "e1",
                "edit_file",
                {"file_path": "/src/app.py", "old_string": "TODO", "new_string": "DONE"},
            ),
            ("w1", "write_file", {"file_path": "/out/new.txt", "content": "fresh"}),
            (
                "e2",
                "edit_file",
                {"file_path": "/out/new.txt", "old_string": "fresh", "new_string": "stale"},
            ),
        ),
        calls(("d1", "delete", {"file_path": "/out"}), ("b1", "read_file", {"path": "/x"})),
        final(),
    )
    async with (
        running_agent(temporal_client) as queue,
        running_tools(temporal_client, {"fs": FilesystemBackend(root)}, tmp_path / "j") as tq,
    ):
        spec = BackendSpec(default=remote("fs", tq))
        result = await run_agent(
            temporal_client, queue, AgentInput(task="go", model=model, backend=spec)
        )
    out = results(result)
    # Editing before reading is refused by the workflow; the file is untouched then.
    assert out["e0"]["status"] == "error" and "read_file" in out["e0"]["content"]
    assert set(out["l1"]["content"].splitlines()) == {"/src/"}
    assert out["g1"]["content"] == "/src/app.py"
    assert out["s1"]["content"] == "/src/app.py"
    assert out["e1"]["status"] == "success"
    assert (root / "src" / "app.py").read_text() == "print('hi')\nDONE: fix\n"
    assert out["e2"]["status"] == "success"  # written files count as read
    assert out["d1"]["status"] == "success" and not (root / "out").exists()
    assert out["b1"]["status"] == "error" and "file_path" in out["b1"]["content"]
    assert result.stop_reason == "final_answer"


async def test_local_shell_execute(temporal_client: Client, tmp_path: Path) -> None:
    root = tmp_path / "shell"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    model = scripted(
        calls(("x1", "execute", {"command": "cat a.txt && echo made > b.txt"})),
        calls(
            ("x2", "execute", {"command": "exit 3"}),
            ("x3", "execute", {"command": "true", "timeout": 99999}),
            ("r1", "read_file", {"file_path": "/b.txt"}),
        ),
        final(),
    )
    async with (
        running_agent(temporal_client) as queue,
        running_tools(temporal_client, {"sh": LocalShellBackend(root)}, tmp_path / "j") as tq,
    ):
        spec = BackendSpec(default=remote("sh", tq, execute=True, shell=str(root)))
        result = await run_agent(
            temporal_client, queue, AgentInput(task="go", model=model, backend=spec)
        )
    out = results(result)
    assert "alpha" in out["x1"]["content"] and "exit code 0" in out["x1"]["content"]
    assert "exit code 3" in out["x2"]["content"]
    assert out["x3"]["status"] == "error" and "timeout" in out["x3"]["content"]
    assert "made" in out["r1"]["content"]
    assert (root / "b.txt").read_text() == "made\n"


def _model_requests(history: Any) -> list[ModelRequest]:
    """Decode the inputs of every model activity scheduled in a history."""
    found: list[ModelRequest] = []
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        attrs = event.activity_task_scheduled_event_attributes
        if attrs.activity_type.name != "filegate.model":
            continue
        payloads = list(attrs.input.payloads)
        [request] = pydantic_data_converter.payload_converter.from_payloads(
            payloads, [ModelRequest]
        )
        found.append(request)
    return found


async def test_composite_across_two_task_queues(temporal_client: Client, tmp_path: Path) -> None:
    shell_root = tmp_path / "shell"
    mem_root = tmp_path / "mem"
    shell_root.mkdir()
    mem_root.mkdir()
    model = scripted(
        calls(
            ("w1", "write_file", {"file_path": "/memories/x.md", "content": "remember\n"}),
            ("w2", "write_file", {"file_path": "/top.txt", "content": "top\n"}),
            ("w3", "write_file", {"file_path": "/scratch/n.txt", "content": "scratch\n"}),
        ),
        calls(
            ("r1", "read_file", {"file_path": "/memories/x.md"}),
            ("l1", "ls", {"path": "/memories"}),
            ("x1", "execute", {"command": "ls"}),
            ("r3", "read_file", {"file_path": "/scratch/n.txt"}),
            ("l0", "ls", {"path": "/"}),
            ("g1", "glob", {"pattern": "**/*.{md,txt}"}),
            ("g2", "glob", {"pattern": "/memories/*.md", "path": "/scratch"}),
            ("s1", "grep", {"pattern": "r", "output_mode": "count"}),
            ("s2", "grep", {"pattern": "emem", "path": "/memories", "output_mode": "content"}),
        ),
        calls(("d1", "delete", {"file_path": "/memories/x.md"})),
        final(),
    )
    async with AsyncExitStack() as stack:
        queue = await stack.enter_async_context(running_agent(temporal_client))
        shell_q = await stack.enter_async_context(
            running_tools(temporal_client, {"ws": LocalShellBackend(shell_root)}, tmp_path / "j1")
        )
        mem_q = await stack.enter_async_context(
            running_tools(temporal_client, {"mem": FilesystemBackend(mem_root)}, tmp_path / "j2")
        )
        spec = BackendSpec(
            default=remote("ws", shell_q, execute=True, shell=str(shell_root)),
            routes=[
                RouteSpec(prefix="/memories", backend=remote("mem", mem_q)),
                RouteSpec(prefix="/scratch/", backend=BackendRef(name="scratch")),
            ],
        )
        input = AgentInput(
            task="go",
            model=model,
            backend=spec,
            system_prompt="Be careful.",
            model_call="activity",  # its requests are read back from history below
        )
        workflow_id = uid("wf")
        result = await temporal_client.execute_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=queue
        )
        REPLAY_IDS.append(workflow_id)
        history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
    out = results(result)
    assert (shell_root / "top.txt").read_text() == "top\n"
    assert not (shell_root / "memories").exists()
    assert out["r1"]["status"] == "success" and "remember" in out["r1"]["content"]
    assert out["l1"]["content"] == "/memories/x.md"
    assert "top.txt" in out["x1"]["content"] and "memories" not in out["x1"]["content"]
    assert "scratch" in out["r3"]["content"]  # State route: in-workflow files
    # Searches over '/' fan out to the default and every route, merged and sorted.
    assert out["l0"]["content"].splitlines() == ["/memories/", "/scratch/", "/top.txt"]
    assert out["g1"]["content"].splitlines() == ["/memories/x.md", "/scratch/n.txt", "/top.txt"]
    assert out["g2"]["content"] == "/memories/x.md"
    assert out["s1"]["content"].splitlines() == ["/memories/x.md: 1", "/scratch/n.txt: 1"]
    assert out["s2"]["content"] == "/memories/x.md:\n  1: remember"
    assert out["d1"]["status"] == "success" and not (mem_root / "x.md").exists()
    requests = _model_requests(history)
    assert len(requests) == 4
    assert [r.call_index for r in requests] == [0, 1, 2, 3]
    first = requests[0]
    assert [t.name for t in first.tools][-1] == "execute"
    assert first.system.startswith("Be careful.")
    assert "## Shell paths vs. virtual paths" in first.system
    assert "`/memories/`" in first.system and "`/scratch/`" in first.system


# --------------------------------------------------------------------------- sandbox


@pytest.mark.parametrize("runner", ["plain-sandbox", "sandboxed_runner"])
async def test_state_tools_in_sandboxed_worker(temporal_client: Client, runner: str) -> None:
    """glob/grep/ls/edit on the in-workflow State backend under the real workflow sandbox.

    The State backend's matchers (wcmatch, bracex) run inside workflow code;
    both the SDK's default sandbox and the runner the package offers must work.
    """
    workflow_runner = SandboxedWorkflowRunner() if runner == "plain-sandbox" else sandboxed_runner()
    files = {
        "/proj/src/app.py": "def main():\n    return 'TODO'\n",
        "/proj/src/util.py": "x = 1  # TODO\n",
        "/proj/README.md": "# Proj\nTODO: docs\n",
        "/proj/.hidden/cfg.md": "TODO hidden\n",
        "/proj/data.json": '{"a": "TODO"}\n',
    }
    model = scripted(
        calls(*((f"w{k}", "write_file", {"file_path": p, "content": c})
                for k, (p, c) in enumerate(files.items()))),
        calls(
            ("g1", "glob", {"pattern": "**/*.{py,md}", "path": "/proj"}),
            ("g2", "glob", {"pattern": "src/[a-t]*.py", "path": "/proj"}),
            ("s1", "grep", {"pattern": "TODO", "path": "/proj", "glob": "*.py",
                            "output_mode": "content"}),
            ("s2", "grep", {"pattern": "TODO", "path": "/proj/src", "output_mode": "count"}),
            ("s3", "grep", {"pattern": "TO.*DO"}),
            ("l1", "ls", {"path": "/proj"}),
            ("r1", "read_file", {"file_path": "/proj/src/app.py"}),
        ),
        calls(
            ("e1", "edit_file",
             {"file_path": "/proj/src/app.py", "old_string": "'TODO'", "new_string": "'done'"}),
            ("e2", "edit_file",
             {"file_path": "/proj/src/util.py", "old_string": "nope", "new_string": "x"}),
        ),
        calls(
            ("r2", "read_file", {"file_path": "/proj/src/app.py"}),
            ("s4", "grep", {"pattern": "TODO", "path": "/proj/src"}),
        ),
        final("sandboxed"),
    )  # fmt: skip
    queue = uid("agent")
    async with agent_worker(temporal_client, queue, workflow_runner=workflow_runner):
        result = await run_agent(temporal_client, queue, AgentInput(task="go", model=model))
    assert result.final_answer == "sandboxed" and result.stop_reason == "final_answer"
    out = results(result)
    assert out["g1"]["content"].splitlines() == [
        "/proj/README.md",
        "/proj/src/app.py",
        "/proj/src/util.py",
    ]  # braces and '**' expanded; the dot-directory is not entered
    assert out["g2"]["content"] == "/proj/src/app.py"
    assert out["s1"]["content"] == (
        "/proj/src/app.py:\n  2:     return 'TODO'\n/proj/src/util.py:\n  1: x = 1  # TODO"
    )
    assert out["s2"]["content"].splitlines() == ["/proj/src/app.py: 1", "/proj/src/util.py: 1"]
    assert "No matches found" in out["s3"]["content"] and "literal" in out["s3"]["content"]
    assert out["l1"]["content"].splitlines() == [
        "/proj/.hidden/",
        "/proj/README.md",
        "/proj/data.json",
        "/proj/src/",
    ]
    assert out["e1"]["status"] == "success"
    assert out["e2"]["status"] == "error" and "not found" in out["e2"]["content"]
    assert "'done'" in out["r2"]["content"] and "TODO" not in out["r2"]["content"]
    assert out["s4"]["content"] == "/proj/src/util.py"
    assert result.tool_errors == 1


async def test_malformed_json_arguments_are_named(temporal_client: Client) -> None:
    """Provider-unparsable arguments ({RAW_ARGS_KEY: text}) get a clear error, not 'extra field'."""
    broken = '{"file_path": "/a.txt", "content": "unterminated'
    model = scripted(
        calls(
            ("bad", "write_file", {RAW_ARGS_KEY: broken}),
            ("ok", "write_file", {"file_path": "/a.txt", "content": "fine"}),
        ),
        final(),
    )
    async with running_agent(temporal_client) as queue:
        result = await run_agent(temporal_client, queue, AgentInput(task="go", model=model))
    out = results(result)
    assert out["bad"]["status"] == "error"
    assert "not valid JSON" in out["bad"]["content"] and "unterminated" in out["bad"]["content"]
    assert "extra" not in out["bad"]["content"].lower()
    assert out["ok"]["status"] == "success"


def _tool_requests(history: Any) -> list[ToolRequest]:
    """Decode the inputs of every file-tool activity scheduled in a history
    (each request of a ``filegate.tool_batch``)."""
    found: list[ToolRequest] = []
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        attrs = event.activity_task_scheduled_event_attributes
        if attrs.activity_type.name == "filegate.model":
            continue
        batched = attrs.activity_type.name == wire.TOOL_BATCH_ACTIVITY
        [decoded] = pydantic_data_converter.payload_converter.from_payloads(
            list(attrs.input.payloads), [ToolBatch if batched else ToolRequest]
        )
        found += decoded.requests if isinstance(decoded, ToolBatch) else [decoded]
    return found


async def test_composite_fanout_merges_structured_results(
    temporal_client: Client, tmp_path: Path
) -> None:
    """Fan-out parts travel as structured, filtered results and are merged once.

    Covers shadowing (a default-backend copy under a route prefix is never
    shown), read-deny filtering inside the route's activity, the regex hint
    staying silent when permissions removed the only matches, and history
    hygiene: only fan-out parts ask for (and carry) the structured result.
    """
    top, mem = tmp_path / "top", tmp_path / "mem"
    (top / "memories").mkdir(parents=True)
    (top / "memories" / "shadow.md").write_text("alpha shadowed\n")
    (top / "top.txt").write_text("alpha top\n")
    (mem / "secret").mkdir(parents=True)
    (mem / "x.md").write_text("alpha mem\n")
    (mem / "secret" / "k.md").write_text("alpha key a.*b\n")
    rules = [FilesystemPermission(operations=["read"], paths=["/memories/secret/**"], mode="deny")]
    model = scripted(
        calls(
            ("g1", "glob", {"pattern": "**/*"}),
            ("l1", "ls", {"path": "/"}),
            ("s1", "grep", {"pattern": "alpha", "output_mode": "content"}),
            ("s2", "grep", {"pattern": "a.*b"}),
            ("s3", "grep", {"pattern": "x|y"}),
            ("s4", "grep", {"pattern": "alpha", "max_count": 1, "output_mode": "count"}),
            ("r1", "read_file", {"file_path": "/memories/x.md"}),
        ),
        final(),
    )
    async with AsyncExitStack() as stack:
        queue = await stack.enter_async_context(running_agent(temporal_client))
        top_q = await stack.enter_async_context(
            running_tools(temporal_client, {"top": FilesystemBackend(top)}, tmp_path / "j1")
        )
        mem_q = await stack.enter_async_context(
            running_tools(temporal_client, {"mem": FilesystemBackend(mem)}, tmp_path / "j2")
        )
        spec = BackendSpec(
            default=remote("top", top_q),
            routes=[RouteSpec(prefix="/memories", backend=remote("mem", mem_q))],
        )
        input = AgentInput(
            task="go",
            model=model,
            backend=spec,
            permissions=rules,
            limits=Limits(max_execute_timeout=50),
        )
        workflow_id = uid("wf")
        result = await temporal_client.execute_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=queue
        )
        REPLAY_IDS.append(workflow_id)
        history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
    out = results(result)
    assert out["g1"]["content"].splitlines() == ["/memories/x.md", "/top.txt"]
    assert out["l1"]["content"].splitlines() == ["/memories/", "/top.txt"]
    assert out["s1"]["content"] == "/memories/x.md:\n  1: alpha mem\n/top.txt:\n  1: alpha top"
    # Denied matches change nothing, not even the "literal" hint (contract §11).
    assert out["s2"]["content"].startswith("No matches found\n\n[Hint: grep searches for literal")
    assert "literal" in out["s3"]["content"]  # nothing existed: the hint is right
    # One budget of 1 for the whole fan-out; each backend stopped early, so the
    # answer says it is incomplete (which match a backend hit first is its walk order).
    body, note = out["s4"]["content"].split("\n\n")
    assert body in ("/memories/x.md: 1", "/top.txt: 1", "No matches found")
    assert "incomplete" in note
    assert "secret" not in str(result.transcript) and "shadow" not in str(result.transcript)
    requests = _tool_requests(history)
    fanned = [r for r in requests if r.tool in ("ls", "glob", "grep")]
    assert fanned and all(r.want_raw for r in fanned)
    assert {r.backend for r in fanned} == {"top", "mem"}
    [read] = [r for r in requests if r.tool == "read_file"]
    assert not read.want_raw and read.args == {"file_path": "/x.md", "offset": 0, "limit": 100}
    assert read.tool_call_id == "1:6:r1"  # step 1, position 6, the model's id
    assert {r.max_execute_timeout for r in requests} == {50}


# --------------------------------------------------------------------------- gate


async def test_deny_never_reaches_backend(temporal_client: Client, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "secret").mkdir(parents=True)
    (root / "private").mkdir()
    key = root / "secret" / "key.txt"
    key.write_text("s3cr3t\n")
    (root / "private" / "p.txt").write_text("private\n")
    (root / "open.txt").write_text("open\n")
    rules = [
        FilesystemPermission(operations=["write"], paths=["/secret/**"], mode="deny"),
        FilesystemPermission(operations=["read"], paths=["/private/**"], mode="deny"),
    ]
    model = scripted(
        calls(
            ("w1", "write_file", {"file_path": "/secret/key.txt", "content": "pwned"}),
            ("w2", "write_file", {"file_path": "/secret/new.txt", "content": "pwned"}),
            ("d1", "delete", {"file_path": "/secret"}),
            ("d2", "delete", {"file_path": "/"}),
            ("r1", "read_file", {"file_path": "/private/p.txt"}),
            ("l1", "ls", {"path": "/private"}),
            ("g1", "glob", {"pattern": "**/*.txt"}),
            ("s1", "grep", {"pattern": "private"}),
            ("r2", "read_file", {"file_path": "/secret/key.txt"}),
        ),
        final(),
    )
    async with (
        running_agent(temporal_client) as queue,
        running_tools(temporal_client, {"fs": FilesystemBackend(root)}, tmp_path / "j") as tq,
    ):
        spec = BackendSpec(default=remote("fs", tq))
        result = await run_agent(
            temporal_client,
            queue,
            AgentInput(task="go", model=model, backend=spec, permissions=rules),
        )
    out = results(result)
    for call_id in ("w1", "w2", "d1", "d2", "r1"):
        assert out[call_id]["status"] == "error", call_id
        assert "ermission denied" in out[call_id]["content"], call_id
    assert "/secret/**" in out["d2"]["content"]
    assert key.read_text() == "s3cr3t\n"
    assert not (root / "secret" / "new.txt").exists()
    assert (root / "private" / "p.txt").exists()
    # ls of the denied directory itself runs, but the result filter hides its entries.
    assert "p.txt" not in out["l1"]["content"]
    assert "/private" not in out["g1"]["content"] and "/open.txt" in out["g1"]["content"]
    assert "/private" not in out["s1"]["content"]
    assert out["r2"]["status"] == "success"  # reads of write-denied paths are fine


# --------------------------------------------------------------------------- approvals

DOCS_INTERRUPT = [FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="interrupt")]


def _four_writes(suffix: str = "") -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (f"{n}{suffix}", "write_file", {"file_path": f"/docs/{n}.txt", "content": f"orig {n}"})
        for n in ("a", "b", "c", "d")
    ]


@pytest.mark.parametrize("via", ["signal", "update"])
async def test_interrupt_four_decisions(temporal_client: Client, tmp_path: Path, via: str) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    writes = _four_writes()
    model = scripted(
        calls(*writes),
        calls(("c2", "write_file", {"file_path": "/docs/c.txt", "content": "orig c"})),
        final(),
    )
    async with (
        running_agent(temporal_client) as queue,
        running_tools(temporal_client, {"fs": FilesystemBackend(root)}, tmp_path / "j") as tq,
    ):
        input = AgentInput(
            task="go",
            model=model,
            backend=BackendSpec(default=remote("fs", tq)),
            permissions=DOCS_INTERRUPT,
        )
        workflow_id = uid("wf")
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=queue
        )
        approvals = await pending(handle, 4)
        by_path = {a.args["file_path"]: a for a in approvals}
        assert {a.tool for a in approvals} == {"write_file"}
        assert by_path["/docs/a.txt"].rule is not None
        assert by_path["/docs/a.txt"].rule["mode"] == "interrupt"
        assert by_path["/docs/a.txt"].tool_call_id == "a"
        status = await handle.query(AgentWorkflow.status)
        assert status.state == "awaiting_approval" and len(status.pending_approvals) == 4
        assert not any(root.joinpath("docs").glob("*"))  # nothing ran yet

        decisions = [
            Decision(id=by_path["/docs/a.txt"].id, decision="approve"),
            Decision(
                id=by_path["/docs/b.txt"].id,
                decision="edit",
                args={"file_path": "/docs/b.txt", "content": "edited b"},
            ),
            Decision(id=by_path["/docs/c.txt"].id, decision="reject", reason="not now"),
            Decision(id=by_path["/docs/d.txt"].id, decision="respond", message="d is handled"),
        ]
        if via == "update":
            with pytest.raises(WorkflowUpdateFailedError):
                await handle.execute_update(
                    AgentWorkflow.decide_update, Decision(id="nope", decision="approve")
                )
            with pytest.raises(WorkflowUpdateFailedError):
                await handle.execute_update(
                    AgentWorkflow.decide_update,
                    Decision(id=by_path["/docs/b.txt"].id, decision="edit", args={"bad": 1}),
                )
            for n, decision in enumerate(decisions):
                ack = await handle.execute_update(AgentWorkflow.decide_update, decision)
                assert ack.id == decision.id
                if n == 0:  # while the others still hold the run open
                    with pytest.raises(WorkflowUpdateFailedError):
                        await handle.execute_update(AgentWorkflow.decide_update, decision)
        else:
            await handle.signal(
                AgentWorkflow.decide_signal, Decision(id="nope", decision="approve")
            )
            for decision in decisions:
                await handle.signal(AgentWorkflow.decide_signal, decision)
        result = await handle.result()
        REPLAY_IDS.append(workflow_id)
    out = results(result)
    assert (root / "docs" / "a.txt").read_text() == "orig a"
    assert (root / "docs" / "b.txt").read_text() == "edited b"
    assert not (root / "docs" / "c.txt").exists()
    assert not (root / "docs" / "d.txt").exists()
    assert out["a"]["status"] == "success"
    assert "reviewer changed" in out["b"]["content"]
    assert out["c"]["status"] == "error" and "not now" in out["c"]["content"]
    assert "Do not retry" in out["c"]["content"]
    assert out["d"]["content"].endswith("answered it instead]\nd is handled")
    # The identical re-request of the rejected call is answered without asking again.
    assert out["c2"]["status"] == "error" and "already rejected" in out["c2"]["content"]
    assert result.approvals == 4


async def test_edit_is_rechecked_against_deny(temporal_client: Client, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    rules = [
        FilesystemPermission(operations=["write"], paths=["/docs/locked*"], mode="deny"),
        *DOCS_INTERRUPT,
    ]
    model = scripted(
        calls(("w", "write_file", {"file_path": "/docs/x.txt", "content": "x"})), final()
    )
    async with (
        running_agent(temporal_client) as queue,
        running_tools(temporal_client, {"fs": FilesystemBackend(root)}, tmp_path / "j") as tq,
    ):
        input = AgentInput(
            task="go",
            model=model,
            backend=BackendSpec(default=remote("fs", tq)),
            permissions=rules,
        )
        workflow_id = uid("wf")
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=queue
        )
        [approval] = await pending(handle, 1)
        to_locked = Decision(
            id=approval.id,
            decision="edit",
            args={"file_path": "/docs/locked.txt", "content": "sneaky"},
        )
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(AgentWorkflow.decide_update, to_locked)
        assert "ermission denied" in str(refused.value.cause)
        escape = to_locked.model_copy(update={"args": {"file_path": "/../x", "content": "y"}})
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(AgentWorkflow.decide_update, escape)
        # The signal path drops the same decision; the approval stays open.
        await handle.signal(AgentWorkflow.decide_signal, to_locked)
        assert len(await handle.query(AgentWorkflow.pending_approvals)) == 1
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=approval.id, decision="approve")
        )
        result = await handle.result()
        REPLAY_IDS.append(workflow_id)
    assert not (root / "docs" / "locked.txt").exists()
    assert (root / "docs" / "x.txt").read_text() == "x"
    assert results(result)["w"]["status"] == "success"


@pytest.mark.slow
async def test_approval_survives_worker_restart(temporal_client: Client, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    model = scripted(
        calls(("w", "write_file", {"file_path": "/docs/r.txt", "content": "after restart"})),
        calls(("r", "read_file", {"file_path": "/docs/r.txt"})),
        final("restarted fine"),
    )
    agent_q = uid("agent")
    tools_q = uid("tools")
    input = AgentInput(
        task="go",
        model=model,
        backend=BackendSpec(default=remote("fs", tools_q)),
        permissions=DOCS_INTERRUPT,
    )
    workflow_id = uid("wf")
    async with (
        agent_worker(temporal_client, agent_q),
        tools_worker(temporal_client, tools_q, {"fs": FilesystemBackend(root)}, tmp_path / "j"),
    ):
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=agent_q
        )
        [approval] = await pending(handle, 1)
    # Both workers are gone; the approval is workflow state on the server.
    async with (
        agent_worker(temporal_client, agent_q),
        tools_worker(temporal_client, tools_q, {"fs": FilesystemBackend(root)}, tmp_path / "j"),
    ):
        [again] = await pending(handle, 1)
        assert again.id == approval.id and again.requested_at == approval.requested_at
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=approval.id, decision="approve")
        )
        result = await handle.result()
    REPLAY_IDS.append(workflow_id)
    assert result.final_answer == "restarted fine"
    assert (root / "docs" / "r.txt").read_text() == "after restart"


async def test_multi_turn_messages(temporal_client: Client) -> None:
    model = scripted(
        final("first answer"),
        calls(("w", "write_file", {"file_path": "/n.txt", "content": "two"})),
        final("second answer"),
    )
    async with running_agent(temporal_client) as queue:
        input = AgentInput(task="one", model=model, wait_for_messages=True)
        workflow_id = uid("wf")
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=queue
        )
        status = await eventually(
            lambda: handle.query(AgentWorkflow.status), lambda s: s.state == "idle"
        )
        assert status.last_message["content"] == "first answer"
        await handle.execute_update(
            AgentWorkflow.add_message_update, UserMessage(content="now write a file")
        )
        await eventually(
            lambda: handle.query(AgentWorkflow.status),
            lambda s: s.state == "idle" and s.step == 3,
        )
        await handle.signal(AgentWorkflow.add_message_signal, UserMessage(end=True))
        result = await handle.result()
        REPLAY_IDS.append(workflow_id)
    assert result.stop_reason == "ended"
    assert result.final_answer == "second answer"
    users = [m["content"] for m in result.transcript if m["role"] == "user"]
    assert users == ["one", "now write a file"]


async def test_max_steps_stops_run(temporal_client: Client) -> None:
    model = scripted(*(calls((f"l{k}", "ls", {"path": "/"})) for k in range(5)))
    async with running_agent(temporal_client) as queue:
        input = AgentInput(task="loop", model=model, limits=Limits(max_steps=3))
        result = await run_agent(temporal_client, queue, input)
    assert result.stop_reason == "max_steps" and result.steps == 3


async def test_continue_as_new_carries_thread_state(temporal_client: Client) -> None:
    model = scripted(
        calls(("w", "write_file", {"file_path": "/a.txt", "content": "one\n"})),
        calls(("r", "read_file", {"file_path": "/a.txt"})),
        calls(
            ("e", "edit_file", {"file_path": "/a.txt", "old_string": "one", "new_string": "two"})
        ),
        calls(("r2", "read_file", {"file_path": "/a.txt"})),
        final("carried"),
    )
    input = AgentInput(task="go", model=model, continue_as_new_after_steps=2)
    async with running_agent(temporal_client) as queue:
        workflow_id = uid("wf")
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=queue
        )
        result = await handle.result()
        REPLAY_IDS.append(workflow_id)
        runs = [e async for e in temporal_client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    assert len(runs) == 3  # two continue-as-new hops
    assert result.final_answer == "carried" and result.steps == 5 and result.tool_calls == 4
    out = results(result)
    assert out["e"]["status"] == "success"  # the read-set survived the hop
    assert "two" in out["r2"]["content"]  # and so did the State files
    assert result.transcript[0]["role"] == "user"


async def test_bulk_tool_without_path_needs_approval(temporal_client: Client) -> None:
    rules = [FilesystemPermission(operations=["read"], paths=["/docs/**"], mode="interrupt")]
    model = scripted(
        calls(
            ("g", "grep", {"pattern": "x"}),
            ("l", "ls", {"path": "/other"}),
            ("r", "read_file", {"file_path": "/docs/a.txt"}),
        ),
        final(),
    )
    async with running_agent(temporal_client) as queue:
        input = AgentInput(task="go", model=model, permissions=rules)
        workflow_id = uid("wf")
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=queue
        )
        approvals = await pending(handle, 2)
        assert {a.tool for a in approvals} == {"grep", "read_file"}
        for approval in approvals:
            await handle.execute_update(
                AgentWorkflow.decide_update,
                Decision(id=approval.id, decision="respond", message=f"answered {approval.tool}"),
            )
        result = await handle.result()
        REPLAY_IDS.append(workflow_id)
    out = results(result)
    assert out["g"]["content"].endswith("answered it instead]\nanswered grep")
    assert out["r"]["content"].endswith("answered it instead]\nanswered read_file")
    assert "/other: directory not found" in out["l"]["content"]  # outside the rule: ran unasked


@pytest.mark.slow
async def test_worker_cli_processes(
    temporal_client: Client, temporal_server: Any, tmp_path: Path
) -> None:
    """Both CLI forms start real worker processes that stop cleanly on SIGTERM."""
    root = tmp_path / "cli-ws"
    root.mkdir()
    agent_q, tools_q = uid("agent"), uid("tools")
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": temporal_server.address,
        "TEMPORAL_NAMESPACE": temporal_server.namespace,
        "FILEGATE_STATE_DIR": str(tmp_path / "state"),
    }
    cli = [sys.executable, "-m", "filegate"]
    commands = [
        [*cli, "worker", "--role", "agent", "--task-queue", agent_q],
        [*cli, "--role", "tools", "--backend", "filesystem",
         "--root", str(root), "--task-queue", tools_q, "--name", "disk"],
    ]  # fmt: skip
    procs = [
        await asyncio.create_subprocess_exec(
            *cmd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        for cmd in commands
    ]
    try:
        model = scripted(
            calls(("w", "write_file", {"file_path": "/cli.txt", "content": "from cli"})), final()
        )
        input = AgentInput(
            task="go", model=model, backend=BackendSpec(default=remote("disk", tools_q))
        )
        result = await asyncio.wait_for(run_agent(temporal_client, agent_q, input), 60)
        assert results(result)["w"]["status"] == "success"
        assert (root / "cli.txt").read_text() == "from cli"
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        outputs = [await asyncio.wait_for(proc.communicate(), 30) for proc in procs]
    for proc, (output, _) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, output.decode(errors="replace")[-2000:]


# --------------------------------------------------------------------------- replay


async def test_replay_histories(temporal_client: Client, tmp_path: Path) -> None:
    """Every run recorded above replays against the current code without nondeterminism.

    Under pytest-xdist this module's runs may all have gone to other workers
    (a CI run with ``-n 3`` failed on that); the test then records one run of
    its own, a write and a read through a tools worker, and replays that.
    """
    if not REPLAY_IDS:
        root = tmp_path / "ws"
        root.mkdir()
        model = scripted(
            calls(("w", "write_file", {"file_path": "/r.txt", "content": "replayed\n"})),
            calls(("r", "read_file", {"file_path": "/r.txt"})),
            final(),
        )
        backends: dict[str, BackendProtocol] = {"fs": FilesystemBackend(root)}
        async with (
            running_agent(temporal_client) as agent_q,
            running_tools(temporal_client, backends, tmp_path / "j") as tools_q,
        ):
            input = AgentInput(
                task="go", model=model, backend=BackendSpec(default=remote("fs", tools_q))
            )
            result = await run_agent(temporal_client, agent_q, input)
        assert results(result)["r"]["status"] == "success"
    assert REPLAY_IDS
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)
    for workflow_id in REPLAY_IDS:
        history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
        await replayer.replay_workflow(history)


# --------------------------------------------------------------------------- timers


def _approval_input(model: ModelSpec, approvals: ApprovalConfig) -> AgentInput:
    return AgentInput(task="go", model=model, permissions=DOCS_INTERRUPT, approvals=approvals)


async def test_approval_timeout_rejects(time_env: WorkflowEnvironment) -> None:
    model = scripted(
        calls(("w", "write_file", {"file_path": "/docs/t.txt", "content": "late"})),
        calls(("r", "read_file", {"file_path": "/docs/t.txt"})),
        final(),
    )
    approvals = ApprovalConfig(timeout_seconds=3600, on_timeout="reject")
    async with running_agent(time_env.client) as queue:
        result = await time_env.client.execute_workflow(
            AgentWorkflow.run, _approval_input(model, approvals), id=uid("wf"), task_queue=queue
        )
    out = results(result)
    assert out["w"]["status"] == "error" and "timed out" in out["w"]["content"]
    assert out["r"]["status"] == "error"  # never written


async def test_approval_timeout_escalates_per_rule(time_env: WorkflowEnvironment) -> None:
    model = scripted(
        calls(("w", "write_file", {"file_path": "/docs/e.txt", "content": "ok"})), final()
    )
    approvals = ApprovalConfig(
        timeout_seconds=10,
        on_timeout="reject",
        per_rule=[RuleTimeout(rule_index=0, timeout_seconds=600, on_timeout="escalate")],
    )
    async with running_agent(time_env.client) as queue:
        handle = await time_env.client.start_workflow(
            AgentWorkflow.run, _approval_input(model, approvals), id=uid("wf"), task_queue=queue
        )
        [approval] = await pending(handle, 1)
        assert not approval.escalated
        await time_env.sleep(700)
        [escalated] = await pending(handle, 1)
        assert escalated.escalated and escalated.id == approval.id
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=approval.id, decision="approve")
        )
        result = await handle.result()
    assert results(result)["w"]["status"] == "success"


async def test_idle_timeout_ends_thread(time_env: WorkflowEnvironment) -> None:
    input = AgentInput(
        task="hi",
        model=scripted(final("hello")),
        wait_for_messages=True,
        idle_timeout_seconds=3600,
    )
    async with running_agent(time_env.client) as queue:
        result = await time_env.client.execute_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=queue
        )
    assert result.stop_reason == "idle_timeout" and result.final_answer == "hello"
