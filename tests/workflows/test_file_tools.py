"""FileTools in a hand-written workflow: the kit without AgentWorkflow.

``ToolListWorkflow`` (docs/examples/file_tools_host.py, the example of
docs/own-workflow.md) has no model: it runs a fixed list of calls through
``FileTools.run`` and returns what each produced. It declares no approval
handlers; FileTools registers them dynamically, and the test decides its
gated call through the ``filegate approve`` command line, as an operator
would. The backend is a composite over two tools workers on two task
queues, so a search over ``/`` fans out to both. It runs on the sandboxed
runner agent workers use, and its history replays.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Replayer, Worker

with workflow.unsafe.imports_passed_through():
    from filegate.backends.filesystem import FilesystemBackend
    from filegate.kernel.permissions import FilesystemPermission
    from filegate.workflows import FileToolsConfig, FileToolsState
    from filegate.workflows.inputs import BackendRef, BackendSpec, RouteSpec
    from filegate.workflows.runner import agent_runner

from tests.activities.test_stubs import _load_example
from tests.cli.test_cli import CLI, cli_env  # noqa: F401  (fixture)
from tests.workflows.test_workflow_e2e import eventually, running_tools

pytestmark = pytest.mark.services


_example = _load_example("file_tools_host")
ToolListWorkflow = _example.ToolListWorkflow
ContinuingWorkflow = _example.ContinuingWorkflow


def _call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": args}


async def test_hand_written_workflow_uses_the_kit(
    temporal_client: Client,
    tmp_path: Path,
    cli_env: dict[str, str],  # noqa: F811
) -> None:
    main_root, mem_root = tmp_path / "main", tmp_path / "mem"
    main_root.mkdir()
    mem_root.mkdir()
    (main_root / "secret").mkdir()
    (main_root / "secret" / "key.txt").write_text("hunter2\n")
    (mem_root / "note.md").write_text("remember\n")
    calls = [
        _call("w1", "write_file", file_path="/a.txt", content="alpha\n"),
        _call("s1", "read_file", file_path="/secret/key.txt"),
        _call("d1", "write_file", file_path="/docs/plan.md", content="the plan\n"),
        _call("l1", "ls", path="/"),
        _call("g1", "grep", pattern="e", output_mode="files_with_matches"),
        _call("e1", "edit_file", file_path="/a.txt", old_string="alpha", new_string="beta"),
        _call("x1", "execute", command="ls"),
    ]
    async with AsyncExitStack() as stack:
        main_q = await stack.enter_async_context(
            running_tools(temporal_client, {"main": FilesystemBackend(main_root)}, tmp_path / "j1")
        )
        mem_q = await stack.enter_async_context(
            running_tools(temporal_client, {"mem": FilesystemBackend(mem_root)}, tmp_path / "j2")
        )
        config = FileToolsConfig(
            backend=BackendSpec(
                default=BackendRef(kind="remote", name="main", task_queue=main_q),
                routes=[
                    RouteSpec(
                        prefix="/memories/",
                        backend=BackendRef(kind="remote", name="mem", task_queue=mem_q),
                    )
                ],
            ),
            permissions=[
                FilesystemPermission(
                    operations=["read", "write"], paths=["/secret/**"], mode="deny"
                ),
                FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="interrupt"),
            ],
        )
        host_q = f"kit-{uuid.uuid4().hex[:8]}"
        await stack.enter_async_context(
            Worker(
                temporal_client,
                task_queue=host_q,
                workflows=[ToolListWorkflow],
                workflow_runner=agent_runner(),
            )
        )
        workflow_id = f"kit-{uuid.uuid4().hex[:8]}"
        handle = await temporal_client.start_workflow(
            ToolListWorkflow.run, args=[config, calls], id=workflow_id, task_queue=host_q
        )
        waiting = await eventually(
            lambda: handle.query("pending_approvals", result_type=list[dict[str, Any]]),
            lambda p: len(p) == 1 and p[0].get("preview") is not None,  # computed after it waits
        )
        assert waiting[0]["tool"] == "write_file"
        assert waiting[0]["preview"]["kind"] == "new_file"
        assert "+the plan" in waiting[0]["preview"]["diff"]
        # The operator's command line finds the hand-written workflow and decides.
        process = await asyncio.create_subprocess_exec(
            *CLI,
            "approve",
            waiting[0]["id"],
            "--workflow",
            workflow_id,
            "--reviewer",
            "kit-tester",
            env=cli_env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, err.decode()
        result = await handle.result()
        history = await handle.fetch_history()
    await Replayer(workflows=[ToolListWorkflow], workflow_runner=agent_runner()).replay_workflow(
        history
    )

    assert "execute" not in result["offered"]  # no backend can execute: not offered
    assert {"ls", "read_file", "write_file", "edit_file", "glob", "grep"} <= set(result["offered"])
    out_of = result["answers"]
    assert not out_of["w1"]["error"]
    assert out_of["s1"]["error"] and "hunter2" not in json.dumps(out_of)
    assert not out_of["d1"]["error"] and "kit-tester" in out_of["d1"]["text"]
    assert (main_root / "docs" / "plan.md").read_text() == "the plan\n"
    # ls over '/' fans out to both queues; the denied directory's content stays out.
    listing = out_of["l1"]["text"].splitlines()
    assert "/memories/" in listing and "/a.txt" in listing and "/docs/" in listing
    assert "/memories/note.md" in out_of["g1"]["text"].splitlines()
    assert "/secret/key.txt" not in out_of["g1"]["text"]
    assert not out_of["e1"]["error"] and (main_root / "a.txt").read_text() == "beta\n"
    assert out_of["x1"]["error"]  # not visible: refused as an unknown tool
    state = FileToolsState.model_validate(result["state"])
    assert state.counters["tool_calls"] == len(calls)
    assert state.counters["approvals"] == 1 and state.counters["decided_approvals"] == 1
    assert "/a.txt" in state.seen_paths


async def test_state_crosses_continue_as_new(temporal_client: Client) -> None:
    """The State backend's files, the read set and the counters survive the hand-over."""
    config = FileToolsConfig(backend=BackendSpec(default=BackendRef(kind="state", name="mem")))
    calls = [
        _call("w", "write_file", file_path="/notes.md", content="one\n"),
        _call("r", "read_file", file_path="/notes.md"),
        _call("e", "edit_file", file_path="/notes.md", old_string="one", new_string="two"),
        _call("b", "read_file", file_path="/notes.md"),
    ]
    queue = f"kit-can-{uuid.uuid4().hex[:8]}"
    async with Worker(
        temporal_client,
        task_queue=queue,
        workflows=[ContinuingWorkflow],
        workflow_runner=agent_runner(),
    ):
        handle = await temporal_client.start_workflow(
            ContinuingWorkflow.run,
            args=[config, calls, None],
            id=f"kit-can-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        text, count = await handle.result()
    assert "two" in text and "one" not in text  # the edit ran: the read was carried
    assert count == str(len(calls))
