"""The approval UI's guard on its own: Host allow-list, authentication, CSRF, headers.

Driven through httpx's ASGI transport against a two-route app; the end-to-end
attacks on a real uvicorn with a pending approval are in test_ui_security.py.
"""

from __future__ import annotations

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from filegate.cli.ui.web_guard import (
    CSRF_HEADER,
    SESSION_COOKIE,
    GuardMiddleware,
    UiAccess,
    reviewer_of,
)

TOKEN = "t" * 32


def _app(access: UiAccess) -> GuardMiddleware:
    async def who(request: Request) -> JSONResponse:
        reviewer = reviewer_of(request.scope)
        return JSONResponse({"who": reviewer.who, "via": reviewer.via})

    inner = Starlette(routes=[Route("/", who), Route("/api/decide", who, methods=["POST"])])
    return GuardMiddleware(inner, access)


@pytest.fixture
def access() -> UiAccess:
    return UiAccess.for_address("127.0.0.1", {"FILEGATE_UI_REVIEWER": "ana"}, token=TOKEN)


def _client(access: UiAccess, **kwargs: object) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=_app(access), client=("127.0.0.1", 5555))  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080", **kwargs)  # type: ignore[arg-type]


async def test_no_credential_is_refused_and_the_token_url_logs_in(access: UiAccess) -> None:
    async with _client(access) as client:
        assert (await client.get("/")).status_code == 401
        login = await client.get("/", params={"token": TOKEN})
        assert login.status_code == 303 and login.headers["location"] == "/"
        cookie = login.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert TOKEN not in cookie  # the cookie is derived, not the token itself
        page = await client.get("/")  # the client now holds the session cookie
        assert page.json() == {"who": "ana", "via": "ui"}
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff"
    async with _client(access) as client:
        assert (await client.get("/", params={"token": "wrong" * 8})).status_code == 401
        forged = {SESSION_COOKIE: access.derived("something else")}
        client.cookies.update(forged)
        assert (await client.get("/")).status_code == 401


async def test_health_check_needs_no_credential_but_says_nothing(access: UiAccess) -> None:
    async with _client(access) as client:
        health = await client.get("/healthz")
        assert health.status_code == 200 and health.json() == {"ok": True}
        assert (await client.post("/healthz", json={})).status_code == 401
        assert (await client.get("/healthz", headers={"Host": "evil.example"})).status_code == 421


async def test_foreign_host_is_refused_even_with_a_valid_token(access: UiAccess) -> None:
    async with _client(access) as client:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert (await client.get("/", headers=bearer)).status_code == 200
        rebound = await client.get("/", headers={**bearer, "Host": "evil.example"})
        assert rebound.status_code == 421


async def test_decisions_need_json_csrf_and_same_origin(access: UiAccess) -> None:
    good = {"Content-Type": "application/json", CSRF_HEADER: access.csrf_token}
    async with _client(access) as client:
        assert (await client.get("/", params={"token": TOKEN})).status_code == 303
        ok = await client.post("/api/decide", headers=good, content=b"{}")
        assert ok.status_code == 200
        simple = {"Content-Type": "text/plain", CSRF_HEADER: access.csrf_token}
        assert (await client.post("/api/decide", headers=simple, content=b"{}")).status_code == 415
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        assert (await client.post("/api/decide", headers=form, content=b"a=b")).status_code == 415
        no_csrf = {"Content-Type": "application/json"}
        assert (await client.post("/api/decide", headers=no_csrf, content=b"{}")).status_code == 403
        evil = {**good, "Origin": "http://evil.example"}
        assert (await client.post("/api/decide", headers=evil, content=b"{}")).status_code == 403
        cross = {**good, "Sec-Fetch-Site": "cross-site"}
        assert (await client.post("/api/decide", headers=cross, content=b"{}")).status_code == 403
        same = {**good, "Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"}
        assert (await client.post("/api/decide", headers=same, content=b"{}")).status_code == 200


async def test_bearer_callers_need_no_csrf_but_still_json(access: UiAccess) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with _client(access) as client:
        done = await client.post("/api/decide", headers=bearer, content=b"{}")
        assert done.json() == {"who": "api caller", "via": "api"}


async def test_proxy_user_header_is_believed_only_from_trusted_proxies() -> None:
    env = {"FILEGATE_UI_TRUSTED_PROXIES": "127.0.0.1", "FILEGATE_UI_USER_HEADER": "X-User"}
    trusted = UiAccess.for_address("127.0.0.1", env, token=TOKEN)
    async with _client(trusted) as client:
        assert (await client.get("/", headers={"X-User": "bo"})).json() == {
            "who": "bo",
            "via": "proxy",
        }
    untrusted = UiAccess.for_address(
        "127.0.0.1", {**env, "FILEGATE_UI_TRUSTED_PROXIES": "10.0.0.9"}, token=TOKEN
    )
    async with _client(untrusted) as client:
        assert (await client.get("/", headers={"X-User": "bo"})).status_code == 401


def test_bad_settings_fail_with_one_clear_line() -> None:
    with pytest.raises(ValueError, match="at least 16"):
        UiAccess.for_address("127.0.0.1", {"FILEGATE_UI_TOKEN": "short"})
    with pytest.raises(ValueError, match="USER_HEADER"):
        UiAccess.for_address("127.0.0.1", {"FILEGATE_UI_TRUSTED_PROXIES": "10.0.0.1"})
    random_tokens = {UiAccess.for_address("127.0.0.1", {}).token for _ in range(3)}
    assert len(random_tokens) == 3 and all(len(t) >= 32 for t in random_tokens)
