"""Grants on the reviewer's desk: the "Grants" tab, its revoke buttons, and "remember".

A grant is an approval a reviewer asked to remember (docs/approvals.md,
"Grants"). The tab lists the grants of running workflows: the same
visibility-then-parallel-queries scheme as the other tabs
(:mod:`filegate.cli.ui.listing`), over workflows that decided something
(``FilegateDecidedApprovals > 0``, a grant needs a decision) or do not
publish the counter, each asked for its ``grants`` query. A revoke is the
workflow's ``revoke`` update, sent with the guard's reviewer; its validator
refuses an unknown or already revoked id at once.

Each approval card also offers "remember" with the approve button; the card
shows the scope a grant would get by default (:func:`mark_scopes`), which the
reviewer may narrow with a pattern.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from jinja2 import Environment
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError

from filegate.cli.errors import failure_text
from filegate.cli.grant_options import grant_line, shown_status
from filegate.cli.ui.cards import page_json
from filegate.cli.ui.listing import (
    NOT_OURS,
    RUNNING,
    ask,
    ask_all,
    candidates,
    late_entry,
    waiting_or_unknown,
)
from filegate.cli.ui.web_guard import reviewer_of
from filegate.kernel.wire import DECIDED_ATTRIBUTE, GRANTS_QUERY, REVOKE_UPDATE
from filegate.workflows.approvals.grant_models import Grant, scope_text
from filegate.workflows.approvals.grants import grant_scope, grant_search

GRANTS_FRAGMENT = "/grants"
GRANTS_API = "/api/grants"
REVOKE_API = "/api/revoke"


@dataclass
class GrantListing:
    """The grants of running workflows (newest first) and the workflows that did not answer."""

    grants: list[dict[str, Any]] = field(default_factory=list)
    unreachable: list[dict[str, Any]] = field(default_factory=list)


def grant_row(grant: dict[str, Any], workflow_id: str, run_id: str) -> dict[str, Any]:
    """One row of the tab: the grant, where it lives, its scope and status now."""
    shown = Grant.model_validate(grant)
    return {
        **grant,
        "workflow_id": workflow_id,
        "run_id": run_id,
        "status": shown_status(grant),
        "scope": shown.scope(),
        "lasting": shown.lasting(),
    }


async def _grant_listing(client: Client) -> GrantListing:
    narrowed = f"{RUNNING} AND {waiting_or_unknown(DECIDED_ATTRIBUTE)}"
    found = await candidates(client, DECIDED_ATTRIBUTE, narrowed, RUNNING)
    answers = await ask_all(found, lambda wf: ask(client, wf, GRANTS_QUERY))
    listing = GrantListing()
    for wf, answer in zip(found, answers, strict=True):
        if answer is None or isinstance(answer, str):
            if answer != NOT_OURS:
                listing.unreachable.append(late_entry(wf, answer))
            continue
        listing.grants.extend(
            grant_row(g, wf.workflow_id, wf.run_id) for g in answer if isinstance(g, dict)
        )
    listing.grants.sort(key=lambda g: str(g.get("created_at", "")), reverse=True)
    return listing


def _default_scope(card: dict[str, Any]) -> str | None:
    """What "remember" on this card would grant when the reviewer gives no pattern."""
    tool = str(card.get("tool"))
    try:
        args = card.get("args") or {}
        kind, pattern = grant_scope(tool, args, card.get("rule"), None)
    except ValueError:
        return None
    return scope_text(tool, kind, pattern, grant_search(tool, args))


def mark_scopes(cards: list[dict[str, Any]]) -> None:
    """Give every card its ``grant_scope`` (the remember control's placeholder)."""
    for card in cards:
        card["grant_scope"] = _default_scope(card)


def _answer(body: dict[str, Any], status: int = 200) -> JSONResponse:
    return JSONResponse(page_json(body), status)


def _revocation(body: Any) -> tuple[str, str]:
    """``{"workflow_id", "id"}`` of ``/api/revoke``; who revokes comes from the login."""
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    if "reviewer" in body or "via" in body:
        raise ValueError("reviewer, via: set by the UI from your login, not by the body")
    workflow_id, grant_id = body.get("workflow_id"), body.get("id")
    if not isinstance(workflow_id, str) or not workflow_id:
        raise ValueError("workflow_id is required")
    if not isinstance(grant_id, str) or not grant_id:
        raise ValueError("id is required")
    return workflow_id, grant_id


def grant_routes(client: Callable[[], Awaitable[Client]], templates: Environment) -> list[Route]:
    """The tab's fragment, its JSON, and the revoke endpoint (behind the app's guard)."""
    fragment = templates.get_template("grants.html")

    async def grants_fragment(request: Request) -> Response:
        found = await _grant_listing(await client())
        return HTMLResponse(fragment.render(grants=found.grants, unreachable=found.unreachable))

    async def api_grants(request: Request) -> Response:
        return JSONResponse((await _grant_listing(await client())).grants)

    async def api_revoke(request: Request) -> Response:
        reviewer = reviewer_of(request.scope)
        try:
            workflow_id, grant_id = _revocation(await request.json())
        except json.JSONDecodeError:
            return _answer({"ok": False, "error": "the body is not valid JSON"}, 400)
        except ValueError as exc:
            return _answer({"ok": False, "error": str(exc)}, 400)
        handle = (await client()).get_workflow_handle(workflow_id)
        revocation = {"id": grant_id, "reviewer": reviewer.who, "via": reviewer.via}
        try:
            grant: dict[str, Any] = await handle.execute_update(
                REVOKE_UPDATE, revocation, result_type=dict[str, Any]
            )
        except WorkflowUpdateFailedError as exc:
            return _answer({"ok": False, "error": f"refused: {failure_text(exc)}"}, 409)
        except RPCError as exc:
            text = f"grant {grant_id}: cannot reach workflow {workflow_id}: {exc.message}"
            return _answer({"ok": False, "error": text}, 404)
        text = f"revoked: {grant_line(grant)} (in {workflow_id}, by {grant.get('revoked_by')})"
        return _answer({"ok": True, "message": text, "grant": grant})

    return [
        Route(GRANTS_FRAGMENT, grants_fragment),
        Route(GRANTS_API, api_grants),
        Route(REVOKE_API, api_revoke, methods=["POST"]),
    ]
