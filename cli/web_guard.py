"""Who may drive the approval UI, and from where (docs/threat-model.md, the reviewer boundary).

An approval decides whether an agent's write runs, so the UI is a trust
boundary, not a convenience page. Any web page the reviewer visits can send
"simple" cross-origin requests to ``127.0.0.1`` (a ``text/plain`` POST or a
form needs no preflight), and after DNS rebinding a foreign page can even read
the answers. So every request passes this guard first:

- the ``Host`` header must be on an allow-list (default: the bound address and
  ``localhost``), which defeats DNS rebinding;
- the caller must authenticate: a session cookie (set by opening the URL with
  ``?token=`` once; ``HttpOnly``, ``SameSite=Strict``), an
  ``Authorization: Bearer`` token (API clients), or a user header from an
  authenticating proxy, believed only from configured proxy addresses;
- a state-changing request must be JSON (``application/json``, which a page
  cannot send cross-origin without a preflight), carry the CSRF token when the
  credential is ambient (cookie or proxy), and pass the ``Origin`` and
  ``Sec-Fetch-Site`` checks;
- every response carries CSP (no inline script, ``frame-ancestors 'none'``),
  ``X-Content-Type-Options``, ``Referrer-Policy`` and ``no-store``.

The guard records who the caller is (:class:`Reviewer`) in the request scope,
so a decision can say who made it and through what.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ENV_PREFIX = "FILEGATE_UI_"
SESSION_COOKIE = "filegate_session"
CSRF_HEADER = "x-csrf-token"
TOKEN_QUERY = "token"
SAFE_METHODS = frozenset({"GET", "HEAD"})
HEALTH_PATH = "/healthz"
"""Answered by the guard itself without a credential (``Host`` still checked): says
only that the process is up, for container health checks."""
SCOPE_KEY = "filegate.reviewer"
"""Where the guard leaves the :class:`Reviewer` in the ASGI scope."""

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
    """The UI's access settings (env ``FILEGATE_UI_*``, see the README).

    ``token`` authenticates everyone who is not behind a trusted proxy; the
    session cookie and the CSRF token are derived from it, so a restarted UI
    with the same token keeps existing sessions and a new token ends them.
    """

    token: str
    allowed_hosts: frozenset[str]
    trusted_proxies: frozenset[str] = frozenset()
    user_header: str | None = None
    reviewer_name: str = "token holder"

    @classmethod
    def for_address(
        cls, host: str, env: Mapping[str, str] | None = None, *, token: str | None = None
    ) -> UiAccess:
        """Settings for a UI bound to ``host``: token, extra hosts and proxies from ``env``.

        ``FILEGATE_UI_TOKEN`` (default: random per start), ``FILEGATE_UI_ALLOWED_HOSTS``
        (comma-separated, added to the bound address and ``localhost``),
        ``FILEGATE_UI_TRUSTED_PROXIES`` (comma-separated IPs) with
        ``FILEGATE_UI_USER_HEADER`` (e.g. ``X-Forwarded-User``), and
        ``FILEGATE_UI_REVIEWER`` (the name recorded for token holders).
        """
        env = os.environ if env is None else env
        chosen = token or env.get(ENV_PREFIX + "TOKEN") or secrets.token_urlsafe(32)
        if len(chosen) < 16:
            raise ValueError(f"{ENV_PREFIX}TOKEN must be at least 16 characters")
        hosts = {_host_only(host), "localhost", "127.0.0.1", "::1"}
        hosts |= set(_split(env.get(ENV_PREFIX + "ALLOWED_HOSTS", "")))
        proxies = frozenset(_split(env.get(ENV_PREFIX + "TRUSTED_PROXIES", "")))
        for proxy in proxies:
            ipaddress.ip_address(proxy)  # a clear ValueError for a typo
        header = env.get(ENV_PREFIX + "USER_HEADER") or None
        if proxies and not header:
            raise ValueError(f"{ENV_PREFIX}TRUSTED_PROXIES needs {ENV_PREFIX}USER_HEADER")
        name = env.get(ENV_PREFIX + "REVIEWER") or _os_user() or "token holder"
        return cls(chosen, frozenset(h.lower() for h in hosts), proxies, header, name)

    def derived(self, purpose: str) -> str:
        return hmac.new(self.token.encode(), purpose.encode(), hashlib.sha256).hexdigest()

    @property
    def session_value(self) -> str:
        return self.derived("session")

    @property
    def csrf_token(self) -> str:
        return self.derived("csrf")


def _split(text: str) -> Iterable[str]:
    return (part.strip() for part in text.split(",") if part.strip())


def _os_user() -> str | None:
    try:
        import getpass

        return getpass.getuser()
    except (ImportError, KeyError, OSError):
        return None


def _host_only(host: str) -> str:
    """``example.com:8080`` -> ``example.com``; ``[::1]:80`` -> ``::1``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        return host.partition(":")[0]
    return host


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _equal(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


class GuardMiddleware:
    """ASGI middleware enforcing :class:`UiAccess` on every HTTP request."""

    def __init__(self, app: ASGIApp, access: UiAccess) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._check(scope)
        if isinstance(refusal, tuple):
            await _plain(send, *refusal)
            return
        if refusal is not None:  # a redirect that sets the session cookie
            await refusal(send)
            return
        await self.app(scope, receive, _with_security_headers(send))

    def _check(self, scope: Scope) -> tuple[int, str] | Callable[[Send], Awaitable[None]] | None:
        headers = _headers(scope)
        host = _host_only(headers.get("host", ""))
        if host not in self.access.allowed_hosts:
            return 421, f"unknown Host {host!r}: not on this UI's allow-list"
        method = scope["method"].upper()
        if scope["path"] == HEALTH_PATH and method in SAFE_METHODS:
            return 200, "up"
        reviewer, ambient = self._identify(scope, headers)
        if reviewer is None:
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            if method in SAFE_METHODS and _equal(query.get(TOKEN_QUERY), self.access.token):
                return self._login_redirect(scope, query)
            return 401, "authentication required: open the URL the UI printed at start"
        scope[SCOPE_KEY] = reviewer
        if method in SAFE_METHODS:
            return None
        return self._check_unsafe(headers, ambient)

    def _identify(self, scope: Scope, headers: Mapping[str, str]) -> tuple[Reviewer | None, bool]:
        """The authenticated caller and whether the credential is ambient (sent by browsers)."""
        access = self.access
        client = (scope.get("client") or ("", 0))[0]
        if access.user_header and client in access.trusted_proxies:
            user = headers.get(access.user_header.lower(), "").strip()
            if user:
                return Reviewer(user, "proxy"), True
        auth = headers.get("authorization", "")
        scheme, _, credential = auth.partition(" ")
        if scheme.lower() == "bearer" and _equal(credential.strip(), access.token):
            return Reviewer("api caller", "api"), False
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header is simply no session
            return None, False
        session = cookie.get(SESSION_COOKIE)
        if session is not None and _equal(session.value, access.session_value):
            return Reviewer(access.reviewer_name, "ui"), True
        return None, False

    def _check_unsafe(self, headers: Mapping[str, str], ambient: bool) -> tuple[int, str] | None:
        media_type = headers.get("content-type", "").partition(";")[0].strip().lower()
        if media_type != "application/json":
            return 415, "decisions are JSON only (Content-Type: application/json)"
        site = headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return 403, f"cross-site request refused (Sec-Fetch-Site: {site})"
        origin = headers.get("origin")
        if origin is not None and not self._same_origin(origin):
            return 403, f"cross-origin request refused (Origin: {origin})"
        if ambient and not _equal(headers.get(CSRF_HEADER), self.access.csrf_token):
            return 403, "missing or wrong CSRF token"
        return None

    def _same_origin(self, origin: str) -> bool:
        scheme, sep, rest = origin.partition("://")
        return (
            bool(sep)
            and scheme in ("http", "https")
            and (_host_only(rest.rstrip("/")) in self.access.allowed_hosts)
        )

    def _login_redirect(
        self, scope: Scope, query: dict[str, str]
    ) -> Callable[[Send], Awaitable[None]]:
        rest = urlencode({k: v for k, v in query.items() if k != TOKEN_QUERY})
        location = scope.get("root_path", "") + scope["path"] + (f"?{rest}" if rest else "")
        cookie = f"{SESSION_COOKIE}={self.access.session_value}; HttpOnly; SameSite=Strict; Path=/"

        async def respond(send: Send) -> None:
            await send(
                {
                    "type": "http.response.start",
                    "status": 303,
                    "headers": [
                        (b"location", location.encode()),
                        (b"set-cookie", cookie.encode()),
                        *SECURITY_HEADERS,
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b""})

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
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *SECURITY_HEADERS],
        }
    )
    await send({"type": "http.response.body", "body": body})


def reviewer_of(scope: Mapping[str, Any]) -> Reviewer:
    """The caller the guard authenticated (raises if the guard did not run)."""
    reviewer = scope.get(SCOPE_KEY)
    if not isinstance(reviewer, Reviewer):
        raise RuntimeError("the request did not pass GuardMiddleware")
    return reviewer
