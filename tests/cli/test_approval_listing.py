"""Finding approvals at scale (cli/ui/listing.py) with stuck workflows and other types.

- One workflow that never answers queries (an ``AgentWorkflow`` whose worker
  was stopped while it waited on a human) costs the listing at most
  ``LISTING_TIMEOUT`` and is named as unreachable by the function,
  ``filegate approvals`` and the UI; the UI's first page does not wait for it
  at all (under 1 s).
- A workflow of another type that answers ``pending_approvals`` is listed.
- With the ``FilegatePendingApprovals`` search attribute, one visibility query
  names only the workflows that wait or do not publish the count (a running
  workflow with the query but a zero count is not asked); on a server without
  it, the refusal is detected, remembered, and every running workflow is
  asked instead.
- Recent decisions come from ``decided_approvals`` of running and recently
  closed workflows with ``FilegateDecidedApprovals > 0``.
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
from starlette.testclient import TestClient
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from filegate.cli.approvals import LISTING_TIMEOUT, UNANSWERED_EXIT, approval_listing
from filegate.cli.ui import decided as ui_decided
from filegate.cli.ui import listing as ui_listing
from filegate.cli.ui.app import create_app
from filegate.cli.ui.decided import DecidedListing, decided_listing, from_history
from filegate.cli.ui.listing import (
    RUNNING,
    Candidate,
    attribute_missing,
    candidates,
)
from filegate.devstack.servers import TemporalDevServer
from filegate.kernel.wire import PENDING_ATTRIBUTE
from filegate.workflows import Decision
from tests.ui_support import (
    TOKEN,
    agent_stack,
    client_factory,
    has_listing_attributes,
    listing_attributes,
    pending,
    ui_access,
    write_call,
)

pytestmark = pytest.mark.services

FAST = 3.0
"""Seconds a listing may take with a stuck workflow among the candidates."""
PAGE = 1.0
"""Seconds the UI's first page may take with a stuck workflow among them."""

PENDING = SearchAttributeKey.for_int("FilegatePendingApprovals")
DECIDED = SearchAttributeKey.for_int("FilegateDecidedApprovals")


@workflow.defn(name="ReviewQueue")
class ReviewQueue:
    """Not an AgentWorkflow, but it answers the same queries.

    ``mode``: ``quiet`` publishes no counters, ``waiting`` publishes one pending
    approval and one decision, ``finished`` publishes one decision and closes.
    """

    @workflow.run
    async def run(self, mode: str) -> None:
        if mode == "waiting":
            workflow.upsert_search_attributes([PENDING.value_set(1), DECIDED.value_set(1)])
        elif mode == "finished":
            workflow.upsert_search_attributes([PENDING.value_set(0), DECIDED.value_set(1)])
            return
        await workflow.wait_condition(lambda: False)

    @workflow.query(name="pending_approvals")
    def pending_approvals(self) -> list[dict[str, Any]]:
        rule = {"operations": ["write"], "paths": ["/q/**"], "mode": "interrupt", "index": 0}
        return [{"id": "q1", "tool": "write_file", "args": {"file_path": "/q/a"}, "rule": rule}]

    @workflow.query(name="decided_approvals")
    def decided_approvals(self) -> list[dict[str, Any]]:
        return [
            {
                "id": f"d-{workflow.info().workflow_id}",
                "tool": "write_file",
                "tool_call_id": "c1",
                "decision": "approve",
                "reviewer": "zoe",
                "via": "cli",
                "decided_at": workflow.info().start_time.isoformat(),
                "path": "/q/a",
                "summary": "write_file /q/a",
            }
        ]


@workflow.defn(name="QuietJob")
class QuietJob:
    """Some other running workflow, without the query: not a Filegate one."""

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


@pytest_asyncio.fixture
async def other_type(temporal_client: Client) -> AsyncIterator[str]:
    """A running ReviewQueue workflow (and a QuietJob, ``quiet-<id>``), worker up;
    the ReviewQueue publishes its counters where the server has them."""
    queue = f"review-{uuid.uuid4().hex[:8]}"
    mode = "waiting" if await has_listing_attributes(temporal_client) else "quiet"
    async with Worker(
        temporal_client,
        task_queue=queue,
        workflows=[ReviewQueue, QuietJob],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await temporal_client.start_workflow(
            ReviewQueue.run, mode, id=queue, task_queue=queue
        )
        quiet = await temporal_client.start_workflow(
            QuietJob.run, id=f"quiet-{queue}", task_queue=queue
        )
        try:
            yield queue
        finally:
            await handle.terminate("test over")
            await quiet.terminate("test over")


async def stopped_worker_approval(client: Client, tmp_path: Path) -> tuple[str, str]:
    """An AgentWorkflow waiting on an approval whose workers are then stopped:
    listed (its counter says 1), but no query of it ever gets an answer."""
    async with agent_stack(client, tmp_path / "stuck", tmp_path / "stuck.db") as agents:
        handle = await agents.start(write_call("s1", "/docs/s.md", "s"))
        (approval,) = await pending(handle, 1)
    return handle.id, approval.id


async def visible(client: Client, query: str, workflow_id: str) -> None:
    """Wait until visibility (eventually consistent) shows ``workflow_id`` for ``query``."""
    deadline = time.monotonic() + 20
    while not [w async for w in client.list_workflows(f"{query} AND WorkflowId = '{workflow_id}'")]:
        assert time.monotonic() < deadline, f"{workflow_id} never matched {query}"
        await asyncio.sleep(0.2)


@pytest.mark.timing
async def test_stuck_workflow_is_reported_not_waited_for(
    temporal_client: Client, temporal_server: TemporalDevServer, other_type: str, tmp_path: Path
) -> None:
    stuck, _ = await stopped_worker_approval(temporal_client, tmp_path)
    async with agent_stack(temporal_client, tmp_path / "root", tmp_path / "j.db") as agents:
        handle = await agents.start(write_call("w1", "/docs/a.md", "a"))
        (approval,) = await pending(handle, 1)
        assert await temporal_client.get_workflow_handle(other_type).query("pending_approvals")
        if await has_listing_attributes(temporal_client):
            for wf in (stuck, handle.id, other_type):
                await visible(temporal_client, f"{PENDING_ATTRIBUTE} > 0", wf)

        started = time.monotonic()
        listing = await approval_listing(temporal_client)
        took = time.monotonic() - started
        assert took < FAST, f"listing took {took:.2f} s"
        found = {(a["workflow_id"], a["id"]) for a in listing.approvals}
        assert {(handle.id, approval.id), (other_type, "q1")} <= found
        mine = next(a for a in listing.approvals if a["workflow_id"] == handle.id)
        assert mine["workflow_type"] == "AgentWorkflow" and mine["run_id"] == handle.result_run_id
        theirs = next(a for a in listing.approvals if a["workflow_id"] == other_type)
        assert theirs["workflow_type"] == "ReviewQueue"
        late = [u for u in listing.unreachable if u["workflow_id"] == stuck]
        assert late and late[0]["reason"].startswith(f"did not answer in {LISTING_TIMEOUT:g} s")
        skipped = (handle.id, other_type, f"quiet-{other_type}")
        assert not any(u["workflow_id"] in skipped for u in listing.unreachable)
        assert not any(a["workflow_id"] == f"quiet-{other_type}" for a in listing.approvals)

        env = {k: v for k, v in os.environ.items() if not k.startswith(("FILEGATE_", "TEMPORAL_"))}
        env.update(
            TEMPORAL_ADDRESS=temporal_server.address, TEMPORAL_NAMESPACE=temporal_server.namespace
        )
        # The stuck workflow may be waiting for a human: exit 3, never "no pending".
        text = await cli(env, "approvals", code=UNANSWERED_EXIT)
        json_out, json_err = await cli_both(env, code=UNANSWERED_EXIT)
        assert f"!! workflow {stuck} did not answer in 1.5 s" in text
        # Counted, not "1": another test's run on this server may be unanswered too.
        silent = text.count("!! workflow ")
        assert f"{silent} workflow{'s' * (silent > 1)} did not answer" in text
        assert "no pending approvals" not in text
        assert f"{handle.id}  {approval.id}  write_file" in text and f"{other_type}  q1" in text
        assert f'"workflow_id": "{handle.id}"' in json_out and json_out.lstrip().startswith("[")
        assert stuck not in json_out and f"!! workflow {stuck} did not answer" in json_err
        assert '"preview"' not in json_out  # --json keeps the contract's keys

        access = ui_access()
        app = create_app(client_factory(temporal_server), access)
        with TestClient(app, base_url="http://127.0.0.1:8080") as ui:
            login = await asyncio.to_thread(ui.get, "/", params={"token": TOKEN})
            assert login.status_code == 200
            started = time.monotonic()
            first = await asyncio.to_thread(ui.get, "/")
            took_page = time.monotonic() - started
            started = time.monotonic()
            page = await asyncio.to_thread(ui.get, "/fragment")
            took = time.monotonic() - started
            api = await asyncio.to_thread(ui.get, "/api/approvals")
        assert api.status_code == 200 and int(api.headers["X-Filegate-Unanswered"]) >= 1
        assert any(a["workflow_id"] == handle.id for a in api.json())
        assert first.status_code == 200 and took_page < PAGE, f"page took {took_page:.2f} s"
        assert f'data-key="{handle.id}/{approval.id}"' in first.text  # the healthy one is there
        assert (
            f'data-key="unreachable/{stuck}"' in first.text and "has not answered yet" in first.text
        )
        assert 'data-incomplete="1"' in first.text  # the script refreshes at once
        assert page.status_code == 200 and took < FAST, f"fragment took {took:.2f} s"
        assert f'data-key="unreachable/{stuck}"' in page.text
        assert "did not answer in 1.5 s" in page.text
        assert f'data-key="{handle.id}/{approval.id}"' in page.text
        assert f'data-key="{other_type}/q1"' in page.text
        await handle.terminate("test over")
    await temporal_client.get_workflow_handle(stuck).terminate("test over")


class BareDevServer(TemporalDevServer):
    """The dev server without Filegate's search attributes (an older setup)."""

    def _command(self) -> list[str]:
        cmd = super()._command()
        while "--search-attribute" in cmd:
            at = cmd.index("--search-attribute")
            del cmd[at : at + 2]
        return cmd


async def test_server_without_the_attribute_falls_back_and_remembers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with BareDevServer(tmp_path / "bare") as server:
        client = await Client.connect(
            server.address, namespace=server.namespace, data_converter=pydantic_data_converter
        )
        assert not await has_listing_attributes(client)
        assert not attribute_missing(client, PENDING_ATTRIBUTE)
        sent: list[str] = []
        real = Client.list_workflows

        def spy(self: Client, query: str | None = None, **kw: Any) -> Any:
            sent.append(str(query))
            return real(self, query, **kw)

        monkeypatch.setattr(Client, "list_workflows", spy)
        queue = f"bare-{uuid.uuid4().hex[:8]}"
        async with Worker(
            client,
            task_queue=queue,
            workflows=[ReviewQueue],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ):
            await client.start_workflow(ReviewQueue.run, "quiet", id=queue, task_queue=queue)
            await visible(client, RUNNING, queue)
            sent.clear()
            first = await approval_listing(client)
            narrowed = f"{RUNNING} AND ({PENDING_ATTRIBUTE} > 0 OR {PENDING_ATTRIBUTE} IS NULL)"
            assert sent == [narrowed, RUNNING]
            assert attribute_missing(client, PENDING_ATTRIBUTE) and not first.narrowed
            assert (queue, "q1") in {(a["workflow_id"], a["id"]) for a in first.approvals}
            sent.clear()
            await approval_listing(client)
            assert sent == [RUNNING]  # remembered: no second refusal
            monkeypatch.setattr(ui_listing, "ATTRIBUTE_RECHECK", 0.0)
            sent.clear()
            await approval_listing(client)
            assert len(sent) == 2  # the memory expires: asked again
            decided = await decided_listing(client)  # the same fallback for decisions
            assert [d["reviewer"] for d in decided.decisions if d["workflow_id"] == queue] == [
                "zoe"
            ]
            await client.get_workflow_handle(queue).terminate("test over")


async def test_the_attribute_narrows_listing_and_recent_decisions(temporal_client: Client) -> None:
    if not await has_listing_attributes(temporal_client):
        pytest.fail(
            "the embedded dev server registers the listing attributes (devstack/servers.py)"
        )
    queue = f"narrow-{uuid.uuid4().hex[:8]}"
    async with Worker(
        temporal_client, task_queue=queue, workflows=[ReviewQueue],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):  # fmt: skip
        started = {}
        for mode in ("quiet", "waiting", "finished"):
            started[mode] = await temporal_client.start_workflow(
                ReviewQueue.run, mode, id=f"{queue}-{mode}", task_queue=queue,
                search_attributes=await listing_attributes(temporal_client),
            )  # fmt: skip
        # Started without the counters: nothing says it has no approvals, so it is asked.
        started["unknown"] = await temporal_client.start_workflow(
            ReviewQueue.run, "quiet", id=f"{queue}-unknown", task_queue=queue
        )
        await started["finished"].result()
        await visible(temporal_client, f"{PENDING_ATTRIBUTE} > 0", f"{queue}-waiting")
        await visible(temporal_client, "FilegateDecidedApprovals > 0", f"{queue}-finished")
        listing = await approval_listing(temporal_client)
        assert listing.narrowed
        ids = {a["workflow_id"] for a in listing.approvals}
        assert f"{queue}-waiting" in ids and f"{queue}-quiet" not in ids  # 0: never asked
        assert f"{queue}-unknown" in ids
        decided = await decided_listing(temporal_client)
        mine = {
            d["workflow_id"]: d for d in decided.decisions if d["workflow_id"].startswith(queue)
        }
        assert set(mine) == {f"{queue}-waiting", f"{queue}-finished", f"{queue}-unknown"}
        assert mine[f"{queue}-finished"]["running"] is False  # a closed one is still recent
        assert mine[f"{queue}-waiting"]["summary"] == "write_file /q/a"
        for mode in ("quiet", "waiting", "unknown"):
            await started[mode].terminate("test over")


async def test_decisions_of_a_closed_run_without_workers_come_from_history(
    temporal_client: Client, tmp_path: Path
) -> None:
    """A finished run whose workers stopped cannot answer ``decided_approvals``; its
    history says who decided (an update and a signal), and is read once."""
    async with agent_stack(temporal_client, tmp_path / "ws", tmp_path / "j.db") as agents:
        handle = await agents.start(
            write_call("w1", "/docs/h.md", "h"), write_call("w2", "/docs/i.md", "i")
        )
        first, second = await pending(handle, 2)
        await handle.execute_update(
            "decide", Decision(id=first.id, decision="approve", reviewer="ana", via="cli")
        )
        no = Decision(id=second.id, decision="reject", reason="no", reviewer="bo", via="cli")
        await handle.signal("decide", no)
        await asyncio.wait_for(handle.result(), 30)
    if await has_listing_attributes(temporal_client):
        await visible(temporal_client, "FilegateDecidedApprovals > 0", handle.id)
        listing = await decided_listing(temporal_client)
    else:  # the fallback lists running workflows only: ask this closed run directly
        listing = DecidedListing(await from_history(temporal_client, closed_candidate(handle)))
    rows = {d["id"]: d for d in listing.decisions if d["workflow_id"] == handle.id}
    assert {(k, d["decision"], d["reviewer"], d["via"]) for k, d in rows.items()} == {
        (first.id, "approve", "ana", "cli"),
        (second.id, "reject", "bo", "cli"),
    }
    assert rows[second.id]["reason"] == "no" and rows[first.id]["source"] == "history"
    assert not any(u["workflow_id"] == handle.id for u in listing.unreachable)
    if await has_listing_attributes(temporal_client):
        key = (temporal_client.namespace, handle.id, handle.result_run_id)
        assert key in ui_decided._closed  # a closed run is not asked again


def closed_candidate(handle: Any) -> Candidate:
    return Candidate(handle.id, handle.result_run_id, "AgentWorkflow", running=False)


async def test_candidates_detect_a_missing_attribute_by_name(temporal_client: Client) -> None:
    """Any attribute the server lacks is detected (not only ours), and the refusal
    of another problem is not mistaken for it."""
    name = f"FilegateNoSuch{uuid.uuid4().hex[:6]}"
    assert not attribute_missing(temporal_client, name)
    found = await candidates(temporal_client, name, f"{RUNNING} AND {name} > 0", RUNNING)
    assert attribute_missing(temporal_client, name) and isinstance(found, list)
    other = f"FilegateOther{uuid.uuid4().hex[:6]}"
    with pytest.raises(Exception, match="invalid"):
        await candidates(temporal_client, other, f"{RUNNING} AND NoSuchField > 0", RUNNING)
    assert not attribute_missing(temporal_client, other)


async def cli(env: dict[str, str], *args: str, code: int = 0) -> str:
    out, _ = await run(env, *args, code=code)
    return out


async def cli_both(env: dict[str, str], code: int = 0) -> tuple[str, str]:
    return await run(env, "approvals", "--json", code=code)


async def run(env: dict[str, str], *args: str, code: int = 0) -> tuple[str, str]:
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
    assert proc.returncode == code, err.decode()
    return out.decode(), err.decode()
