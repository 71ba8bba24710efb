"""Approval web UI: pending approvals of running agents, decided from a browser.

A small Starlette app (``filegate ui``). It is only a Temporal client: it lists
pending approvals with the same visibility query as ``filegate approvals`` and
sends decisions as the workflow's ``decide`` update, so the validator's refusal
(unknown or already-decided id, edited args that fail validation or hit a deny
rule) comes back to the reviewer at once. It never reads the agent's
workspace: the preview is the workflow's (computed on the tools worker), or,
from a workflow that sends none, what the arguments alone show
(:mod:`filegate.cli.ui.cards`). Finding approvals is :mod:`filegate.cli.ui.listing`,
recent decisions :mod:`filegate.cli.ui.decided`.

Every request passes :class:`~filegate.cli.ui.web_guard.GuardMiddleware` first
(``Host`` allow-list, token login, CSRF, JSON only, CSP): an approval decides
whether an agent's write runs, so no other web page may drive this one. What
the model wrote reaches the page with its hidden characters (controls, bidi
overrides, zero-width ones) spelled out as ``⟨U+202E⟩``
(:func:`~filegate.cli.ui.cards.visible`): the templates apply it to every
value they print, and the JSON answers the page shows pass
:func:`~filegate.cli.ui.cards.page_json`. Each
decision carries the guard's :class:`~filegate.cli.ui.web_guard.Reviewer` (who,
and through what), which the workflow records in its state and history and
tells the model.

Imported only by ``filegate ui`` (and tests): the web dependencies are the
optional ``ui`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import uvicorn
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError

from filegate.cli.connection import target_from
from filegate.cli.errors import CliError, failure_text, port_in_use, undecodable
from filegate.cli.grant_options import grant_line
from filegate.cli.ui.cards import (
    PREVIEW_LIMIT,
    Raw,
    describe_rule,
    edited_preview,
    enrich,
    enrich_decision,
    oneline,
    page_json,
    preview,
    shown,
    visible,
)
from filegate.cli.ui.decided import decided_listing
from filegate.cli.ui.grants import grant_routes, mark_scopes
from filegate.cli.ui.listing import LISTING_TIMEOUT, approval_listing, forget_cards
from filegate.cli.ui.turns import mark_turns, turn_decision_text
from filegate.cli.ui.web_guard import TOKEN_QUERY, GuardMiddleware, Reviewer, UiAccess, reviewer_of
from filegate.devstack.servers import is_listening
from filegate.kernel.wire import DECIDE_TURN_UPDATE, DECIDE_UPDATE
from filegate.wiring.connection import ConfigError
from filegate.workflows.approvals.turn_decisions import TurnDecision
from filegate.workflows.inputs import Decision

log = logging.getLogger("filegate.ui")

ClientFactory = Callable[[], Awaitable[Client]]
"""Connects a Temporal client; called once, on the server's own event loop."""

REFRESH_MS = 2000

PAGE_BUDGET = 0.5
"""Seconds the first page waits for workflows' answers. A stuck workflow costs
:data:`LISTING_TIMEOUT` (1.5 s); the page must not: it renders what answered
by then, marks the rest as not answered yet, and its first refresh (sent at
once) brings them in or names them unreachable."""

WEB_URL_ENV = "FILEGATE_UI_TEMPORAL_WEB_URL"
"""Base URL of the Temporal Web UI (``http://127.0.0.1:8233``): cards link each
workflow run there. Unset: no links."""

STATIC = Path(__file__).with_name("static")
SCRIPT = STATIC / "approvals.js"
"""The page's JavaScript, served at ``/static/approvals.js`` (CSP forbids inline script)."""

_TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).with_name("templates")),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
    finalize=shown,
)
"""Every ``{{ }}`` is :func:`~filegate.cli.ui.cards.shown` (hidden characters as
``⟨U+XXXX⟩``) and escaped; ``|raw`` keeps a value exact (an edit field, a data
attribute the script sends back), ``|oneline`` shows tab and newline too (paths, ids)."""
_TEMPLATES.filters["raw"] = Raw
_TEMPLATES.filters["oneline"] = oneline


__all__ = ["PREVIEW_LIMIT", "create_app", "describe_rule", "preview", "serve", "ui_command"]


class ApprovalService:
    """The app's one Temporal client (connected lazily) and its operations."""

    def __init__(self, client_factory: ClientFactory, web_url: str | None = None) -> None:
        self._factory = client_factory
        self._client: Client | None = None
        self._lock = asyncio.Lock()
        self.web_url = web_url

    async def client(self) -> Client:
        async with self._lock:
            if self._client is None:
                self._client = await self._factory()
            return self._client

    async def pending(self) -> list[dict[str, Any]]:
        return (await self.listing())[0]

    async def listing(
        self, soft_deadline: float | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Pending approvals (enriched) and the workflows that did not answer in time."""
        client = await self.client()
        found = await approval_listing(client, soft_deadline=soft_deadline)
        cards = [enrich(a, self.web_url, client.namespace) for a in found.approvals]
        mark_turns(cards)  # "Approve all N" per turn (cli/ui/turns.py)
        mark_scopes(cards)  # what "remember" would grant (cli/ui/grants.py)
        return cards, found.unreachable

    async def decided(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The latest decisions (newest first) and the workflows that did not answer."""
        client = await self.client()
        found = await decided_listing(client)
        rows = [enrich_decision(d, self.web_url, client.namespace) for d in found.decisions]
        return rows, found.unreachable

    async def decide(self, workflow_id: str, decision: Decision) -> dict[str, Any]:
        """Send ``decision`` as the ``decide`` update; raise ``ValueError`` on refusal."""
        payload = decision.model_dump(mode="json", exclude_none=True)
        return await self._update(workflow_id, DECIDE_UPDATE, payload, f"approval {decision.id}")

    async def decide_turn(self, workflow_id: str, decision: TurnDecision) -> dict[str, Any]:
        """Send ``decision`` as the ``decide_turn`` update; raise ``ValueError`` on refusal."""
        payload = decision.model_dump(mode="json", exclude_none=True)
        return await self._update(workflow_id, DECIDE_TURN_UPDATE, payload, f"turn {decision.turn}")

    async def _update(
        self, workflow_id: str, update: str, payload: dict[str, Any], what: str
    ) -> dict[str, Any]:
        """One decision update: a refusal is ``ValueError``, an unreachable run ``LookupError``."""
        client = await self.client()
        handle = client.get_workflow_handle(workflow_id)
        # Whatever the outcome (applied, bounced with a fresh preview), the cards
        # this page shows next are asked anew.
        forget_cards(client, workflow_id)
        try:
            ack: dict[str, Any] = await handle.execute_update(update, payload)
        except WorkflowUpdateFailedError as exc:
            raise ValueError(failure_text(exc)) from None
        except RPCError as exc:
            raise LookupError(
                f"{what}: cannot reach workflow {workflow_id}: {exc.message}"
            ) from None
        return ack


_Model = TypeVar("_Model", Decision, TurnDecision)

IDENTITY_FIELDS = ("reviewer", "via")
"""Set from the authenticated caller, never from the request body."""


def _parse_decision(body: Any, reviewer: Reviewer) -> tuple[str, Decision]:
    """``{"workflow_id", "id", "decision", "args"?, "reason"?, "message"?}`` -> Decision.

    Who decided comes from the guard's ``reviewer``; a body that names a
    reviewer or channel itself is refused rather than silently corrected.
    """
    workflow_id, fields = _decision_fields(body, reviewer)
    return workflow_id, _validated(Decision, fields)


def _parse_turn_decision(body: Any, reviewer: Reviewer) -> tuple[str, TurnDecision]:
    """``{"workflow_id", "turn", "decision", "fingerprints", "reason"?}`` -> TurnDecision,
    checked as :func:`_parse_decision` checks a single one."""
    workflow_id, fields = _decision_fields(body, reviewer)
    return workflow_id, _validated(TurnDecision, fields)


def _decision_fields(body: Any, reviewer: Reviewer) -> tuple[str, dict[str, Any]]:
    """The workflow id and the decision's fields, stamped with ``reviewer``."""
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
    # Recorded as shown: the workflow refuses hidden characters in an identity,
    # and a name spelled out (``ana⟨U+202E⟩``) is what every reader sees anyway.
    fields.update(reviewer=visible(reviewer.who, layout=False), via=reviewer.via)
    return workflow_id, fields


def _validated(model: type[_Model], fields: dict[str, Any]) -> _Model:
    """``fields`` as ``model``; what is wrong with them as one ValueError line."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(problems) from None


def _decision_text(ack: dict[str, Any], workflow_id: str, reviewer: Reviewer) -> str:
    """The line the page shows for an accepted decision."""
    by = f"{ack.get('reviewer', reviewer.who)} via {ack.get('via', reviewer.via)}"
    text = f"{ack['decision']}: approval {ack['id']} of {workflow_id} (by {by})"
    if ack.get("changed_since_preview"):
        text += (
            " - but the file changed since the preview you saw: nothing ran, the approval"
            " is still open with a fresh preview"
        )
    elif ack.get("grant"):
        text += f"; remembered as {grant_line(ack['grant'])}"
    return text


def _edit_request(body: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``{"tool", "original", "args"}`` of ``/api/edit-preview``, checked."""
    if not isinstance(body, dict) or not isinstance(body.get("tool"), str):
        raise ValueError("the body must be a JSON object with a tool")
    original, args = body.get("original"), body.get("args")
    if not isinstance(original, dict) or not isinstance(args, dict):
        raise ValueError("original and args must be JSON objects")
    return body["tool"], original, args


def _page_error(text: str, status: int) -> JSONResponse:
    """A refusal the page shows on the card (validator text may quote the model's args)."""
    return JSONResponse(page_json({"ok": False, "error": text}), status)


def create_app(
    client_factory: ClientFactory, access: UiAccess, *, temporal_web_url: str | None = None
) -> GuardMiddleware:
    """The approval UI as an ASGI app behind its guard; ``client_factory`` connects
    to Temporal, ``access`` says who may use the UI and from where, and
    ``temporal_web_url`` (default: env ``FILEGATE_UI_TEMPORAL_WEB_URL``) is the
    Temporal Web UI that cards link each run to."""
    web_url = temporal_web_url if temporal_web_url is not None else os.environ.get(WEB_URL_ENV)
    service = ApprovalService(client_factory, web_url or None)
    page = _TEMPLATES.get_template("approvals.html")
    cards = _TEMPLATES.get_template("approval_cards.html")
    decided = _TEMPLATES.get_template("decided.html")
    diff = _TEMPLATES.get_template("edit_preview.html")
    script = SCRIPT.read_bytes()

    async def index(request: Request) -> Response:
        approvals, unreachable = await service.listing(soft_deadline=PAGE_BUDGET)
        html = page.render(
            approvals=approvals,
            unreachable=unreachable,
            timeout=LISTING_TIMEOUT,
            refresh_ms=REFRESH_MS,
            csrf_token=access.csrf_token,
            incomplete=any(u.get("waiting") for u in unreachable),
            web_url=service.web_url,
        )
        return HTMLResponse(html)

    async def javascript(request: Request) -> Response:
        return Response(script, media_type="text/javascript; charset=utf-8")

    async def fragment(request: Request) -> Response:
        approvals, unreachable = await service.listing()
        html = cards.render(approvals=approvals, unreachable=unreachable, timeout=LISTING_TIMEOUT)
        return HTMLResponse(html)

    async def decided_fragment(request: Request) -> Response:
        rows, unreachable = await service.decided()
        return HTMLResponse(decided.render(decisions=rows, unreachable=unreachable))

    async def api_approvals(request: Request) -> Response:
        cards, unreachable = await service.listing()
        # The list stays the body (scripts read it); a header says how many workflows
        # did not answer, since one of them may be waiting for a human.
        unanswered = {"X-Filegate-Unanswered": str(len(unreachable))}
        return JSONResponse(cards, headers=unanswered)

    async def api_decided(request: Request) -> Response:
        return JSONResponse((await service.decided())[0])

    async def api_edit_preview(request: Request) -> Response:
        try:
            tool, original, args = _edit_request(await request.json())
        except json.JSONDecodeError:
            return _page_error("the body is not valid JSON", 400)
        except ValueError as exc:
            return _page_error(str(exc), 400)
        edited = edited_preview(tool, original, args)
        html = diff.render(p=edited)
        return JSONResponse(page_json({"ok": True, "changed": edited["changed"], "html": html}))

    async def send_decision(
        request: Request,
        parse: Callable[[Any, Reviewer], tuple[str, Any]],
        send: Callable[[str, Any], Awaitable[dict[str, Any]]],
        describe: Callable[[dict[str, Any], str, Reviewer], str],
    ) -> Response:
        """One decision endpoint: parse the body, send the update, answer the page."""
        reviewer = reviewer_of(request.scope)
        try:
            workflow_id, decision = parse(await request.json(), reviewer)
        except json.JSONDecodeError:
            return _page_error("the body is not valid JSON", 400)
        except ValueError as exc:
            return _page_error(str(exc), 400)
        try:
            ack = await send(workflow_id, decision)
        except ValueError as exc:
            return _page_error(f"refused: {exc}", 409)
        except LookupError as exc:
            return _page_error(str(exc), 404)
        text = describe(ack, workflow_id, reviewer)
        log.info("%s", text)
        changed = bool(ack.get("changed_since_preview"))
        answer = {"ok": True, "ack": ack, "message": text, "changed": changed}
        return JSONResponse(page_json(answer))  # the page shows message and ack

    async def api_decide(request: Request) -> Response:
        return await send_decision(request, _parse_decision, service.decide, _decision_text)

    async def api_decide_turn(request: Request) -> Response:
        return await send_decision(
            request,
            _parse_turn_decision,
            service.decide_turn,
            lambda ack, workflow_id, _reviewer: turn_decision_text(ack, workflow_id),
        )

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/fragment", fragment),
            Route("/decided", decided_fragment),
            Route("/static/approvals.js", javascript),
            Route("/api/approvals", api_approvals),
            Route("/api/decided", api_decided),
            Route("/api/edit-preview", api_edit_preview, methods=["POST"]),
            Route("/api/decide", api_decide, methods=["POST"]),
            Route("/api/decide-turn", api_decide_turn, methods=["POST"]),
            *grant_routes(service.client, _TEMPLATES),  # the Grants tab, revoke
        ],
        exception_handlers={RPCError: _unreachable, KeyError: _unreadable},
    )
    return GuardMiddleware(app, access)


async def _unreachable(request: Request, exc: Exception) -> Response:
    """Temporal down or restarting: one line (503, the page retries), not a traceback."""
    if not isinstance(exc, RPCError):
        raise exc
    return _page_error(f"Temporal is unreachable ({exc.message}): try again shortly", 503)


async def _unreadable(request: Request, exc: Exception) -> Response:
    """An answer stored in S3 that this UI cannot read: the fix, in one line."""
    reason = undecodable(exc)
    if reason is None:
        raise exc
    return _page_error(f"a workflow's {reason}", 502)


def login_url(host: str, port: int, access: UiAccess) -> str:
    """The URL a reviewer opens once: it trades the token for the session cookie."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/?{urlencode({TOKEN_QUERY: access.token})}"


def uvicorn_server(app: Any, host: str, port: int) -> uvicorn.Server:
    """A uvicorn server for ``app`` (run it with ``serve()`` or ``run()`` in a thread).

    ``proxy_headers`` is off: uvicorn would otherwise believe ``X-Forwarded-For``
    from 127.0.0.1 and rewrite the client address, so any local process could
    pose as a trusted proxy and name any reviewer. Which proxies are believed
    is the guard's business (``FILEGATE_UI_TRUSTED_PROXIES``), by their own address.
    """
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", lifespan="off", proxy_headers=False
    )
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
            access = UiAccess.for_address(args.host)  # FILEGATE_UI_* (docs/configuration.md)
        except ValueError as exc:
            raise CliError(str(exc), 2) from None
        if is_listening(args.host, args.port):
            raise port_in_use(args.host, args.port, "--port")
        client = await target_from(args).connect()  # fail now, not on the first page
    except ConfigError as exc:  # CliError, or a connection / S3 failure
        print(f"filegate: {exc}", file=sys.stderr, flush=True)
        return exc.code

    async def reuse() -> Client:
        return client

    await serve(reuse, access, args.host, args.port)
    return 0
