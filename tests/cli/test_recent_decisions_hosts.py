"""Recent decisions of workflows hosting FileTools that keep no approval counters.

Issue 28 item 8. A workflow of one's own started without the approval search
attributes (``initial_search_attributes()``) was listed in "Recent decisions"
only while it ran: once closed, visibility could not tell it from any other
workflow, and its decisions vanished from the tab, silently. Now the UI learns
the types whose runs answer the approval queries without the counters and asks
their recently closed runs too; the tab says what it still cannot list.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from temporalio.client import Client

from filegate.backends.filesystem import FilesystemBackend
from filegate.cli.ui import listing as ui_listing
from filegate.workflows import BackendRef, BackendSpec, FileToolsConfig
from filegate.workflows.gate import ToolInterrupt
from tests.cli.test_ui import get, listed, post_decision
from tests.ui_support import REVIEWER, write_call
from tests.workflows.test_execute_gate import ToolListWorkflow, running_host
from tests.workflows.test_workflow_e2e import eventually, running_tools

pytestmark = pytest.mark.services

NOTE = "Workflows started without the approval search attributes are listed here while they run"


async def decided_rows(ui: TestClient, workflow_id: str, timeout: float = 20.0) -> list[Any]:
    """``/api/decided`` rows of ``workflow_id`` once there are any (visibility lags)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = [
            r for r in (await get(ui, "/api/decided")).json() if r["workflow_id"] == workflow_id
        ]
        if rows or time.monotonic() > deadline:
            return rows
        await asyncio.sleep(0.3)


async def test_a_closed_file_tools_host_without_counters_keeps_its_decisions(
    ui: TestClient, temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    ui_listing._host_types.clear()  # what this UI process learnt before does not count
    async with running_tools(temporal_client, {"fs": FilesystemBackend(root)}, tmp_path / "j") as q:
        config = FileToolsConfig(
            backend=BackendSpec(default=BackendRef(kind="remote", name="fs", task_queue=q)),
            interrupt_on={"write_file": ToolInterrupt(always=True)},
        )
        async with running_host(temporal_client) as host_queue:
            wf = f"host-no-counters-{uuid.uuid4().hex[:8]}"
            handle = await temporal_client.start_workflow(
                ToolListWorkflow.run,
                args=[config, [write_call("w", "/a.txt", "a")]],
                id=wf,
                task_queue=host_queue,
            )  # no search_attributes: the host publishes no counters
            await eventually(  # decided once its preview is shown, as a reviewer would
                lambda: handle.query("pending_approvals", result_type=list[dict[str, Any]]),
                lambda p: len(p) == 1 and not p[0].get("preview_pending"),
            )
            [card] = await listed(ui, wf, 1)  # the pending listing sees the running host
            code, body = await post_decision(ui, workflow_id=wf, id=card["id"], decision="approve")
            assert code == 200 and body["ok"], body
            result = await asyncio.wait_for(handle.result(), 30)
    assert result["answers"]["w"]["error"] is False and (root / "a.txt").read_text() == "a"
    # Closed, and its worker gone: still in the tab, from its history.
    [row] = await decided_rows(ui, wf)
    assert (row["id"], row["decision"], row["reviewer"], row["via"]) == (
        card["id"],
        "approve",
        REVIEWER,
        "ui",
    )
    assert row["running"] is False
    page = (await get(ui, "/decided")).text
    assert f'data-workflow="{wf}"' in page and NOTE in page


async def test_the_tab_says_which_runs_it_cannot_list(ui: TestClient) -> None:
    page = (await get(ui, "/decided")).text
    assert NOTE in page and "initial_search_attributes()" in page
