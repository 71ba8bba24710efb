"""What permission rules mean for ``execute``: one answer for every entry point (contract §5).

A shell command reaches files without going through the file tools, so a
path rule holds for ``execute`` only where something other than the gate
enforces it. Per rule, one of these must be true, or the configuration is
refused before any tool runs (:func:`check_execute_gate`):

- the rule's paths lie in composite routes the shell cannot reach;
- ``execute`` itself waits for a human before every command
  (``interrupt_on.execute`` with ``always``) or is not offered at all;
- the backend runs commands in Filegate's bubblewrap sandbox and the rule
  *compiles* into each command's view of the workspace (:func:`compile_view`):
  a read ``deny``/``interrupt`` subtree is hidden (an empty read-only
  directory in its place), a write ``deny``/``interrupt`` subtree is mounted
  read-only.

Only rules that *protect* something count (``deny`` and ``interrupt``); an
``allow`` rule permits, so it needs no enforcement. The compiled view is never
weaker than the rules and sometimes stricter: allow rules carve no exceptions
out of a protected subtree, a literal directory rule protects what is below it
too, and a read-only directory also refuses new files the rules would allow.
Whether a compiled path can be mounted depends on the workspace at the
moment a command starts (a file where the rule needs a directory, a link),
so that last check is the sandbox's: it refuses the command in one line
naming the rule each :class:`ProtectedPath` carries
(``backends/sandbox_view.py``).

The tools worker applies the same compilation to every ``execute`` request
(``kernel.dispatch``), so a request built by hand (typed activity stubs, the
Deep Agents adapter) gets the same answer: a host shell with protecting rules
runs a command only when a human approved that command.

Pure Python: the workflow imports this for its configuration check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from filegate.kernel.network_rules import NetworkPermission
from filegate.kernel.paths import is_within, validate_path
from filegate.kernel.permissions import FilesystemPermission, Rules
from filegate.kernel.protocol import ExecuteResult
from filegate.kernel.rule_patterns import pattern_alternatives

PROTECTING_MODES = frozenset({"deny", "interrupt"})
"""Rule modes the shell could bypass; ``allow`` needs no enforcement."""

HOST_SHELL = "a host shell, which reaches files without the path rules"
"""Why a backend without a sandbox cannot hold path rules for ``execute``."""

REMEDIES = (
    "gate every command (interrupt_on execute: always), keep the rule's paths in a "
    "route the shell cannot reach, or serve the backend with the bubblewrap sandbox "
    "(filegate worker --backend sandbox; BackendRef(sandboxed=True))"
)
SANDBOX_REMEDIES = (
    "write the rule as a literal path or 'dir/**', gate every command (interrupt_on "
    "execute: always), or keep the rule's paths in a route the shell cannot reach"
)


class ExecuteGateError(ValueError):
    """Permission rules that ``execute`` on this backend could bypass.

    ``rule_number`` counts from 1 in declaration order, ``pattern`` is the
    rule's offending pattern; the message names both and the backend.
    """

    def __init__(self, message: str, *, rule_number: int, pattern: str, backend: str) -> None:
        super().__init__(message)
        self.rule_number = rule_number
        self.pattern = pattern
        self.backend = backend


@dataclass(frozen=True)
class ProtectedPath:
    """One subtree of the shell's root that a command may not read or change.

    ``path`` is a validated path of the shell's backend (route ``/``).
    ``hidden``: a read rule protects it, so the command must not see it (an
    empty read-only directory, or an empty file, takes its place).
    ``frozen``: a write rule protects it, so it is mounted read-only (and a
    missing one may not be created). At least one of the two is set.
    ``rule``: the first rule that asked for this entry, as refusals name it
    (``permission rule 2 (deny write /docs/**)``); not part of equality, so
    a view built by hand compares equal to a compiled one.
    ``itself``: a rule matches the path itself (a literal rule), not only
    what lies below it (``dir/**``); when not, a file there is a name the
    rules let anyone replace with the protected directory, so the sandbox
    refuses the command rather than mount over it.
    """

    path: str
    hidden: bool
    frozen: bool
    rule: str = field(default="", compare=False)
    itself: bool = field(default=True, compare=False)

    def covers(self, inner: ProtectedPath) -> bool:
        """Whether this entry already protects everything ``inner`` asks for."""
        if not is_within(inner.path, self.path):
            return False
        return self.hidden or not inner.hidden


@dataclass(frozen=True)
class SandboxView:
    """What a sandboxed command may not touch, shallowest paths first.

    Invariants (checked when built): every path is validated, every entry
    protects something, and no entry is covered by an earlier one.
    """

    protected: tuple[ProtectedPath, ...] = ()
    network: tuple[NetworkPermission, ...] = ()
    """The command's network rules: with any, its one way out is the egress proxy
    that judges each connection by them (``backends/egress.py``); without, it has
    no network at all."""

    def __post_init__(self) -> None:
        for index, entry in enumerate(self.protected):
            if validate_path(entry.path) != entry.path:
                raise ValueError(f"sandbox view path {entry.path!r} is not validated")
            if not (entry.hidden or entry.frozen):
                raise ValueError(f"sandbox view entry {entry.path!r} protects nothing")
            for outer in self.protected[:index]:
                if outer.covers(entry):
                    raise ValueError(f"sandbox view entry {entry.path!r} is inside {outer.path!r}")

    def __bool__(self) -> bool:
        return bool(self.protected or self.network)


@dataclass(frozen=True)
class _Protection:
    rule_number: int
    rule: FilesystemPermission
    pattern: str


def _protections(rules: Rules, skip_prefixes: Sequence[str]) -> list[_Protection]:
    """Each (rule, pattern) a command could bypass, in declaration order.

    Patterns whose every alternative lies inside ``skip_prefixes`` (routes the
    shell cannot reach) are left out.
    """
    roots = [validate_path(prefix) for prefix in skip_prefixes]
    found: list[_Protection] = []
    for number, rule in enumerate(rules, start=1):
        if rule.mode not in PROTECTING_MODES:
            continue
        for pattern in rule.paths:
            alternatives = pattern_alternatives(pattern)
            if all(any(is_within(alt.anchor, root) for root in roots) for alt in alternatives):
                continue
            found.append(_Protection(number, rule, pattern))
    return found


def protecting_rules(rules: Rules, skip_prefixes: Sequence[str] = ()) -> list[FilesystemPermission]:
    """The rules a shell could bypass, each cut down to its patterns the shell can reach.

    The workflow sends these with an ``execute`` request, so the tools worker
    compiles exactly what reaches the command.
    """
    kept: dict[int, list[str]] = {}
    rule_of: dict[int, FilesystemPermission] = {}
    for item in _protections(rules, skip_prefixes):
        kept.setdefault(item.rule_number, []).append(item.pattern)
        rule_of[item.rule_number] = item.rule
    return [rule_of[n].model_copy(update={"paths": paths}) for n, paths in kept.items()]


def _refusal(item: _Protection, backend: str, why: str, remedies: str) -> ExecuteGateError:
    """The gate's error for ``item``: the rule, its pattern and the backend, why, what to do."""
    return ExecuteGateError(
        f"{_describe(item)} cannot hold for execute on backend {backend!r}: {why}; {remedies}.",
        rule_number=item.rule_number,
        pattern=item.pattern,
        backend=backend,
    )


def _describe(item: _Protection) -> str:
    rule = item.rule
    what = f"{rule.mode} {'/'.join(rule.operations)} {item.pattern}"
    return f"permission rule {item.rule_number} ({what})"


def _uncompilable(pattern: str) -> str | None:
    """Why ``pattern`` cannot be expressed as mounts, or None when it can."""
    for alt in pattern_alternatives(pattern):
        if alt.literal or alt.suffix == ("**",):
            continue
        return (
            f"the wildcard in {alt.raw!r} cannot be expressed as mounts (only literal "
            "paths and 'dir/**' compile into the sandbox's view)"
        )
    return None


def _subtrees(pattern: str) -> list[str]:
    """The subtrees a compilable pattern protects: each alternative's anchor."""
    return [alt.anchor for alt in pattern_alternatives(pattern)]


def compile_view(
    rules: Rules,
    *,
    skip_prefixes: Sequence[str] = (),
    backend: str = "?",
    lenient: bool = False,
    network: Sequence[NetworkPermission] = (),
) -> SandboxView:
    """The sandbox view that enforces ``rules`` for a command (module docstring).

    Raises :class:`ExecuteGateError` naming the first rule that does not
    compile, unless ``lenient`` (a command a human approved): then that rule
    is left to the human's judgement and the rest still compile.
    """
    read: set[str] = set()
    write: set[str] = set()
    named: dict[tuple[bool, str], str] = {}  # (a write rule?, path): the first such rule
    literal: set[str] = set()
    for item in _protections(rules, skip_prefixes):
        reason = _uncompilable(item.pattern)
        if reason is not None:
            if lenient:
                continue
            raise _refusal(item, backend, reason, SANDBOX_REMEDIES)
        subtrees = _subtrees(item.pattern)
        if "read" in item.rule.operations:
            read.update(subtrees)
        if "write" in item.rule.operations:
            write.update(subtrees)
        for path in subtrees:
            named.setdefault(("write" in item.rule.operations, path), _describe(item))
        literal.update(alt.anchor for alt in pattern_alternatives(item.pattern) if alt.literal)
    return _view(read, write, named, literal, tuple(network))


def _view(
    read: set[str],
    write: set[str],
    named: dict[tuple[bool, str], str],
    literal: set[str],
    network: tuple[NetworkPermission, ...],
) -> SandboxView:
    """The entries, each naming its first write rule (else read rule): a refusal is
    mostly about what a command could change."""
    entries = [
        ProtectedPath(path, path in read, path in write, _first(named, path), path in literal)
        for path in read | write
    ]
    entries.sort(key=lambda e: (_depth(e.path), e.path))
    kept: list[ProtectedPath] = []
    for entry in entries:
        if not any(outer.covers(entry) for outer in kept):
            kept.append(entry)
    return SandboxView(tuple(kept), network)


def _first(named: dict[tuple[bool, str], str], path: str) -> str:
    return named.get((True, path)) or named.get((False, path), "")


def _depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


ViewExecutor = Callable[[str, "float | None", SandboxView], ExecuteResult]
"""``execute_in_view(command, timeout, view)`` of a backend that compiles rules."""


def view_executor(backend: Any) -> ViewExecutor | None:
    """The backend's ``execute_in_view`` when it runs commands in a compiled view, else None.

    Optional, like ``resolve_path``: a backend (or a wrapper forwarding to
    one) declares it with ``compiles_rules = True``.
    """
    run = getattr(backend, "execute_in_view", None)
    if getattr(backend, "compiles_rules", False) is True and callable(run):
        return run  # type: ignore[no-any-return]
    return None


def forwarded_view_executor(inner: Any) -> ViewExecutor:
    """``inner``'s ``execute_in_view``, for a wrapper that forwards it (composite, policies).

    A wrapper says ``compiles_rules`` only when ``inner`` does, so the dispatcher
    never calls it otherwise; a direct call on one that does not is a bug.
    """
    run = view_executor(inner)
    if run is None:
        raise TypeError(f"{type(inner).__name__} does not compile rules")
    return run


def _overlaps(path: str, root: str) -> bool:
    return is_within(path, root) or is_within(root, path)


def check_execute_gate(
    rules: Rules,
    *,
    backend: str,
    can_execute: bool,
    sandboxed: bool = False,
    unreachable_prefixes: Sequence[str] = (),
    reachable_prefixes: Sequence[str] = (),
    execute_gated: bool = False,
) -> None:
    """Refuse rules that ``execute`` on ``backend`` could bypass (module docstring).

    ``unreachable_prefixes``: composite routes the shell cannot reach (their
    rules need nothing). ``reachable_prefixes``: routes served elsewhere that
    the shell sees at another host path; a sandbox cannot compile their rules.
    Raises :class:`ExecuteGateError` naming the first offending rule.
    """
    if not can_execute or execute_gated:
        return
    protections = _protections(rules, unreachable_prefixes)
    if not protections:
        return
    if not sandboxed:
        raise _refusal(protections[0], backend, f"it is {HOST_SHELL}", REMEDIES)
    roots = [validate_path(prefix) for prefix in reachable_prefixes]
    for item in protections:
        for alt in pattern_alternatives(item.pattern):
            route = next((r for r in roots if _overlaps(alt.anchor, r)), None)
            if route is not None:
                why = (
                    f"the sandbox sees route {route} at another path, "
                    "so its view cannot hide or freeze it"
                )
                raise _refusal(item, backend, why, SANDBOX_REMEDIES)
    compile_view(rules, skip_prefixes=unreachable_prefixes, backend=backend)


__all__ = [
    "PROTECTING_MODES",
    "ExecuteGateError",
    "ProtectedPath",
    "SandboxView",
    "check_execute_gate",
    "compile_view",
    "forwarded_view_executor",
    "protecting_rules",
    "view_executor",
]
