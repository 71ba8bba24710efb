"""The approval listing does not query a waiting run whose counters stand still.

Every query is a billed Temporal Action and the approval page refreshes every
2 s: one query per waiting workflow per refresh was 30 Actions a minute for a
card nobody touched (``bench/actions.py``, issue 36). The cards are reused
while the run's counters (read by the visibility query, not an Action) stand
still and no preview is pending, for at most ``CARDS_RECHECK`` seconds; a
decision, from any process, moves the counters and the next listing asks.
Counted with the server's own ``action`` counter.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from filegate.cli.ui.listing import approval_listing
from filegate.devstack.servers import TemporalDevServer
from filegate.workflows import AgentWorkflow, Decision
from tests.scripting import calls
from tests.ui_support import has_listing_attributes, listing_attributes
from tests.workflows.test_grants import docs_agent, workers, write

pytestmark = pytest.mark.services


def queries(server: TemporalDevServer) -> int:
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    pattern = (
        rf'^action\{{[^}}]*action_type="grpc_QueryWorkflow"[^}}]*namespace="{server.namespace}"'
    )
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if re.match(pattern, line))  # fmt: skip


async def settled(server: TemporalDevServer) -> int:
    """The query count once it has stood still for 2.5 s.

    Why so long: the server's metrics reach ``/metrics`` on a reporting tick
    (about a second, later on a loaded machine), so two equal reads half a
    second apart could both precede a query still being counted."""
    last, since = queries(server), time.monotonic()
    while time.monotonic() - since < 2.5:
        await asyncio.sleep(0.5)
        if (now := queries(server)) != last:
            last, since = now, time.monotonic()
    return last


async def counted_past(server: TemporalDevServer, count: int) -> bool:
    """Whether the query count rises past ``count`` within 20 s (a reporting tick late)."""
    deadline = time.monotonic() + 20
    while queries(server) <= count:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.5)
    return True


async def listed(client: Client, workflow_id: str) -> list[str]:
    listing = await approval_listing(client, workflow_id)
    return [a["id"] for a in listing.approvals]


async def test_an_untouched_waiting_run_is_asked_once_until_its_counters_move(
    temporal_server: TemporalDevServer, temporal_client: Client, tmp_path: Path
) -> None:
    if not await has_listing_attributes(temporal_client):
        pytest.fail("the embedded dev server registers the listing attributes")
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    queues = (f"agent-{uuid.uuid4().hex[:8]}", f"tools-{uuid.uuid4().hex[:8]}")
    workflow_id = f"cost-{uuid.uuid4().hex[:8]}"
    async with workers(temporal_client, root, tmp_path / "journal", queues):
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run,
            docs_agent(queues[1], calls(write("a", "/docs/a.md"), write("b", "/docs/b.md"))),
            id=workflow_id, task_queue=queues[0],
            search_attributes=await listing_attributes(temporal_client),
        )  # fmt: skip
        while len(pending := await handle.query(AgentWorkflow.pending_approvals)) < 2 or any(
            p.preview_pending for p in pending
        ):
            await asyncio.sleep(0.2)
        first = pending[0]
        deadline = time.monotonic() + 20
        while not (cards := await listed(temporal_client, workflow_id)):
            assert time.monotonic() < deadline, "the waiting run never listed"
            await asyncio.sleep(0.2)
        before = await settled(temporal_server)
        for _ in range(4):  # four refreshes of the page within CARDS_RECHECK
            assert await listed(temporal_client, workflow_id) == cards
        assert await settled(temporal_server) == before, "an untouched run was queried"

        # A decision from another client moves the counters: the next listing asks.
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=first.id, decision="approve")
        )
        deadline = time.monotonic() + 20
        while first.id in await listed(temporal_client, workflow_id):
            assert time.monotonic() < deadline, "the decided card stayed listed"
            await asyncio.sleep(0.2)
        assert await counted_past(temporal_server, before), "the moved run was not asked"
        await handle.terminate("test over")
