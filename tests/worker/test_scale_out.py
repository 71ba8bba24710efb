"""Scale-out: two tools workers and two agent workers on the same queues, one of
each killed mid-run (issue 36).

Every run finishes, nothing is lost and nothing is applied twice. The tools
workers are real ``filegate worker --role tools`` processes over one root and
one journal directory (workers sharing a queue must share the journal: a
retry of a call a dead worker applied may land on the other one, which must
see that it was applied); the agent workers are real ``filegate worker --role
agent`` processes. Each run grows its own file by one line per step with
``edit_file``: an edit applied twice leaves a line twice, one lost leaves a gap.
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
from temporalio.client import Client

from filegate.devstack.servers import TemporalDevServer
from filegate.workflows import AgentWorkflow
from tests.activities.test_crash_recovery import on_tools_queue, start_tools_worker, stop

pytestmark = [pytest.mark.services, pytest.mark.slow]

RUNS = 4
STEPS = 12


def _call(call_id: str, tool: str, **args: str) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": tool, "args": args}]}


def _script(name: str) -> list[dict[str, Any]]:
    path = f"/{name}.txt"
    turns = [_call("w", "write_file", file_path=path, content="line 0\n")]
    for step in range(1, STEPS):
        old = f"line {step - 1}\n"
        new = f"{old}line {step}\n"
        turns.append(_call(f"e{step}", "edit_file", file_path=path, old_string=old, new_string=new))
    turns.append({"content": f"{name} grown"})
    return turns


async def _agent(server: TemporalDevServer, queue: str, state: Path) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": server.address,
        "TEMPORAL_NAMESPACE": server.namespace,
        "FILEGATE_STATE_DIR": str(state),
    }
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "filegate", "worker", "--role", "agent", "--task-queue", queue,
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip


def _lines(root: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in root.glob("*.txt"))


async def test_two_of_each_worker_one_of_each_killed_mid_run(
    temporal_server: TemporalDevServer, temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    journal = tmp_path / "state" / "journal"
    suffix = uuid.uuid4().hex[:8]
    agent_q, tools_q = f"agent-{suffix}", f"tools-{suffix}"
    tools = [
        await start_tools_worker(temporal_server, root, journal, tools_q, None, quiet=True)
        for _ in range(2)
    ]
    agents = [await _agent(temporal_server, agent_q, tmp_path / f"agent{n}") for n in range(2)]
    try:
        handles = [
            await temporal_client.start_workflow(
                AgentWorkflow.run,
                on_tools_queue(f"grow f{n}", _script(f"f{n}"), tools_q),
                id=f"scale-{suffix}-{n}",
                task_queue=agent_q,
            )
            for n in range(RUNS)
        ]
        # Mid-run: a third of all steps are on disk.
        deadline = time.monotonic() + 120
        while _lines(root) < RUNS * STEPS // 3:
            assert time.monotonic() < deadline, f"no progress: {_lines(root)} lines"
            await asyncio.sleep(0.05)
        killed_at = _lines(root)
        tools[0].send_signal(signal.SIGKILL)
        agents[0].send_signal(signal.SIGKILL)
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 180)
    finally:
        for proc in (tools[0], agents[0]):
            if proc.returncode is None:
                proc.kill()
        await stop(tools[1], agents[1])
        for proc in (tools[0], agents[0]):
            await proc.wait()

    assert killed_at < RUNS * STEPS, "the kill came after every step: not mid-run"
    for n, result in enumerate(results):
        assert result.final_answer == f"f{n} grown" and result.tool_errors == 0, result
        expected = "".join(f"line {step}\n" for step in range(STEPS))
        assert (root / f"f{n}.txt").read_text() == expected, f"f{n}: lost or applied twice"
