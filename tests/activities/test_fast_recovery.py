"""A dead tools worker is noticed in seconds; a long call is never cut short.

Every tool call heartbeats each second from its activity's event loop while its
thread works (reads, searches, execute and mutations alike), so the heartbeat
timeout can be short (``HEARTBEAT_TIMEOUT``, 2.5 s): a tools worker SIGKILLed
mid-edit, with a replacement started right away, costs under 4 s from the kill
to the completed run, and the workspace ends byte-identical to a run without
the kill. A command running far longer than the heartbeat timeout completes on
its first attempt.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from filegate.activities.contract import HEARTBEAT_TIMEOUT, tool_activity_options
from filegate.activities.tools import run_blocking
from filegate.backends.local_shell import LocalShellBackend
from filegate.devstack.servers import TemporalDevServer
from filegate.kernel.messages import ModelSpec
from filegate.kernel.tool_types import activity_call_id
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec
from filegate.workflows.inputs import Limits
from tests.activities.test_crash_recovery import start_tools_worker

pytestmark = pytest.mark.timing  # recovery budgets of a few seconds

RECOVERY_BUDGET = 4.0
"""Seconds from the SIGKILL of a tools worker mid-edit to the completed run."""
TRIALS = 3


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": args}


def scripted(turns: list[Any], queue: str, name: str, **ref: Any) -> AgentInput:
    return AgentInput(
        task="recover",
        model=ModelSpec(provider="scripted", options={"script": {"turns": turns}}),
        backend=BackendSpec(default=BackendRef(kind="remote", name=name, task_queue=queue, **ref)),
    )


def started_attempts(history: Any, activity_type: str) -> list[int]:
    scheduled: dict[int, str] = {}
    attempts: list[int] = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attrs.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            if scheduled.get(attrs.scheduled_event_id) == activity_type:
                attempts.append(attrs.attempt)
    return attempts


# --------------------------------------------------------------------------- heartbeats


def test_the_workflow_default_is_the_short_heartbeat_timeout() -> None:
    assert Limits().tool_heartbeat_timeout_seconds == HEARTBEAT_TIMEOUT.total_seconds() <= 3
    for tool in ("read_file", "edit_file", "grep", "execute"):
        assert tool_activity_options(tool)["heartbeat_timeout"] == HEARTBEAT_TIMEOUT


@pytest.mark.slow
@pytest.mark.parametrize("interruptible", [True, False], ids=["read-or-search", "mutation"])
async def test_every_call_heartbeats_while_its_thread_works(interruptible: bool) -> None:
    beats: list[float] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *_: beats.append(time.monotonic())

    def work() -> str:
        time.sleep(0.75)
        return "done"

    async def slow() -> str:
        return await run_blocking(work, interruptible=interruptible, heartbeat_interval=0.1)

    began = time.monotonic()
    assert await env.run(slow) == "done"
    assert len(beats) >= 5, beats
    gaps = [b - a for a, b in zip([began, *beats], beats, strict=False)]
    assert max(gaps) < 0.35, gaps


@pytest.mark.services
async def test_a_long_command_outlives_the_heartbeat_timeout(
    temporal_client: Client, tmp_path: Path
) -> None:
    """6 s of ``sleep``, more than twice the heartbeat timeout: one attempt, success."""
    root = tmp_path / "ws"
    root.mkdir()
    suffix = uuid.uuid4().hex[:8]
    agent_q, tools_q = f"long-a-{suffix}", f"long-t-{suffix}"
    turns = [
        {"tool_calls": [call("x1", "execute", command="sleep 6 && echo slept")]},
        {"content": "done"},
    ]
    shell = LocalShellBackend(str(root))
    async with (
        agent_worker(temporal_client, agent_q),
        tools_worker(temporal_client, tools_q, {"shell": shell}, tmp_path / "journal"),
    ):
        input = scripted(turns, tools_q, "shell", can_execute=True)
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=f"long-{suffix}", task_queue=agent_q
        )
        result = await asyncio.wait_for(handle.result(), 60)
    [out] = [m for m in result.transcript if m["role"] == "tool"]
    assert out["status"] == "success" and "slept" in out["content"], out
    assert started_attempts(await handle.fetch_history(), "filegate.execute") == [1]


# --------------------------------------------------------------------------- SIGKILL mid-edit


async def wait_for_entry(journal: Path, proc: asyncio.subprocess.Process) -> None:
    """Until the edit's intent is journaled: the stalled call is now mid-edit."""
    deadline = time.monotonic() + 30
    while not list(journal.glob("*/*.json")):
        assert proc.returncode is None, "the tools worker exited"
        assert time.monotonic() < deadline, "the edit never started"
        await asyncio.sleep(0.02)


async def one_kill(server: TemporalDevServer, client: Client, base: Path) -> float:
    root, journal = base / "ws", base / "state" / "journal"
    root.mkdir(parents=True)
    (root / "a.txt").write_text("x\n")
    (root / "keep.txt").write_bytes(b"untouched\x00\n")
    edit = call("e1", "edit_file", file_path="/a.txt", old_string="x", new_string="xx")
    turns = [
        {"tool_calls": [call("r0", "read_file", file_path="/a.txt")]},  # read before edit
        {"tool_calls": [edit]},
        {"tool_calls": [call("r1", "read_file", file_path="/a.txt")]},
        {"content": "grown"},
    ]
    suffix = uuid.uuid4().hex[:8]
    agent_q, tools_q = f"fast-a-{suffix}", f"fast-t-{suffix}"
    first = await start_tools_worker(
        server, root, journal, tools_q, None, stall_call=activity_call_id(2, 0, "e1"), quiet=True
    )
    second: asyncio.subprocess.Process | None = None
    try:
        async with agent_worker(client, agent_q):
            handle = await client.start_workflow(
                AgentWorkflow.run, scripted(turns, tools_q, "filesystem"), id=f"fast-{suffix}",
                task_queue=agent_q,
            )  # fmt: skip
            await wait_for_entry(journal, first)
            assert (root / "a.txt").read_text() == "x\n"  # mid-edit: not applied yet
            first.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            second = await start_tools_worker(server, root, journal, tools_q, None, quiet=True)
            result = await asyncio.wait_for(handle.result(), 30)
            elapsed = time.monotonic() - killed
    finally:
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 30)
    assert await first.wait() == -signal.SIGKILL
    assert result.final_answer == "grown" and result.tool_errors == 0, result.transcript
    tree = {p.name: p.read_bytes() for p in sorted(root.iterdir())}
    assert tree == {"a.txt": b"xx\n", "keep.txt": b"untouched\x00\n"}  # edited exactly once
    assert started_attempts(await handle.fetch_history(), "filegate.edit_file") == [2]
    return elapsed


@pytest.mark.services
@pytest.mark.slow
async def test_sigkilled_tools_worker_mid_edit_recovers_within_4s(
    temporal_server: TemporalDevServer, temporal_client: Client, tmp_path: Path
) -> None:
    times = [
        await one_kill(temporal_server, temporal_client, tmp_path / f"t{n}") for n in range(TRIALS)
    ]
    print("kill-to-completion after a tools-worker SIGKILL mid-edit: "
          + ", ".join(f"{t:.2f}s" for t in times))  # fmt: skip
    assert max(times) <= RECOVERY_BUDGET, times
