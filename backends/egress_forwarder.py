"""Runs inside the sandbox: a loopback HTTP proxy port that leads to the host's proxy.

The sandbox has no network of its own; its one way out is the host's egress
proxy (:mod:`filegate.backends.egress`) on a Unix socket bind-mounted into the
sandbox. Tools expect a TCP proxy (``HTTP_PROXY=http://127.0.0.1:PORT``), so
this forwarder listens on ``127.0.0.1:PORT`` (and ``[::1]:PORT`` when there is
IPv6 loopback) in the sandbox's own network namespace and relays each
connection, byte for byte, to that socket. It judges nothing: the host's proxy
does.

It is run as ``python3 -I -S -c <this file's text> SOCKET PORT -- ARGV...``, so
it uses the standard library only (the package is not mounted there) and runs
on older interpreters than the package needs. It forks one child that relays
with :mod:`selectors`, then *becomes* ARGV (``exec``): the command keeps this
pid, its signals and its exit status, and when it exits the sandbox's pid
namespace ends, taking the relay with it. Few imports, no thread and no
``subprocess``: this runs before every networked command, so its start-up is
what a command pays for having network rules (``bench/egress.py``). When
the proxy cannot be offered the command still runs, after one line on stderr,
so it fails at its own connection with a clear error instead of not running.
"""

from __future__ import annotations

import os
import selectors
import socket
import stat
import sys

_CHUNK = 65536
_PENDING_LIMIT = 4 * _CHUNK
"""Bytes held for a slow receiver before the sender is no longer read."""
_CONNECT_TIMEOUT = 5.0


def _listen(port: int) -> list[socket.socket]:
    """Listening sockets on 127.0.0.1 (required) and ::1 (when it exists)."""
    found = []
    for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            if family == socket.AF_INET:
                raise
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address, port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            if family == socket.AF_INET:
                raise
            continue
        found.append(sock)
    return found


class _Side:
    """One socket of a relayed pair; ``pending`` holds bytes waiting to be sent to it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.peer = self
        self.pending = bytearray()
        self.reading = True
        self.shut = False
        self.closed = False
        self.mask = 0


class _Relay:
    """Accepts on the listeners and relays each connection to the Unix socket."""

    def __init__(self, path: str, listeners: list[socket.socket]) -> None:
        self._path = path
        self._selector = selectors.DefaultSelector()
        for listener in listeners:
            self._selector.register(listener, selectors.EVENT_READ, None)

    def run(self, parent: int) -> None:
        """Relays until ``parent`` (the command) is gone: inside the sandbox its
        pid namespace ends first; elsewhere this check ends the relay."""
        while os.getppid() == parent:
            for key, events in self._selector.select(timeout=0.5):
                if key.data is None:
                    self._accept(key.fileobj)  # type: ignore[arg-type]
                elif not key.data.closed:
                    self._service(key.data, events)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # nothing more to accept (or out of descriptors)
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.settimeout(_CONNECT_TIMEOUT)
                upstream.connect(self._path)
            except OSError as exc:
                upstream.close()
                _unavailable(client, exc)
                continue
            client.setblocking(False)
            upstream.setblocking(False)
            try:  # noqa: SIM105 (contextlib: an import this start-up does without)
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            near, far = _Side(client), _Side(upstream)
            near.peer, far.peer = far, near
            self._update(near)
            self._update(far)

    def _service(self, side: _Side, events: int) -> None:
        if events & selectors.EVENT_WRITE:
            self._flush(side)
        if events & selectors.EVENT_READ and not side.closed:
            self._read(side)
        if side.closed:
            return
        if not (side.reading or side.peer.reading or side.pending or side.peer.pending):
            self._close(side)
            return
        self._update(side)
        self._update(side.peer)

    def _read(self, side: _Side) -> None:
        try:
            data = side.sock.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(side)
            return
        if data:
            side.peer.pending += data
            self._flush(side.peer)
            return
        side.reading = False
        if not side.peer.pending:
            _shut(side.peer)

    def _flush(self, side: _Side) -> None:
        while side.pending:
            try:
                sent = side.sock.send(side.pending)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._close(side)
                return
            del side.pending[:sent]
        if not side.peer.reading:
            _shut(side)

    def _update(self, side: _Side) -> None:
        if side.closed:
            return
        mask = 0
        if side.reading and len(side.peer.pending) < _PENDING_LIMIT:
            mask |= selectors.EVENT_READ
        if side.pending:
            mask |= selectors.EVENT_WRITE
        if mask == side.mask:
            return
        if side.mask == 0:
            self._selector.register(side.sock, mask, side)
        elif mask == 0:
            self._selector.unregister(side.sock)
        else:
            self._selector.modify(side.sock, mask, side)
        side.mask = mask

    def _close(self, side: _Side) -> None:
        for each in (side, side.peer):
            if each.closed:
                continue
            each.closed = True
            if each.mask:
                self._selector.unregister(each.sock)
            each.sock.close()


def _shut(side: _Side) -> None:
    if not side.shut:
        side.shut = True
        try:  # noqa: SIM105 (as above)
            side.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _unavailable(client: socket.socket, exc: OSError) -> None:
    """Answers a client whose connection cannot reach the proxy, then closes it."""
    body = f"filegate: network proxy unavailable: {exc.strerror or exc}\n".encode()
    head = (
        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    try:
        client.setblocking(True)
        client.settimeout(1.0)
        client.sendall(head.encode() + body)
        client.shutdown(socket.SHUT_WR)
        client.setblocking(False)
        client.recv(_CHUNK)  # what the client sent already: no reset on close
    except OSError:
        pass
    client.close()


def _socket_problem(path: str) -> str | None:
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    return None if stat.S_ISSOCK(mode) else f"{path} is not a socket"


def _exec(command: list[str]) -> int:
    """Becomes ``command`` (same pid: its signals and exit status are its own);
    returns only when it cannot be run, with the shell's status for that."""
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"filegate: cannot run {command[0]}: {exc.strerror or exc}\n")
        return 127 if isinstance(exc, FileNotFoundError) else 126


def _serve_in_child(relay: _Relay) -> None:
    """Relays in a forked child until the sandbox ends.

    The command then exits as this process (``exec``), and the sandbox's pid
    namespace ends with it, taking the relay along. The relay keeps no pipe of
    the command's open, so the command's output ends when the command does.
    """
    parent = os.getpid()
    if os.fork() != 0:
        return
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    try:
        relay.run(parent)
    finally:
        os._exit(0)


def main() -> int:
    args = sys.argv[1:]
    if len(args) < 4 or args[2] != "--":
        sys.stderr.write("usage: egress_forwarder SOCKET PORT -- COMMAND [ARG...]\n")
        return 2
    path, port_text, command = args[0], args[1], args[3:]
    problem = _socket_problem(path)
    listeners: list[socket.socket] = []
    if not (port_text.isdigit() and 0 < int(port_text) < 65536):
        problem = problem or f"the port {port_text!r} is not 1 to 65535"
    else:
        try:
            listeners = _listen(int(port_text))
        except OSError as exc:
            why = exc.strerror or exc
            problem = problem or f"cannot listen on 127.0.0.1:{port_text}: {why}"
    if problem:
        sys.stderr.write(f"filegate: network proxy unavailable: {problem}\n")
        sys.stderr.flush()
    if listeners:
        _serve_in_child(_Relay(path, listeners))
        for listener in listeners:  # the command does not inherit them
            listener.close()
    return _exec(command)


if __name__ == "__main__":
    sys.exit(main())
