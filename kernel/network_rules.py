"""Network rules: which hosts a sandboxed command may connect to (docs/network.md).

A command in the bubblewrap sandbox has no network of its own. Its one way
out is the egress proxy the tools worker runs beside it
(``backends/egress.py``), and the proxy asks :func:`judge` about every new
connection. So network access is one more operation under the same modes as
files: ``allow``, ``deny`` and ``interrupt``, first matching rule in
declaration order, and -- unlike file rules -- **no match means no
connection**: a run without network rules keeps today's behaviour, a command
with no network at all.

What a rule names:

- ``hosts``: exact host names (``pypi.org``), suffix patterns (``*.pythonhosted.org``
  matches ``files.pythonhosted.org`` but not ``pythonhosted.org`` itself), or IP
  literals (``127.0.0.1``, ``::1``). Names are compared case-insensitively; a
  name is never resolved here.
- ``ports``: the ports it covers; none named means every port.
- ``methods`` and ``path_prefixes``: plain-HTTP requests only (the proxy sees
  the request line; inside an HTTPS tunnel it sees nothing). An ``allow`` rule
  with them therefore never lets a ``CONNECT`` tunnel through, while a ``deny``
  rule with them refuses a tunnel to its host and port outright: the method of
  a request inside TLS cannot be checked, so it is not assumed harmless.

Loopback, private and link-local addresses are the host's own services and
its neighbours': the proxy refuses a name that resolves to one unless the rule
that allowed it names that address itself (an IP literal), never through a
name whose resolution happens to land there (:attr:`Judgement.private_ok`).

Pure Python (no sockets, no resolver): the workflow validates these rules in
its configuration check and the tools worker judges connections with them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Mode = Literal["allow", "deny", "interrupt"]

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_METHOD = re.compile(r"^[A-Z]{1,20}$")
MAX_NAME = 253


def ip_literal(host: str) -> str | None:
    """``host`` as a normalised IP address when it is one (``[::1]`` too), else None."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if "%" in text:  # a zone id names an interface, not an address
        return None
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def host_port(host: str, port: object) -> str:
    """``host:port`` as every record and message writes it (``[v6]:port`` for IPv6)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def name_problem(host: str) -> str | None:
    """Why ``host`` is not a plain DNS host name (lowercase expected), or None."""
    if not host:
        return "an empty host name"
    if len(host) > MAX_NAME:
        return f"a host name over {MAX_NAME} characters"
    if host.endswith("."):
        return f"host name {host!r} ends with a dot"
    labels = host.split(".")
    for label in labels:
        if not _LABEL.match(label):
            return f"host name {host!r} is not a plain DNS name"
    if re.fullmatch(r"[0-9]+|0x[0-9a-f]*", labels[-1]):
        return f"host {host!r} is an IP address in a non-standard form"
    return None


def _pattern(value: str) -> str:
    """One ``hosts`` entry, normalised; a clear error for one that could never match."""
    host = value.strip().lower()
    literal = ip_literal(host)
    if literal is not None:
        return literal
    if host == "*" or (host.startswith("*.") and host.count("*") == 1):
        suffix = host[2:]
        if host == "*" or not suffix:
            raise ValueError(
                "'*' would allow every host: name the hosts, or '*.example.com' for "
                "the names below one domain"
            )
        problem = name_problem(suffix)
    else:
        problem = name_problem(host)
    if problem is not None:
        raise ValueError(f"hosts entry {value!r}: {problem}")
    return host


class NetworkPermission(BaseModel):
    """One network rule: which hosts (and ports, methods, paths) decide what."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hosts: list[str] = Field(
        min_length=1,
        description="Host names ('pypi.org'), '*.suffix' patterns or IP literals.",
    )
    ports: list[int] | None = Field(
        default=None, description="Ports the rule covers; none named: every port."
    )
    methods: list[str] | None = Field(
        default=None, description="Plain HTTP only: request methods ('GET', 'HEAD')."
    )
    path_prefixes: list[str] | None = Field(
        default=None, description="Plain HTTP only: request paths starting with one of these."
    )
    mode: Mode = Field(default="allow", description="What a match means: allow, deny or interrupt.")

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        return [_pattern(entry) for entry in value]

    @field_validator("ports")
    @classmethod
    def _ports(cls, value: list[int] | None) -> list[int] | None:
        if value is not None:
            bad = [port for port in value if not 1 <= port <= 65535]
            if bad or not value:
                raise ValueError(f"ports must be 1-65535 and not empty, not {value}")
        return value

    @field_validator("methods")
    @classmethod
    def _methods(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        upper = [method.upper() for method in value]
        if not upper or any(not _METHOD.match(method) for method in upper):
            raise ValueError(f"methods must be HTTP method names, not {value}")
        return upper

    @field_validator("path_prefixes")
    @classmethod
    def _paths(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or any(not p.startswith("/") for p in value)):
            raise ValueError(f"path_prefixes must start with '/', not {value}")
        return value

    @property
    def plain_http_only(self) -> bool:
        """Whether the rule looks inside requests (methods or paths)."""
        return self.methods is not None or self.path_prefixes is not None

    def host_pattern_for(self, host: str, port: int) -> str | None:
        """The first of this rule's ``hosts`` entries naming ``host`` on ``port``."""
        if self.ports is not None and port not in self.ports:
            return None
        for pattern in self.hosts:
            if pattern == host or (pattern.startswith("*.") and host.endswith(pattern[1:])):
                return pattern
        return None

    def covers_request(self, method: str | None, path: str | None) -> bool:
        """Whether the rule's method and path conditions hold (plain HTTP)."""
        if method is None:
            return not self.plain_http_only
        if self.methods is not None and method.upper() not in self.methods:
            return False
        return self.path_prefixes is None or any(
            (path or "/").startswith(prefix) for prefix in self.path_prefixes
        )


NetworkRules = Sequence[NetworkPermission]


@dataclass(frozen=True)
class Judgement:
    """What the rules say about one connection."""

    mode: Mode
    reason: str
    """One line: the rule that decided, or why nothing did."""
    private_ok: bool = False
    """The deciding rule names this address itself (an IP literal): the proxy may
    reach it even in loopback, private or link-local ranges."""
    rule: int | None = None
    """Index of the deciding rule, None when none matched."""


def normalise_host(host: str) -> tuple[str, str | None]:
    """``(host, problem)``: the host as rules compare it (lowercase, an IP literal
    normalised) or why it is no host name at all (checked before any rule)."""
    if any(ord(ch) < 33 or ord(ch) > 126 for ch in host):
        return host, f"host {host!r} has spaces, control or non-ASCII characters"
    literal = ip_literal(host)
    if literal is not None:
        return literal, None
    lowered = host.lower()
    return lowered, name_problem(lowered)


def judge(
    rules: NetworkRules,
    host: str,
    port: int,
    *,
    method: str | None = None,
    path: str | None = None,
) -> Judgement:
    """The first rule naming ``host:port`` decides; none: deny (module docstring).

    ``method``/``path``: a plain-HTTP request's line; None for a tunnel (CONNECT).
    """
    name, problem = normalise_host(host)
    if problem is not None:
        return Judgement("deny", problem)
    where = host_port(name, port)
    for index, rule in enumerate(rules):
        pattern = rule.host_pattern_for(name, port)
        if pattern is None:
            continue
        if method is None and rule.plain_http_only:
            if rule.mode == "allow":
                continue  # looks inside plain HTTP: says nothing about a tunnel
            return Judgement(
                rule.mode,
                f"network rule {index + 1} ({rule.mode} {pattern} for some HTTP requests) "
                f"refuses a tunnel to {where}: what goes through it cannot be checked",
                rule=index,
            )
        if not rule.covers_request(method, path):
            continue
        private_ok = ip_literal(pattern) is not None
        return Judgement(
            rule.mode, f"network rule {index + 1} ({rule.mode} {pattern})", private_ok, index
        )
    return Judgement("deny", f"no network rule names {where}")


NETWORK_NEEDS_SANDBOX = (
    "network rules need the bubblewrap sandbox: a host shell's commands use the host's "
    "network, which no rule can hold (filegate worker --backend sandbox; "
    "BackendRef(sandboxed=True))"
)


class NetworkAsk(BaseModel):
    """What a tools worker asks the run (``wire.NETWORK_ASK_UPDATE``) about a
    connection an ``interrupt`` rule holds. The run judges the host again by its
    own rules: the asker's word decides nothing."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field(max_length=MAX_NAME + 2)
    port: int = Field(ge=1, le=65535)
    tool_call_id: str = Field(max_length=500)
    """The ``execute`` call whose command connects."""
    command: str = Field(default="", max_length=4000)
    """The command (clipped), for the reviewer's card."""


class NetworkAnswer(BaseModel):
    """The run's answer: the connection may go through, or why not."""

    allowed: bool
    reason: str = ""
    decided_by: str | None = None


def enforcement_problem(
    rules: NetworkRules,
    *,
    sandboxed: bool = True,
    runs_commands: bool = True,
    can_ask: bool = False,
) -> str | None:
    """Why these rules cannot be enforced, or None (checked at configuration, and
    by the tools worker for a request built by hand). Rules no command would
    meet are refused too: a user who wrote them expects them to do something.

    ``can_ask``: a run that can hold a connection while a human decides
    (``AgentWorkflow``, ``FileTools``); elsewhere an ``interrupt`` rule is refused.
    """
    if rules and not runs_commands:
        return (
            "network rules govern commands' connections, and no command runs here "
            "(execute is not offered): serve the bubblewrap sandbox, or drop the rules"
        )
    if rules and not sandboxed:
        return NETWORK_NEEDS_SANDBOX
    for index, rule in enumerate(rules):
        if rule.mode == "interrupt" and not can_ask:
            return (
                f"network rule {index + 1} is in interrupt mode, and nothing here can "
                "ask a human while a command's connection waits (AgentWorkflow and "
                "FileTools can): use allow or deny"
            )
    return None


__all__ = [
    "NETWORK_NEEDS_SANDBOX",
    "Judgement",
    "NetworkAnswer",
    "NetworkAsk",
    "NetworkPermission",
    "NetworkRules",
    "enforcement_problem",
    "host_port",
    "ip_literal",
    "judge",
    "name_problem",
    "normalise_host",
]
