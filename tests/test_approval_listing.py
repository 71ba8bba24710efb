"""The approval listing (cli/approvals.py) with a stuck workflow and a non-Agent one.

One workflow that never answers queries (an ``AgentWorkflow`` on a task queue
no worker polls) must cost the listing at most ``LISTING_TIMEOUT`` and be named
as unreachable, by the function, ``filegate approvals`` and the UI; a workflow
of another type that implements the ``pending_approvals`` query is listed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from filegate.backends.embedded import TemporalDevServer
from filegate.cli.approvals import LISTING_TIMEOUT, approval_listing
from filegate.cli.ui import create_app
from starlette.testclient import TestClient
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from tests.ui_support import TOKEN, agent_stack, client_factory, pending, ui_access, write_call

pytestmark = pytest.mark.services

FAST = 3.0
"""Seconds a listing may take with a stuck workflow among the candidates."""


@workflow.defn(name="ReviewQueue")
class ReviewQueue:
    """Not an AgentWorkflow, but it answers the same ``pending_approvals`` query."""

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.query(name="pending_approvals")
    def pending_approvals(self) -> list[dict[str, Any]]:
        rule = {"operations": ["write"], "paths": ["/q/**"], "mode": "interrupt", "index": 0}
        return [{"id": "q1", "tool": "write_file", "args": {"file_path": "/q/a"}, "rule": rule}]


@workflow.defn(name="QuietJob")
class QuietJob:
    """Some other running workflow, without the query: not a Filegate one."""

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


@pytest_asyncio.fixture
async def stuck(temporal_client: Client) -> AsyncIterator[str]:
    """A running ``AgentWorkflow`` no worker serves: its queries never get an answer."""
    wf_id = f"stuck-{uuid.uuid4().hex[:8]}"
    handle = await temporal_client.start_workflow(
        "AgentWorkflow", id=wf_id, task_queue=f"nobody-{wf_id}"
    )
    try:
        yield wf_id
    finally:
        await handle.terminate("test over")


@pytest_asyncio.fixture
async def other_type(temporal_client: Client) -> AsyncIterator[str]:
    """A running ReviewQueue workflow (and a QuietJob, ``quiet-<id>``), worker up."""
    queue = f"review-{uuid.uuid4().hex[:8]}"
    async with Worker(
        temporal_client,
        task_queue=queue,
        workflows=[ReviewQueue, QuietJob],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await temporal_client.start_workflow(ReviewQueue.run, id=queue, task_queue=queue)
        quiet = await temporal_client.start_workflow(
            QuietJob.run, id=f"quiet-{queue}", task_queue=queue
        )
        try:
            yield queue
        finally:
            await handle.terminate("test over")
            await quiet.terminate("test over")


async def test_stuck_workflow_is_reported_not_waited_for(
    temporal_client: Client,
    temporal_server: TemporalDevServer,
    stuck: str,
    other_type: str,
    tmp_path: Path,
) -> None:
    async with agent_stack(temporal_client, tmp_path / "root", tmp_path / "j.db") as agents:
        handle = await agents.start(write_call("w1", "/docs/a.md", "a"))
        (approval,) = await pending(handle, 1)
        assert await temporal_client.get_workflow_handle(other_type).query("pending_approvals")

        started = time.monotonic()
        listing = await approval_listing(temporal_client)
        took = time.monotonic() - started
        assert took < FAST, f"listing took {took:.2f} s"
        found = {(a["workflow_id"], a["id"]) for a in listing.approvals}
        assert {(handle.id, approval.id), (other_type, "q1")} <= found
        late = [u for u in listing.unreachable if u["workflow_id"] == stuck]
        assert late and late[0]["reason"].startswith(f"did not answer in {LISTING_TIMEOUT:g} s")
        skipped = (handle.id, other_type, f"quiet-{other_type}")
        assert not any(u["workflow_id"] in skipped for u in listing.unreachable)
        assert not any(a["workflow_id"] == f"quiet-{other_type}" for a in listing.approvals)

        env = {k: v for k, v in os.environ.items() if not k.startswith(("FILEGATE_", "TEMPORAL_"))}
        env.update(
            TEMPORAL_ADDRESS=temporal_server.address, TEMPORAL_NAMESPACE=temporal_server.namespace
        )
        text, json_out, json_err = await cli(env, "approvals"), *await cli_both(env)
        assert f"!! workflow {stuck} did not answer in 1.5 s" in text
        assert f"{handle.id}  {approval.id}  write_file" in text and f"{other_type}  q1" in text
        assert f'"workflow_id": "{handle.id}"' in json_out and json_out.lstrip().startswith("[")
        assert stuck not in json_out and f"!! workflow {stuck} did not answer" in json_err

        access = ui_access()
        app = create_app(client_factory(temporal_server), access)
        with TestClient(app, base_url="http://127.0.0.1:8080") as ui:
            await asyncio.to_thread(ui.get, "/", params={"token": TOKEN})
            started = time.monotonic()
            page = await asyncio.to_thread(ui.get, "/fragment")
            took = time.monotonic() - started
        assert page.status_code == 200 and took < FAST, f"fragment took {took:.2f} s"
        assert f'data-key="unreachable/{stuck}"' in page.text
        assert "did not answer in 1.5 s" in page.text
        assert f'data-key="{handle.id}/{approval.id}"' in page.text
        assert f'data-key="{other_type}/q1"' in page.text
        await handle.terminate("test over")


async def cli(env: dict[str, str], *args: str) -> str:
    out, _ = await run(env, *args)
    return out


async def cli_both(env: dict[str, str]) -> tuple[str, str]:
    return await run(env, "approvals", "--json")


async def run(env: dict[str, str], *args: str) -> tuple[str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "filegate",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode(), err.decode()
