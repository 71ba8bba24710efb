"""A read-heavy ``filegate run`` through an S3 outage is never terminated (issue 49, item 1).

``filegate run`` (co-hosted: the reads are local activities in the agent's
workflow task) with turns of eight reads of ~70 KB files, a gated write and
more reads; this module's own SeaweedFS is stopped for 12 s (and, in the slow
case, 120 s) from the second turn on, then started again on the same ports and
data. Before, the codec kept every read result inline while S3 was away, a
workflow task completion carried several of them past the server's gRPC
message limit, and the server terminated the run (``GrpcMessageTooLarge``):
work lost for good. Now the run completes, every read answered, the write
applied once, and no completion of its history is near the limit.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from filegate.devstack.s3 import S3DevServer
from filegate.devstack.servers import TemporalDevServer
from tests.cli.test_cli import CLI, call, cli, env_for, write_json
from tests.cli.test_cli_outage import Lines, approval_id

pytestmark = [pytest.mark.services, pytest.mark.slow]

FILES = 8
FILE_BYTES = 70_000
"""Under the offload limit (80 000 characters), far over the codec's 8 KB."""


def reads(turn: int) -> dict[str, Any]:
    return {
        "tool_calls": [
            call(f"r{turn}-{n}", "read_file", file_path=f"/f{n}.txt", limit=2000)
            for n in range(FILES)
        ]
    }


def script(before: int, after: int) -> dict[str, Any]:
    turns = [reads(t) for t in range(before)]
    turns.append({"tool_calls": [call("w", "write_file", file_path="/out.txt", content="kept\n")]})
    turns += [reads(before + t) for t in range(after)]
    turns.append({"content": "read it all"})
    return {"turns": turns}


async def reads_recorded(client: Client, workflow_id: str, count: int) -> None:
    """Wait until ``count`` local activities are recorded in the run's history."""
    deadline = time.monotonic() + 90
    while True:
        try:
            history = await client.get_workflow_handle(workflow_id).fetch_history()
            markers = [
                e for e in history.events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
            ]
            if len(markers) >= count:
                return
        except RPCError:
            pass  # not started yet
        assert time.monotonic() < deadline, "the first reads never came back"
        await asyncio.sleep(0.2)


async def explain(client: Client, workflow_id: str) -> str:
    """The run's status, event counts and workflow task failures, for a failing assertion."""
    handle = client.get_workflow_handle(workflow_id)
    described = await handle.describe()
    counts: dict[str, int] = {}
    failures = []
    async for event in handle.fetch_history_events():
        name = EventType.Name(event.event_type)
        counts[name] = counts.get(name, 0) + 1
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            failures.append(event.workflow_task_failed_event_attributes.failure.message[:300])
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
            failures.append(f"terminated: {event.workflow_execution_terminated_event_attributes}")
    pending = described.raw_description.pending_workflow_task
    return f"{described.status} {counts} {failures} pending task attempt {pending.attempt}"


async def largest_completion(client: Client, workflow_id: str) -> tuple[int, int]:
    """(bytes of the largest workflow task's commands, history bytes) of the run."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    largest = current = total = 0
    for event in history.events:
        size = event.ByteSize()
        total += size
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            current = 0
        elif event.event_type in (
            EventType.EVENT_TYPE_MARKER_RECORDED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
        ):
            current += size
            largest = max(largest, current)
    return largest, total


@pytest.mark.parametrize(
    "outage", [pytest.param(12.0, marks=pytest.mark.slow(seconds=40)),
               pytest.param(120.0, marks=pytest.mark.slow(seconds=150))],
)  # fmt: skip
async def test_a_read_heavy_run_completes_through_an_outage(
    outage: float,
    temporal_server: TemporalDevServer,
    temporal_client: Client,
    s3: S3DevServer,
    tmp_path: Path,
) -> None:
    env = env_for(temporal_server, s3, tmp_path)
    env["FILEGATE_S3_BUCKET"] = f"rh-{uuid.uuid4().hex[:8]}"
    root = tmp_path / "ws"
    root.mkdir()
    for n in range(FILES):
        line = f"file {n} " + "x" * 60 + "\n"
        (root / f"f{n}.txt").write_text(line * (FILE_BYTES // len(line)))
    turns = write_json(tmp_path / "script.json", script(before=10, after=4))
    gate = write_json(tmp_path / "gate.json", {"write_file": True})
    workflow_id = f"read-heavy-{uuid.uuid4().hex[:8]}"
    command = [
        *CLI, "run", "read everything", "--model", f"scripted:{turns}", "--root", str(root),
        "--interrupt-on", gate, "--workflow-id", workflow_id, "--max-steps", "30",
    ]  # fmt: skip
    pipe = subprocess.PIPE
    run = Lines(subprocess.Popen(command, env=env, stdout=pipe, stderr=pipe, text=True))
    try:
        # The first turn's reads came back (their markers are in history; the
        # progress lines wait for the workflow task, which the reads keep open).
        await reads_recorded(temporal_client, workflow_id, FILES)
        await asyncio.to_thread(s3.stop)
        await asyncio.sleep(outage)
        await asyncio.to_thread(s3.start)
        try:
            line = await asyncio.to_thread(run.wait_for, "?? approval", 180)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{await explain(temporal_client, workflow_id)}") from None
        decided = await asyncio.to_thread(
            cli, env, "approve", approval_id(line), "--workflow", workflow_id
        )
        assert decided.returncode == 0, decided.stdout + decided.stderr + run.text()
        code = await asyncio.to_thread(run.finish, 180)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    out = run.text()
    described = await temporal_client.get_workflow_handle(workflow_id).describe()
    assert described.status == WorkflowExecutionStatus.COMPLETED, (described.status, out[-3000:])
    assert code == 0, out[-3000:]
    assert "final answer: read it all" in out
    assert (root / "out.txt").read_text() == "kept\n"
    assert "Traceback" not in out
    largest, total = await largest_completion(temporal_client, workflow_id)
    assert largest < 1_500_000, (largest, total)
