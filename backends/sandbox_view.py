"""A compiled :class:`~filegate.kernel.execute_gate.SandboxView` as bubblewrap mounts.

The kernel decides *what* a command may not touch; this module turns it into
mounts over the workspace bind, on the host, just before each command:

- a hidden directory gets an empty tmpfs of mode 0555 and a few KiB (what a
  command may put there after a chmod stays in memory and is gone with the
  command; not remounting it read-only saves bwrap a mount-table scan, which
  is most of a mount's cost); a hidden file gets ``/dev/null`` bound
  read-only over it (reads see nothing);
- a read-only path is bound onto itself read-only;
- every directory between the workspace and a protected path is bound onto
  itself (read-write), so it is a mount point: ``mv a b`` of an ancestor fails
  with EBUSY instead of carrying the protected subtree to an unprotected name;
- a write-protected path that does not exist yet gets a placeholder directory
  for the command's lifetime (removed afterwards when still empty), so the
  command cannot create it; a read-only-hidden path that does not exist has
  nothing to hide and is skipped.

Mounts act on resolved paths inside the sandbox's mount namespace, so no
symlink, planted before the command or made by it, reaches behind them.
Each path is resolved on the host first and must stay inside the root: a
symlink out of the workspace is left alone (its target is not in the sandbox).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from filegate.kernel.execute_gate import ProtectedPath, SandboxView

HIDDEN_TMPFS_BYTES = 16 * 1024
"""Size of the empty tmpfs over a hidden directory (nothing of it reaches the host)."""


def _host_path(root: str, entry: ProtectedPath) -> str | None:
    """The protected path on the host, symlinks resolved; None when it leaves the root."""
    rel = entry.path.lstrip("/")
    real = os.path.realpath(os.path.join(root, rel) if rel else root)
    if real != root and not real.startswith(root + os.sep):
        return None
    return real


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _make_placeholder(real: str, root: str, made: list[str]) -> bool:
    """Create ``real`` (and missing parents below ``root``) as empty directories."""
    missing: list[str] = []
    probe = real
    while not os.path.lexists(probe) and probe != root:
        missing.append(probe)
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return False
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o755)
        except OSError:
            return False
        made.append(path)
    return True


@contextmanager
def view_mounts(root: str, workspace: str, view: SandboxView) -> Iterator[list[str]]:
    """bwrap arguments that apply ``view`` to ``root`` bound at ``workspace``.

    A context manager: placeholders made for missing write-protected paths
    are removed (when still empty) once the command is over.
    """
    made: list[str] = []
    try:
        yield _arguments(root, workspace, view, made)
    finally:
        for path in reversed(made):
            with suppress(OSError):
                os.rmdir(path)


def _arguments(root: str, workspace: str, view: SandboxView, made: list[str]) -> list[str]:
    protected: list[tuple[str, bool]] = []  # (host path, hidden), shallowest first
    for entry in view.protected:
        real = _host_path(root, entry)
        if real is None:
            continue
        if any(_inside(real, outer) and (hid or not entry.hidden) for outer, hid in protected):
            continue  # resolved into a subtree that already protects it
        if not os.path.lexists(real):
            if not entry.frozen:
                continue  # nothing there to read; what the command makes is its own
            if not _make_placeholder(real, root, made):
                continue
        protected.append((real, entry.hidden))
    protected.sort(key=lambda item: item[0].count(os.sep))

    def inside_sandbox(real: str) -> str:
        return workspace + real[len(root) :]

    anchors: set[str] = set()
    for real, _ in protected:
        parent = os.path.dirname(real)
        while _inside(parent, root) and parent != root:
            if not any(_inside(parent, outer) for outer, _ in protected):
                anchors.add(parent)
            parent = os.path.dirname(parent)
    steps: list[tuple[int, list[str]]] = []
    for parent in anchors:
        dest = inside_sandbox(parent)
        steps.append((parent.count(os.sep), ["--bind", parent, dest]))
    for real, hidden in protected:
        dest = inside_sandbox(real)
        depth = real.count(os.sep)
        if not hidden:
            steps.append((depth, ["--ro-bind", real, dest]))
        elif os.path.isdir(real) and not os.path.islink(real):
            tmpfs = ["--perms", "0555", "--size", str(HIDDEN_TMPFS_BYTES), "--tmpfs", dest]
            steps.append((depth, tmpfs))
        else:
            steps.append((depth, ["--ro-bind", os.devnull, dest]))
    steps.sort(key=lambda step: step[0])
    return [arg for _, args in steps for arg in args]


__all__ = ["view_mounts"]
