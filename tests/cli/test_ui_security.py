"""Attacks on the approval boundary, end to end: a real uvicorn, a real pending approval.

Each attack is a request a hostile web page (or a DNS-rebinding page, or
anyone on the network) could make. Every one must be refused *and* leave the
approval pending with nothing written. Then the page's own flow (session
cookie from the token URL, the CSRF token from the page, JSON) decides, and
the decision records who made it and through what.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from temporalio.client import Client, WorkflowHandle

from filegate.cli.ui.app import create_app
from filegate.cli.ui.web_guard import CSRF_HEADER, SESSION_COOKIE
from filegate.devstack.servers import TemporalDevServer
from filegate.workflows import AgentWorkflow
from tests.ui_support import (
    REVIEWER,
    TOKEN,
    agent_stack,
    client_factory,
    pending,
    served,
    tool_results,
    ui_access,
    write_call,
)

pytestmark = pytest.mark.services

APPROVAL_ID = re.compile(r"[0-9a-f]{16}")


@pytest.fixture
def ui_url(temporal_server: TemporalDevServer) -> Iterator[str]:
    with served(create_app(client_factory(temporal_server), ui_access())) as url:
        yield url


async def logged_in(url: str) -> httpx.AsyncClient:
    """A browser-like client that opened the printed login URL (holds the session cookie)."""
    client = httpx.AsyncClient(base_url=url, timeout=20)
    login = await client.get("/", params={"token": TOKEN}, follow_redirects=True)
    assert login.status_code == 200, login.text
    assert SESSION_COOKIE in client.cookies
    return client


def csrf_from(page: str) -> str:
    found = re.search(r'<meta name="csrf-token" content="([0-9a-f]+)">', page)
    assert found, "the page carries no CSRF token"
    return found.group(1)


async def still_pending(handle: WorkflowHandle[Any, Any], approval_id: str, root: Path) -> None:
    [approval] = await pending(handle, 1)
    assert approval.id == approval_id
    assert not (root / "docs").exists(), "a refused request let the call run"


async def test_attacks_are_refused_then_the_page_decides(
    ui_url: str, temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    async with agent_stack(temporal_client, root, tmp_path / "journal") as agents:
        handle = await agents.start(write_call("w1", "/docs/owned.md", "attacker text\n"))
        [approval] = await pending(handle, 1)
        assert APPROVAL_ID.fullmatch(approval.id), f"guessable approval id {approval.id!r}"
        body = {"workflow_id": handle.id, "id": approval.id, "decision": "approve"}
        raw = httpx.AsyncClient(base_url=ui_url, timeout=20)
        browser = await logged_in(ui_url)
        try:
            # A cross-origin "simple" request (no preflight) riding the session cookie.
            cross = await browser.post(
                "/api/decide",
                content=httpx.Request("POST", ui_url, json=body).content,
                headers={"Content-Type": "text/plain", "Origin": "http://evil.example"},
            )
            assert cross.status_code in (403, 415), cross.text
            await still_pending(handle, approval.id, root)

            # An HTML form posted at the UI.
            form = await browser.post(
                "/api/decide",
                content=urlencode(body).encode(),
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            assert form.status_code == 415, form.text
            await still_pending(handle, approval.id, root)

            # DNS rebinding: the right token does not help under a foreign Host.
            bearer = {"Authorization": f"Bearer {TOKEN}", "Host": "evil.example"}
            rebound_page = await raw.get("/", headers=bearer)
            rebound = await raw.post("/api/decide", json=body, headers=bearer)
            assert rebound_page.status_code == 421 and rebound.status_code == 421
            await still_pending(handle, approval.id, root)

            # No credential at all.
            assert (await raw.get("/")).status_code == 401
            assert (await raw.get("/api/approvals")).status_code == 401
            assert (await raw.get("/fragment")).status_code == 401
            assert (await raw.post("/api/decide", json=body)).status_code == 401
            assert (await raw.get("/", params={"token": "x" * 32})).status_code == 401
            await still_pending(handle, approval.id, root)

            # The cookie but no CSRF token (JSON, even same-origin).
            no_csrf = await browser.post(
                "/api/decide", json=body, headers={"Origin": ui_url.rstrip("/")}
            )
            assert no_csrf.status_code == 403 and "CSRF" in no_csrf.text
            # The CSRF token but from a foreign origin.
            page = await browser.get("/")
            csrf = csrf_from(page.text)
            foreign = await browser.post(
                "/api/decide",
                json=body,
                headers={CSRF_HEADER: csrf, "Origin": "http://evil.example"},
            )
            assert foreign.status_code == 403, foreign.text
            await still_pending(handle, approval.id, root)

            # The page is served with the protections that make the rest hold.
            policy = page.headers["content-security-policy"]
            assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
            assert page.headers["x-frame-options"] == "DENY"
            assert not re.search(r"<script(?![^>]*\bsrc=)", page.text), "inline script"
            script = await browser.get("/static/approvals.js")
            assert script.status_code == 200
            assert script.headers["content-type"].startswith("text/javascript")
            assert CSRF_HEADER in script.text.lower() and "application/json" in script.text
            assert (await raw.get("/static/approvals.js")).status_code == 401

            # The page's own flow: cookie + CSRF header + JSON, same origin.
            decided = await browser.post(
                "/api/decide",
                json=body,
                headers={
                    CSRF_HEADER: csrf,
                    "Origin": ui_url.rstrip("/"),
                    "Sec-Fetch-Site": "same-origin",
                },
            )
            assert decided.status_code == 200, decided.text
            ack = decided.json()["ack"]
            assert ack["reviewer"] == REVIEWER and ack["via"] == "ui"
            assert f"by {REVIEWER} via ui" in decided.json()["message"]
            status = await handle.query(AgentWorkflow.status)
        finally:
            await browser.aclose()
            await raw.aclose()
        result = await handle.result()
    [record] = [d for d in status.decided if d.id == approval.id]
    assert (record.decision, record.reviewer, record.via) == ("approve", REVIEWER, "ui")
    assert record.tool == "write_file" and record.tool_call_id == "w1"
    out = tool_results(result)["w1"]
    assert out["status"] == "success" and f"approved by {REVIEWER} via ui" in out["content"]
    assert (root / "docs" / "owned.md").read_text() == "attacker text\n"
    # The reviewer is in history too: the update's own arguments.
    history = await handle.fetch_history()
    updates = [
        e.workflow_execution_update_accepted_event_attributes.accepted_request.input
        for e in history.events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    [accepted] = [u for u in updates if u.name == "decide"]
    payload = accepted.args.payloads[0].data.decode()
    assert f'"reviewer":"{REVIEWER}"' in payload.replace(" ", "")
    assert '"via":"ui"' in payload.replace(" ", "")


async def test_api_callers_use_the_bearer_token(
    ui_url: str, temporal_client: Client, tmp_path: Path
) -> None:
    """Scripts use ``Authorization: Bearer``: no cookie, no CSRF, still JSON only."""
    root = tmp_path / "ws"
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        agent_stack(temporal_client, root, tmp_path / "journal") as agents,
        httpx.AsyncClient(base_url=ui_url, headers=bearer, timeout=20) as api,
    ):
        handle = await agents.start(write_call("w1", "/docs/api.md", "by api\n"))
        [approval] = await pending(handle, 1)
        body = {"workflow_id": handle.id, "id": approval.id, "decision": "reject"}
        # A body cannot claim to be someone else.
        forged = await api.post("/api/decide", json={**body, "reviewer": "root", "via": "cli"})
        assert forged.status_code == 400 and "reviewer" in forged.text
        await still_pending(handle, approval.id, root)
        done = await api.post("/api/decide", json={**body, "reason": "no"})
        assert done.status_code == 200, done.text
        assert done.json()["ack"]["via"] == "api"
        result = await handle.result()
    out = tool_results(result)["w1"]
    assert out["status"] == "error" and "via api" in out["content"] and "no" in out["content"]


HOSTILE = '"><script src="https://evil.example/x.js"></script><img src=x onerror=alert(1)>'
"""Model-chosen text aimed at the card: out of the attribute, into markup."""


async def test_model_text_is_inert_and_the_new_endpoints_are_guarded(
    ui_url: str, temporal_client: Client, tmp_path: Path
) -> None:
    """What the model chose (its text before the call, the arguments, the preview's
    diff) reaches the card escaped, in text and in attributes; the recent-decisions
    and edit-preview endpoints need the login, and the edit preview (a POST) the
    CSRF token as well."""
    root = tmp_path / "ws"
    async with agent_stack(temporal_client, root, tmp_path / "journal") as agents:
        handle = await agents.start(
            write_call("w1", "/docs/x.md", f"{HOSTILE}\n"), said=f"Now: {HOSTILE}"
        )
        [approval] = await pending(handle, 1)
        raw = httpx.AsyncClient(base_url=ui_url, timeout=20)
        browser = await logged_in(ui_url)
        try:
            fragment = (await browser.get("/fragment")).text
            assert f'data-id="{approval.id}"' in fragment
            assert "<script" not in fragment and "<img" not in fragment
            assert "&lt;script src=&#34;https://evil.example/x.js&#34;&gt;" in fragment
            for path in ("/decided", "/api/decided"):
                assert (await raw.get(path)).status_code == 401
                assert (await browser.get(path)).status_code == 200
            edit = {"tool": "write_file", "original": approval.args, "args": approval.args}
            assert (await raw.post("/api/edit-preview", json=edit)).status_code == 401
            no_csrf = await browser.post("/api/edit-preview", json=edit)
            assert no_csrf.status_code == 403 and "CSRF" in no_csrf.text
            csrf = csrf_from((await browser.get("/")).text)
            shown = await browser.post("/api/edit-preview", json=edit, headers={CSRF_HEADER: csrf})
            assert shown.status_code == 200 and shown.json()["changed"] == []
            assert "<script" not in shown.json()["html"]
            bad = await browser.post(
                "/api/edit-preview", json={"tool": 1}, headers={CSRF_HEADER: csrf}
            )
            assert bad.status_code == 400
            await still_pending(handle, approval.id, root)
        finally:
            await browser.aclose()
            await raw.aclose()
        await handle.terminate("test over")
