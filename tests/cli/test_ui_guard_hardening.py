"""The UI guard against the attacks of issue 26 (item 5), on a real uvicorn over real HTTP.

Each test is one way in that used to work: a login redirect to another site,
an ``Origin`` on another port, a ``Host`` with junk the allow-list check cut
off, a websocket that skipped the guard, a session cookie that never expired
and could not be taken back, and hidden characters (U+202E and friends) that
made a card read differently from the call's bytes. The guard's own tests
(test_web_guard.py) drive it in-process; these go through a socket.
"""

from __future__ import annotations

import asyncio
import html
import http.client
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
import uvicorn
import websockets.sync.client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket
from temporalio.client import Client
from websockets.exceptions import InvalidStatus

from filegate.cli.ui.app import create_app
from filegate.cli.ui.web_guard import (
    CSRF_HEADER,
    SESSION_COOKIE,
    GuardMiddleware,
    Message,
    Scope,
    UiAccess,
    reviewer_of,
)
from filegate.devstack.servers import TemporalDevServer
from tests.ui_support import (
    TOKEN,
    agent_stack,
    client_factory,
    free_port,
    pending,
    served,
    write_call,
)

BEARER = {"Authorization": f"Bearer {TOKEN}"}


def _access(env: dict[str, str] | None = None) -> UiAccess:
    return UiAccess.for_address(
        "127.0.0.1", {"FILEGATE_UI_REVIEWER": "ana", **(env or {})}, token=TOKEN
    )


def _inner() -> Starlette:
    """Two pages, a decision endpoint and a websocket that would accept anyone."""

    async def who(request: Request) -> JSONResponse:
        reviewer = reviewer_of(request.scope)
        return JSONResponse({"who": reviewer.who, "via": reviewer.via})

    async def socket(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text("opened without the guard")
        await websocket.close()

    return Starlette(
        routes=[
            Route("/", who),
            Route("/docs/{rest:path}", who),
            Route("/api/decide", who, methods=["POST"]),
            WebSocketRoute("/ws", socket),
        ]
    )


@contextmanager
def guarded(env: dict[str, str] | None = None) -> Iterator[str]:
    """The guard in front of :func:`_inner`, on a real uvicorn; yields the base URL."""
    with served(GuardMiddleware(_inner(), _access(env))) as url:
        yield url


def raw_request(
    url: str, target: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, dict[str, str]]:
    """One request sent as written (``http.client`` keeps the target and a given
    ``Host`` as they are); the status and the headers of the answer."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        given = {"Host": parts.netloc, **(headers or {})}
        connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        for name, value in given.items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()


async def _login(client: httpx.AsyncClient) -> httpx.Response:
    login = await client.get("/", params={"token": TOKEN})
    assert login.status_code == 303, login.text
    return login


# ------------------------------------------------------------------ redirect


def test_the_login_redirect_never_leaves_this_ui() -> None:
    """``//evil.example/x?token=`` used to answer ``Location: //evil.example/x``:
    the reviewer, freshly logged in, was sent to another site."""
    with guarded() as url:
        ours = urlsplit(url).netloc
        expected = {
            f"//evil.example/x?token={TOKEN}": "/evil.example/x",
            f"///evil.example/x?token={TOKEN}": "/evil.example/x",
            f"/%2F%2Fevil.example/x?token={TOKEN}": "/evil.example/x",
            f"/\\evil.example/x?token={TOKEN}": "/",
            f"/%5Cevil.example?token={TOKEN}": "/",
            f"/%09/evil.example?token={TOKEN}": "/",
            f"/%0a/evil.example?token={TOKEN}": "/",
            f"http://evil.example/x?token={TOKEN}": None,  # absolute form: the server's parse
            f"/docs/ok?token={TOKEN}&view=2": "/docs/ok?view=2",
            f"/docs/a%20b?token={TOKEN}": "/docs/a%20b",
        }
        for target, location in expected.items():
            status, headers = raw_request(url, target)
            if status != 303:
                assert status == 400, (target, status)  # the server refused the request line
                continue
            where = headers["location"]
            assert where.startswith("/") and where[1:2] not in ("/", "\\"), (target, where)
            assert urlsplit(urljoin(url, where)).netloc == ours, (target, where)
            if location is not None:
                assert where == location, (target, where)


# ------------------------------------------------------------------ origin


async def test_an_origin_on_another_port_is_cross_origin() -> None:
    """``Origin: http://127.0.0.1:<other port>`` passed: only the host was compared.
    Scheme, host and port (80 and 443 made explicit) are compared now."""
    with guarded() as url:
        port = urlsplit(url).port
        other = port + 1 if port and port < 65535 else 1024
        async with httpx.AsyncClient(base_url=url, timeout=10) as browser:
            await _login(browser)
            good = {"Content-Type": "application/json", CSRF_HEADER: _access().csrf_token}

            async def post(origin: str) -> int:
                headers = {**good, "Origin": origin}
                return (
                    await browser.post("/api/decide", headers=headers, content=b"{}")
                ).status_code

            assert await post(f"http://127.0.0.1:{port}") == 200
            assert await post(f"http://localhost:{port}") == 200  # an allowed name, same port
            assert await post(f"https://127.0.0.1:{port}") == 200  # a TLS proxy in front
            for foreign in (
                f"http://127.0.0.1:{other}",
                "http://127.0.0.1",  # port 80
                "http://127.0.0.1:80",
                f"https://127.0.0.1:{other}",
                f"http://127.0.0.1:{port}/",
                f"http://ana@127.0.0.1:{port}",
                f"ws://127.0.0.1:{port}",
                f"http://127.0.0.1.:{port}",
                "null",
                "http://evil.example",
            ):
                assert await post(foreign) == 403, foreign
        async with httpx.AsyncClient(base_url=url, timeout=10, headers=BEARER) as api:
            # Host without a port: the origin's default port is the one to match.
            plain = {"Content-Type": "application/json", "Host": "localhost"}
            for origin, status in (
                ("http://localhost", 200),
                ("https://localhost:443", 200),
                ("http://localhost:8080", 403),
            ):
                answer = await api.post(
                    "/api/decide", headers={**plain, "Origin": origin}, content=b"{}"
                )
                assert answer.status_code == status, origin


# ------------------------------------------------------------------ host


def test_host_is_host_and_port_and_nothing_else() -> None:
    """``Host: 127.0.0.1:0``, ``127.0.0.1:80junk`` or ``[::1]@evil`` passed: whatever
    followed the host was cut off unread. Only ``host[:port]`` passes now."""
    with guarded() as url:
        port = urlsplit(url).port
        accepted = (
            f"127.0.0.1:{port}",
            "127.0.0.1",
            "localhost",
            f"LocalHost:{port}",
            f"[::1]:{port}",
            "[0:0:0:0:0:0:0:1]",
        )
        refused = (
            "127.0.0.1:0",
            "127.0.0.1:65536",
            "127.0.0.1:",
            f"127.0.0.1:{port}x",
            f"127.0.0.1:+{port}",
            f"127.0.0.1:0{port}",
            f"127.0.0.1:{port}:{port}",
            f"ana@127.0.0.1:{port}",
            f"127.0.0.1/x:{port}",
            f"127.0.0.1 :{port}",
            f"127.0.0.1 evil.example:{port}",
            "localhost.",
            f"localhost.:{port}",
            "127.0.0.1.",
            "127.1",
            "0127.0.0.1",
            "::1",
            f"[::1]x:{port}",
            "[::1]@evil.example",
            "[::1%25lo]",
            f"[::1]:{port}:1",
            "local_host",
            "",
        )
        for host in refused:
            status, _ = raw_request(url, "/", {"Host": host, **BEARER})
            assert status in (400, 421), (host, status)
        for host in accepted:
            assert raw_request(url, "/", {"Host": host, **BEARER})[0] == 200, host


def test_a_local_process_cannot_pose_as_the_trusted_proxy() -> None:
    """uvicorn believed ``X-Forwarded-For`` from 127.0.0.1 and rewrote the client
    address, so with a remote proxy trusted (here 10.0.0.9) any local process
    could send ``X-Forwarded-For: 10.0.0.9`` and a user header and be that user.
    The UI's server no longer rewrites addresses; the guard trusts by its own."""
    env = {"FILEGATE_UI_TRUSTED_PROXIES": "10.0.0.9", "FILEGATE_UI_USER_HEADER": "X-User"}
    with guarded(env) as url:
        posing = {"X-Forwarded-For": "10.0.0.9", "X-User": "mallory"}
        assert raw_request(url, "/", posing)[0] == 401
    env["FILEGATE_UI_TRUSTED_PROXIES"] = "127.0.0.1"  # a proxy on this host: believed
    with guarded(env) as url:
        assert raw_request(url, "/", {"X-User": "bo"})[0] == 200


# ------------------------------------------------------------------ other protocols


def test_websockets_are_closed_before_they_open() -> None:
    """A websocket went past the guard unchecked: no Host check, no login."""
    with guarded() as url:
        ws_url = url.replace("http://", "ws://") + "ws"
        for headers in ({}, BEARER):
            with (
                pytest.raises(InvalidStatus) as refused,
                websockets.sync.client.connect(ws_url, additional_headers=headers, open_timeout=10),
            ):
                pass
            assert refused.value.response.status_code == 403


async def test_lifespan_still_reaches_the_app_and_other_scopes_do_not() -> None:
    """The server's start and stop pass (a real uvicorn with ``lifespan="on"``);
    a scope of any other type never reaches the app."""
    events: list[str] = []

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        events.append("startup")
        yield
        events.append("shutdown")

    app = GuardMiddleware(Starlette(lifespan=lifespan), _access())
    config = uvicorn.Config(
        app, host="127.0.0.1", port=free_port(), log_level="warning", lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        await asyncio.sleep(0.05)
    assert server.started and events == ["startup"]
    server.should_exit = True
    await asyncio.to_thread(thread.join, 10)
    assert events == ["startup", "shutdown"]

    called: list[str] = []

    async def inner(scope: Scope, receive: Any, send: Any) -> None:
        called.append(scope["type"])

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        return {"type": "webtransport.connect"}

    guard = GuardMiddleware(inner, _access())
    await guard({"type": "webtransport", "path": "/", "headers": []}, receive, send)
    assert called == [] and sent == []


# ------------------------------------------------------------------ sessions


@pytest.mark.slow
async def test_sessions_are_random_expire_and_end_at_logout() -> None:
    """The session cookie was one HMAC of the token: the same for every login,
    valid forever, impossible to take back. Now each login has a random id kept
    server-side with an expiry (``FILEGATE_UI_SESSION_SECONDS``), which is also
    the cookie's ``Max-Age``, and ``POST /logout`` revokes it."""
    access = _access()
    with guarded({"FILEGATE_UI_SESSION_SECONDS": "2"}) as url:
        async with (
            httpx.AsyncClient(base_url=url, timeout=10) as one,
            httpx.AsyncClient(base_url=url, timeout=10) as two,
        ):
            first, second = await _login(one), await _login(two)
            ids = [c.cookies[SESSION_COOKIE] for c in (one, two)]
            assert ids[0] != ids[1] and len(ids[0]) >= 32
            assert access.derived("session") not in ids and TOKEN not in "".join(ids)
            for login in (first, second):
                assert "Max-Age=2" in login.headers["set-cookie"]
            assert (await one.get("/")).status_code == 200
            await asyncio.sleep(2.3)
            assert (await one.get("/")).status_code == 401, "an expired session still works"
            assert (await two.get("/")).status_code == 401

    with guarded() as url:
        async with (
            httpx.AsyncClient(base_url=url, timeout=10) as one,
            httpx.AsyncClient(base_url=url, timeout=10) as two,
        ):
            login = await _login(one)
            await _login(two)
            assert "Max-Age=43200" in login.headers["set-cookie"]  # 12 h by default
            stolen = one.cookies[SESSION_COOKIE]
            json_only = {"Content-Type": "application/json"}
            assert (await one.post("/logout", headers=json_only, content=b"{}")).status_code == 403
            form = {
                "Content-Type": "application/x-www-form-urlencoded",
                CSRF_HEADER: access.csrf_token,
            }
            assert (await one.post("/logout", headers=form, content=b"a=b")).status_code == 415
            foreign = {**json_only, CSRF_HEADER: access.csrf_token, "Origin": "http://evil.example"}
            assert (await one.post("/logout", headers=foreign, content=b"{}")).status_code == 403
            assert (await one.get("/")).status_code == 200  # none of those logged out
            out = await one.post(
                "/logout", headers={**json_only, CSRF_HEADER: access.csrf_token}, content=b"{}"
            )
            assert out.status_code == 200 and out.json()["ok"]
            assert re.search(rf"{SESSION_COOKIE}=;.*Max-Age=0", out.headers["set-cookie"])
            assert SESSION_COOKIE not in one.cookies
            replay = await one.get("/", headers={"Cookie": f"{SESSION_COOKIE}={stolen}"})
            assert replay.status_code == 401, "a revoked session still works"
            assert (await two.get("/")).status_code == 200  # other sessions stay


def test_session_length_is_a_checked_setting() -> None:
    assert _access().session_seconds == 12 * 3600
    assert _access({"FILEGATE_UI_SESSION_SECONDS": "600"}).session_seconds == 600
    for bad in ("0", "-5", "soon", "nan", "inf"):
        with pytest.raises(ValueError, match="FILEGATE_UI_SESSION_SECONDS"):
            _access({"FILEGATE_UI_SESSION_SECONDS": bad})
    with pytest.raises(ValueError, match="ALLOWED_HOSTS"):
        _access({"FILEGATE_UI_ALLOWED_HOSTS": "ui.example/x"})
    assert "ui.example" in _access({"FILEGATE_UI_ALLOWED_HOSTS": "UI.example"}).allowed_hosts


# ------------------------------------------------------------------ hidden characters

RLO = "\u202e"
SNEAKY_PATH = f"/docs/report{RLO}dm.exe\u200b.md"
"""Reads as ``/docs/reportexe.md`` (more or less) on a page that renders U+202E raw."""
SNEAKY_CONTENT = f"rate = 1\n# {RLO}0 = etar\u2028-rate = 0\x1b[2K\n"
"""A comment that displays reversed, a line separator and an ANSI escape."""
HIDDEN = re.compile("[\u202e\u200b\u2028\x1b]")


@pytest.mark.services
async def test_hidden_characters_are_shown_on_cards_and_in_answers(
    temporal_server: TemporalDevServer, temporal_client: Client, tmp_path: Path
) -> None:
    """A diff, a path or an argument with U+202E used to reach the page raw,
    reading differently from its bytes. Every page and every JSON answer the
    page shows now spells such characters out (``⟨U+202E⟩``), while the edit
    form and the JSON API keep the exact bytes."""
    access = UiAccess.for_address("127.0.0.1", {"FILEGATE_UI_REVIEWER": f"ana{RLO}"}, token=TOKEN)
    root = tmp_path / "ws"
    with served(create_app(client_factory(temporal_server), access)) as url:
        async with (
            agent_stack(temporal_client, root, tmp_path / "journal") as agents,
            httpx.AsyncClient(base_url=url, timeout=20) as browser,
        ):
            handle = await agents.start(
                write_call("w1", SNEAKY_PATH, SNEAKY_CONTENT), said=f"see {RLO}"
            )
            [approval] = await pending(handle, 1)
            await _login(browser)
            page = (await browser.get("/")).text
            fragment = (await browser.get("/fragment")).text
            for shown in (page, fragment):
                card = shown[shown.rindex("<article", 0, shown.index(approval.id)) :]
                visible_text = re.sub(
                    r"<textarea[^>]*>.*?</textarea>|<[^>]*>", "", card, flags=re.S
                )
                assert not HIDDEN.search(html.unescape(visible_text)), (
                    "a hidden character is rendered raw"
                )
                assert "report⟨U+202E⟩dm.exe⟨U+200B⟩.md" in card
                assert "# ⟨U+202E⟩0 = etar⟨U+2028⟩" in card and "rate = 0⟨U+001B⟩[2K" in card
                assert "see ⟨U+202E⟩" in card  # what the model said
                assert "contains invisible or control characters" in card
            # The edit form and the data the script sends back keep the bytes.
            textarea = re.search(
                r'<textarea data-arg="content"[^>]*>(.*?)</textarea>', fragment, re.S
            )
            assert textarea and html.unescape(textarea.group(1)) == SNEAKY_CONTENT
            raw_args = re.search(r'data-args="([^"]*)"', fragment)
            assert raw_args and RLO in html.unescape(raw_args.group(1))
            api = (await browser.get("/api/approvals")).json()
            assert [a["args"]["file_path"] for a in api if a["id"] == approval.id] == [SNEAKY_PATH]

            csrf = access.csrf_token
            edited = {**approval.args, "content": f"{RLO}edited\n"}
            body = {"tool": "write_file", "original": approval.args, "args": edited}
            shown_edit = await browser.post(
                "/api/edit-preview", json=body, headers={CSRF_HEADER: csrf}
            )
            assert shown_edit.status_code == 200
            assert (
                not HIDDEN.search(shown_edit.text) and "⟨U+202E⟩edited" in shown_edit.json()["html"]
            )

            refused = await browser.post(
                "/api/decide",
                json={"workflow_id": handle.id, "id": f"nope{RLO}", "decision": "approve"},
                headers={CSRF_HEADER: csrf},
            )
            assert refused.status_code in (400, 404, 409) and not HIDDEN.search(refused.text)
            decide = {"workflow_id": handle.id, "id": approval.id, "decision": "approve"}
            done = await browser.post("/api/decide", json=decide, headers={CSRF_HEADER: csrf})
            assert done.status_code == 200, done.text
            answer = done.json()
            assert not HIDDEN.search(done.text)
            assert (
                answer["ack"]["reviewer"] == "ana⟨U+202E⟩"
                and "ana⟨U+202E⟩ via ui" in answer["message"]
            )
            deadline = time.monotonic() + 20  # the decided counter reaches visibility late
            while "ana⟨U+202E⟩" not in (decided := (await browser.get("/decided")).text):
                assert time.monotonic() < deadline, decided
                await asyncio.sleep(0.3)
            assert RLO not in decided
            await handle.result()
    written = next((root / "docs").iterdir())
    assert (
        written.name == SNEAKY_PATH.removeprefix("/docs/") and written.read_text() == SNEAKY_CONTENT
    )
