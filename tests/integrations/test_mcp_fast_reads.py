"""Reads the rules alone allow are answered in the ``filegate mcp --root`` process (issue 55).

Real parts: the official MCP SDK client drives ``filegate mcp --root`` as its
stdio subprocess on the test's Temporal and S3 servers. The guarantees a fast
read keeps (``cli/mcp_fast.py``):

- the same answer the session gives the same call the long way (sent here as
  the session's ``call`` update, on the same session and files);
- the session books it: an ``edit_file`` after it runs (read-before-edit), a
  ``write_file`` after someone else changed the file is refused as stale, and
  the history holds the read as a ``noted`` signal (no update, no activity);
- a read a rule denies or interrupts, or an edit, still goes the long way
  (an interrupted read asks the client); the policies' audit file has a line
  for the fast read under the session's run chain;
- a ``noted`` signal the rules would not have answered so (a forged one, for
  a read an ``interrupt`` rule gates) books nothing.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client as TemporalClient
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from filegate.cli.mcp_gate import _call_result
from filegate.kernel import wire
from filegate.kernel.messages import ToolCall
from filegate.workflows.file_tools import ToolResult
from filegate.workflows.session import NotedRead, SessionWorkflow
from tests.cli.test_cli import cli_env, write_json
from tests.integrations.test_mcp import answering, mcp_client, text_of

__all__ = ["cli_env"]

pytestmark = pytest.mark.services

RULES = [
    {"operations": ["read", "write"], "paths": ["/secret/**"], "mode": "deny"},
    {"operations": ["read"], "paths": ["/gated/**"], "mode": "interrupt"},
]

READS: list[dict[str, Any]] = [
    {"file_path": "/notes.txt"},
    {"file_path": "/notes.txt", "offset": 1, "limit": 1},
    {"file_path": "/empty.txt"},
    {"file_path": "/blob.bin"},
    {"file_path": "/missing.txt"},
    {"file_path": "/dir"},
    {"file_path": "/../etc/passwd"},
    {"file_path": "/secret/key.txt"},
    {"file_path": "/notes.txt", "offset": -3},
    {"file_path": "notes.txt"},
]
"""Text windows, an empty and a binary file, the errors (missing, a directory, an
escape, a denied path, a bad offset, a relative path)."""


def tree(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for folder in ("secret", "gated", "dir"):
        (root / folder).mkdir(parents=True)
    (root / "notes.txt").write_text("".join(f"line {i}\n" for i in range(1, 40)))
    (root / "empty.txt").write_text("")
    (root / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (root / "secret" / "key.txt").write_text("TOP-SECRET\n")
    (root / "gated" / "a.txt").write_text("gated content\n")
    return root


def flags(tmp_path: Path, root: Path, workflow_id: str) -> list[str]:
    rules = tmp_path / "rules.json"
    write_json(rules, RULES)
    return [
        "mcp", "--root", str(root), "--permissions", str(rules), "--workflow-id", workflow_id,
    ]  # fmt: skip


async def long_way(temporal: TemporalClient, workflow_id: str, args: dict[str, Any]) -> ToolResult:
    """The same read as the session's own ``call`` update (what every call used to be)."""
    handle = temporal.get_workflow_handle(workflow_id)
    call = ToolCall(id=f"long-{len(json.dumps(args))}-{id(args)}", name="read_file", args=args)
    result: ToolResult = await handle.execute_update(
        wire.SESSION_CALL_UPDATE, call, result_type=ToolResult
    )
    return result


def shown(result: types.CallToolResult) -> tuple[bool, list[str]]:
    return result.is_error, [
        b.text if isinstance(b, types.TextContent) else f"image:{b.mime_type}"
        for b in result.content
        if isinstance(b, types.TextContent | types.ImageContent)
    ]


async def events_of(temporal: TemporalClient, workflow_id: str) -> list[Any]:
    history = await temporal.get_workflow_handle(workflow_id).fetch_history()
    return list(history.events)


def signals(events: list[Any], name: str) -> list[Any]:
    kind = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    return [
        e
        for e in events
        if e.event_type == kind
        and e.workflow_execution_signaled_event_attributes.signal_name == name
    ]


def updates(events: list[Any]) -> int:
    kind = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    return sum(1 for e in events if e.event_type == kind)


async def test_a_fast_read_answers_what_the_session_answers(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient
) -> None:
    root = tree(tmp_path)
    workflow_id = f"mcp-fast-same-{tmp_path.name}"
    async with mcp_client(cli_env, flags(tmp_path, root, workflow_id), None) as client:
        for args in READS:
            here = await client.call_tool("read_file", args)
            there = await long_way(temporal_client, workflow_id, args)
            assert shown(here) == shown(_call_result(there)), args
        events = await events_of(temporal_client, workflow_id)
    # The long way's reads are updates; the answers given here are noted, not sent.
    # The long way's reads are updates; those answered here are noted, not sent: all but
    # the refused ones (a path the session's check or rules refuse goes the long way).
    noted = [
        json.loads(payload.data)["call"]["args"]
        for event in signals(events, wire.SESSION_NOTED_SIGNAL)
        for payload in event.workflow_execution_signaled_event_attributes.input.payloads
    ]
    long_way_only = [{"file_path": "/../etc/passwd"}, {"file_path": "/secret/key.txt"}]
    assert noted == [args for args in READS if args not in long_way_only]
    assert updates(events) == len(READS) + len(long_way_only)
    assert "TOP-SECRET" not in json.dumps([str(e) for e in events])


async def test_the_session_books_a_fast_read(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient
) -> None:
    root = tree(tmp_path)
    (root / "data.txt").write_text("v1\n")
    workflow_id = f"mcp-fast-book-{tmp_path.name}"
    asked: list[str] = []
    audit = tmp_path / "audit.jsonl"
    env = {**cli_env, "FILEGATE_POLICY_JSON": json.dumps({"audit_file": str(audit)})}
    async with mcp_client(
        env, flags(tmp_path, root, workflow_id), answering("approve", asked)
    ) as client:
        read = await client.call_tool("read_file", {"file_path": "/notes.txt"})
        assert not read.is_error and "line 2" in text_of(read)
        edited = await client.call_tool(
            "edit_file",
            {"file_path": "/notes.txt", "old_string": "line 2\n", "new_string": "two\n"},
        )
        assert not edited.is_error, text_of(edited)  # read-before-edit saw the fast read
        assert "two\n" in (root / "notes.txt").read_text()

        assert not (await client.call_tool("read_file", {"file_path": "/data.txt"})).is_error
        (root / "data.txt").write_text("someone else's v2\n")  # changed after the read
        stale = await client.call_tool("write_file", {"file_path": "/data.txt", "content": "v3\n"})
        assert stale.is_error, text_of(stale)  # the read's fingerprint was booked
        assert (root / "data.txt").read_text() == "someone else's v2\n"

        gated = await client.call_tool("read_file", {"file_path": "/gated/a.txt"})
        assert not gated.is_error and "gated content" in text_of(gated)
        assert len(asked) == 1 and "/gated/a.txt" in asked[0]  # asked: the long way
        events = await events_of(temporal_client, workflow_id)
    noted = signals(events, wire.SESSION_NOTED_SIGNAL)
    assert len(noted) == 2  # the two allowed reads; the gated one is an update
    # The session, closed with its process, replays with the noted reads in its history.
    handle = temporal_client.get_workflow_handle(workflow_id)
    await handle.result()
    replayer = Replayer(workflows=[SessionWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(await handle.fetch_history())
    assert updates(events) == 4  # the edit, the stale write, the gated read and its decision
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    reads = [r for r in lines if r.get("operation") == "read" and r.get("path") == "/notes.txt"]
    assert reads and all(r["workflow_id"].startswith(workflow_id + "@") for r in reads), reads
    assert any(r["tool_call_id"].startswith("0:0:") for r in reads), reads  # the fast one


async def test_a_forged_note_books_nothing(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient
) -> None:
    """A ``noted`` signal for a read an interrupt rule gates (nobody approved it) does not
    count as a read: an edit of the file is still refused until it is really read."""
    root = tree(tmp_path)
    workflow_id = f"mcp-fast-forged-{tmp_path.name}"
    async with mcp_client(cli_env, flags(tmp_path, root, workflow_id), None) as client:
        await client.list_tools()
        handle = temporal_client.get_workflow_handle(workflow_id)
        forged = ToolCall(id="forged", name="read_file", args={"file_path": "/gated/a.txt"})
        await handle.signal(wire.SESSION_NOTED_SIGNAL, NotedRead(call=forged, fingerprint="x"))
        edited = await client.call_tool(
            "edit_file",
            {"file_path": "/gated/a.txt", "old_string": "gated", "new_string": "changed"},
        )
        assert edited.is_error and "read" in text_of(edited).lower(), text_of(edited)
        assert (root / "gated" / "a.txt").read_text() == "gated content\n"


async def test_fast_reads_beside_writes_on_one_path(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient
) -> None:
    """Reads answered here while writes of the same file go the long way, at once: every
    read sees a whole version (never a torn one), and every write is applied once."""
    root = tree(tmp_path)
    (root / "race.txt").write_text("v0\n" * 100)
    workflow_id = f"mcp-fast-race-{tmp_path.name}"
    async with mcp_client(cli_env, flags(tmp_path, root, workflow_id), None) as client:
        await client.call_tool("read_file", {"file_path": "/race.txt"})

        async def write(n: int) -> types.CallToolResult:
            return await client.call_tool(
                "write_file", {"file_path": "/race.txt", "content": f"v{n}\n" * 100}
            )

        async def read() -> types.CallToolResult:
            return await client.call_tool("read_file", {"file_path": "/race.txt", "limit": 200})

        results = await asyncio.gather(*(write(n) if n % 4 == 0 else read() for n in range(1, 25)))
    for result in results:
        body = text_of(result)
        if "v" in body and not result.is_error:
            versions = {line.split("\t")[-1].strip() for line in body.splitlines() if "\t" in line}
            assert len(versions) <= 1, versions  # one whole version per read
    final = (root / "race.txt").read_text()
    assert len(set(final.splitlines())) == 1
