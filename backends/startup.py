"""Start-time checks of a tools worker's configuration (contract §11).

A worker that would silently promise more than it enforces refuses to start,
with one line saying why and what to change:

- :func:`check_execute_policies`: path policies (``deny_write``,
  ``secret_scan``, any kind but ``rate_limit`` / ``deny_operations``) judge
  file-tool paths and contents only. A shell on an executing backend writes
  wherever it likes, so they do not constrain ``execute``; such a worker needs
  a *required* ``deny_operations`` policy on ``execute`` or an explicit opt-in.
- :func:`check_journal_outside`: the idempotency journal holds every mutating
  call's result; inside a served root the agent could read or forge it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from filegate.backends.settings import CommandSettings

if TYPE_CHECKING:
    from filegate.backends.policy import PolicyConfig
    from filegate.kernel.protocol import BackendProtocol

ALLOW_EXECUTE_ENV = CommandSettings.env_name("allow_execute_with_policies")
ALLOW_EXECUTE_FLAG = "--allow-execute-with-path-policies"
_NOT_PATH_KINDS = frozenset({"rate_limit", "deny_operations"})


def served_roots(backend: object) -> Iterator[str]:
    """Host directories ``backend`` serves (through policy wrappers and composite routes)."""
    inner = getattr(backend, "inner", None)
    if inner is not None:
        yield from served_roots(inner)
    default = getattr(backend, "default", None)
    routes = getattr(backend, "routes", None)
    if default is not None and isinstance(routes, Mapping):
        yield from served_roots(default)
        for routed in routes.values():
            yield from served_roots(routed)
    for attribute in ("root", "cwd"):
        value = getattr(backend, attribute, None)
        if isinstance(value, str):
            yield os.path.realpath(value)


def inside(path: Path | str, root: str) -> bool:
    """``path`` (resolved) is ``root`` or below it."""
    resolved = os.path.realpath(path)
    return resolved == root or resolved.startswith(root.rstrip("/") + "/")


def check_journal_outside(journal_dir: Path | str, backends: Mapping[str, object]) -> None:
    """Raise ValueError when the journal is inside (or is) a served root."""
    for name, backend in backends.items():
        for root in served_roots(backend):
            if inside(journal_dir, root):
                raise ValueError(
                    f"the idempotency journal {os.path.realpath(journal_dir)} is inside the root "
                    f"{root} of backend {name!r}, where the agent could read or change it: "
                    "choose a journal directory (--journal-dir / FILEGATE_STATE_DIR) outside it"
                )


def _execute_denied(config: PolicyConfig) -> bool:
    for name in config.required:
        spec = config.spec(name)
        if spec.kind == "deny_operations" and "execute" in getattr(spec, "operations", ()):
            return True
    return False


def check_execute_policies(
    backends: Mapping[str, BackendProtocol], config: PolicyConfig, *, allow: bool
) -> None:
    """Raise ValueError for an executing backend under path policies that cannot bind it."""
    path_policies = sorted(
        name for name, spec in config.policies.items() if spec.kind not in _NOT_PATH_KINDS
    )
    if allow or not path_policies or _execute_denied(config):
        return
    executing = sorted(name for name, backend in backends.items() if backend.can_execute)
    if executing:
        raise ValueError(
            f"path policies {path_policies} cannot constrain execute on backend "
            f"{executing[0]!r} (a shell writes any path and content): add a required "
            "deny_operations policy for execute, or accept the risk with "
            f"{ALLOW_EXECUTE_FLAG} / {ALLOW_EXECUTE_ENV}=1"
        )


__all__ = [
    "ALLOW_EXECUTE_ENV",
    "ALLOW_EXECUTE_FLAG",
    "check_execute_policies",
    "check_journal_outside",
    "inside",
    "served_roots",
]
