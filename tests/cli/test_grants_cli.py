# ruff: noqa: F811  (pytest fixtures imported from tests.cli.test_cli)
"""Grants through the command line, as users run it, on the session servers.

``filegate approve ID --remember [PATTERN] [--for DURATION]`` remembers an
approval, ``filegate grants`` lists it (text and ``--json``), ``filegate
revoke`` ends it, and every mistake is one line with the documented exit code.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from filegate.backends.filesystem import FilesystemBackend
from filegate.cli.errors import CliError
from filegate.cli.grant_options import parse_duration, shown_status
from filegate.cli.ui.grants import _revocation, mark_scopes
from filegate.kernel import wire
from filegate.workflows import AgentWorkflow, Decision, UserMessage
from filegate.workflows.approvals import grants as workflow_grants
from tests.cli.test_cli import cli, cli_env, cli_parallel  # noqa: F401  (cli_env: a fixture)
from tests.scripting import calls, uid
from tests.workflows.test_grants import docs_agent, idle, pending_one, write
from tests.workflows.test_workflow_e2e import final, running_agent, running_tools

pytestmark = pytest.mark.services


def test_durations_and_the_handler_names() -> None:
    assert [parse_duration(t) for t in ("90", "90s", "30m", "1h30m", "1d", "0.5h")] == [
        90, 90, 1800, 5400, 86_400, 1800,
    ]  # fmt: skip
    for bad in ("", "10x", "m", "0", "-5m", "99999999d", "1e12", "nan", "inf"):
        with pytest.raises(CliError, match="--for"):
            parse_duration(bad)
    assert parse_duration("3650d") == 3650 * 86_400  # ten years is kept
    assert workflow_grants.GRANTS_QUERY == wire.GRANTS_QUERY  # the CLI imports wire's
    assert workflow_grants.REVOKE_UPDATE == wire.REVOKE_UPDATE
    past = {"status": "active", "expires_at": "2000-01-01T00:00:00+00:00"}
    assert shown_status(past) == "expired" and shown_status({"status": "revoked"}) == "revoked"


def test_the_ui_names_the_default_scope_and_takes_who_revokes_from_the_login() -> None:
    rule = {"source": "permissions", "operations": ["write"], "paths": ["/docs/**"],
            "mode": "interrupt", "index": 0}  # fmt: skip
    cards: list[dict[str, Any]] = [
        {"tool": "write_file", "args": {"file_path": "/docs/a.md"}, "rule": rule},
        {"tool": "execute", "args": {"command": "make test"}, "rule": {"always": True}},
        {"tool": "write_file", "args": {"file_path": "/a~b"}, "rule": {"always": False}},
    ]
    mark_scopes(cards)
    assert [c["grant_scope"] for c in cards] == ["write_file /docs/**", "execute 'make test'", None]
    assert _revocation({"workflow_id": "wf", "id": "g-1"}) == ("wf", "g-1")
    for body, problem in (
        ({"workflow_id": "wf", "id": "g-1", "reviewer": "eve"}, "set by the UI"),
        ({"id": "g-1"}, "workflow_id is required"),
        ({"workflow_id": "wf"}, "id is required"),
        ([], "JSON object"),
    ):
        with pytest.raises(ValueError, match=problem):
            _revocation(body)


@pytest.mark.slow
async def test_approve_remember_list_and_revoke(
    temporal_client: Client, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    turns = (
        calls(write("w1", "/docs/a.md")),
        calls(write("w2", "/docs/b.md"), write("w3", "/docs/b.txt")),
        final("one"),
        calls(write("w4", "/docs/c.md")),
        final("two"),
    )
    async with (
        running_agent(temporal_client) as agent_q,
        running_tools(temporal_client, {"fs": FilesystemBackend(root)}, tmp_path / "j") as tq,
    ):
        wf = uid("wf")
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run,
            docs_agent(tq, *turns, wait_for_messages=True),
            id=wf,
            task_queue=agent_q,
        )
        asked = await pending_one(handle)
        approve = ["approve", asked.id, "--workflow", wf]
        broad, lone_for, with_all = await asyncio.to_thread(
            cli_parallel,
            cli_env,
            [*approve, "--remember", "/**"],
            [*approve, "--for", "5m"],
            ["approve", "--all", "--workflow", wf, "--remember"],
        )
        assert broad[0] == 1 and broad[2].count("\n") == 1, broad[2]
        assert "broader than the rule's scope (/docs/**)" in broad[2]
        assert lone_for[0] == 2 and "--for goes with --remember" in lone_for[2]
        assert with_all[0] == 2 and "not --all" in with_all[2]
        done = await asyncio.to_thread(
            cli, cli_env, *approve, "--remember", "/docs/*.md", "--for", "10m", "--reviewer", "ana"
        )
        assert done.returncode == 0, done.stderr
        [decided, remembered] = done.stdout.splitlines()
        assert decided == f"approve: approval {asked.id} of {wf} (by ana via cli)"
        assert remembered.startswith("remembered as grant g-")
        assert ": write_file /docs/*.md by ana via cli, until 20" in remembered
        grant_id = remembered.split()[3].rstrip(":")

        # w2 (/docs/b.md) runs on the grant; w3 (/docs/b.txt) is outside it and asks.
        other = await pending_one(handle)
        assert other.args["file_path"] == "/docs/b.txt"
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=other.id, decision="approve")
        )
        await idle(handle, 3)
        text, listed, unknown = await asyncio.to_thread(
            cli_parallel,
            cli_env,
            ["grants", "--workflow", wf],
            ["grants", "--workflow", wf, "--json"],
            ["revoke", "g-nope", "--workflow", wf],
        )
        assert text[0] == 0, text[2]
        assert text[1].startswith(f"{grant_id}  active   write_file /docs/*.md by ana via cli")
        assert "(used 1 time)" in text[1]
        [grant] = json.loads(listed[1])
        assert grant["id"] == grant_id and grant["uses"] == 1 and grant["status"] == "active"
        assert unknown[0] == 1
        assert unknown[2] == f"filegate: revoke refused by {wf}: no grant with id 'g-nope'\n"

        revoked = await asyncio.to_thread(
            cli, cli_env, "revoke", grant_id, "--workflow", wf, "--reviewer", "bo"
        )
        assert revoked.returncode == 0, revoked.stderr
        assert revoked.stdout.startswith(f"revoked: grant {grant_id}: write_file /docs/*.md")
        assert f"(in {wf}, by bo via cli)" in revoked.stdout
        again, after = await asyncio.to_thread(
            cli_parallel,
            cli_env,
            ["revoke", grant_id, "--workflow", wf],
            ["grants", "--workflow", wf, "--json"],
        )
        assert again[0] == 1 and f"grant {grant_id} was already revoked by bo via cli" in again[2]
        assert json.loads(after[1])[0]["status"] == "revoked"

        await handle.execute_update(AgentWorkflow.add_message_update, UserMessage(content="c"))
        asked_again = await pending_one(handle)  # revoked: /docs/c.md asks
        assert asked_again.args["file_path"] == "/docs/c.md"
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=asked_again.id, decision="reject")
        )
        await idle(handle, 5)
        await handle.signal(AgentWorkflow.add_message_signal, UserMessage(end=True))
        result = await handle.result()
        closed = await asyncio.to_thread(cli, cli_env, "grants", "--workflow", wf)
    out: dict[str, Any] = {m["tool_call_id"]: m for m in result.transcript if m["role"] == "tool"}
    assert out["w2"]["content"].startswith(f"[allowed by grant {grant_id} (write_file /docs/*.md")
    assert out["w3"]["content"].startswith("[This call was approved by unknown")
    assert closed.returncode == 1
    assert (
        closed.stderr
        == f"filegate: workflow {wf} is not running (completed): its grants ended with it\n"
    )
