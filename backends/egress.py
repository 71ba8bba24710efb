"""The host-side HTTP proxy that is a sandbox's only way onto the network.

Why it exists: a command runs in bubblewrap with ``--unshare-all``, so the
sandbox has no network of its own: no interface but loopback, no resolver, no
route. Network access under rules is granted through one door: this proxy,
listening on a Unix socket that is bind-mounted into the sandbox (a forwarder
there, :mod:`filegate.backends.egress_forwarder`, relays ``127.0.0.1:PORT``
to it so unmodified ``pip``, ``curl`` and ``git`` work with ``HTTP_PROXY``).

Every connection is judged on its own: by host and port, and for plain HTTP
also by method and path (one request per client connection, ``Connection:
close`` both ways, so the next request is a new connection judged again). The
checks, in order, and why:

* The host string must be a plain host name or IP literal before the judge
  sees it: NUL and control characters, ``@``, slashes, ``%`` zone ids, trailing
  or doubled dots are how a rule matcher and a resolver are made to disagree.
* The proxy resolves names itself, so the sandbox needs no resolver, and it
  connects to exactly the address it checked (never resolving again, so a DNS
  answer cannot change between the check and the connection).
* Loopback, private, link-local, CGNAT and other non-global addresses are
  refused unless the matching rule names the address itself
  (:attr:`Verdict.private_ok`): an allowed *name* must not become a way to the
  host's own services or the local network.
* Through a CONNECT tunnel, a TLS ClientHello's server name must equal the
  CONNECT host: otherwise an allowed host on a shared front (a CDN) would carry
  traffic for any other name it serves (domain fronting). No byte reaches the
  upstream before that check passes.

Each connection runs in a thread of its own (plus one for the upstream's
direction once relaying), with blocking ``sendall``; the result of every
connection is kept as a :class:`ConnectionEvent`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol

_HEAD_LIMIT = 64 * 1024
"""A request (or response) head longer than this is refused."""
_HELLO_LIMIT = 16 * 1024
"""The most bytes of a TLS ClientHello read while looking for its server name."""
_BUFFER = 64 * 1024
_HEAD_TIMEOUT = 60.0
"""Seconds a client has to finish its request head."""
_STOP_WAIT = 5.0
"""Seconds :meth:`EgressProxy.__exit__` waits for the connection threads."""
_LINGER = 1.0
"""Seconds a refused client's unread bytes are drained so the refusal is not lost to a reset."""
_CHUNK_LINE_LIMIT = 4096

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class ConnectionAsk:
    """What the proxy asks the judge about one client connection."""

    host: str
    """Exactly as the client sent it (an IPv6 literal without its brackets)."""
    port: int
    method: str | None
    """Plain HTTP only (``"GET"``, ...); None for CONNECT."""
    path: str | None
    """Plain HTTP only: the request target's path, without the query; None for CONNECT."""


@dataclass(frozen=True)
class Verdict:
    """The judge's answer."""

    allowed: bool
    reason: str
    """One line, e.g. ``no network rule names example.com:443``."""
    private_ok: bool = False
    """The matching rule names this address itself: loopback, private and
    link-local destinations are allowed."""


Judge = Callable[[ConnectionAsk], Verdict]


@dataclass(frozen=True)
class ConnectionEvent:
    """How one client connection ended."""

    host: str
    port: int
    allowed: bool
    """The final outcome: False if refused at any step, also after the judge said yes."""
    reason: str
    """Why it was refused, or ``""`` when allowed."""
    bytes_out: int = 0
    """Client to upstream."""
    bytes_in: int = 0
    """Upstream to client."""


def host_problem(host: str) -> str | None:
    """Why ``host`` is not a plain host name or IP literal, or None when it is.

    ``host`` is as in :class:`ConnectionAsk`: an IPv6 literal without brackets.
    Names are ASCII letters, digits, dots and hyphens, with no empty label, no
    trailing dot, labels of at most 63 characters and at most 253 in all; a
    name whose last label is numeric must be a dotted-quad IPv4 address (no
    ``127.1`` or ``0x7f.1``, which resolvers read as addresses).
    """
    if not host:
        return "the host is empty"
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in host):
        return "the host contains a control character"
    for char, what in _FORBIDDEN_CHARS:
        if char in host:
            return f"the host contains {what}"
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return "the host is neither a host name nor an IP address"
        return None
    return _name_problem(host)


_FORBIDDEN_CHARS = (
    (" ", "a space"),
    ("@", "'@'"),
    ("/", "'/'"),
    ("\\", "a backslash"),
    ("%", "'%' (zone ids are not accepted)"),
)
_NAME = re.compile(r"[A-Za-z0-9.-]+")


def _name_problem(host: str) -> str | None:
    if not _NAME.fullmatch(host):
        return "the host has characters other than letters, digits, '.' and '-'"
    if host.endswith("."):
        return "the host ends with a dot"
    if host.startswith(".") or ".." in host:
        return "the host has an empty label (a leading or doubled dot)"
    if len(host) > 253:
        return "the host name is over 253 characters"
    labels = host.split(".")
    for label in labels:
        if len(label) > 63:
            return "the host has a label over 63 characters"
        if label.startswith("-") or label.endswith("-"):
            return "the host has a label starting or ending with '-'"
    last = labels[-1]
    if last.isdigit() or last.lower().startswith("0x"):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return "the host looks numeric but is not a dotted-quad IPv4 address"
    return None


class EgressProxy:
    """The proxy on a Unix socket; serves while inside its ``with`` block.

    ``judge`` decides each connection; ``resolve(host, port)`` returns the
    addresses of a name (default: :func:`socket.getaddrinfo`).
    """

    def __init__(
        self,
        judge: Judge,
        socket_path: str,
        *,
        connect_timeout: float = 10.0,
        resolve: Callable[[str, int], list[str]] | None = None,
    ) -> None:
        self._judge = judge
        self._path = socket_path
        self._connect_timeout = connect_timeout
        self._resolve = resolve if resolve is not None else _resolve
        self._lock = threading.Lock()
        self._events: list[ConnectionEvent] = []
        self._open: set[socket.socket] = set()
        self._workers: set[threading.Thread] = set()
        self._stopping = False
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._inode: tuple[int, int] | None = None

    def __enter__(self) -> EgressProxy:
        if self._listener is not None or self._stopping:
            raise RuntimeError("an EgressProxy serves once")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # Linux creates the socket file with the socket's own mode: 0600 from the start.
            os.fchmod(listener.fileno(), 0o600)
            listener.bind(self._path)
            info = os.stat(self._path)
            self._inode = (info.st_dev, info.st_ino)
            os.chmod(self._path, 0o600)
            listener.listen(128)
        except BaseException:
            listener.close()
            self._remove_socket_file()
            raise
        self._listener = listener
        self._acceptor = threading.Thread(
            target=self._accept_loop, args=(listener,), name="filegate-egress", daemon=True
        )
        self._acceptor.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._lock:
            self._stopping = True
        try:
            if self._listener is not None:
                _shutdown(self._listener, socket.SHUT_RDWR)
            if self._acceptor is not None:
                self._acceptor.join(_STOP_WAIT)
            with self._lock:
                still_open = list(self._open)
                workers = list(self._workers)
            for sock in still_open:
                _shutdown(sock, socket.SHUT_RDWR)
            deadline = time.monotonic() + _STOP_WAIT
            for worker in workers:
                worker.join(max(0.0, deadline - time.monotonic()))
        finally:
            if self._listener is not None:
                self._listener.close()
            self._remove_socket_file()

    @property
    def events(self) -> list[ConnectionEvent]:
        """A copy of the events, in the order the connections ended or were refused."""
        with self._lock:
            return list(self._events)

    # -- serving --------------------------------------------------------------------

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                if self._stopping:
                    return
                time.sleep(0.05)  # out of descriptors, say: do not spin
                continue
            worker = threading.Thread(
                target=self._serve, args=(client,), name="filegate-egress-conn", daemon=True
            )
            with self._lock:
                if self._stopping:
                    client.close()
                    return
                self._open.add(client)
                self._workers.add(worker)
            worker.start()

    def _serve(self, client: socket.socket) -> None:
        conn = _Conn(client)
        event: ConnectionEvent | None = None
        try:
            event = self._handle(conn)
        except _Refusal as refusal:
            _refuse(client, refusal.status, refusal.reason)
            event = conn.event(refusal.reason)
        except _Stopped:
            event = conn.event("the proxy stopped") if conn.asked else None
        except OSError as exc:  # the client or upstream went away mid-way
            event = conn.event(_one_line(f"connection failed: {exc.strerror or exc}"))
        except Exception as exc:  # one connection's failure never stops the server
            event = conn.event(_one_line(f"internal error: {type(exc).__name__}: {exc}"))
        finally:
            for sock in conn.sockets:
                sock.close()
            with self._lock:
                self._open.difference_update(conn.sockets)
                if event is not None:
                    self._events.append(event)
                self._workers.discard(threading.current_thread())

    def _handle(self, conn: _Conn) -> ConnectionEvent | None:
        got = _read_head(conn.client)
        if got is None:
            return None
        head, rest = got
        request = _parse_request(head, conn)
        verdict = self._ask(request, conn)
        if not verdict.allowed:
            raise _Refusal(403, _one_line(verdict.reason) or "refused by the network rules")
        addresses = self._addresses(request.host, request.port, verdict.private_ok)
        upstream = self._connect(addresses, request, conn)
        c2u: _Filter
        u2c: _Filter
        if request.method == "CONNECT":
            conn.client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            c2u, u2c = _ServerNameCheck(request.host), _Passthrough()
        else:
            upstream.sendall(request.upstream_head)
            conn.tally.add_out(len(request.upstream_head))
            c2u, u2c = request.body, _ResponseHeads()
        pump = threading.Thread(
            target=_pump,
            args=(upstream, conn.client, u2c, conn.tally, False, b""),
            name="filegate-egress-in",
            daemon=True,
        )
        pump.start()
        _pump(conn.client, upstream, c2u, conn.tally, True, rest)
        pump.join()
        return conn.event(conn.tally.failure)

    def _ask(self, request: _Request, conn: _Conn) -> Verdict:
        conn.asked = True
        ask = ConnectionAsk(request.host, request.port, request.judged_method, request.path)
        try:
            return self._judge(ask)
        except Exception as exc:
            raise _Refusal(
                403, _one_line(f"the network rules could not be checked: {type(exc).__name__}")
            ) from exc

    def _addresses(self, host: str, port: int, private_ok: bool) -> list[_IP]:
        """The addresses to connect to, every one of them checked."""
        try:
            addresses: list[_IP] = [ipaddress.ip_address(host)]
            literal = True
        except ValueError:
            addresses = self._resolved(host, port)
            literal = False
        if private_ok:
            return addresses
        for address in addresses:
            kind = _special_kind(address)
            if kind is None:
                continue
            said = f"{host} is" if literal else f"{host} resolves to {address},"
            raise _Refusal(
                403,
                f"{said} a {kind} address; only a rule naming that address itself allows it",
            )
        return addresses

    def _resolved(self, host: str, port: int) -> list[_IP]:
        try:
            found = self._resolve(host, port)
        except OSError as exc:
            raise _Refusal(502, f"cannot resolve {host}: {exc.strerror or exc}") from exc
        addresses: list[_IP] = []
        for text in found:
            try:
                address = ipaddress.ip_address(text.split("%", 1)[0])
            except ValueError:
                raise _Refusal(502, f"the resolver gave {host} a non-address") from None
            if address not in addresses:
                addresses.append(address)
        if not addresses:
            raise _Refusal(502, f"{host} has no addresses")
        return addresses

    def _connect(self, addresses: list[_IP], request: _Request, conn: _Conn) -> socket.socket:
        """A connection to the first of ``addresses`` that answers (no new resolving)."""
        failures = []
        for checked in addresses:
            address = checked
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
                address = address.ipv4_mapped
            family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            self._track(sock, conn)
            sock.settimeout(self._connect_timeout)
            try:
                sock.connect((str(address), request.port))
            except OSError as exc:
                failures.append(f"{address}: {exc.strerror or exc}")
                continue
            sock.settimeout(None)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        if self._stopping:
            raise _Stopped
        raise _Refusal(
            502, f"cannot connect to {request.host} port {request.port}: {'; '.join(failures)}"
        )

    def _track(self, sock: socket.socket, conn: _Conn) -> None:
        """Registers ``sock`` for :meth:`__exit__` to close; refuses once stopping."""
        conn.sockets.append(sock)
        with self._lock:
            if self._stopping:
                raise _Stopped
            self._open.add(sock)

    def _remove_socket_file(self) -> None:
        """Removes the socket file, if it is still the one this proxy bound."""
        if self._inode is None:
            return
        with contextlib.suppress(OSError):
            info = os.stat(self._path)
            if (info.st_dev, info.st_ino) == self._inode:
                os.unlink(self._path)
        self._inode = None


# -- one connection -------------------------------------------------------------------


class _Refusal(Exception):
    """Answer the client with ``status`` and a one-line reason, and record it refused."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class _Stopped(Exception):
    """The proxy is stopping: the connection ends without an answer."""


class _Abort(Exception):
    """A relayed stream broke a rule (or upstream misbehaved): both sides are closed."""

    def __init__(self, reason: str, reply: bytes = b"") -> None:
        super().__init__(reason)
        self.reason = reason
        self.reply = reply


class _Tally:
    """Bytes relayed each way, and the first reason a relay was stopped."""

    def __init__(self) -> None:
        self.bytes_out = 0
        self.bytes_in = 0
        self.failure = ""
        self._lock = threading.Lock()

    def add_out(self, count: int) -> None:
        self.bytes_out += count  # only the client-to-upstream thread writes this

    def add_in(self, count: int) -> None:
        self.bytes_in += count  # only the upstream-to-client thread writes this

    def fail(self, reason: str) -> None:
        with self._lock:
            if not self.failure:
                self.failure = reason


@dataclass
class _Conn:
    """One client connection: its sockets, and what is known so far for its event."""

    client: socket.socket
    host: str = ""
    port: int = 0
    asked: bool = False
    tally: _Tally = field(default_factory=_Tally)
    sockets: list[socket.socket] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sockets.append(self.client)

    def event(self, failure: str) -> ConnectionEvent:
        return ConnectionEvent(
            self.host,
            self.port,
            not failure,
            failure,
            self.tally.bytes_out,
            self.tally.bytes_in,
        )


@dataclass
class _Request:
    method: str
    host: str
    port: int
    path: str | None = None
    upstream_head: bytes = b""
    body: _Filter = field(default_factory=lambda: _Length(0))

    @property
    def judged_method(self) -> str | None:
        return None if self.method == "CONNECT" else self.method


def _read_head(client: socket.socket) -> tuple[bytes, bytes] | None:
    """The request head (without its blank line) and the bytes after it; None if
    the client left without sending anything."""
    client.settimeout(_HEAD_TIMEOUT)
    buf = bytearray()
    while True:
        try:
            chunk = client.recv(_BUFFER)
        except TimeoutError:
            if not buf:
                return None
            raise _Refusal(408, "the request head did not end in time") from None
        if not chunk:
            if not buf:
                return None
            raise _Refusal(400, "the connection closed before the request head ended")
        start = max(0, len(buf) - 3)
        buf += chunk
        end = buf.find(b"\r\n\r\n", start)
        if end >= 0 and end + 4 <= _HEAD_LIMIT:
            client.settimeout(None)
            return bytes(buf[:end]), bytes(buf[end + 4 :])
        if len(buf) > _HEAD_LIMIT:
            raise _Refusal(400, "the request head is over 64 KiB")


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VERSIONS = ("HTTP/1.0", "HTTP/1.1")
_DROPPED_REQUEST_HEADERS = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
    "host",
}
_FRAMING = {"content-length", "transfer-encoding", "host"}
"""Headers a ``Connection`` header cannot have dropped (they frame the request)."""


def _parse_request(head: bytes, conn: _Conn) -> _Request:
    """The request in ``head``; fills ``conn.host``/``conn.port`` as soon as known."""
    lines = head.decode("latin-1").split("\r\n")
    if any("\r" in line or "\n" in line for line in lines):
        raise _Refusal(400, "a bare CR or LF in the request head")
    method, _, remainder = lines[0].partition(" ")
    target, _, version = remainder.rpartition(" ")
    if not _TOKEN.fullmatch(method) or not target or version not in _VERSIONS:
        raise _Refusal(400, "a malformed request line")
    headers = [_parse_header(line) for line in lines[1:]]
    if method == "CONNECT":
        host, port_text, bracketed = _split_authority(target)
        conn.host = host
        _check_host(host, bracketed)
        conn.port = _port(port_text, None)
        return _Request(method, host, conn.port)
    return _plain_request(method, target, version, headers, conn)


def _parse_header(line: str) -> tuple[str, str]:
    name, colon, value = line.partition(":")
    if not colon or not _TOKEN.fullmatch(name):
        raise _Refusal(400, "a malformed header line")
    value = value.strip(" \t")
    if any((ord(char) < 0x20 and char != "\t") or ord(char) == 0x7F for char in value):
        raise _Refusal(400, f"a control character in the {name} header")
    return name, value


def _split_authority(authority: str) -> tuple[str, str | None, bool]:
    """``host``, the port's text (None when absent) and whether the host was bracketed."""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise _Refusal(400, "an unclosed '[' in the target")
        rest = authority[end + 1 :]
        if rest and not rest.startswith(":"):
            raise _Refusal(400, "text after ']' in the target")
        return authority[1:end], (rest[1:] if rest else None), True
    host, colon, port_text = authority.rpartition(":")
    if not colon:
        return authority, None, False
    return host, port_text, False


def _check_host(host: str, bracketed: bool) -> None:
    problem = host_problem(host)
    if problem is None and bracketed != (":" in host):
        problem = (
            "only IPv6 literals go in brackets"
            if bracketed
            else "an IPv6 literal must be in brackets"
        )
    if problem is not None:
        raise _Refusal(403, f"host {_quoted(host)} refused: {problem}")


def _port(text: str | None, default: int | None) -> int:
    if text is None and default is not None:
        return default
    if text is None:
        raise _Refusal(400, "CONNECT needs a port (host:port)")
    if not (text.isascii() and text.isdigit() and len(text) <= 5 and 0 < int(text) <= 65535):
        raise _Refusal(400, f"the port {_quoted(text)} is not 1 to 65535")
    return int(text)


def _plain_request(
    method: str, target: str, version: str, headers: list[tuple[str, str]], conn: _Conn
) -> _Request:
    if target[:8].lower() == "https://":
        raise _Refusal(400, "https:// URLs go through CONNECT, not a plain proxy request")
    if target[:7].lower() != "http://":
        raise _Refusal(400, "a proxy request needs an absolute http:// URL")
    rest = target[7:]
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, origin = rest[:cut], rest[cut:].partition("#")[0]
    host, port_text, bracketed = _split_authority(authority)
    conn.host = host
    _check_host(host, bracketed)
    conn.port = _port(port_text, 80)
    if not origin.startswith("/"):
        origin = "/" + origin
    path = origin.partition("?")[0]
    problem = _path_problem(origin)
    if problem:
        raise _Refusal(400, problem)
    upstream_head, body = _upstream_request(f"{method} {origin} {version}", authority, headers)
    return _Request(method, host, conn.port, path, upstream_head, body)


_DOT_SEGMENTS = {".", "..", "%2e", "%2e%2e", ".%2e", "%2e."}


def _path_problem(origin: str) -> str | None:
    """Why the target cannot be judged by its path as sent, or None."""
    if any(char.isspace() or not char.isprintable() or not char.isascii() for char in origin):
        return "a space, control or non-ASCII character in the URL"
    if "\\" in origin:
        return "a backslash in the URL path"
    segments = origin.partition("?")[0].lower().split("/")
    if any(segment in _DOT_SEGMENTS for segment in segments):
        return "a '.' or '..' segment in the URL path"
    return None


def _upstream_request(
    request_line: str, authority: str, headers: list[tuple[str, str]]
) -> tuple[bytes, _Filter]:
    """The head sent upstream (origin-form, ``Host`` from the URL, ``Connection:
    close``, no hop-by-hop headers) and the filter that frames the request body."""
    named = {
        token.strip().lower()
        for name, value in headers
        if name.lower() in ("connection", "proxy-connection")
        for token in value.split(",")
    }
    named -= _FRAMING
    lines = [request_line, f"Host: {authority}"]
    lengths: list[str] = []
    encodings: list[str] = []
    for name, value in headers:
        low = name.lower()
        if low == "content-length":
            lengths.append(value)
        elif low == "transfer-encoding":
            encodings.append(value)
        if low not in _DROPPED_REQUEST_HEADERS and low not in named:
            lines.append(f"{name}: {value}")
    lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head, _body_filter(lengths, encodings)


def _body_filter(lengths: list[str], encodings: list[str]) -> _Filter:
    """Follows the request body's framing: bytes past its end are never forwarded
    (a second request smuggled after the first would escape the judge)."""
    if lengths and encodings:
        raise _Refusal(400, "both Content-Length and Transfer-Encoding")
    if encodings:
        codings = [token.strip().lower() for value in encodings for token in value.split(",")]
        if codings != ["chunked"]:
            raise _Refusal(400, "a Transfer-Encoding other than chunked")
        return _Chunked()
    if not lengths:
        return _Length(0)
    if len(set(lengths)) != 1 or not (lengths[0].isascii() and lengths[0].isdigit()):
        raise _Refusal(400, "a malformed Content-Length")
    return _Length(int(lengths[0]))


# -- relaying -------------------------------------------------------------------------


class _Filter(Protocol):
    """What a relayed direction does with the bytes it reads."""

    @property
    def done(self) -> bool:
        """Nothing more is forwarded: what is read next is dropped."""

    def feed(self, data: bytes) -> bytes:
        """The bytes to forward now (may raise :class:`_Abort`)."""

    def finish(self) -> bytes:
        """The source ended: bytes still to forward (may raise :class:`_Abort`)."""


def _pump(
    src: socket.socket,
    dst: socket.socket,
    filt: _Filter,
    tally: _Tally,
    outbound: bool,
    initial: bytes,
) -> None:
    """Relays ``src`` to ``dst`` through ``filt`` until ``src`` ends, then half-closes ``dst``."""
    count = tally.add_out if outbound else tally.add_in
    try:
        data = initial
        while True:
            if data and not filt.done:
                out = filt.feed(data)
                if out:
                    dst.sendall(out)
                    count(len(out))
            data = src.recv(_BUFFER)
            if not data:
                break
        out = filt.finish()
        if out:
            dst.sendall(out)
            count(len(out))
        _shutdown(dst, socket.SHUT_WR)
        return
    except _Abort as abort:
        if abort.reply:
            with contextlib.suppress(OSError):
                dst.sendall(abort.reply)
        tally.fail(_one_line(abort.reason))
    except Exception:
        pass  # a reset or a closed peer ends both directions
    _shutdown(src, socket.SHUT_RDWR)
    _shutdown(dst, socket.SHUT_RDWR)


class _Passthrough:
    done = False

    def feed(self, data: bytes) -> bytes:
        return data

    def finish(self) -> bytes:
        return b""


class _Length:
    """A body of ``left`` bytes (Content-Length; 0 when the request has none)."""

    def __init__(self, left: int) -> None:
        self._left = left

    @property
    def done(self) -> bool:
        return self._left == 0

    def feed(self, data: bytes) -> bytes:
        out = data[: self._left]
        self._left -= len(out)
        return out

    def finish(self) -> bytes:
        return b""


_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")


class _Chunked:
    """A chunked body, forwarded as is up to its last chunk and trailers."""

    def __init__(self) -> None:
        self._state = "size"  # size | data | data-end | trailer | done
        self._line = bytearray()
        self._left = 0

    @property
    def done(self) -> bool:
        return self._state == "done"

    def feed(self, data: bytes) -> bytes:
        pos = 0
        while pos < len(data) and self._state != "done":
            if self._state == "data":
                take = min(self._left, len(data) - pos)
                pos += take
                self._left -= take
                if self._left == 0:
                    self._state = "data-end"
                continue
            newline = data.find(b"\n", pos)
            end = len(data) if newline < 0 else newline + 1
            self._line += data[pos:end]
            pos = end
            if len(self._line) > _CHUNK_LINE_LIMIT:
                raise _Abort("a chunk line over 4 KiB in the request body")
            if newline >= 0:
                self._end_line(bytes(self._line))
                self._line.clear()
        return data[:pos]

    def _end_line(self, line: bytes) -> None:
        if not line.endswith(b"\r\n"):
            raise _Abort("a malformed chunked request body")
        text = line[:-2]
        if self._state == "data-end":
            if text:
                raise _Abort("a malformed chunked request body")
            self._state = "size"
        elif self._state == "size":
            size = text.split(b";", 1)[0].strip(b" \t")
            if not _CHUNK_SIZE.fullmatch(size):
                raise _Abort("a malformed chunk size in the request body")
            self._left = int(size, 16)
            self._state = "data" if self._left else "trailer"
        elif not text:  # trailer: a blank line ends the body
            self._state = "done"

    def finish(self) -> bytes:
        return b""


class _ResponseHeads:
    """Rewrites the final response head: hop-by-hop headers out, ``Connection: close`` in."""

    done = False

    def __init__(self) -> None:
        self._buf = bytearray()
        self._passing = False

    def feed(self, data: bytes) -> bytes:
        if self._passing:
            return data
        self._buf += data
        out = bytearray()
        while not self._passing:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > _HEAD_LIMIT:
                    raise _bad_upstream("the upstream's response head is over 64 KiB")
                return bytes(out)
            head = bytes(self._buf[:end])
            del self._buf[: end + 4]
            out += self._rewrite(head)
        out += self._buf
        self._buf.clear()
        return bytes(out)

    def _rewrite(self, head: bytes) -> bytes:
        lines = head.split(b"\r\n")
        status = re.fullmatch(rb"HTTP/1\.[01] ([1-5][0-9][0-9])(?: .*)?", lines[0])
        if status is None:
            raise _bad_upstream("the upstream sent a malformed response")
        code = int(status.group(1))
        if 100 <= code < 200 and code != 101:
            return head + b"\r\n\r\n"  # an interim response; the final one follows
        self._passing = True
        named = {b"connection", b"keep-alive", b"proxy-connection"}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"connection":
                named |= {token.strip().lower() for token in value.split(b",")}
        named -= {b"content-length", b"transfer-encoding"}
        kept = [line for line in lines[1:] if line.partition(b":")[0].strip().lower() not in named]
        return b"\r\n".join([lines[0], *kept, b"Connection: close"]) + b"\r\n\r\n"

    def finish(self) -> bytes:
        if not self._passing:
            raise _bad_upstream("the upstream closed without a complete response")
        return b""


def _bad_upstream(reason: str) -> _Abort:
    return _Abort(reason, _response(502, reason))


class _ServerNameCheck:
    """Holds the tunnel's first client bytes until a TLS ClientHello's server name
    is known to equal the CONNECT host (or the bytes are not TLS, or name none)."""

    done = False

    def __init__(self, host: str) -> None:
        self._host = host
        self._buf = bytearray()
        self._passing = False

    def feed(self, data: bytes) -> bytes:
        if self._passing:
            return data
        self._buf += data
        try:
            complete, name = _client_hello_server_name(bytes(self._buf))
        except ValueError as exc:
            raise _Abort(f"malformed TLS ClientHello: {exc}") from None
        if not complete:
            if len(self._buf) > _HELLO_LIMIT:
                raise _Abort("the TLS ClientHello is over 16 KiB")
            return b""
        if name is not None and name.lower() != self._host.lower():
            raise _Abort(f"TLS server name {name} differs from CONNECT host {self._host}")
        self._passing = True
        out = bytes(self._buf)
        self._buf.clear()
        return out

    def finish(self) -> bytes:
        return b""  # an unfinished ClientHello is never forwarded


def _client_hello_server_name(buf: bytes) -> tuple[bool, str | None]:
    """``(complete, server name)`` of a stream's start: ``(False, None)`` while more
    bytes are needed; ``(True, None)`` when it is not TLS or names no server.
    Raises ValueError for a malformed ClientHello."""
    if not buf or buf[0] != 0x16:
        return bool(buf), None
    if len(buf) < 2 or buf[1] != 0x03:
        return len(buf) >= 2, None
    handshake = bytearray()
    pos = 0
    while pos + 5 <= len(buf):
        length = int.from_bytes(buf[pos + 3 : pos + 5], "big")
        if buf[pos] != 0x16 or buf[pos + 1] != 0x03 or not 0 < length <= _HELLO_LIMIT:
            raise ValueError("not a TLS handshake record")
        if pos + 5 + length > len(buf):
            break
        handshake += buf[pos + 5 : pos + 5 + length]
        pos += 5 + length
        if len(handshake) < 4:
            continue
        if handshake[0] != 0x01:
            raise ValueError("the handshake does not start with a ClientHello")
        need = 4 + int.from_bytes(handshake[1:4], "big")
        if need > _HELLO_LIMIT:
            raise ValueError("over 16 KiB")
        if len(handshake) >= need:
            return True, _hello_server_name(bytes(handshake[4:need]))
    return False, None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    @property
    def left(self) -> int:
        return len(self._data) - self._pos

    def take(self, count: int) -> bytes:
        if count > self.left:
            raise ValueError("truncated")
        self._pos += count
        return self._data[self._pos - count : self._pos]

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")


def _hello_server_name(body: bytes) -> str | None:
    """The host name of a ClientHello body's server_name extension, or None."""
    hello = _Reader(body)
    hello.take(2 + 32)  # version, random
    hello.take(hello.number(1))  # session id
    hello.take(hello.number(2))  # cipher suites
    hello.take(hello.number(1))  # compression methods
    if hello.left == 0:
        return None
    extensions = _Reader(hello.take(hello.number(2)))
    seen: set[int] = set()
    name = None
    while extensions.left:
        kind = extensions.number(2)
        data = extensions.take(extensions.number(2))
        if kind in seen:
            raise ValueError("a repeated extension")
        seen.add(kind)
        if kind == 0:
            name = _server_name_extension(data)
    return name


def _server_name_extension(data: bytes) -> str:
    outer = _Reader(data)
    entries = _Reader(outer.take(outer.number(2)))
    if outer.left:
        raise ValueError("bytes after the server name list")
    names = []
    while entries.left:
        kind = entries.number(1)
        value = entries.take(entries.number(2))
        if kind == 0:
            names.append(value)
    if len(names) != 1:
        raise ValueError("the server_name extension does not hold exactly one host name")
    try:
        name = names[0].decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("a non-ASCII server name") from None
    if not name or not name.isprintable() or " " in name:
        raise ValueError("an empty or unprintable server name")
    return name


# -- addresses and small helpers ------------------------------------------------------


def _resolve(host: str, port: int) -> list[str]:
    """The addresses of ``host``, in the resolver's order."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in found]


_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_KINDS = (
    ("is_loopback", "loopback"),
    ("is_unspecified", "unspecified"),
    ("is_link_local", "link-local"),
    ("is_multicast", "multicast"),
    ("is_private", "private"),
    ("is_reserved", "reserved"),
)


def _special_kind(address: _IP) -> str | None:
    """What makes ``address`` not a public one (``"loopback"``, ``"private"``...), or None."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return _special_kind(address.ipv4_mapped)
        embedded = address.sixtofour or (address.teredo[1] if address.teredo else None)
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None and _special_kind(embedded) is not None:
            return f"{_special_kind(embedded)} (embedded)"
    for attribute, kind in _KINDS:
        if getattr(address, attribute):
            return kind
    if isinstance(address, ipaddress.IPv4Address) and address in _CGNAT:
        return "shared (CGNAT)"
    if not address.is_global:
        return "non-global"
    return None


_REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    408: "Request Timeout",
    502: "Bad Gateway",
}


def _response(status: int, reason: str) -> bytes:
    body = f"filegate: {_one_line(reason)}\n".encode("utf-8", "backslashreplace")
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _refuse(client: socket.socket, status: int, reason: str) -> None:
    """Answers and closes gently: unread client bytes would turn the close into a
    reset that can destroy the answer before the client reads it."""
    try:
        client.sendall(_response(status, reason))
        client.shutdown(socket.SHUT_WR)
        client.settimeout(_LINGER)
        deadline = time.monotonic() + _LINGER
        while time.monotonic() < deadline and client.recv(_BUFFER):
            pass
    except OSError:
        pass


def _shutdown(sock: socket.socket, how: int) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(how)


def _one_line(text: str) -> str:
    """``text`` with control characters escaped, so it stays one line."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def _quoted(text: str) -> str:
    shown = _one_line(text[:80]) + ("..." if len(text) > 80 else "")
    return f"'{shown}'"
