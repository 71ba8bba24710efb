"""``filegate mcp``: Filegate's gate as an MCP server, on the official ``mcp`` SDK.

One process serves one tool session (:mod:`filegate.workflows.session`) to
MCP clients over stdio (the default: the client starts this command) or
streamable HTTP. With ``--root`` the process serves that directory itself,
as ``filegate run`` does: the embedded Temporal and S3 servers unless
``TEMPORAL_ADDRESS`` names one, and an agent worker and a tools worker in
this process. Without ``--root`` a deployment's workers serve the session
(``--backend``, ``--tools-queue``, ``--agent-queue`` as for ``submit``).

Why stdout stays clean: over stdio it is the protocol channel, so every
note this command prints goes to stderr.

HTTP listens on 127.0.0.1 by default, where the SDK's Host and Origin checks
hold off DNS rebinding, and on every address it takes the approval UI's guard
(:mod:`filegate.cli.ui.web_guard`): ``Authorization: Bearer <token>``, with the
token from ``FILEGATE_UI_TOKEN`` or printed at start. A tool call decides
what runs on the files and answers the session's approvals, and loopback is
open to every local user, so no address is served unauthenticated (issue 50:
another user's process read a 0700 workspace and approved a gated write).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import getpass
import hashlib
import json
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client

from filegate.cli.errors import CliError, port_in_use
from filegate.cli.run import ROOT_MEMO, terminal_exports
from filegate.cli.run_inputs import (
    load_interrupt_on,
    load_rule_set,
    workspace_root,
)
from filegate.kernel import wire

if TYPE_CHECKING:
    from filegate.cli.mcp_fast import FastReads

DEFAULT_HTTP_PORT = 8765
DEFAULT_LEASE_SECONDS = 300.0


def note(text: str) -> None:
    """A line for the human: stderr, since stdout may be the MCP channel."""
    print(text, file=sys.stderr, flush=True)


def _session_config(args: argparse.Namespace, ref: Any) -> Any:
    """The session's FileToolsConfig from the flags; bad flags exit 2 before anything starts."""
    from filegate.kernel.execute_gate import ExecuteGateError
    from filegate.workflows import BackendSpec, FileToolsConfig

    rules = load_rule_set(args.permissions)
    config = FileToolsConfig(
        backend=BackendSpec(default=ref),
        permissions=rules.permissions,
        network=rules.network,
        reviewer=rules.reviewer,
        interrupt_on=load_interrupt_on(args.interrupt_on),
    )
    try:
        config.check_execute_gate()
    except ExecuteGateError as exc:
        raise CliError(str(exc), 2) from None
    return config


def reviewer_name(args: argparse.Namespace) -> str:
    """Who the audit log names for a decision the MCP client sends."""
    chosen = (args.reviewer or "").strip()
    if chosen:
        if len(chosen) > 200:
            raise CliError("--reviewer must be 1 to 200 characters", 2)
        return chosen
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown user"
    return f"{user} (MCP client)"


@contextlib.asynccontextmanager
async def _served_session(
    args: argparse.Namespace,
) -> AsyncIterator[tuple[Client, str, str, FastReads | None]]:
    """Temporal, the workers this process hosts (``--root``), and the running session; with
    them, how a person decides an approval the client could not (:func:`_decide_hint`), and
    with ``--root`` the reads this process answers itself (``cli.mcp_fast``)."""
    from filegate.cli.connection import target_from

    target = target_from(args)
    workflow_id = args.workflow_id or f"filegate-mcp-{uuid.uuid4().hex[:12]}"
    if args.root is None:
        if not target.configured:
            raise CliError(
                "give --root DIR (serve a directory from here), or set TEMPORAL_ADDRESS to "
                "use a deployment's workers",
                2,
            )
        async with _deployed(args, target, workflow_id) as client:
            yield client, workflow_id, _decide_hint(workflow_id, None, None), None
        return
    async with _hosted(args, target, workflow_id) as (client, address, fast):
        hint = _decide_hint(workflow_id, address, workspace_root(args.root))
        yield client, workflow_id, hint, fast


def _decide_hint(workflow_id: str, embedded: str | None, root: Path | None) -> str:
    """The command a person runs to decide approval ``{id}`` of this session.

    A deployment's Temporal outlives this process: the plain command works. The
    embedded stack lives only while this process does, so the hint names its
    address and, for after, serving the session again. No S3 key goes into it:
    the MCP client (a model) reads this text; stderr has the full settings.
    """
    decide = f"filegate approve --workflow {workflow_id} {{id}}"
    if embedded is None:
        return f"decide it with `{decide}` (or reject) or in the approval UI"
    return (
        f"while this server runs, decide it from another terminal with "
        f"`TEMPORAL_ADDRESS={embedded} {decide}` (this server's stderr lists the S3 "
        f"settings a large card needs); once it has exited, serve the session again "
        f"with `filegate mcp --root {root} --workflow-id {workflow_id}` and decide then"
    )


@contextlib.asynccontextmanager
async def _hosted(
    args: argparse.Namespace, target: Any, workflow_id: str
) -> AsyncIterator[tuple[Client, str | None, FastReads]]:
    from filegate.cli.mcp_fast import FastReads
    from filegate.cli.run import served_kind, served_ref, tools_queue_for
    from filegate.cli.services import local_services, services_client, state_dir_outside
    from filegate.cli.workers import env_policies
    from filegate.worker import in_process_workers, make_backend

    root = workspace_root(args.root)
    tools_queue = tools_queue_for(workflow_id, root)
    config = _session_config(args, served_ref(args, root, tools_queue, "workspace"))
    backend = make_backend(served_kind(args), root, commands=target.settings.commands)
    backends = {"workspace": backend}
    policies = env_policies()
    state_dir = state_dir_outside(target.settings.journal, [str(root)])
    async with local_services(target, state_dir, reuse_default=True) as services:
        for line in services.notes:
            note(line)
        client, artifacts = await services_client(target, services)
        async with (
            in_process_workers(
                client,
                f"{workflow_id}.agent",
                tools_queue,
                backends,
                state_dir / "journal" / "workspace",
                artifacts=artifacts,
                settings=target.settings,
                policies=policies,
            ),  # fmt: skip
            _session(client, config, workflow_id, tools_queue, args.lease, root),
        ):
            exports = terminal_exports(target, services)
            if exports:
                note(f"filegate mcp: to decide from another terminal, first: {exports}")
            address = None if target.configured else services.temporal_address
            yield client, address, FastReads(config, backends, policies)


@contextlib.asynccontextmanager
async def _deployed(
    args: argparse.Namespace, target: Any, workflow_id: str
) -> AsyncIterator[Client]:
    from filegate.cli.services import signals_as_interrupt
    from filegate.cli.submit import backend_ref, warn_unserved

    if args.shell or args.sandbox:
        raise CliError("--shell and --sandbox choose how --root is served: use --backend", 2)
    ref = backend_ref(args)
    config = _session_config(args, ref)
    agent_queue = args.agent_queue or target.settings.temporal.task_queue
    client = await target.connect()
    await warn_unserved(client, agent_queue, ref.task_queue)
    # SIGTERM (how an MCP client stops its server) closes the session like the end of
    # stdin: the hosted path gets this from local_services.
    with signals_as_interrupt():
        async with _session(client, config, workflow_id, agent_queue, args.lease):
            yield client


RULES_MEMO = "filegate_session_rules"
"""Memo of a session workflow: the digest of its rules, so a process serving it again
with other flags is refused instead of silently serving the old rules."""


def _rules_digest(config: Any) -> str:
    """What decides a session's calls (rules, network, approvals, reviewer, tools), hashed."""
    decisive = config.model_dump(
        mode="json", include={"permissions", "network", "interrupt_on", "reviewer", "tools"}
    )
    text = json.dumps(decisive, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@contextlib.asynccontextmanager
async def _session(
    client: Client,
    config: Any,
    workflow_id: str,
    task_queue: str,
    lease: float,
    root: Path | None = None,
) -> AsyncIterator[None]:
    """Start the session workflow, or serve a running one again (``--workflow-id``), and
    renew its lease while serving; on the way out, close it and see it end (its running
    calls finish first, and a later start may reopen it)."""
    from temporalio.exceptions import WorkflowAlreadyStartedError

    from filegate.workflows.session import SessionInput, SessionWorkflow

    rules = _rules_digest(config)
    memo = {RULES_MEMO: rules, **({ROOT_MEMO: str(root)} if root is not None else {})}
    handle = client.get_workflow_handle(workflow_id)
    try:
        await client.start_workflow(
            SessionWorkflow.run, SessionInput(config=config, lease_seconds=lease), id=workflow_id,
            task_queue=task_queue, memo=memo,
        )  # fmt: skip
    except WorkflowAlreadyStartedError:
        found = await handle.describe()
        served = await found.memo_value(ROOT_MEMO, None)
        if found.workflow_type != wire.SESSION_WORKFLOW_TYPE or served != memo.get(ROOT_MEMO):
            raise CliError(
                f"workflow {workflow_id} is running and is not a session on this root: "
                "choose another --workflow-id",
                2,
            ) from None
        kept = await found.memo_value(RULES_MEMO, None)
        if kept is not None and kept != rules:
            raise CliError(
                f"session {workflow_id} is running with other rules than these flags give "
                "(its own stay in force): give it the same --permissions and --interrupt-on, "
                "or choose another --workflow-id",
                2,
            ) from None
        await handle.signal(SessionWorkflow.reopen)
        note(f"filegate mcp: serving the running session {workflow_id} again (its own rules)")
    listing = f"filegate approvals --workflow {workflow_id}"
    note(f"filegate mcp: session {workflow_id} (its approvals: {listing})")
    renewing = asyncio.ensure_future(_renew(handle, lease))
    try:
        yield
    finally:
        renewing.cancel()
        await _close(handle)


async def _renew(handle: Any, lease: float) -> None:
    """Tell the session this process still serves it, four times per lease."""
    from filegate.workflows.session import SessionWorkflow

    while True:
        await asyncio.sleep(lease / 4)
        with contextlib.suppress(Exception):
            await handle.signal(SessionWorkflow.renew)


CLOSE_WAIT_SECONDS = 15.0
"""How long the way out waits to see the session end (its running calls finish first)."""


async def _close(handle: Any) -> None:
    """Close the session and wait, bounded, until it has ended, while the workers this
    process hosts still run: a process that exits first leaves it Running with nobody to
    end it (issue 54). A SIGTERM meanwhile (a client stopping its server) does not cut the
    wait short. A call waiting for a person keeps the session open by design (serve it
    again with ``--workflow-id``); the lease ends what this wait cannot."""
    closing = asyncio.ensure_future(_close_and_wait(handle))
    while not closing.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(closing)


async def _close_and_wait(handle: Any) -> None:
    from filegate.workflows.session import SessionWorkflow

    with contextlib.suppress(Exception):
        await handle.signal(SessionWorkflow.close)
        waiting = await handle.query(wire.PENDING_QUERY, result_type=list[dict[str, Any]])
        if waiting:
            note(f"filegate mcp: session {handle.id} stays open for {len(waiting)} waiting call(s)")
            return
        await asyncio.wait_for(handle.result(), CLOSE_WAIT_SECONDS)


def _mcp_server(
    client: Client,
    workflow_id: str,
    args: argparse.Namespace,
    hint: str,
    fast: FastReads | None = None,
) -> Any:
    """The SDK's low-level server with Filegate's two handlers."""
    from mcp.server import Server

    from filegate.cli.mcp_gate import McpGate

    gate = McpGate(
        client, workflow_id, reviewer=reviewer_name(args), ask=args.ask,
        approval_url=args.approval_url, decide_hint=hint, fast=fast,
    )  # fmt: skip
    return Server(
        "filegate",
        instructions=(
            "File tools behind Filegate's permission rules. A call a rule interrupts asks "
            "you to approve or reject it, with the change it would make."
        ),
        on_list_tools=gate.list_tools,
        on_call_tool=gate.call_tool,
    )


async def _serve_stdio(server: Any) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _listening(host: str, port: int) -> socket.socket:
    """The HTTP transport's socket, bound before the session starts: a port another
    process holds is one line and exit 2, with nothing started (no session left Running)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise port_in_use(host, port, "--port") from None
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", 2) from None
    sock.listen(128)
    return sock


async def _serve_http(server: Any, host: str, port: int, sock: socket.socket) -> None:
    """Streamable HTTP at ``/mcp``; off loopback, behind the approval UI's guard."""
    import uvicorn

    from filegate.cli.ui.web_guard import GuardMiddleware, UiAccess

    # Loopback included: every local user reaches 127.0.0.1, and a tool call decides
    # what runs on the files (and answers the session's approvals), so the caller
    # proves it holds the token as the approval UI's callers do.
    access = UiAccess.for_address(host)
    app: Any = GuardMiddleware(server.streamable_http_app(host=host), access)
    note(f"filegate mcp: send `Authorization: Bearer {access.token}`")
    note(f"filegate mcp: serving http://{host}:{port}/mcp")
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])


async def _mcp_command(args: argparse.Namespace) -> int:
    from filegate.cli.run import quiet_core_warnings

    try:  # the SDK is an optional extra: import it only for this command
        import mcp.server  # noqa: F401
    except ImportError as exc:
        raise CliError(f"filegate mcp needs: pip install 'filegate[mcp]' ({exc})", 2) from None
    if not getattr(args, "verbose", False):
        quiet_core_warnings()
    reviewer_name(args)  # a bad --reviewer exits 2 before anything starts
    if not 1 <= args.lease <= 86_400:
        raise CliError(f"--lease {args.lease:g}: must be 1 to 86400 seconds", 2)
    if args.transport == "http" and not 0 < args.port < 65536:
        raise CliError(f"--port {args.port}: must be 1 to 65535", 2)
    if args.ask == "url" and not args.approval_url:
        raise CliError("--ask url needs --approval-url (the approval UI's address)", 2)
    sock = _listening(args.host, args.port) if args.transport == "http" else None
    try:
        async with _served_session(args) as (client, workflow_id, hint, fast):
            server = _mcp_server(client, workflow_id, args, hint, fast)
            if sock is not None:
                await _serve_http(server, args.host, args.port, sock)
            else:
                await _serve_stdio(server)
    finally:
        if sock is not None:
            sock.close()
    return 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    from filegate.cli.submit import DEPLOYED_BACKENDS

    parser = sub.add_parser(
        "mcp", parents=[common], help="serve Filegate's tools to MCP clients (stdio or HTTP)"
    )
    parser.add_argument("--root", help="directory this process serves (else a deployment's)")
    parser.add_argument("--permissions", help="JSON file: list of {operations, paths, mode}")
    parser.add_argument(
        "--interrupt-on", metavar="FILE", help="JSON file: approvals per tool (as for run)"
    )
    shells = parser.add_mutually_exclusive_group()
    shells.add_argument("--shell", action="store_true", help="LocalShell backend (adds execute)")
    shells.add_argument(
        "--sandbox", action="store_true", help="bubblewrap sandbox backend (adds execute)"
    )
    parser.add_argument(
        "--backend",
        choices=sorted(DEPLOYED_BACKENDS),
        default="filesystem",
        help="without --root: the deployment's tools worker kind (as for submit)",
    )
    parser.add_argument("--tools-queue", help="without --root: the tools worker's task queue")
    parser.add_argument("--name", help="without --root: the tools worker's --name")
    parser.add_argument("--agent-queue", help="without --root: the agent workers' task queue")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_HTTP_PORT, help="HTTP port")
    parser.add_argument("--workflow-id", help="the session's workflow id (default: generated)")
    parser.add_argument(
        "--lease",
        type=float,
        default=DEFAULT_LEASE_SECONDS,
        metavar="SECONDS",
        help="a session this process stops renewing (killed) closes itself after this long "
        f"idle, where workers serve it (default {DEFAULT_LEASE_SECONDS:.0f})",
    )
    parser.add_argument("--reviewer", help="who decisions sent from the client are recorded as")
    parser.add_argument(
        "--approval-url",
        help="the approval UI's address (filegate ui): a client that takes URL questions "
        "and no forms is sent there to decide",
    )
    parser.add_argument(
        "--ask",
        choices=("form", "url"),
        default="form",
        help="the question tried first when the client takes both (default form: it shows "
        "the preview in the client)",
    )
    parser.set_defaults(handler=_mcp_command)
