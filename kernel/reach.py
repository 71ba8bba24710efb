"""The rules judged where an operation lands, not only where the gate looked.

The gate (:mod:`filegate.kernel.gates`) judges a path as written and the
in-root target it resolves to. On a tree that something else can change at
the same time (a sandboxed or host command re-pointing a link), the target
the gate saw and the object the backend then opens can differ: a link that
led to ``/decoy`` when it was judged leads to ``/docs`` a few milliseconds
later. So a backend over real files reports what it *reached*, after it
opened the object (a descriptor, resolved beneath its root) and before it
reads or changes a byte, and :func:`check_reach` judges that path here.

- A reached path the gate already judged for this call keeps the gate's
  answer: the ordinary call, with nothing racing it, behaves exactly as
  before.
- Any other reached path is judged strictly: a ``deny`` or an ``interrupt``
  rule refuses (a human's approval covered the paths shown, not this one),
  and for a recursive delete so does a write-deny rule anywhere below it.

The guard travels in a context variable that :func:`~filegate.kernel.dispatch.run_tool`
sets around the backend call, because the backend protocol's methods (the
Deep Agents signatures) have no room for it; a wrapper with rules of its own
(a worker's policies, :mod:`filegate.backends.policy`) adds itself as one
more :class:`Judge` around its inner call. Without a judge (a backend used
directly, no rules) every check passes. Pure: no I/O.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal, Protocol

from filegate.kernel.permissions import (
    Rules,
    check_permission,
    delete_blockers,
    matching_interrupt_rule,
    read_denied,
)
from filegate.kernel.protocol import Visible
from filegate.kernel.visibility import read_visible, search_root_denied, to_virtual

ReachOp = Literal["read", "write", "mkdir", "search", "delete"]
"""``mkdir``: a missing parent made on the way to a write (judged as a write)."""

REACH_REFUSED = "permission denied: the path leads to a protected location"
"""What the model reads. It names no path: the reached one may be protected."""


class ReachRefused(PermissionError):
    """The object an operation reached is one the rules protect; nothing was done."""

    def __init__(self) -> None:
        super().__init__(errno.EACCES, REACH_REFUSED)


@dataclass
class Reach:
    """One call's rules, and the backend-local paths its gate already judged."""

    rules: Rules
    route_prefix: str = "/"
    judged: set[str] = field(default_factory=set)

    def note(self, local_paths: list[str]) -> None:
        """Record paths the gate judged (as written and resolved) for this call."""
        self.judged.update(path.rstrip("/") or "/" for path in local_paths)

    def refuses(self, op: ReachOp, local_path: str) -> bool:
        """True when the rules forbid ``op`` on the reached ``local_path``."""
        if not self.rules:
            return False
        path = local_path.rstrip("/") or "/"
        if settled(op, path, self.judged):
            return False
        virtual = to_virtual(self.route_prefix, path)
        if op == "search":
            # As the gate asks for a search root: an interrupt rule anywhere below
            # it (not only on the root itself) needs a human, who saw another root.
            return search_root_denied(self.rules, "read", virtual) or (
                matching_interrupt_rule(self.rules, "ls", {"path": virtual}) is not None
            )
        if op == "delete":
            if check_permission(self.rules, "write", virtual) != "allow":
                return True
            return bool(delete_blockers(self.rules, virtual, has_descendants=True))
        return check_permission(self.rules, "read" if op == "read" else "write", virtual) != (
            "allow"
        )

    def entry_visible(self, local_path: str) -> bool:
        """Whether a listing may name (and describe) what sits at ``local_path``."""
        if not self.rules:
            return True
        return not read_denied(self.rules, to_virtual(self.route_prefix, local_path))


def reach_for(rules: Rules, route_prefix: str = "/") -> Reach | None:
    """The guard for a call under ``rules`` (None without rules: nothing to judge)."""
    return Reach(list(rules), route_prefix) if rules else None


def settled(op: ReachOp, path: str, judged: set[str]) -> bool:
    """True when the gate's answer for ``judged`` already covers ``op`` at ``path``.

    A directory made on the way to a judged path is part of that write.
    """
    if path in judged:
        return True
    if op != "mkdir":
        return False
    prefix = path.rstrip("/") + "/"
    return any(other.startswith(prefix) for other in judged)


class Judge(Protocol):
    """One party judging what an operation reached: the call's rules, a worker's policies."""

    def refuses(self, op: ReachOp, local_path: str) -> bool: ...

    def entry_visible(self, local_path: str) -> bool: ...


_CURRENT: ContextVar[tuple[Judge, ...]] = ContextVar("filegate_reach", default=())


@contextmanager
def judged_at_reach(reach: Reach | None) -> Iterator[None]:
    """Make ``reach`` the only judge of backend operations run in this block (None: none)."""
    token = _CURRENT.set(() if reach is None else (reach,))
    try:
        yield
    finally:
        _CURRENT.reset(token)


@contextmanager
def also_judged(judge: Judge) -> Iterator[None]:
    """Add ``judge`` to the judges of this block (a wrapper backend's own rules)."""
    token = _CURRENT.set((*_CURRENT.get(), judge))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_reach() -> Reach | None:
    """The call's rules guarding this block, if any."""
    return next((j for j in _CURRENT.get() if isinstance(j, Reach)), None)


def note_judged(local_paths: list[str]) -> None:
    """The gate's half: remember what it judged (no guard: nothing to remember)."""
    reach = current_reach()
    if reach is not None:
        reach.note(local_paths)


def check_reach(op: ReachOp, local_path: str) -> None:
    """The backend's half: raise :class:`ReachRefused` when ``local_path`` may not be touched."""
    if any(judge.refuses(op, local_path) for judge in _CURRENT.get()):
        raise ReachRefused


def entry_visible(local_path: str) -> bool:
    """Whether a listing may show the object at the reached ``local_path``."""
    return all(judge.entry_visible(local_path) for judge in _CURRENT.get())


def reached_search(root: str, reached_root: str, visible: Visible | None) -> Visible | None:
    """``visible`` narrowed for a walk whose root ``root`` was reached at ``reached_root``.

    A found file sits below the directory actually opened; it is shown only
    when its path below that directory passes the read rules too.
    """
    reach = current_reach()
    if reach is None or (reached_root.rstrip("/") or "/") == (root.rstrip("/") or "/"):
        return visible
    moved = read_visible(reach.rules, reach.route_prefix, root, reached_root)
    if moved is None:
        return visible
    if visible is None:
        return moved
    first = visible
    return lambda local: first(local) and moved(local)


__all__ = [
    "REACH_REFUSED",
    "Judge",
    "Reach",
    "ReachRefused",
    "also_judged",
    "check_reach",
    "current_reach",
    "entry_visible",
    "judged_at_reach",
    "note_judged",
    "reach_for",
    "reached_search",
    "settled",
]
