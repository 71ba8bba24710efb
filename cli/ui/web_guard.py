"""Who may drive the approval UI, and from where (docs/threat-model.md, the reviewer boundary).

An approval decides whether an agent's write runs, so the UI is a trust
boundary, not a convenience page. Any web page the reviewer visits can send
"simple" cross-origin requests to ``127.0.0.1`` (a ``text/plain`` POST or a
form needs no preflight), and after DNS rebinding a foreign page can even read
the answers. So every request passes this guard first:

- the ``Host`` header must be exactly ``host[:port]`` (strict grammar,
  :mod:`filegate.cli.ui.web_hosts`) with the host on an allow-list (default: the
  bound address and ``localhost``), which defeats DNS rebinding;
- the caller must authenticate: a session cookie (set by opening the URL with
  ``?token=`` once; ``HttpOnly``, ``SameSite=Strict``), an
  ``Authorization: Bearer`` token (API clients), or a user header from an
  authenticating proxy, believed only from configured proxy addresses;
- a state-changing request must be JSON (``application/json``, which a page
  cannot send cross-origin without a preflight), carry the CSRF token when the
  credential is ambient (cookie or proxy), and pass the ``Origin`` (scheme,
  host *and* port) and ``Sec-Fetch-Site`` checks;
- every response carries CSP (no inline script, ``frame-ancestors 'none'``),
  ``X-Content-Type-Options``, ``Referrer-Policy`` and ``no-store``;
- only HTTP reaches the app: a websocket is closed before it opens (the UI
  has none, and a handshake would skip every check above), the ``lifespan``
  protocol passes (the server's start and stop), anything else is dropped.

Sessions. Each login (the token URL) opens a session with a random id
(``secrets.token_urlsafe``), kept in this process with an expiry:
``FILEGATE_UI_SESSION_SECONDS`` (default 43200, 12 hours), also the cookie's
``Max-Age``. ``POST /logout`` (JSON, CSRF token, same origin, like every
POST) revokes the caller's session here and clears the cookie; an expired or
revoked id is no session at all (401), and a restart ends every session.
The id is a bearer secret the browser keeps, so it expires and can be taken
back, unlike the token it was traded for. The login redirect stays on this
UI: a local path with one leading slash, never ``//elsewhere``.

The guard records who the caller is (:class:`Reviewer`) in the request scope,
so a decision can say who made it and through what.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import math
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode

from filegate.cli.ui.web_hosts import (
    canonical_host,
    local_location,
    origin_allowed,
    parse_host_header,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("filegate.ui")

ENV_PREFIX = "FILEGATE_UI_"
SESSION_COOKIE = "filegate_session"
CSRF_HEADER = "x-csrf-token"
TOKEN_QUERY = "token"
SAFE_METHODS = frozenset({"GET", "HEAD"})
HEALTH_PATH = "/healthz"
"""Answered by the guard itself without a credential (``Host`` still checked): says
only that the process is up, for container health checks."""
LOGOUT_PATH = "/logout"
"""``POST`` here (checked like any POST) revokes the caller's session; answered by the guard."""
SCOPE_KEY = "filegate.reviewer"
"""Where the guard leaves the :class:`Reviewer` in the ASGI scope."""
SESSION_SECONDS = 12 * 3600.0
"""How long a login lasts by default (``FILEGATE_UI_SESSION_SECONDS``): a working day."""
MAX_SESSIONS = 1000
"""Live sessions kept at most; the oldest goes first (only token holders open them)."""

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        b"connect-src 'self'; img-src 'self' data:; form-action 'none'; "
        b"frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)

Via = Literal["ui", "api", "proxy"]


@dataclass(frozen=True)
class Reviewer:
    """Who sent a request and through what: recorded with every decision."""

    who: str
    via: Via


@dataclass(frozen=True)
class UiAccess:
    """The UI's access settings (env ``FILEGATE_UI_*``, see docs/configuration.md).

    ``token`` authenticates everyone who is not behind a trusted proxy; the
    CSRF token is derived from it. Sessions are not: each login gets a random
    id that lives ``session_seconds`` in the serving process (module docstring).
    """

    token: str
    allowed_hosts: frozenset[str]
    trusted_proxies: frozenset[str] = frozenset()
    user_header: str | None = None
    reviewer_name: str = "token holder"
    session_seconds: float = SESSION_SECONDS

    @classmethod
    def for_address(
        cls, host: str, env: Mapping[str, str] | None = None, *, token: str | None = None
    ) -> UiAccess:
        """Settings for a UI bound to ``host``: token, extra hosts and proxies from ``env``.

        ``FILEGATE_UI_TOKEN`` (default: random per start), ``FILEGATE_UI_ALLOWED_HOSTS``
        (comma-separated host names or addresses, no ports, added to the bound
        address and ``localhost``), ``FILEGATE_UI_TRUSTED_PROXIES``
        (comma-separated IPs) with ``FILEGATE_UI_USER_HEADER`` (e.g.
        ``X-Forwarded-User``), ``FILEGATE_UI_REVIEWER`` (the name recorded for
        token holders) and ``FILEGATE_UI_SESSION_SECONDS`` (how long a login
        lasts, default 43200). A malformed value is a ``ValueError`` naming it.
        """
        env = os.environ if env is None else env
        chosen = token or env.get(ENV_PREFIX + "TOKEN") or secrets.token_urlsafe(32)
        if len(chosen) < 16:
            raise ValueError(f"{ENV_PREFIX}TOKEN must be at least 16 characters")
        names = [host.strip(), "localhost", "127.0.0.1", "::1"]
        hosts = {_allowed_host(name, "the bound address") for name in names}
        for name in _split(env.get(ENV_PREFIX + "ALLOWED_HOSTS", "")):
            hosts.add(_allowed_host(name, f"{ENV_PREFIX}ALLOWED_HOSTS"))
        proxies = frozenset(_split(env.get(ENV_PREFIX + "TRUSTED_PROXIES", "")))
        for proxy in proxies:
            ipaddress.ip_address(proxy)  # a clear ValueError for a typo
        header = env.get(ENV_PREFIX + "USER_HEADER") or None
        if proxies and not header:
            raise ValueError(f"{ENV_PREFIX}TRUSTED_PROXIES needs {ENV_PREFIX}USER_HEADER")
        name = env.get(ENV_PREFIX + "REVIEWER") or _os_user() or "token holder"
        lasting = _session_seconds(env.get(ENV_PREFIX + "SESSION_SECONDS"))
        return cls(chosen, frozenset(hosts), proxies, header, name, lasting)

    def derived(self, purpose: str) -> str:
        return hmac.new(self.token.encode(), purpose.encode(), hashlib.sha256).hexdigest()

    @property
    def csrf_token(self) -> str:
        return self.derived("csrf")


def _split(text: str) -> Iterable[str]:
    return (part.strip() for part in text.split(",") if part.strip())


def _allowed_host(entry: str, source: str) -> str:
    host = canonical_host(entry)
    if host is None:
        raise ValueError(f"{source}: {entry!r} is not a host name or IP address (no port)")
    return host


def _session_seconds(text: str | None) -> float:
    if text is None or not text.strip():
        return SESSION_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 1:
        raise ValueError(f"{ENV_PREFIX}SESSION_SECONDS must be a number of seconds >= 1")
    return seconds


def _os_user() -> str | None:
    try:
        import getpass

        return getpass.getuser()
    except (ImportError, KeyError, OSError):
        return None


class Sessions:
    """Live logins of one UI process: session id -> when it expires.

    Only a digest of each id is kept, so neither a lookup's timing nor a memory
    dump gives an id away. ``clock`` is monotonic: a changed wall clock neither
    revives nor ends sessions.
    """

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._expiry: dict[str, float] = {}

    def open(self) -> str:
        """A new session id, valid for :attr:`seconds` from now."""
        now = self._clock()
        for key in [k for k, until in self._expiry.items() if until <= now]:
            del self._expiry[key]
        while len(self._expiry) >= MAX_SESSIONS:
            del self._expiry[next(iter(self._expiry))]  # the oldest login
        session = secrets.token_urlsafe(32)
        self._expiry[_digest(session)] = now + self.seconds
        return session

    def valid(self, session: str) -> bool:
        key = _digest(session)
        until = self._expiry.get(key)
        if until is None:
            return False
        if until <= self._clock():
            del self._expiry[key]
            return False
        return True

    def revoke(self, session: str) -> None:
        self._expiry.pop(_digest(session), None)


def _digest(session: str) -> str:
    return hashlib.sha256(session.encode("utf-8", "replace")).hexdigest()


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _equal(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


Responder = Callable[[Send], Awaitable[None]]


class GuardMiddleware:
    """ASGI middleware enforcing :class:`UiAccess` on every request (module docstring)."""

    def __init__(self, app: ASGIApp, access: UiAccess) -> None:
        self.app = app
        self.access = access
        self.sessions = Sessions(access.session_seconds)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":  # the server's start and stop, not a request
            await self.app(scope, receive, send)
            return
        if kind == "websocket":  # refused before the handshake: the server answers 403
            await send({"type": "websocket.close", "code": 1008})
            return
        if kind != "http":
            log.warning("refused an ASGI %r scope: the approval UI serves HTTP only", kind)
            return
        refusal = self._check(scope)
        if isinstance(refusal, tuple):
            await _plain(send, *refusal)
            return
        if refusal is not None:  # the login redirect, or the logout
            await refusal(send)
            return
        await self.app(scope, receive, _with_security_headers(send))

    def _check(self, scope: Scope) -> tuple[int, str] | Responder | None:
        headers = _headers(scope)
        hosts = [v for k, v in scope["headers"] if k.lower() == b"host"]
        given = parse_host_header(hosts[0].decode("latin-1")) if len(hosts) == 1 else None
        if given is None:
            shown = [h.decode("latin-1") for h in hosts]
            return 421, f"Host {shown!r} is not one host[:port]"
        if given.host not in self.access.allowed_hosts:
            return 421, f"unknown Host {given.host!r}: not on this UI's allow-list"
        method = scope["method"].upper()
        if scope["path"] == HEALTH_PATH and method in SAFE_METHODS:
            return 200, "up"
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if method in SAFE_METHODS and _equal(query.get(TOKEN_QUERY), self.access.token):
            return self._login_redirect(scope, query)
        reviewer, ambient, session = self._identify(scope, headers)
        if reviewer is None:
            return 401, "authentication required: open the URL the UI printed at start"
        scope[SCOPE_KEY] = reviewer
        if method in SAFE_METHODS:
            return None
        origin = headers.get("origin")
        if origin is not None and not origin_allowed(
            origin, given, scope.get("scheme", "http"), self.access.allowed_hosts
        ):
            return 403, f"cross-origin request refused (Origin: {origin!r})"
        refused = self._check_unsafe(headers, ambient)
        if refused is None and scope["path"] == LOGOUT_PATH and method == "POST":
            return self._logout(session)
        return refused

    def _identify(
        self, scope: Scope, headers: Mapping[str, str]
    ) -> tuple[Reviewer | None, bool, str | None]:
        """The authenticated caller, whether the credential is ambient (sent by
        browsers), and the session id it came with."""
        access = self.access
        client = (scope.get("client") or ("", 0))[0]
        if access.user_header and client in access.trusted_proxies:
            user = headers.get(access.user_header.lower(), "").strip()
            if user:
                return Reviewer(user, "proxy"), True, None
        auth = headers.get("authorization", "")
        scheme, _, credential = auth.partition(" ")
        if scheme.lower() == "bearer" and _equal(credential.strip(), access.token):
            return Reviewer("api caller", "api"), False, None
        cookie: SimpleCookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header is simply no session
            return None, False, None
        session = cookie.get(SESSION_COOKIE)
        if session is not None and self.sessions.valid(session.value):
            return Reviewer(access.reviewer_name, "ui"), True, session.value
        return None, False, None

    def _check_unsafe(self, headers: Mapping[str, str], ambient: bool) -> tuple[int, str] | None:
        media_type = headers.get("content-type", "").partition(";")[0].strip().lower()
        if media_type != "application/json":
            return 415, "decisions are JSON only (Content-Type: application/json)"
        site = headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return 403, f"cross-site request refused (Sec-Fetch-Site: {site!r})"
        if ambient and not _equal(headers.get(CSRF_HEADER), self.access.csrf_token):
            return 403, "missing or wrong CSRF token"
        return None

    def _cookie(self, scope: Scope, value: str, max_age: int) -> bytes:
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        return (
            f"{SESSION_COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; "
            f"Max-Age={max_age}{secure}"
        ).encode()

    def _login_redirect(self, scope: Scope, query: dict[str, str]) -> Responder:
        """A new session and a redirect to the same page without the token."""
        rest = urlencode({k: v for k, v in query.items() if k != TOKEN_QUERY})
        location = local_location(scope.get("root_path", ""), scope["path"], rest)
        lasting = max(1, int(self.sessions.seconds))
        cookie = self._cookie(scope, self.sessions.open(), lasting)
        headers = [(b"location", location.encode("ascii")), (b"set-cookie", cookie)]
        return _respond(303, headers, b"")

    def _logout(self, session: str | None) -> Responder:
        """Revoke the caller's session (if it came with one) and clear the cookie."""
        if session is not None:
            self.sessions.revoke(session)
        cookie = f"{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0".encode()
        headers = [(b"content-type", b"application/json"), (b"set-cookie", cookie)]
        return _respond(200, headers, json.dumps({"ok": True, "logged_out": True}).encode())


def _respond(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> Responder:
    async def respond(send: Send) -> None:
        start = {"type": "http.response.start", "status": status}
        await send({**start, "headers": [*headers, *SECURITY_HEADERS]})
        await send({"type": "http.response.body", "body": body})

    return respond


def _with_security_headers(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            present = {k.lower() for k, _ in message.get("headers", [])}
            extra = [(k, v) for k, v in SECURITY_HEADERS if k not in present]
            message["headers"] = [*message.get("headers", []), *extra]
        await send(message)

    return wrapped


async def _plain(send: Send, status: int, text: str) -> None:
    body = json.dumps({"ok": True} if status == 200 else {"ok": False, "error": text}).encode()
    await _respond(status, [(b"content-type", b"application/json")], body)(send)


def reviewer_of(scope: Mapping[str, Any]) -> Reviewer:
    """The caller the guard authenticated (raises if the guard did not run)."""
    reviewer = scope.get(SCOPE_KEY)
    if not isinstance(reviewer, Reviewer):
        raise RuntimeError("the request did not pass GuardMiddleware")
    return reviewer
