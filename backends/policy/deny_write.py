"""The ``deny_write`` policy kind: protected path prefixes and globs."""

from __future__ import annotations

from collections.abc import Sequence

from wcmatch import glob as wc_glob

from filegate.backends.policy.base import WRITE_OPERATIONS, Call, Policy, Refusal, names_operation
from filegate.kernel.paths import validate_path
from filegate.kernel.permissions import FilesystemPermission, delete_blockers
from filegate.kernel.protocol import (
    BackendProtocol,
)


class DenyWritePolicy(Policy):
    """Refuse writes under path prefixes or matching globs (the seeds' ``deny_prefixes``).

    A prefix matches whole components (``/etc`` covers ``/etc/x``, not
    ``/etc2``). Globs use the permission-rule syntax (``**``, braces, dotfiles
    included). ``delete`` is refused when the deleted subtree *overlaps* a
    protected path (deleting ``/`` would take ``/etc`` with it), using the
    same overlap rules as the permission gate; the inner backend is asked
    (``ls``) whether the target is a leaf so a file delete is judged exactly.
    """

    def __init__(
        self,
        name: str,
        prefixes: Sequence[str] = (),
        globs: Sequence[str] = (),
        operations: Sequence[str] = WRITE_OPERATIONS,
    ) -> None:
        super().__init__(name)
        unknown = set(operations) - set(WRITE_OPERATIONS)
        if unknown:
            raise ValueError(f"deny_write governs {WRITE_OPERATIONS}, not {sorted(unknown)}")
        self.operations = frozenset(operations)
        self._rules: list[tuple[str, FilesystemPermission]] = []
        for prefix in prefixes:
            literal = wc_glob.escape(validate_path(prefix))
            patterns = ["/**"] if literal == "/" else [literal, literal + "/**"]
            self._rules.append((f"prefix:{validate_path(prefix)}", _deny_rule(patterns)))
        for pattern in globs:
            self._rules.append((f"glob:{pattern}", _deny_rule([pattern])))

    def check(self, call: Call, inner: BackendProtocol) -> Refusal | None:
        if not names_operation(self.operations, call.operation) or call.path is None:
            return None
        path = call.path
        if call.operation == "delete":
            leafy = _may_have_descendants(inner, path)
            hits = [label for label, rule in self._rules if delete_blockers([rule], path, leafy)]
        else:
            hits = [label for label, rule in self._rules if rule.matches(path)]
        if not hits:
            return None
        return Refusal(
            policy=self.name,
            rule=hits[0],
            message=(
                f"{call.operation} refused by policy '{self.name}' "
                f"(protected path rule {', '.join(hits)}). Do not retry; choose another path."
            ),
        )


def _deny_rule(patterns: list[str]) -> FilesystemPermission:
    return FilesystemPermission(operations=["write"], paths=patterns, mode="deny")


def _may_have_descendants(inner: BackendProtocol, path: str) -> bool:
    """False only when the inner backend shows ``path`` is a file, empty or absent."""
    listing = inner.ls(path)
    if listing.ok:
        return bool(listing.entries)
    return listing.code not in ("not_a_directory", "file_not_found")
