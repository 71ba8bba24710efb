"""``filegate mcp`` driven by the official ``mcp`` SDK's own client (issue 37).

Real parts: the command runs as a subprocess (``python -m filegate mcp``) on
the suite's Temporal and S3 servers, with its agent and tools workers in
that process, and the client is ``mcp.client.Client`` over stdio (both
protocol eras: the 2026-07-28 stateless flow, where a question rides an
``InputRequiredResult``, and the handshake era, where it is an
``elicitation/create`` request) and over streamable HTTP.
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import json
import os
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.client import Client, ClientRequestContext
from mcp.client.session import ElicitationFnT
from mcp.client.stdio import StdioServerParameters
from temporalio.client import Client as TemporalClient

from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.kernel import wire
from filegate.kernel.registry import TOOLS
from tests.cli.test_cli import CLI, cli, cli_env, write_json
from tests.roots import made

__all__ = ["cli_env"]  # the fixture, shared with test_cli

pytestmark = pytest.mark.services

Asker = ElicitationFnT

RULES = [
    {"operations": ["read", "write"], "paths": ["/secret/**"], "mode": "deny"},
]
INTERRUPT_ON = {"write_file": True, "edit_file": True, "delete": True}


def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "secret").mkdir(parents=True)
    (root / "notes.txt").write_text("first line\nsecond line\n")
    (root / "secret" / "key.txt").write_text("TOP-SECRET\n")
    return root


def flags(tmp_path: Path, root: Path, workflow_id: str) -> list[str]:
    rules = tmp_path / "rules.json"
    interrupts = tmp_path / "interrupt.json"
    write_json(rules, RULES)
    write_json(interrupts, INTERRUPT_ON)
    return [
        "mcp", "--root", str(root), "--permissions", str(rules),
        "--interrupt-on", str(interrupts), "--workflow-id", workflow_id,
        "--reviewer", "mcp-test-reviewer",
    ]  # fmt: skip


def answering(decision: str | None, asked: list[str]) -> Asker:
    """An elicitation callback: accept with ``decision``, or decline when None."""

    async def ask(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        assert isinstance(params, types.ElicitRequestFormParams)
        asked.append(params.message)
        assert params.requested_schema["required"] == ["decision"]
        if decision is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"decision": decision})

    return ask


@asynccontextmanager
async def mcp_client(
    env: dict[str, str], args: list[str], ask: Asker | None, *, mode: str = "auto"
) -> AsyncIterator[Client]:
    server = StdioServerParameters(command=sys.executable, args=[*CLI[1:], *args], env=env)
    async with Client(server, elicitation_callback=ask, mode=mode) as client:  # type: ignore[arg-type]
        yield client


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def pending(temporal: TemporalClient, workflow_id: str) -> list[dict[str, Any]]:
    handle = temporal.get_workflow_handle(workflow_id)
    listed: list[dict[str, Any]] = await handle.query(
        wire.PENDING_QUERY, result_type=list[dict[str, Any]]
    )
    return listed


async def decided(temporal: TemporalClient, workflow_id: str) -> list[dict[str, Any]]:
    handle = temporal.get_workflow_handle(workflow_id)
    listed: list[dict[str, Any]] = await handle.query(
        wire.DECIDED_QUERY, result_type=list[dict[str, Any]]
    )
    return listed


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_gate_over_stdio(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient, mode: str
) -> None:
    """Lists the tools, reads, refuses a denied read, runs an accepted write, and runs
    nothing for a declined one (whose approval stays open for ``filegate approve``)."""
    root = workspace(tmp_path)
    workflow_id = f"mcp-{mode}-{tmp_path.name}"
    asked: list[str] = []
    decisions: list[str | None] = ["approve", None, "reject"]

    async def ask(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        return await answering(decisions.pop(0), asked)(context, params)

    async with mcp_client(cli_env, flags(tmp_path, root, workflow_id), ask, mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == set(TOOLS.order) - {"execute"}  # no shell was asked for
        assert tools["read_file"].annotations and tools["read_file"].annotations.read_only_hint
        assert tools["write_file"].input_schema["required"] == ["file_path", "content"]

        read = await client.call_tool("read_file", {"file_path": "/notes.txt"})
        assert not read.is_error and "second line" in text_of(read)

        denied = await client.call_tool("read_file", {"file_path": "/secret/key.txt"})
        assert denied.is_error and "TOP-SECRET" not in text_of(denied)

        wrote = await client.call_tool("write_file", {"file_path": "/out.txt", "content": "yes\n"})
        assert not wrote.is_error, text_of(wrote)
        assert (root / "out.txt").read_text() == "yes\n"
        assert "write_file" in asked[0] and "+yes" in asked[0], asked[0]

        declined = await client.call_tool(
            "write_file", {"file_path": "/declined.txt", "content": "no\n"}
        )
        assert declined.is_error and "filegate approve" in text_of(declined)
        assert not (root / "declined.txt").exists()
        [open_one] = await pending(temporal_client, workflow_id)
        assert open_one["args"]["file_path"] == "/declined.txt"

        rejected = await client.call_tool(
            "write_file", {"file_path": "/rejected.txt", "content": "no\n"}
        )
        assert rejected.is_error
        assert not (root / "rejected.txt").exists()

        # The declined call's approval is still decidable from the command line.
        approved = cli(cli_env, "approve", "--workflow", workflow_id, open_one["id"])
        assert approved.returncode == 0, approved.stdout + approved.stderr
        for _ in range(100):
            if (root / "declined.txt").exists():
                break
            await asyncio.sleep(0.1)
        assert (root / "declined.txt").read_text() == "no\n"

        records = await decided(temporal_client, workflow_id)
        via_mcp = [d for d in records if d["via"] == "mcp"]
        assert sorted(d["decision"] for d in via_mcp) == ["approve", "reject"]
        assert {d["reviewer"] for d in via_mcp} == {"mcp-test-reviewer"}
        assert [d["via"] for d in records if d["path"] == "/declined.txt"] == ["cli"]


async def test_a_client_that_cannot_ask_runs_nothing(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient
) -> None:
    root = workspace(tmp_path)
    workflow_id = f"mcp-mute-{tmp_path.name}"
    async with mcp_client(cli_env, flags(tmp_path, root, workflow_id), None) as client:
        result = await client.call_tool("write_file", {"file_path": "/x.txt", "content": "x"})
        assert result.is_error and "cannot ask you" in text_of(result)
        assert not (root / "x.txt").exists()
        # A malformed call is an error result naming the argument.
        bad = await client.call_tool("read_file", {"path": "/notes.txt"})
        assert bad.is_error and "file_path" in text_of(bad)
        [still_open] = await pending(temporal_client, workflow_id)
        assert still_open["args"]["file_path"] == "/x.txt"


async def test_a_forged_request_state_decides_nothing(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient
) -> None:
    """The retry's ``request_state`` comes from the client: an altered one is refused."""
    root = workspace(tmp_path)
    workflow_id = f"mcp-forged-{tmp_path.name}"
    never = answering("approve", [])
    async with mcp_client(cli_env, flags(tmp_path, root, workflow_id), never) as client:
        session = client.session
        first = await session.call_tool(
            "write_file", {"file_path": "/f.txt", "content": "f"}, allow_input_required=True
        )
        assert isinstance(first, types.InputRequiredResult), first
        assert first.request_state is not None
        body, _, mac = first.request_state.partition(".")
        forged = body + "." + ("0" * len(mac))
        yes: types.InputResponses = {
            "filegate_approval": types.ElicitResult(
                action="accept", content={"decision": "approve"}
            )
        }
        with pytest.raises(Exception, match="request_state"):
            await session.call_tool(
                "write_file", {"file_path": "/f.txt", "content": "f"},
                input_responses=yes, request_state=forged, allow_input_required=True,
            )  # fmt: skip
        assert not (root / "f.txt").exists()
        assert len(await pending(temporal_client, workflow_id)) == 1


def test_bad_flags_are_one_line(cli_env: dict[str, str], tmp_path: Path) -> None:
    missing = cli(cli_env, "mcp", "--root", str(tmp_path / "nope"))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert missing.stdout == ""
    bad_rules = tmp_path / "bad.json"
    bad_rules.write_text(json.dumps([{"operations": ["read"], "paths": ["/x"], "mode": "maybe"}]))
    refused = cli(cli_env, "mcp", "--root", str(tmp_path), "--permissions", str(bad_rules))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    # A host shell could read what a deny rule hides: refused before anything starts.
    rules = tmp_path / "rules.json"
    write_json(rules, RULES)
    shell = cli(cli_env, "mcp", "--root", str(tmp_path), "--shell", "--permissions", str(rules))
    assert shell.returncode == 2 and len(shell.stderr.strip().splitlines()) == 1, shell.stderr
    assert "execute" in shell.stderr and shell.stdout == ""
    lease = cli(cli_env, "mcp", "--root", str(tmp_path), "--lease", "0")
    assert lease.returncode == 2 and lease.stderr.strip() == (
        "filegate: --lease 0: must be 1 to 86400 seconds"
    ), lease.stderr


MARK = "OUTSIDE-MARK-7f3a"


def hostile_tree(tmp_path: Path, root: Path) -> Path:
    """Files outside the root, and links inside it that point at them."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file.txt").write_text(f"{MARK}\n")
    sibling = tmp_path / "ws_evil"  # shares the root's name as a prefix
    sibling.mkdir()
    (sibling / "secret.txt").write_text(f"{MARK}\n")
    (root / "link.txt").symlink_to(outside / "file.txt")
    (root / "dirlink").symlink_to(outside, target_is_directory=True)
    return outside


async def test_the_reference_servers_hostile_paths_through_mcp(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Traversal, a sibling sharing the root's prefix, links out of the root, a NUL byte,
    ``~`` and encoded dots: no read shows an outside byte, no write changes one, even
    with every write approved (so each reaches the tools worker, not only the gate)."""
    root = workspace(tmp_path)
    outside = hostile_tree(tmp_path, root)
    workflow_id = f"mcp-hostile-{tmp_path.name}"
    yes = answering("approve", [])
    paths = [
        "/../outside/file.txt",
        "/notes.txt/../../outside/file.txt",
        "/../ws_evil/secret.txt",
        str(outside / "file.txt"),
        "/link.txt",
        "/dirlink/file.txt",
        "/notes.txt\x00/../../outside/file.txt",
        "~/../outside/file.txt",
        "/%2e%2e/outside/file.txt",
        "\\..\\outside\\file.txt",
    ]
    async with mcp_client(cli_env, flags(tmp_path, root, workflow_id), yes) as client:
        for path in paths:
            read = await client.call_tool("read_file", {"file_path": path})
            assert MARK not in text_of(read), (path, text_of(read))
            wrote = await client.call_tool("write_file", {"file_path": path, "content": "PWNED"})
            assert MARK not in text_of(wrote), path
            edited = await client.call_tool(
                "edit_file", {"file_path": path, "old_string": MARK, "new_string": "PWNED"}
            )
            assert MARK not in text_of(edited), path
        for tool, args in (
            ("grep", {"pattern": MARK, "path": "/", "output_mode": "content"}),
            ("grep", {"pattern": MARK, "path": "/dirlink"}),
            ("glob", {"pattern": "**/*.txt", "path": "/dirlink"}),
            ("ls", {"path": "/dirlink"}),
            ("ls", {"path": "/.."}),
        ):
            found = await client.call_tool(tool, args)
            assert MARK not in text_of(found) and "secret.txt" not in text_of(found), (tool, args)
    assert (outside / "file.txt").read_text() == f"{MARK}\n"
    assert (tmp_path / "ws_evil" / "secret.txt").read_text() == f"{MARK}\n"
    assert sorted(p.name for p in outside.iterdir()) == ["file.txt"]
    assert (root / "link.txt").is_symlink() or not (root / "link.txt").exists()


async def test_streamable_http_answers_only_the_token_holder_loopback_included(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient
) -> None:
    """127.0.0.1 and another address (127.0.0.2 here, still this machine) answer only a
    caller with the bearer token: loopback is open to every local user, and the old
    code let one without the token read the workspace and answer approvals there
    (issue 50). The SDK's client with the token works as over stdio."""
    import httpx

    root = workspace(tmp_path)
    env = {**cli_env, "FILEGATE_UI_TOKEN": "t" * 32}
    for host in ("127.0.0.1", "127.0.0.2"):
        port = free_port()
        workflow_id = f"mcp-http-{host[-1]}-{tmp_path.name}"
        args = [*flags(tmp_path, root, workflow_id), "--transport", "http", "--host", host]
        proc = await asyncio.create_subprocess_exec(
            *CLI, *args, "--port", str(port), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        url = f"http://{host}:{port}/mcp"
        try:
            await until_listening(host, port, proc)
            headers = {"Authorization": "Bearer " + "t" * 32}
            async with httpx.AsyncClient() as raw:
                for wrong in ({}, {"Authorization": "Bearer " + "u" * 32}):
                    refused = await raw.post(
                        url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=wrong
                    )
                    assert refused.status_code == 401, (host, refused.text)
            if os.geteuid() == 0 and os.path.exists("/usr/bin/python3"):  # another user, no token
                assert await status_as_nobody(url) == 401, host
            transport = streamable_client(url, headers)
            async with Client(transport, elicitation_callback=answering("approve", [])) as client:
                read = await client.call_tool("read_file", {"file_path": "/notes.txt"})
                assert "first line" in text_of(read)
                wrote = await client.call_tool(
                    "write_file", {"file_path": f"/{host}.txt", "content": "over http"}
                )
                assert not wrote.is_error, text_of(wrote)
            assert (root / f"{host}.txt").read_text() == "over http"
        finally:
            proc.terminate()
            await proc.wait()


NOBODY_POST = """
import sys, urllib.error, urllib.request
body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
request = urllib.request.Request(sys.argv[1], data=body, method="POST", headers={
    "Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
try:
    print(urllib.request.urlopen(request, timeout=10).status)
except urllib.error.HTTPError as exc:
    print(exc.code)
"""


async def status_as_nobody(url: str) -> int:
    """The HTTP status a process of uid 65534 (another local user) gets for a bare ping."""
    proc = await asyncio.create_subprocess_exec(
        "/usr/bin/python3", "-I", "-c", NOBODY_POST, url,
        user=65534, group=65534, extra_groups=[], cwd="/",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return int(out.decode().strip())


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def until_listening(host: str, port: int, proc: asyncio.subprocess.Process) -> None:
    for _ in range(300):
        if proc.returncode is not None:
            err = await proc.stderr.read() if proc.stderr else b""
            raise AssertionError(f"filegate mcp exited: {err.decode()}")
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        writer.close()
        return
    raise AssertionError(f"nothing listens on {host}:{port}")


def streamable_client(url: str, headers: dict[str, str] | None) -> Any:
    """The SDK's streamable HTTP transport, with the bearer header when one is needed."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    return streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers or {}))


async def test_a_client_that_leaves_mid_approval_loses_nothing(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient
) -> None:
    """The client exits while its write waits for a human (over stdio the server exits
    with it): the approval stays in the session, and ``filegate mcp --workflow-id`` on the
    same root serves the session again, where ``filegate approve`` lets the write run."""
    root = workspace(tmp_path)
    workflow_id = f"mcp-leave-{tmp_path.name}"
    args = flags(tmp_path, root, workflow_id)
    async with mcp_client(cli_env, args, answering("approve", [])) as client:
        asked = await client.session.call_tool(
            "write_file", {"file_path": "/later.txt", "content": "later"}, allow_input_required=True
        )
        assert isinstance(asked, types.InputRequiredResult)
    assert not (root / "later.txt").exists()
    async with mcp_client(cli_env, args, None) as client:
        [waiting] = await pending(temporal_client, workflow_id)
        assert waiting["args"]["file_path"] == "/later.txt"
        approved = cli(cli_env, "approve", "--workflow", workflow_id, waiting["id"])
        assert approved.returncode == 0, approved.stdout + approved.stderr
        read = await client.call_tool("read_file", {"file_path": "/notes.txt"})
        assert not read.is_error, text_of(read)
        for _ in range(100):
            if (root / "later.txt").exists():
                break
            await asyncio.sleep(0.1)
        # While it runs, the session is served on its own root only.
        other = tmp_path / "other"
        other.mkdir()
        elsewhere = cli(cli_env, *flags(tmp_path, other, workflow_id))
        assert elsewhere.returncode == 2 and "not a session on this root" in elsewhere.stderr
    assert (root / "later.txt").read_text() == "later"


async def test_a_deployments_workers_serve_the_session(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient
) -> None:
    """Without ``--root`` the process holds no files: the deployment's agent worker runs
    the session and its tools worker the calls (both built by ``FilegatePlugin``)."""
    from temporalio.worker import Worker

    from filegate.backends.filesystem import FilesystemBackend
    from filegate.backends.settings import Settings
    from filegate.plugin import FilegatePlugin

    root = workspace(tmp_path)
    tag = tmp_path.name[-20:]
    agent_queue, tools_queue = f"agents-{tag}", f"tools-{tag}"
    quiet: dict[str, Any] = {"artifacts": None, "settings": Settings(), "tracer_provider": None}
    agents = FilegatePlugin(agent=True, **quiet)
    tools = FilegatePlugin(
        backends={"ws": FilesystemBackend(root)}, journal_dir=tmp_path / "j", policies=None, **quiet
    )
    env = {k: v for k, v in cli_env.items() if not k.startswith("FILEGATE_S3_")}
    rules = tmp_path / "rules.json"
    write_json(rules, RULES)
    args = [
        "mcp", "--tools-queue", tools_queue, "--name", "ws", "--agent-queue", agent_queue,
        "--permissions", str(rules), "--workflow-id", f"mcp-deployed-{tag}",
    ]  # fmt: skip
    async with (
        Worker(temporal_client, task_queue=agent_queue, plugins=[agents]),
        Worker(temporal_client, task_queue=tools_queue, plugins=[tools]),
        mcp_client(env, args, None) as client,
    ):
        read = await client.call_tool("read_file", {"file_path": "/notes.txt"})
        assert "first line" in text_of(read)
        denied = await client.call_tool("read_file", {"file_path": "/secret/key.txt"})
        assert denied.is_error and "TOP-SECRET" not in text_of(denied)
        wrote = await client.call_tool("write_file", {"file_path": "/d.txt", "content": "d"})
        assert not wrote.is_error, text_of(wrote)
    assert (root / "d.txt").read_text() == "d"
    no_root = cli({k: v for k, v in env.items() if k != "TEMPORAL_ADDRESS"}, "mcp")
    assert no_root.returncode == 2 and "--root" in no_root.stderr


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_url_question_sends_the_human_to_the_approval_page(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient, mode: str
) -> None:
    """``--ask url``: the client is given the approval UI's address, the human decides
    there (``filegate approve`` stands in for the page: both send the same update), and
    the call answers with what the decision let run. A declined link runs nothing."""
    root = workspace(tmp_path)
    workflow_id = f"mcp-url-{mode}-{tmp_path.name}"
    page = "http://127.0.0.1:8080/"
    links: list[types.ElicitRequestURLParams] = []
    accept = [True, False]

    async def follow_link(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        assert isinstance(params, types.ElicitRequestURLParams), params
        links.append(params)
        if not accept.pop(0):
            return types.ElicitResult(action="decline")
        named = params.url.partition("#")[2]
        waiting = [a for a in await pending(temporal_client, workflow_id) if a["id"] == named]
        assert waiting, f"the link {params.url} names no waiting approval"
        decided = cli(cli_env, "approve", "--workflow", workflow_id, waiting[0]["id"])
        assert decided.returncode == 0, decided.stdout + decided.stderr
        return types.ElicitResult(action="accept")

    args = [*flags(tmp_path, root, workflow_id), "--ask", "url", "--approval-url", page]
    async with mcp_client(cli_env, args, follow_link, mode=mode) as client:
        wrote = await client.call_tool("write_file", {"file_path": "/u.txt", "content": "u"})
        assert not wrote.is_error, text_of(wrote)
        assert (root / "u.txt").read_text() == "u"
        declined = await client.call_tool("write_file", {"file_path": "/v.txt", "content": "v"})
        assert declined.is_error and not (root / "v.txt").exists()
    assert [link.url.partition("#")[0] for link in links] == [page, page]
    assert "write_file" in links[0].message and "+u" in links[0].message
    refused = cli(cli_env, "mcp", "--root", str(root), "--ask", "url")
    assert refused.returncode == 2 and "--approval-url" in refused.stderr


async def test_a_decision_made_elsewhere_first_wins(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient
) -> None:
    """While the client's question is open, ``filegate approve`` decides; the client's
    later ``reject`` is refused as already decided and the call follows the approval."""
    root = workspace(tmp_path)
    workflow_id = f"mcp-race-{tmp_path.name}"

    async def approve_then_reject(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        [waiting] = await pending(temporal_client, workflow_id)
        done = cli(cli_env, "approve", "--workflow", workflow_id, waiting["id"])
        assert done.returncode == 0, done.stdout + done.stderr
        return types.ElicitResult(action="accept", content={"decision": "reject"})

    async with mcp_client(cli_env, flags(tmp_path, root, workflow_id), approve_then_reject) as c:
        wrote = await c.call_tool("write_file", {"file_path": "/raced.txt", "content": "r"})
        assert not wrote.is_error, text_of(wrote)
        records = await decided(temporal_client, workflow_id)
    assert (root / "raced.txt").read_text() == "r"
    assert [(d["decision"], d["via"]) for d in records] == [("approve", "cli")]


async def test_the_sessions_shell_keeps_the_command_bounds_from_the_environment(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """``FILEGATE_EXEC_FILE_SIZE`` bounds a command of ``filegate mcp --shell`` as it
    does one of ``filegate worker``: the session's in-process shell was built with
    the default bounds, and a command wrote as much as it liked."""
    root = tmp_path / "ws"
    root.mkdir()
    env = {**cli_env, "FILEGATE_EXEC_FILE_SIZE": "16384"}
    args = ["mcp", "--root", str(root), "--shell", "--workflow-id", f"mcp-bounds-{tmp_path.name}"]
    async with mcp_client(env, args, None) as client:
        await client.call_tool("execute", {"command": "head -c 200000 /dev/zero > big"})
    assert (root / "big").stat().st_size <= 16384


async def test_a_commands_held_connection_is_asked_by_elicitation(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient
) -> None:
    """``filegate mcp --root --sandbox`` with an ``interrupt`` network rule: the
    command's connection waits, the client is asked (the question names the host and
    port), and the accepted decision lets the same request through."""
    BwrapSandboxBackend(made(tmp_path / "probe"), check=True)  # the sandbox works here
    token = f"mcp-net-{uuid.uuid4().hex}"
    served = tmp_path / "served"
    served.mkdir()
    (served / "x").write_text(token)
    handler = functools.partial(QuietFiles, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    root = tmp_path / "ws"
    root.mkdir()
    rules = write_json(
        tmp_path / "net.json", [{"hosts": ["127.0.0.1"], "ports": [port], "mode": "interrupt"}]
    )
    asked: list[str] = []
    args = ["mcp", "--root", str(root), "--sandbox", "--permissions", str(rules),
            "--workflow-id", f"mcp-net-{tmp_path.name}", "--reviewer", "mcp-net"]  # fmt: skip
    try:
        async with mcp_client(cli_env, args, answering("approve", asked)) as client:
            ran = await client.call_tool(
                "execute", {"command": f"curl -sS --max-time 60 http://127.0.0.1:{port}/x"}
            )
    finally:
        server.shutdown()
        server.server_close()
    assert not ran.is_error and token in text_of(ran), text_of(ran)
    assert len(asked) == 1 and "connect" in asked[0] and f"{port}" in asked[0], asked


class QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


async def test_http_on_a_busy_port_is_one_line_and_starts_no_session(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient
) -> None:
    """As ``ui`` and ``dev`` do: exit 2 with one line naming the address, and no session
    left Running (the old code printed "serving", a traceback, exited 3 and left one)."""
    import socket

    from temporalio.service import RPCError

    root = workspace(tmp_path)
    workflow_id = f"mcp-busy-{tmp_path.name}"
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = await asyncio.to_thread(
            cli, cli_env, *flags(tmp_path, root, workflow_id), "--transport", "http",
            "--port", str(port),
        )  # fmt: skip
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stdout + done.stderr
    assert lines == [f"filegate: 127.0.0.1:{port} is already in use; pick another --port"], lines
    with pytest.raises(RPCError, match="not found"):
        await temporal_client.get_workflow_handle(workflow_id).describe()


async def test_serving_a_running_session_with_other_rules_is_refused(
    cli_env: dict[str, str], tmp_path: Path, temporal_client: TemporalClient
) -> None:
    """``--workflow-id`` of a running session with other ``--permissions``: one line,
    exit 2, instead of serving the session's old rules under the new flags' name."""
    root = workspace(tmp_path)
    workflow_id = f"mcp-rules-{tmp_path.name}"
    looser = write_json(tmp_path / "looser.json", [])
    async with mcp_client(cli_env, flags(tmp_path, root, workflow_id), None) as client:
        assert (await client.call_tool("read_file", {"file_path": "/notes.txt"})).content
        other = await asyncio.to_thread(
            cli, cli_env, "mcp", "--root", str(root), "--permissions", str(looser),
            "--workflow-id", workflow_id,
        )  # fmt: skip
    errors = [line for line in other.stderr.splitlines() if line.startswith("filegate:")]
    assert other.returncode == 2, other.stdout + other.stderr
    assert len(errors) == 1 and "running with other rules" in errors[0], other.stderr
