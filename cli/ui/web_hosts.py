"""The strict grammars of the UI guard: ``Host``, ``Origin`` and the login redirect.

Split from :mod:`filegate.cli.ui.web_guard` so each rule is one small, testable
function. They are strict on purpose: every leniency here was a way around
the guard (found by trying to break it on real servers).

- ``Host`` is ``host[:port]`` and nothing else: a DNS name (ASCII letters,
  digits and hyphens in dot-separated labels, no trailing dot, not ending in a
  number unless it *is* an IPv4 address), a dotted IPv4 address or a
  bracketed IPv6 address (no zone), then an optional port 1-65535 in plain
  digits. Userinfo, paths, spaces, ``%`` escapes, non-ASCII and junk after the
  port are refused instead of being cut off, so what is compared with the
  allow-list is exactly what the browser resolved. Hosts come out canonical
  (lower case, IPv6 compressed) so ``[0:0::1]`` and ``::1`` are one entry.
- ``Origin`` is ``scheme://host[:port]`` with scheme ``http`` or ``https``;
  its port, the default one (80, 443) made explicit, must be the request's
  own port, or a page on another local port (another web app on the same
  machine) could post to the UI.
- The login redirect goes to a local path with exactly one leading slash: a
  path like ``//evil.example/x`` would otherwise send the reviewer, freshly
  logged in, to another site (an open redirect).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Set
from dataclasses import dataclass
from urllib.parse import quote

DEFAULT_PORTS = {"http": 80, "https": 443}

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_DIGITS = re.compile(r"[0-9]+")
_PORT = re.compile(r"[1-9][0-9]{0,4}")
_IPV6 = re.compile(r"[0-9a-f:.]+")
_UNSAFE_PATH = re.compile(r"[\x00-\x1f\x7f-\x9f\\]")
"""Refused in a redirect target: controls (browsers drop tabs and newlines
from URLs, so ``/\\t/evil`` would become ``//evil``) and backslashes (which
browsers read as ``/``). Anything else is percent-encoded again."""
_PATH_SAFE = "/!$&'()*+,;=:@-._~"
"""Left as they are when the redirect target is percent-encoded again (RFC 3986 pchar)."""


@dataclass(frozen=True)
class HostPort:
    """A parsed ``Host``: the canonical host and the explicit port, if any."""

    host: str
    port: int | None


def canonical_host(text: str) -> str | None:
    """``text`` as a canonical host (no port), or None when it is not one.

    A bracketed or bare IPv6 address comes out compressed without brackets,
    an IPv4 address dotted, a DNS name in lower case.
    """
    if text.startswith("[") and text.endswith("]"):
        return _ipv6(text[1:-1])
    if ":" in text:
        return _ipv6(text)
    return _name_or_ipv4(text)


def _ipv6(text: str) -> str | None:
    text = text.lower()
    if not _IPV6.fullmatch(text):  # no zone ids ("%eth0"), no brackets left
        return None
    try:
        return ipaddress.IPv6Address(text).compressed
    except ValueError:
        return None


def _name_or_ipv4(text: str) -> str | None:
    if not text.isascii() or len(text) > 253:
        return None
    text = text.lower()
    labels = text.split(".")
    if _DIGITS.fullmatch(labels[-1]):
        # Browsers read a name ending in a number as an IPv4 address (WHATWG
        # URL): only a strict dotted quad is one; "127.1" or "0127.0.0.1" is not.
        try:
            return str(ipaddress.IPv4Address(text))
        except ValueError:
            return None
    if all(_LABEL.fullmatch(label) for label in labels):
        return text
    return None  # an empty label: "a..b" or a trailing dot


def parse_host_header(value: str) -> HostPort | None:
    """A ``Host`` header as :class:`HostPort`, or None when it is not ``host[:port]``."""
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        host, rest = _ipv6(value[1:end]), value[end + 1 :]
    else:
        name, colon, port_text = value.partition(":")
        host, rest = _name_or_ipv4(name), colon + port_text
    if host is None:
        return None
    if not rest:
        return HostPort(host, None)
    if not rest.startswith(":") or not _PORT.fullmatch(rest[1:]) or int(rest[1:]) > 65535:
        return None
    return HostPort(host, int(rest[1:]))


def _parse_origin(value: str) -> tuple[str, str, int] | None:
    """``Origin`` as ``(scheme, host, port)`` with the default port made explicit."""
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in DEFAULT_PORTS:
        return None
    parsed = parse_host_header(rest)
    if parsed is None:
        return None
    return scheme, parsed.host, parsed.port or DEFAULT_PORTS[scheme]


def origin_allowed(
    origin: str, request: HostPort, request_scheme: str, allowed_hosts: Set[str]
) -> bool:
    """Whether ``Origin`` is one of this UI's own origins.

    The allowed origins are the allow-listed hosts at the request's own port
    (the ``Host`` header's, else the scheme's default), under the request's
    scheme or ``https`` (a TLS proxy in front of a plain-HTTP UI: nothing else
    can serve ``https`` on the port the UI answers on).
    """
    parsed = _parse_origin(origin)
    if parsed is None:
        return False
    scheme, host, port = parsed
    expected = request.port if request.port is not None else DEFAULT_PORTS[scheme]
    return scheme in {request_scheme, "https"} and host in allowed_hosts and port == expected


def local_location(root_path: str, path: str, query: str = "") -> str:
    """Where the login redirect sends the browser: a path on this UI, never elsewhere.

    ``path`` is the ASGI (percent-decoded) path. A target that is not a plain
    local path (no leading slash: an absolute-form request line; controls or
    backslashes) becomes ``/``; leading slashes collapse to one (a
    ``//host`` would be another site); the rest is percent-encoded again.
    """
    target = root_path + path
    if not target.startswith("/") or _UNSAFE_PATH.search(target):
        target = "/"
    target = "/" + target.lstrip("/")
    try:
        location = quote(target, safe=_PATH_SAFE)
    except UnicodeEncodeError:  # a lone surrogate: nothing a browser asked for
        location = "/"
    return location + (f"?{query}" if query else "")
