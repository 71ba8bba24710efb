"""``filegate cancel``: a run ends, whether its workers are alive or gone.

Why: a run whose workers died keeps ``filegate approvals`` at exit 3 and used
to need ``temporal workflow terminate``, which no page named (issue 36). A
live run is canceled cleanly by its worker; an abandoned one is terminated on
the server after the grace period, with who ended it and why.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from filegate.workflows import AgentWorkflow
from tests.cli.test_cli import cli, cli_env
from tests.scripting import calls
from tests.workflows.test_grants import docs_agent, pending_one, workers, write

pytestmark = pytest.mark.services

__all__ = ["cli_env"]


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


async def _terminate_reason(client: Client, workflow_id: str) -> str:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    [ended] = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED
    ]
    return str(ended.workflow_execution_terminated_event_attributes.reason)


async def test_an_abandoned_run_is_terminated_with_who_and_why(
    temporal_client: Client, cli_env: dict[str, str]
) -> None:
    workflow_id = f"abandoned-{uuid.uuid4().hex[:8]}"
    handle = await temporal_client.start_workflow(
        AgentWorkflow.run,
        docs_agent("nobody-tools", calls(write("w", "/docs/a.md"))),
        id=workflow_id,
        task_queue=f"nobody-{uuid.uuid4().hex[:8]}",
    )
    done = await asyncio.to_thread(
        cli, cli_env, "cancel", workflow_id, "--reason", "workers gone", "--grace", "0.5",
        "--reviewer", "ops",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "terminated" in done.stdout and "no worker ended it" in done.stdout, done.stdout
    assert (await handle.describe()).status == WorkflowExecutionStatus.TERMINATED
    reason = await _terminate_reason(temporal_client, workflow_id)
    assert reason == "filegate cancel by ops: workers gone"
    again = await asyncio.to_thread(cli, cli_env, "cancel", workflow_id)
    assert again.returncode == 1
    assert "is not running (terminated)" in one_line(again.stderr)


async def test_a_live_run_waiting_for_a_human_is_canceled_by_its_worker(
    temporal_client: Client, cli_env: dict[str, str], tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    queues = (f"agent-{uuid.uuid4().hex[:8]}", f"tools-{uuid.uuid4().hex[:8]}")
    async with workers(temporal_client, root, tmp_path / "journal", queues):
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run,
            docs_agent(queues[1], calls(write("w", "/docs/a.md"))),
            id=f"live-{uuid.uuid4().hex[:8]}",
            task_queue=queues[0],
        )
        await pending_one(handle)
        done = await asyncio.to_thread(
            cli, cli_env, "cancel", handle.id, "--grace", "20", "--reason", "wrong task",
            "--reviewer", "ana",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"workflow {handle.id} ended (canceled; " in done.stdout, done.stdout
        assert "filegate cancel by ana: wrong task" in done.stdout, done.stdout
        assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
        # Who and why are in the run's history, as for a terminated run (the old code
        # sent the cancel with neither: issue 54).
        history = await handle.fetch_history()
        [asked] = [
            e.workflow_execution_cancel_requested_event_attributes
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
        ]
        assert asked.cause == "filegate cancel by ana: wrong task", asked
    assert not (root / "docs" / "a.md").exists()


async def test_an_unknown_run_is_one_line(cli_env: dict[str, str]) -> None:
    done = await asyncio.to_thread(cli, cli_env, "cancel", f"nope-{uuid.uuid4().hex}")
    assert done.returncode == 1
    assert "nope-" in one_line(done.stderr)


async def test_approving_on_a_finished_run_says_it_finished(
    temporal_client: Client, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Not "is its worker running?": a closed run has nothing to approve (issue 36)."""
    root = tmp_path / "ws"
    root.mkdir()
    queues = (f"agent-{uuid.uuid4().hex[:8]}", f"tools-{uuid.uuid4().hex[:8]}")
    done_id = f"done-{uuid.uuid4().hex[:8]}"
    async with workers(temporal_client, root, tmp_path / "journal", queues):
        result = await temporal_client.execute_workflow(
            AgentWorkflow.run,
            docs_agent(queues[1], {"content": "nothing to do"}),
            id=done_id,
            task_queue=queues[0],
        )
    assert result.stop_reason == "final_answer"
    done = await asyncio.to_thread(
        cli, cli_env, "approve", "a1", "--workflow", done_id, "--timeout", "2"
    )
    assert done.returncode == 1
    assert f"workflow {done_id} is not running (completed)" in one_line(done.stderr)
