"""Approval web UI: pending approvals of running agents, decided from a browser.

A small Starlette app (``filegate ui``). It is only a Temporal client: it lists
pending approvals with the same visibility query as ``filegate approvals`` and
sends decisions as the workflow's ``decide`` update, so the validator's refusal
(unknown or already-decided id, edited args that fail validation or hit a deny
rule) comes back to the reviewer at once. It never reads the agent's
workspace: a write is previewed from its arguments, an edit as the unified diff
of ``old_string`` against ``new_string``.

Every request passes :class:`~filegate.cli.web_guard.GuardMiddleware` first
(``Host`` allow-list, token login, CSRF, JSON only, CSP): an approval decides
whether an agent's write runs, so no other web page may drive this one. Each
decision carries the guard's :class:`~filegate.cli.web_guard.Reviewer` (who,
and through what), which the workflow records in its state and history and
tells the model.

Imported only by ``filegate ui`` (and tests): the web dependencies are the
optional ``ui`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import uvicorn
from filegate.backends.embedded import is_listening
from filegate.cli.approvals import LISTING_TIMEOUT, approval_listing
from filegate.cli.connection import target_from
from filegate.cli.contract import DECIDE_UPDATE
from filegate.cli.errors import CliError, failure_text
from filegate.cli.web_guard import TOKEN_QUERY, GuardMiddleware, Reviewer, UiAccess, reviewer_of
from filegate.worker import ConfigError
from filegate.workflows.inputs import Decision
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError

log = logging.getLogger("filegate.ui")

ClientFactory = Callable[[], Awaitable[Client]]
"""Connects a Temporal client; called once, on the server's own event loop."""

PREVIEW_LIMIT = 20_000
"""Characters of a write's content or an edit's diff shown; history may hold more."""

REFRESH_MS = 2000

SCRIPT = Path(__file__).with_name("static") / "approvals.js"
"""The page's JavaScript, served at ``/static/approvals.js`` (CSP forbids inline script)."""

_TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).with_name("templates")),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _clip(text: str) -> tuple[str, bool]:
    if len(text) <= PREVIEW_LIMIT:
        return text, False
    return text[:PREVIEW_LIMIT], True


def preview(tool: str, args: dict[str, Any]) -> dict[str, Any] | None:
    """What a reviewer should see of a file change, from the call's arguments alone.

    ``edit_file``: unified diff of old_string -> new_string; ``write_file``:
    the content to be written. Other tools: None (their arguments say it all).
    """
    path = str(args.get("file_path", ""))
    if tool == "edit_file":
        old, new = str(args.get("old_string", "")), str(args.get("new_string", ""))
        lines = difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"{path} (old_string)",
            tofile=f"{path} (new_string)",
            n=3,
        )
        # difflib leaves the last line of a text without a newline unterminated.
        text, clipped = _clip("".join(ln if ln.endswith("\n") else ln + "\n" for ln in lines))
        return {
            "kind": "diff",
            "text": text,
            "clipped": clipped,
            "replace_all": bool(args.get("replace_all", False)),
        }
    if tool == "write_file":
        text, clipped = _clip(str(args.get("content", "")))
        return {"kind": "content", "text": text, "clipped": clipped}
    return None


def describe_rule(rule: dict[str, Any] | None) -> str:
    if not rule:
        return "(no rule recorded)"
    ops = ", ".join(rule.get("operations", []))
    paths = ", ".join(rule.get("paths", []))
    index = f"#{rule['index']} " if rule.get("index") is not None else ""
    return f"{index}{rule.get('mode', '?')} {ops} on {paths}"


def _diff_line_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "meta"
    return {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "ctx")


_TEMPLATES.filters["diffclass"] = _diff_line_class


def enrich(approval: dict[str, Any]) -> dict[str, Any]:
    """An approval as the UI shows it: key, rule text, preview, editable args."""
    args = approval.get("args") or {}
    return {
        **approval,
        "key": f"{approval['workflow_id']}/{approval['id']}",
        "rule_text": describe_rule(approval.get("rule")),
        "preview": preview(str(approval.get("tool")), args),
        "args_json": json.dumps(args, indent=2, ensure_ascii=False),
    }


class ApprovalService:
    """The app's one Temporal client (connected lazily) and its two operations."""

    def __init__(self, client_factory: ClientFactory) -> None:
        self._factory = client_factory
        self._client: Client | None = None
        self._lock = asyncio.Lock()

    async def client(self) -> Client:
        async with self._lock:
            if self._client is None:
                self._client = await self._factory()
            return self._client

    async def pending(self) -> list[dict[str, Any]]:
        return (await self.listing())[0]

    async def listing(self) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        """Pending approvals (enriched) and the workflows that did not answer in time."""
        found = await approval_listing(await self.client())
        return [enrich(a) for a in found.approvals], found.unreachable

    async def decide(self, workflow_id: str, decision: Decision) -> dict[str, Any]:
        """Send ``decision`` as the ``decide`` update; raise ``ValueError`` on refusal."""
        handle = (await self.client()).get_workflow_handle(workflow_id)
        try:
            ack: dict[str, Any] = await handle.execute_update(
                DECIDE_UPDATE, decision.model_dump(mode="json", exclude_none=True)
            )
        except WorkflowUpdateFailedError as exc:
            raise ValueError(failure_text(exc)) from None
        except RPCError as exc:
            raise LookupError(
                f"approval {decision.id}: cannot reach workflow {workflow_id}: {exc.message}"
            ) from None
        return ack


IDENTITY_FIELDS = ("reviewer", "via")
"""Set from the authenticated caller, never from the request body."""


def _parse_decision(body: Any, reviewer: Reviewer) -> tuple[str, Decision]:
    """``{"workflow_id", "id", "decision", "args"?, "reason"?, "message"?}`` -> Decision.

    Who decided comes from the guard's ``reviewer``; a body that names a
    reviewer or channel itself is refused rather than silently corrected.
    """
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    workflow_id = body.get("workflow_id")
    if not isinstance(workflow_id, str) or not workflow_id:
        raise ValueError("workflow_id is required")
    claimed = [key for key in IDENTITY_FIELDS if key in body]
    if claimed:
        raise ValueError(f"{', '.join(claimed)}: set by the UI from your login, not by the body")
    fields = {k: v for k, v in body.items() if k != "workflow_id"}
    if isinstance(fields.get("reason"), str) and not fields["reason"].strip():
        fields["reason"] = None  # an empty reason box means "no reason"
    fields.update(reviewer=reviewer.who, via=reviewer.via)
    try:
        return workflow_id, Decision.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(problems) from None


def create_app(client_factory: ClientFactory, access: UiAccess) -> GuardMiddleware:
    """The approval UI as an ASGI app behind its guard; ``client_factory`` connects
    to Temporal, ``access`` says who may use the UI and from where."""
    service = ApprovalService(client_factory)
    page = _TEMPLATES.get_template("approvals.html")
    cards = _TEMPLATES.get_template("approval_cards.html")
    script = SCRIPT.read_bytes()

    async def index(request: Request) -> Response:
        approvals, unreachable = await service.listing()
        html = page.render(
            approvals=approvals,
            unreachable=unreachable,
            timeout=LISTING_TIMEOUT,
            refresh_ms=REFRESH_MS,
            csrf_token=access.csrf_token,
        )
        return HTMLResponse(html)

    async def javascript(request: Request) -> Response:
        return Response(script, media_type="text/javascript; charset=utf-8")

    async def fragment(request: Request) -> Response:
        approvals, unreachable = await service.listing()
        html = cards.render(approvals=approvals, unreachable=unreachable, timeout=LISTING_TIMEOUT)
        return HTMLResponse(html)

    async def api_approvals(request: Request) -> Response:
        return JSONResponse(await service.pending())

    async def api_decide(request: Request) -> Response:
        reviewer = reviewer_of(request.scope)
        try:
            workflow_id, decision = _parse_decision(await request.json(), reviewer)
        except json.JSONDecodeError:
            return JSONResponse({"ok": False, "error": "the body is not valid JSON"}, 400)
        except ValueError as exc:
            return JSONResponse({"ok": False, "error": str(exc)}, 400)
        try:
            ack = await service.decide(workflow_id, decision)
        except ValueError as exc:
            return JSONResponse({"ok": False, "error": f"refused: {exc}"}, 409)
        except LookupError as exc:
            return JSONResponse({"ok": False, "error": str(exc)}, 404)
        by = f"{ack.get('reviewer', reviewer.who)} via {ack.get('via', reviewer.via)}"
        log.info("%s: approval %s of %s by %s", ack["decision"], ack["id"], workflow_id, by)
        text = f"{ack['decision']}: approval {ack['id']} of {workflow_id} (by {by})"
        return JSONResponse({"ok": True, "ack": ack, "message": text})

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/fragment", fragment),
            Route("/static/approvals.js", javascript),
            Route("/api/approvals", api_approvals),
            Route("/api/decide", api_decide, methods=["POST"]),
        ]
    )
    return GuardMiddleware(app, access)


def login_url(host: str, port: int, access: UiAccess) -> str:
    """The URL a reviewer opens once: it trades the token for the session cookie."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/?{urlencode({TOKEN_QUERY: access.token})}"


def uvicorn_server(app: Any, host: str, port: int) -> uvicorn.Server:
    """A uvicorn server for ``app`` (run it with ``serve()`` or ``run()`` in a thread)."""
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
    return uvicorn.Server(config)


async def serve(
    client_factory: ClientFactory, access: UiAccess, host: str = "127.0.0.1", port: int = 8080
) -> None:
    """Serve the UI until interrupted (``filegate ui``); prints the login URL first."""
    server = uvicorn_server(create_app(client_factory, access), host, port)
    print(f"filegate ui: {login_url(host, port, access)}  (Ctrl-C to stop)", flush=True)
    print(
        "filegate ui: open that URL once to log in; keep it private (it is the UI's "
        "password). API clients send `Authorization: Bearer <token>`.",
        flush=True,
    )
    await server.serve()


async def ui_command(args: argparse.Namespace) -> int:
    """``filegate ui [--host H] [--port P]`` plus the usual Temporal connection options.

    Reports failures itself (one line on stderr) and returns the exit code.
    """
    try:
        try:
            access = UiAccess.for_address(args.host)  # FILEGATE_UI_* (README)
        except ValueError as exc:
            raise CliError(str(exc), 2) from None
        if is_listening(args.host, args.port):
            raise CliError(f"{args.host}:{args.port} is already in use; pick another --port", 2)
        client = await target_from(args).connect()  # fail now, not on the first page
    except ConfigError as exc:  # CliError, or a connection / S3 failure
        print(f"filegate: {exc}", file=sys.stderr, flush=True)
        return exc.code

    async def reuse() -> Client:
        return client

    await serve(reuse, access, args.host, args.port)
    return 0
