# ruff: noqa: F811  (pytest fixtures imported from tests.sandbox_fixtures)
"""``interrupt`` network rules: a command's connection waits for a human (issue 51, item 3).

Real Temporal, real tools worker, real bubblewrap, a real web server on the
host's loopback. The command ``curl``s a host an ``interrupt`` rule names:
the connection holds, the run shows a pending approval (tool ``connect``,
host, port, the command, its working directory), and the decision goes back
to the connection: approve lets the same request through, reject fails it
with the reviewer's reason, approve-with-remember is a grant for that host
and port that answers the next command unasked (and ``revoke`` ends it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.devstack.servers import TemporalDevServer
from filegate.kernel.network_rules import NetworkAsk, NetworkPermission
from filegate.kernel.review_scope import ReviewerConfig, ReviewScope
from filegate.kernel.tool_types import activity_call_id
from filegate.workflows import (
    AgentInput,
    AgentWorkflow,
    BackendRef,
    BackendSpec,
    Decision,
    FileToolsConfig,
)
from filegate.workflows.approvals.grant_models import GrantRequest
from filegate.workflows.approvals.grants import GrantRevocation
from tests.cli.test_cli import CLI, cli_env  # noqa: F401  (cli_env: a fixture)
from tests.net_servers import token_server
from tests.roots import made
from tests.sandbox_fixtures import _bwrap_ok  # noqa: F401  (fixture)
from tests.scripting import calls, scripted
from tests.workflows.test_execute_gate import ToolListWorkflow, running_host
from tests.workflows.test_workflow_e2e import results, running_agent, running_tools

pytestmark = pytest.mark.services

TOKEN = "asked-" + uuid.uuid4().hex


@pytest.fixture
def web() -> Iterator[tuple[int, list[str]]]:
    with token_server(TOKEN) as served:
        yield served


def _sandbox(queue: str) -> BackendSpec:
    return BackendSpec(default=BackendRef(
        kind="remote", name="box", task_queue=queue, can_execute=True, sandboxed=True,
        shell_path="/workspace",
    ))  # fmt: skip


def _ask(port: int) -> list[NetworkPermission]:
    return [NetworkPermission(hosts=["127.0.0.1"], ports=[port], mode="interrupt")]


async def _waiting(handle: WorkflowHandle[Any, Any], count: int = 1) -> list[Any]:
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        found = await handle.query(AgentWorkflow.pending_approvals)
        if len(found) == count:
            return list(found)
        assert asyncio.get_running_loop().time() < deadline, found
        await asyncio.sleep(0.1)


async def _run(
    client: Client, tmp_path: Path, port: int, turns: list[dict[str, Any]], decide: Any
) -> dict[str, Any]:
    box = BwrapSandboxBackend(made(tmp_path / "ws"), check=False)
    async with (
        running_tools(client, {"box": box}, tmp_path / "j") as tools_queue,
        running_agent(client) as agent_queue,
    ):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentInput(
                task="go", model=scripted(*turns, {"content": "done"}),
                backend=_sandbox(tools_queue), network=_ask(port),
            ),
            id=f"net-ask-{uuid.uuid4().hex[:10]}",
            task_queue=agent_queue,
        )  # fmt: skip
        await decide(handle)
        return results(await handle.result())


def _curl(call_id: str, port: int, path: str = "/x") -> dict[str, Any]:
    return calls(
        (call_id, "execute", {"command": f"curl -sS --max-time 60 http://127.0.0.1:{port}{path}"})
    )


async def test_approve_lets_the_held_connection_through(
    temporal_client: Client, tmp_path: Path, _bwrap_ok: None, web: tuple[int, list[str]]
) -> None:
    port, seen = web

    async def decide(handle: WorkflowHandle[Any, Any]) -> None:
        [card] = await _waiting(handle)
        assert card.tool == "connect" and card.args["host"] == "127.0.0.1"
        assert card.args["port"] == port and "curl" in card.args["command"]
        assert card.cwd == "/workspace" and "network rule 1" in (card.description or "")
        assert seen == []  # held: nothing reached the server yet
        await handle.execute_update(
            AgentWorkflow.decide_update,
            Decision(id=card.id, decision="approve", reviewer="ana", via="cli"),
        )

    out = await _run(temporal_client, tmp_path, port, [_curl("c", port)], decide)
    assert TOKEN in str(out["c"]["content"]) and seen == ["/x"], out["c"]


async def test_reject_fails_the_connection_with_the_reason(
    temporal_client: Client, tmp_path: Path, _bwrap_ok: None, web: tuple[int, list[str]]
) -> None:
    port, seen = web

    async def decide(handle: WorkflowHandle[Any, Any]) -> None:
        [card] = await _waiting(handle)
        await handle.execute_update(
            AgentWorkflow.decide_update,
            Decision(id=card.id, decision="reject", reviewer="bo", via="ui", reason="not today"),
        )

    out = await _run(temporal_client, tmp_path, port, [_curl("c", port)], decide)
    text = str(out["c"]["content"])
    assert seen == [] and TOKEN not in text
    assert f"[network: refused 127.0.0.1:{port}: rejected by bo via ui: not today]" in text, text


async def test_a_remembered_grant_answers_the_next_command_and_revoke_ends_it(
    temporal_client: Client, tmp_path: Path, _bwrap_ok: None, web: tuple[int, list[str]]
) -> None:
    port, seen = web
    turns = [_curl("first", port, "/1"), _curl("second", port, "/2"), _curl("third", port, "/3")]

    async def decide(handle: WorkflowHandle[Any, Any]) -> None:
        [card] = await _waiting(handle)
        ack = await handle.execute_update(
            AgentWorkflow.decide_update,
            Decision(id=card.id, decision="approve", reviewer="ana", via="cli",
                     remember=GrantRequest()),
        )  # fmt: skip
        assert ack.grant is not None and ack.grant.pattern == f"127.0.0.1:{port}"
        while "/2" not in seen:  # the second command went through on the grant, unasked
            assert not await handle.query(AgentWorkflow.pending_approvals)
            await asyncio.sleep(0.05)
        await handle.execute_update(
            AgentWorkflow.revoke_update, GrantRevocation(id=ack.grant.id, reviewer="ana")
        )
        [again] = await _waiting(handle)  # the third asks again
        await handle.execute_update(
            AgentWorkflow.decide_update,
            Decision(id=again.id, decision="reject", reviewer="ana", via="cli"),
        )

    out = await _run(temporal_client, tmp_path, port, turns, decide)
    assert seen == ["/1", "/2"]
    assert TOKEN in str(out["second"]["content"])
    assert "rejected by ana" in str(out["third"]["content"])


async def test_a_question_no_interrupt_rule_asks_opens_no_card(
    temporal_client: Client, tmp_path: Path, _bwrap_ok: None, web: tuple[int, list[str]]
) -> None:
    """Anyone who can send updates could send the question: only a command of the
    run that is running may ask, and only about what the run's own rules ask."""
    port, _ = web

    async def decide(handle: WorkflowHandle[Any, Any]) -> None:
        await _waiting(handle)
        running = activity_call_id(1, 0, "c")
        for forged, why in [
            (NetworkAsk(host="127.0.0.1", port=port, tool_call_id="1:0:other"),
             "no command of this run is running as '1:0:other'"),
            (NetworkAsk(host="evil.example", port=443, tool_call_id=running),
             "no interrupt network rule asks about evil.example:443"),
        ]:  # fmt: skip
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update("ask_network", forged)
            assert why in str(refused.value.cause)
        [card] = await _waiting(handle)  # still the one real question
        await handle.execute_update(
            AgentWorkflow.decide_update,
            Decision(id=card.id, decision="approve", reviewer="ana", via="cli"),
        )

    out = await _run(temporal_client, tmp_path, port, [_curl("c", port)], decide)
    assert TOKEN in str(out["c"]["content"])


async def test_the_cli_lists_the_held_connection_and_approves_it(
    cli_env: dict[str, str],
    temporal_client: Client,
    tmp_path: Path,
    _bwrap_ok: None,
    web: tuple[int, list[str]],
) -> None:
    """``filegate approvals`` shows the question (host, port, command) and ``filegate
    approve --remember`` answers it: the same entry points as any approval."""
    port, seen = web

    async def decide(handle: WorkflowHandle[Any, Any]) -> None:
        [card] = await _waiting(handle)
        listed = await asyncio.to_thread(
            subprocess.run,
            [*CLI, "approvals", "--workflow", handle.id],
            env=cli_env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        assert card.id in listed.stdout and f"127.0.0.1:{port}" in listed.stdout, listed.stdout
        approved = await asyncio.to_thread(
            subprocess.run,
            [*CLI, "approve", card.id, "--workflow", handle.id, "--reviewer", "cy", "--remember"],
            env=cli_env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert approved.returncode == 0, approved.stdout + approved.stderr

    out = await _run(temporal_client, tmp_path, port, [_curl("c", port)], decide)
    assert TOKEN in str(out["c"]["content"]) and seen == ["/x"]


async def _sandbox_worker(
    server: TemporalDevServer, root: Path, journal: Path, queue: str
) -> asyncio.subprocess.Process:
    env = {
        **os.environ, "TEMPORAL_ADDRESS": server.address,
        "TEMPORAL_NAMESPACE": server.namespace, "FILEGATE_STATE_DIR": str(journal.parent),
    }  # fmt: skip
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "filegate", "worker", "--role", "tools", "--backend", "sandbox",
        "--name", "box", "--root", str(root), "--task-queue", queue, "--journal-dir", str(journal),
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip


async def test_a_sigkilled_tools_worker_leaves_one_question_and_no_stale_card(
    temporal_server: TemporalDevServer,
    temporal_client: Client,
    tmp_path: Path,
    _bwrap_ok: None,
    web: tuple[int, list[str]],
) -> None:
    """The tools worker dies (SIGKILL) while its command's connection waits for a
    decision. Another worker takes the call over: the journal reports the command
    as interrupted (it is not run twice), the question it left is closed as
    refused rather than left on reviewers' lists, nothing reached the server, and
    the run goes on; the next command asks once, and its approval lets it through."""
    port, seen = web
    root, journal = tmp_path / "ws", tmp_path / "state" / "journal"
    root.mkdir()
    queue = f"net-kill-{uuid.uuid4().hex[:8]}"
    first = await _sandbox_worker(temporal_server, root, journal, queue)
    second: asyncio.subprocess.Process | None = None
    try:
        async with running_agent(temporal_client) as agent_queue:
            handle = await temporal_client.start_workflow(
                AgentWorkflow.run,
                AgentInput(
                    task="go", backend=_sandbox(queue), network=_ask(port),
                    model=scripted(_curl("a", port, "/a"), _curl("b", port, "/b"),
                                   {"content": "done"}),
                ),
                id=f"net-kill-{uuid.uuid4().hex[:8]}",
                task_queue=agent_queue,
            )  # fmt: skip
            [card] = await _waiting(handle)
            first.send_signal(signal.SIGKILL)
            assert await first.wait() == -signal.SIGKILL
            second = await _sandbox_worker(temporal_server, root, journal, queue)
            [later] = await _waiting_for_another(handle, card.id)
            assert later.args["command"].endswith("/b") and seen == []
            await handle.execute_update(
                AgentWorkflow.decide_update,
                Decision(id=later.id, decision="approve", reviewer="ana", via="cli"),
            )
            result = await asyncio.wait_for(handle.result(), 60)
            decided = {d.id: d for d in await handle.query(AgentWorkflow.decided_approvals)}
            assert not await handle.query(AgentWorkflow.pending_approvals)
    finally:
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 30)
    out = results(result)
    assert "may or may not have run" in str(out["a"]["content"]), out["a"]
    assert TOKEN in str(out["b"]["content"]) and seen == ["/b"]
    assert decided[card.id].reviewer == "nobody (the command ended)"
    assert decided[later.id].decision == "approve"


async def _waiting_for_another(handle: WorkflowHandle[Any, Any], old: str) -> list[Any]:
    """The pending approvals once the one with id ``old`` has gone and another is there."""
    deadline = asyncio.get_running_loop().time() + 90
    while True:
        found = await handle.query(AgentWorkflow.pending_approvals)
        if found and all(a.id != old for a in found):
            return list(found)
        assert asyncio.get_running_loop().time() < deadline, found
        await asyncio.sleep(0.2)


async def test_a_first_pass_reviewer_lets_a_listed_host_through_and_no_other(
    temporal_client: Client, tmp_path: Path, _bwrap_ok: None, web: tuple[int, list[str]]
) -> None:
    """The reviewer's ``hosts`` scope answers a held connection; a port it does not
    list is left to a person (issue 52's envelope, for connections)."""
    port, seen = web
    reviewer = ReviewerConfig(
        name="net", scope=ReviewScope(tools=["connect"], hosts=[f"127.0.0.1:{port}"])
    )
    box = BwrapSandboxBackend(made(tmp_path / "ws"), check=False)
    rules = [NetworkPermission(hosts=["127.0.0.1"], mode="interrupt")]
    other = f"curl -sS --max-time 60 http://127.0.0.1:{port + 1}/y"
    async with (
        running_tools(temporal_client, {"box": box}, tmp_path / "j") as tools_queue,
        running_agent(temporal_client) as agent_queue,
    ):
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run,
            AgentInput(
                task="go", backend=_sandbox(tools_queue), network=rules, reviewer=reviewer,
                model=scripted(_curl("ok", port), calls(("no", "execute", {"command": other})),
                               {"content": "done"}),
            ),
            id=f"net-rev-{uuid.uuid4().hex[:8]}",
            task_queue=agent_queue,
        )  # fmt: skip
        [left] = await _waiting(handle)  # the first went through; the second waits
        assert left.args["port"] == port + 1 and seen == ["/x"]
        await handle.execute_update(
            AgentWorkflow.decide_update,
            Decision(id=left.id, decision="reject", reviewer="ana", via="cli"),
        )
        out = results(await handle.result())
        decided = await handle.query(AgentWorkflow.decided_approvals)
    assert TOKEN in str(out["ok"]["content"])
    assert [(d.reviewer, d.via) for d in decided] == [("auto:net", "reviewer"), ("ana", "cli")]


async def test_file_tools_in_an_own_workflow_asks_about_a_held_connection(
    temporal_client: Client, tmp_path: Path, _bwrap_ok: None, web: tuple[int, list[str]]
) -> None:
    """``FileTools`` registers the question's update itself: a workflow of one's own
    gets the card on its ``pending_approvals`` query and decides it with ``decide``."""
    port, seen = web
    box = BwrapSandboxBackend(made(tmp_path / "ws"), check=False)
    command = f"curl -sS --max-time 60 http://127.0.0.1:{port}/own"
    async with running_tools(temporal_client, {"box": box}, tmp_path / "j") as queue:
        config = FileToolsConfig(backend=_sandbox(queue), network=_ask(port))
        async with running_host(temporal_client) as host_queue:
            handle = await temporal_client.start_workflow(
                ToolListWorkflow.run,
                args=[config, [{"id": "c", "name": "execute", "args": {"command": command}}]],
                id=f"net-own-{uuid.uuid4().hex[:8]}",
                task_queue=host_queue,
            )
            deadline = asyncio.get_running_loop().time() + 60
            while not (found := await handle.query("pending_approvals")):
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.1)
            [card] = found
            assert card["tool"] == "connect" and card["args"]["port"] == port
            await handle.execute_update(
                "decide", Decision(id=card["id"], decision="approve", reviewer="ana", via="cli")
            )
            result = await handle.result()
    assert TOKEN in result["answers"]["c"]["text"] and seen == ["/own"]
