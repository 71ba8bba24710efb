"""A tools worker killed between applying an edit and reporting it (issue 4).

The tools worker is a real ``filegate worker`` subprocess; the test hook
``FILEGATE_TEST_CRASH_AFTER_APPLY`` makes it ``os._exit(137)`` right after the
edit reached the disk and before the journal recorded its outcome. Temporal
retries the activity once the heartbeat timeout notices the dead worker; a
fresh worker process (same journal directory, no hook) picks the retry up,
sees that the file already is in the predicted post-edit state, and returns
the original success without editing again. The agent worker runs in-process.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from filegate.activities.idempotency import CRASH_AFTER_APPLY_ENV, STALL_BEFORE_APPLY_ENV
from filegate.devstack.servers import TemporalDevServer
from filegate.kernel.messages import ModelSpec
from filegate.kernel.tool_types import activity_call_id
from filegate.worker import agent_worker
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec

pytestmark = [pytest.mark.services, pytest.mark.slow]


async def start_tools_worker(
    server: TemporalDevServer,
    root: Path,
    journal: Path,
    queue: str,
    crash_call: str | None,
    *,
    stall_call: str | None = None,
    quiet: bool = False,
) -> asyncio.subprocess.Process:
    """A real ``filegate worker --role tools`` process; the fault hooks name one call each:
    ``crash_call`` dies right after applying it, ``stall_call`` sleeps before applying it."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": server.address,
        "TEMPORAL_NAMESPACE": server.namespace,
        "FILEGATE_STATE_DIR": str(journal.parent),
    }
    for hook, call_id in (
        (CRASH_AFTER_APPLY_ENV, crash_call),
        (STALL_BEFORE_APPLY_ENV, stall_call),
    ):
        env.pop(hook, None)
        if call_id is not None:
            env[hook] = call_id
    output = asyncio.subprocess.DEVNULL if quiet else asyncio.subprocess.PIPE
    errors = asyncio.subprocess.DEVNULL if quiet else asyncio.subprocess.STDOUT
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "filegate", "worker", "--role", "tools",
        "--backend", "filesystem", "--root", str(root), "--task-queue", queue,
        "--journal-dir", str(journal),
        env=env, stdout=output, stderr=errors,
    )  # fmt: skip


async def output_of(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    return (await proc.stdout.read()).decode(errors="replace")[-3000:]


def on_tools_queue(task: str, turns: list[Any], tools_q: str) -> AgentInput:
    """A scripted run whose default backend is the tools worker's on ``tools_q``."""
    return AgentInput(
        task=task,
        model=ModelSpec(provider="scripted", options={"script": {"turns": turns}}),
        backend=BackendSpec(
            default=BackendRef(kind="remote", name="filesystem", task_queue=tools_q)
        ),
    )


async def stop(*procs: asyncio.subprocess.Process | None) -> None:
    """SIGTERM the worker processes still running and wait for them."""
    for proc in procs:
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)


def edit_attempts(history: Any) -> list[int]:
    """Attempt numbers of every started filegate.edit_file activity."""
    scheduled: dict[int, str] = {}
    attempts: list[int] = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attrs.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            if scheduled.get(attrs.scheduled_event_id) == "filegate.edit_file":
                attempts.append(attrs.attempt)
    return attempts


async def test_worker_killed_after_apply_edits_exactly_once(
    temporal_server: TemporalDevServer, temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    target = root / "grow.txt"
    target.write_text("a\n")
    journal = tmp_path / "state" / "journal"
    turns = [
        {"tool_calls": [{"id": "r1", "name": "read_file", "args": {"file_path": "/grow.txt"}}]},
        {
            "tool_calls": [
                {
                    "id": "e1",
                    "name": "edit_file",
                    "args": {"file_path": "/grow.txt", "old_string": "a\n", "new_string": "aa\n"},
                }
            ]
        },
        {"tool_calls": [{"id": "r2", "name": "read_file", "args": {"file_path": "/grow.txt"}}]},
        {"content": "grown"},
    ]
    # The edit is the first call of the second model step (see activity_call_id).
    crash_call = activity_call_id(2, 0, "e1")
    suffix = uuid.uuid4().hex[:8]
    agent_q, tools_q, workflow_id = f"agent-{suffix}", f"tools-{suffix}", f"crash-{suffix}"
    input = on_tools_queue("grow the file", turns, tools_q)
    started = time.monotonic()
    first = await start_tools_worker(temporal_server, root, journal, tools_q, crash_call)
    second: asyncio.subprocess.Process | None = None
    try:
        async with agent_worker(temporal_client, agent_q):
            handle = await temporal_client.start_workflow(
                AgentWorkflow.run, input, id=workflow_id, task_queue=agent_q
            )
            code = await asyncio.wait_for(first.wait(), 30)
            assert code == 137, await output_of(first)
            # Died in the crash window: the edit is on disk, its outcome is not journaled.
            assert target.read_text() == "aa\n"
            [entry] = list(journal.glob("*/*.json"))
            assert '"outcome":null' in entry.read_text()

            second = await start_tools_worker(temporal_server, root, journal, tools_q, None)
            result = await asyncio.wait_for(handle.result(), 40)
        elapsed = time.monotonic() - started
    finally:
        await stop(first, second)

    assert target.read_text() == "aa\n"  # exactly once: a second apply would give "aaa\n"
    assert result.final_answer == "grown" and result.tool_errors == 0
    out = {m["tool_call_id"]: m for m in result.transcript if m["role"] == "tool"}
    assert out["e1"]["status"] == "success" and "1 occurrence" in out["e1"]["content"]
    assert "1  aa" in out["r2"]["content"]
    history = await handle.fetch_history()
    assert edit_attempts(history) == [2]  # only the completing attempt is recorded
    assert '"outcome":null' not in entry.read_text()  # the retry journaled the outcome
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(history)
    assert second is not None and second.returncode == 0, await output_of(second)
    print(f"crash-recovery round trip: {elapsed:.1f}s")
    assert elapsed < 40


async def test_worker_killed_mid_batch_applies_each_edit_once(
    temporal_server: TemporalDevServer, temporal_client: Client, tmp_path: Path
) -> None:
    """Four edits of one turn share a ``filegate.tool_batch`` that dies after applying
    the second: the batch fails, each edit runs again on its own activity, and the
    journal keeps every one to a single apply."""
    root = tmp_path / "ws"
    root.mkdir()
    names = [f"f{i}.txt" for i in range(4)]
    for name in names:
        (root / name).write_text("a\n")
    journal = tmp_path / "state" / "journal"

    def turn(prefix: str, tool: str, **args: Any) -> dict[str, Any]:
        return {
            "tool_calls": [
                {"id": f"{prefix}{i}", "name": tool, "args": {"file_path": f"/{n}", **args}}
                for i, n in enumerate(names)
            ]
        }

    turns = [
        turn("r", "read_file"),
        turn("e", "edit_file", old_string="a\n", new_string="aa\n"),
        turn("b", "read_file"),
        {"content": "grown"},
    ]
    crash_call = activity_call_id(2, 1, "e1")
    suffix = uuid.uuid4().hex[:8]
    agent_q, tools_q, workflow_id = f"agent-{suffix}", f"tools-{suffix}", f"batch-{suffix}"
    input = on_tools_queue("grow the files", turns, tools_q)
    first = await start_tools_worker(temporal_server, root, journal, tools_q, crash_call)
    second: asyncio.subprocess.Process | None = None
    try:
        async with agent_worker(temporal_client, agent_q):
            handle = await temporal_client.start_workflow(
                AgentWorkflow.run, input, id=workflow_id, task_queue=agent_q
            )
            code = await asyncio.wait_for(first.wait(), 30)
            assert code == 137, await output_of(first)
            assert (root / "f1.txt").read_text() == "aa\n"  # applied, then the crash
            second = await start_tools_worker(temporal_server, root, journal, tools_q, None)
            result = await asyncio.wait_for(handle.result(), 60)
    finally:
        await stop(first, second)

    # Exactly once each: a second apply of an edit would give "aaa\n".
    assert [(root / n).read_text() for n in names] == ["aa\n"] * 4
    assert result.final_answer == "grown" and result.tool_errors == 0, result
    out = {m["tool_call_id"]: m for m in result.transcript if m["role"] == "tool"}
    for i in range(4):
        assert out[f"e{i}"]["status"] == "success", out[f"e{i}"]
        assert "1  aa" in out[f"b{i}"]["content"], out[f"b{i}"]
    history = await handle.fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    # The edits' batch failed with its worker; the four edits then ran on their own.
    assert scheduled.count("filegate.edit_file") == 4, scheduled
    assert scheduled.count("filegate.tool_batch") == 3, scheduled
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(history)
