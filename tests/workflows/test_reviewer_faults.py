"""No waiting call is hidden from the reviewer (issue 34 items 4 and 5), on real servers.

A pending card over 8 KiB (the S3 codec's by-reference threshold): a terminal
without the run's S3 settings lists it and decides it, and while S3 is down
the run answers the listing and stays in its worker's cache (query answers
are kept inline: they never enter history). A card that is stored by
reference all the same (a workflow of one's own, an older worker) is listed
as unreadable with the fix, exit 3, and ``approve`` says so in one line. An
approve the workflow refused (the target changed since its preview) exits 1.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from filegate.activities.history import CODEC_THRESHOLD, filegate_data_converter
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.settings import Settings
from filegate.devstack.s3 import S3DevServer
from filegate.devstack.servers import TemporalDevServer
from filegate.kernel.messages import ModelSpec
from filegate.plugin import connect
from filegate.wiring.connection import configured_store
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec
from filegate.workflows.gate import ToolInterrupt
from tests.cli.test_cli import CLI, call, cli, write_json
from tests.cli.test_cli_outage import Lines

pytestmark = pytest.mark.services

BIG = "".join(f"row {n:05d} of a file the reviewer must see\n" for n in range(600))
"""About 26 KB: well over the codec's threshold."""
assert len(BIG) > 3 * CODEC_THRESHOLD
S3_VARIABLES = ("FILEGATE_S3_ENDPOINT", "FILEGATE_S3_ACCESS_KEY", "FILEGATE_S3_SECRET_KEY")


def bare_env(server: TemporalDevServer, tmp_path: Path) -> dict[str, str]:
    """A reviewer's terminal: Temporal's address, no S3 settings at all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FILEGATE_", "TEMPORAL_"))}
    env.update(
        TEMPORAL_ADDRESS=server.address,
        TEMPORAL_NAMESPACE=server.namespace,
        FILEGATE_STATE_DIR=str(tmp_path / "reviewer-state"),
    )
    return env


@pytest_asyncio.fixture
async def private_s3(tmp_path: Path) -> AsyncIterator[S3DevServer]:
    """An S3 server of this test alone: it is stopped and started again."""
    server = S3DevServer(tmp_path / "s3")
    await asyncio.to_thread(server.start)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)


def s3_settings(server: TemporalDevServer, s3: S3DevServer) -> Settings:
    return Settings.model_validate({
        "temporal": {"address": server.address, "namespace": server.namespace},
        "s3": {"endpoint": s3.endpoint, "access_key": s3.access_key, "secret_key": s3.secret_key},
    })  # fmt: skip


def gated_input(queue: str, *turns: Any) -> AgentInput:
    return AgentInput(
        task="write the big file",
        model=ModelSpec(provider="scripted", options={"script": {"turns": list(turns)}}),
        backend=BackendSpec(default=BackendRef(kind="remote", name="fs", task_queue=queue)),
        interrupt_on={"write_file": ToolInterrupt(always=True)},
    )


async def first_pending(client: Client, workflow_id: str) -> dict[str, Any]:
    handle = client.get_workflow_handle(workflow_id)
    deadline = time.monotonic() + 30
    while True:
        listed = await handle.query(AgentWorkflow.pending_approvals)
        if listed and not listed[0].preview_pending:
            return listed[0].model_dump(mode="json")
        assert time.monotonic() < deadline, "no approval was requested"
        await asyncio.sleep(0.2)


async def test_a_large_card_is_listed_and_decided_without_s3_and_while_s3_is_down(
    temporal_server: TemporalDevServer, private_s3: S3DevServer, tmp_path: Path
) -> None:
    settings = s3_settings(temporal_server, private_s3)
    client = await connect(settings)
    store = await configured_store(settings.s3)
    root = tmp_path / "ws"
    root.mkdir()
    queue = f"big-card-{uuid.uuid4().hex[:8]}"
    workflow_id = f"big-card-{uuid.uuid4().hex[:8]}"
    write = call("w", "write_file", file_path="/big.txt", content=BIG)
    backend = FilesystemBackend(str(root))
    env = bare_env(temporal_server, tmp_path)
    async with (
        agent_worker(client, f"{queue}.agent", artifacts=store),
        tools_worker(client, queue, {"fs": backend}, tmp_path / "journal", artifacts=store),
    ):
        handle = await client.start_workflow(
            AgentWorkflow.run, gated_input(queue, {"tool_calls": [write]}, {"content": "done"}),
            id=workflow_id, task_queue=f"{queue}.agent",
        )  # fmt: skip
        card = await first_pending(client, workflow_id)
        listing = await asyncio.to_thread(cli, env, "approvals", "--workflow", workflow_id)
        assert listing.returncode == 0, listing.stdout + listing.stderr
        assert "no pending approvals" not in listing.stdout
        assert f"{workflow_id}  {card['id']}  write_file" in listing.stdout
        status = await asyncio.to_thread(cli, env, "status", workflow_id)
        assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
        assert json.loads(status.stdout)["pending_approvals"][0]["args"]["content"] == BIG

        # S3 down: the listing is still answered, and the run stays cached.
        await asyncio.to_thread(private_s3.stop)
        during = await asyncio.to_thread(cli, env, "approvals", "--json", "--workflow", workflow_id)
        again = await asyncio.to_thread(cli, env, "approvals", "--json", "--workflow", workflow_id)
        await asyncio.to_thread(private_s3.start)

        approve = await asyncio.to_thread(
            cli, env, "approve", card["id"], "--workflow", workflow_id
        )
        result = await asyncio.wait_for(handle.result(), 60)
    for answered in (during, again):
        assert answered.returncode == 0, answered.stdout + answered.stderr
        [item] = json.loads(answered.stdout)
        assert item["id"] == card["id"] and item["args"]["content"] == BIG
    assert approve.returncode == 0, approve.stdout + approve.stderr
    assert result.final_answer == "done"
    assert (root / "big.txt").read_text() == BIG


@workflow.defn(name="OwnApprovals")
class OwnApprovals:
    """A workflow of one's own whose approvals query answers plainly (not inline):
    with the S3 codec on its worker, its large answer travels by reference."""

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.query(name="pending_approvals")
    def pending_approvals(self) -> list[dict[str, Any]]:
        return [{"id": "a1b2c3d4e5f60718", "tool": "write_file",
                 "args": {"file_path": "/big.txt", "content": BIG}, "rule": None}]  # fmt: skip


async def test_a_card_stored_by_reference_is_listed_as_unreadable_with_the_fix(
    temporal_server: TemporalDevServer, private_s3: S3DevServer, tmp_path: Path
) -> None:
    settings = s3_settings(temporal_server, private_s3)
    store = await configured_store(settings.s3)
    base = await connect(settings, artifacts=None)
    config = base.config()
    config["data_converter"] = filegate_data_converter(store)
    client = Client(**config)
    queue = f"own-{uuid.uuid4().hex[:8]}"
    workflow_id = f"own-{uuid.uuid4().hex[:8]}"
    env = bare_env(temporal_server, tmp_path)
    async with Worker(
        client,
        task_queue=queue,
        workflows=[OwnApprovals],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await client.start_workflow(
            OwnApprovals.run, id=workflow_id, task_queue=queue,
            execution_timeout=timedelta(minutes=5),
        )  # fmt: skip
        try:
            assert (await handle.query(OwnApprovals.pending_approvals))[0]["args"]["content"] == BIG
            listing, approve = await asyncio.gather(
                asyncio.to_thread(cli, env, "approvals", "--workflow", workflow_id),
                asyncio.to_thread(
                    cli, env, "approve", "a1b2c3d4e5f60718", "--workflow", workflow_id
                ),
            )
        finally:
            await handle.terminate("test over")
    assert listing.returncode == 3, listing.stdout + listing.stderr
    assert "no pending approvals" not in listing.stdout
    assert f"workflow {workflow_id}" in listing.stdout
    assert "needs the run's S3 settings: export FILEGATE_S3_ENDPOINT" in listing.stdout
    assert approve.returncode == 1, approve.stdout + approve.stderr
    assert "Traceback" not in approve.stderr
    [line] = approve.stderr.strip().splitlines()
    assert "needs the run's S3 settings" in line


async def test_an_approve_the_workflow_refused_exits_1(
    temporal_server: TemporalDevServer, temporal_client: Client, tmp_path: Path
) -> None:
    """The target changed since its preview: the call keeps waiting, ``approve`` exits 1
    and says why (cli.md); a second approve on the fresh preview goes through."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("before\n")
    queue = f"changed-{uuid.uuid4().hex[:8]}"
    workflow_id = f"changed-{uuid.uuid4().hex[:8]}"
    write = call("w", "write_file", file_path="/a.txt", content="after\n")
    read = call("r", "read_file", file_path="/a.txt")
    backend = FilesystemBackend(str(root))
    env = bare_env(temporal_server, tmp_path)
    async with (
        agent_worker(temporal_client, f"{queue}.agent"),
        tools_worker(temporal_client, queue, {"fs": backend}, tmp_path / "journal"),
    ):
        input = gated_input(
            queue, {"tool_calls": [read]}, {"tool_calls": [write]}, {"content": "done"}
        )
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=f"{queue}.agent"
        )
        card = await first_pending(temporal_client, workflow_id)
        (root / "a.txt").write_text("changed by someone else\n")
        refused = await asyncio.to_thread(
            cli, env, "approve", card["id"], "--workflow", workflow_id
        )
        pending = await first_pending(temporal_client, workflow_id)
        second = await asyncio.to_thread(cli, env, "approve", card["id"], "--workflow", workflow_id)
        result = await asyncio.wait_for(handle.result(), 60)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert "changed since its preview" in line and card["id"] in line
    assert pending["id"] == card["id"]  # still waiting, with a fresh preview
    assert second.returncode == 0, second.stdout + second.stderr
    assert result.final_answer == "done"
    assert (root / "a.txt").read_text() == "after\n"


def test_run_prints_the_exports_another_terminal_needs(
    temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    """``filegate run`` with its own private S3: the approval hint says what the deciding
    terminal exports, and a terminal that sets exactly that decides the large card."""
    root = tmp_path / "ws"
    root.mkdir()
    script = write_json(tmp_path / "s.json", {"turns": [
        {"tool_calls": [call("w", "write_file", file_path="/big.txt", content=BIG)]},
        {"content": "done"},
    ]})  # fmt: skip
    gate = write_json(tmp_path / "gate.json", {"write_file": True})
    env = bare_env(temporal_server, tmp_path)
    env["FILEGATE_STATE_DIR"] = str(tmp_path / "run-state")  # S3: leased, private
    workflow_id = f"exports-{uuid.uuid4().hex[:8]}"
    run = Lines(subprocess.Popen(
        [*CLI, "run", "write big", "--model", f"scripted:{script}", "--root", str(root),
         "--interrupt-on", gate, "--workflow-id", workflow_id],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ))  # fmt: skip
    try:
        approval = run.wait_for("?? approval").split("approval ", 1)[1].split()[0]
        hint = run.wait_for("decide from another terminal")
        exports = run.wait_for("that terminal first:", timeout=5).split("export ", 1)[1].split()
        reviewer = {**bare_env(temporal_server, tmp_path), **dict(e.split("=", 1) for e in exports)}
        listed = cli(reviewer, "approvals", "--json", "--workflow", workflow_id)
        decided = cli(reviewer, "approve", approval, "--workflow", workflow_id)
        code = run.finish(timeout=60)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert approval in hint
    assert {e.split("=", 1)[0] for e in exports} >= set(S3_VARIABLES), exports
    assert listed.returncode == 0 and json.loads(listed.stdout)[0]["id"] == approval
    assert decided.returncode == 0, decided.stdout + decided.stderr
    assert code == 0, run.text()
    assert (root / "big.txt").read_text() == BIG
