"""A sandboxed command's one way out: the egress proxy, mounted and wired in.

With no network rule a command keeps bubblewrap's empty network namespace
(``--unshare-all``): no interface but its own loopback, no resolver, nothing
to reach. With rules (:mod:`filegate.kernel.network_rules`) the namespace
stays the same, and one thing is added per command:

- on the host, an :class:`~filegate.backends.egress.EgressProxy` serving a
  Unix socket in a private directory (0700, this worker's user only), judging
  each new connection by the command's rules;
- that directory bind-mounted at :data:`SOCKET_DIR` inside the sandbox;
- the command started by a small forwarder (``backends/egress_forwarder.py``,
  stdlib only, run by the sandbox's ``python3``) that listens on the
  sandbox's own ``127.0.0.1:``:data:`PROXY_PORT` and relays each connection to
  the socket, with ``HTTP_PROXY``/``HTTPS_PROXY`` (both spellings) pointing
  there. ``pip``, ``curl`` and ``git`` use them unmodified.

A program that ignores the variables finds no route: the namespace has no
interface but loopback, no resolver is configured, UDP and raw sockets lead
nowhere. Killing the forwarder only takes the command's network away; the
socket it leaves reaches the same judge. What each connection got is
returned with the command's result (:class:`~filegate.kernel.protocol.NetworkUse`).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from filegate.backends.egress import ConnectionAsk, ConnectionEvent, EgressProxy, Verdict
from filegate.kernel.network_rules import NetworkRules, judge, normalise_host
from filegate.kernel.protocol import ExecuteResult, NetworkUse

SOCKET_DIR = "/run/filegate"
"""Where the proxy's socket directory is mounted inside the sandbox."""
SOCKET_NAME = "egress.sock"
PROXY_PORT = 3128
"""The forwarder's port on the sandbox's own loopback (nothing else listens there)."""
PYTHONS = ("/usr/local/bin/python3", "/usr/bin/python3")
"""Where the sandbox (which sees the host's ``/usr``) finds an interpreter for the forwarder."""
FORWARDER = Path(__file__).with_name("egress_forwarder.py")
NO_PYTHON = (
    "network rules need python3 at /usr/bin/python3 or /usr/local/bin/python3 (the "
    "sandbox's forwarder to the egress proxy runs on it)"
)


@functools.cache
def _forwarder_source() -> str:
    """The forwarder's text, read once per worker (it goes with every networked command)."""
    return FORWARDER.read_text()


class NetworkUnavailableError(RuntimeError):
    """The command's network rules cannot be served here: it is refused, not run offline."""


def _sandbox_python() -> str | None:
    """The interpreter the forwarder runs on inside the sandbox, or None."""
    return next((path for path in PYTHONS if os.access(path, os.X_OK)), None)


def proxy_environment() -> dict[str, str]:
    """The variables that send a command's HTTP(S) through the forwarder."""
    url = f"http://127.0.0.1:{PROXY_PORT}"
    names = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
    return {**dict.fromkeys(names, url), "NO_PROXY": "", "no_proxy": ""}


@dataclass(frozen=True)
class HostQuestion:
    """A connection an ``interrupt`` rule holds, put to whoever can ask a human."""

    host: str
    """As the rules compare it (lowercase, an IP literal normalised)."""
    port: int
    reason: str
    """The rule that asks."""


@dataclass(frozen=True)
class HostAnswer:
    allowed: bool
    reason: str


Asker = Callable[[HostQuestion, threading.Event], HostAnswer]
"""Asks the run about one host and port and waits for the answer, giving up
(a refusal) once the event is set: the command ended."""

_ASKER: ContextVar[Asker | None] = ContextVar("filegate_network_asker", default=None)


@contextmanager
def network_questions(asker: Asker | None) -> Iterator[None]:
    """Within the block, a sandboxed command's ``interrupt`` connections are put to
    ``asker`` (set by the tools worker's activity, in the thread that runs the
    command: a context variable does not follow a new thread). Without one they
    are refused: nothing could ask a human."""
    token = _ASKER.set(asker)
    try:
        yield
    finally:
        _ASKER.reset(token)


class _Judge:
    """The rules, and for an ``interrupt`` the run's answer, once per host and port."""

    def __init__(self, rules: NetworkRules, asker: Asker | None) -> None:
        self.rules = list(rules)
        self.asker = asker
        self.ended = threading.Event()
        self._answers: dict[tuple[str, int], HostAnswer] = {}
        self._locks: dict[tuple[str, int], threading.Lock] = {}
        self._lock = threading.Lock()

    def __call__(self, ask: ConnectionAsk) -> Verdict:
        found = judge(self.rules, ask.host, ask.port, method=ask.method, path=ask.path)
        if found.mode != "interrupt":
            return Verdict(found.mode == "allow", found.reason, found.private_ok)
        host, _ = normalise_host(ask.host)
        answer = self._answer(HostQuestion(host, ask.port, found.reason))
        return Verdict(answer.allowed, answer.reason, found.private_ok)

    def _answer(self, question: HostQuestion) -> HostAnswer:
        key = (question.host, question.port)
        with self._lock:
            one = self._locks.setdefault(key, threading.Lock())
        with one:  # one question per host and port, however many connections
            known = self._answers.get(key)
            if known is not None:
                return known
            if self.asker is None:
                answer = HostAnswer(
                    False,
                    f"{question.reason} asks a human, and nothing runs this command "
                    "that could ask one",
                )
            else:
                answer = self.asker(question, self.ended)
            self._answers[key] = answer
            return answer


@dataclass
class Egress:
    """One command's proxy: what to add to its bwrap argv and how to start it."""

    proxy: EgressProxy
    host_dir: str
    python: str

    def mounts(self) -> list[str]:
        return ["--bind", self.host_dir, SOCKET_DIR]

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started by the forwarder (its source handed over with ``-c``:
        the package is not mounted in the sandbox)."""
        socket_path = f"{SOCKET_DIR}/{SOCKET_NAME}"
        source = _forwarder_source()
        return [self.python, "-I", "-S", "-c", source, socket_path, str(PROXY_PORT), "--", *argv]

    def with_uses(self, result: ExecuteResult) -> ExecuteResult:
        """``result`` with what the command's connections got."""
        return result.model_copy(update={"network": summarise(self.proxy.events)})


def summarise(events: list[ConnectionEvent]) -> list[NetworkUse]:
    """One entry per host, port and outcome, in the order first seen."""
    uses: dict[tuple[str, int, bool, str], NetworkUse] = {}
    for event in events:
        key = (event.host, event.port, event.allowed, event.reason)
        seen = uses.get(key)
        if seen is None:
            uses[key] = NetworkUse(
                host=event.host,
                port=event.port,
                allowed=event.allowed,
                reason=event.reason,
                bytes_out=event.bytes_out,
                bytes_in=event.bytes_in,
            )
        else:
            seen.connections += 1
            seen.bytes_out += event.bytes_out
            seen.bytes_in += event.bytes_in
    return list(uses.values())


@contextmanager
def egress_for(rules: NetworkRules) -> Iterator[Egress]:
    """A proxy judging by ``rules`` for one command, stopped and removed after it.

    Raises :class:`NetworkUnavailableError` (:data:`NO_PYTHON`) when the sandbox
    has no interpreter for the forwarder.
    """
    python = _sandbox_python()
    if python is None:
        raise NetworkUnavailableError(NO_PYTHON)
    # /tmp, not TMPDIR: a socket path must stay under 108 bytes.
    host_dir = tempfile.mkdtemp(prefix="filegate-net-", dir="/tmp")
    try:
        os.chmod(host_dir, 0o700)
        path = os.path.join(host_dir, SOCKET_NAME)
        judging = _Judge(rules, _ASKER.get())
        with EgressProxy(judging, path) as proxy:
            try:
                yield Egress(proxy, host_dir, python)
            finally:
                judging.ended.set()  # a question still waiting gives up first
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)
