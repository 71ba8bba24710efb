"""A compiled :class:`~filegate.kernel.execute_gate.SandboxView` as bubblewrap mounts.

The kernel decides *what* a command may not touch; this module turns it into
mounts over the workspace bind, on the host, just before each command, and
never into a view weaker than the rules (issue 33; docs/threat-model.md §6a):

- a hidden directory gets an empty tmpfs of mode 0555 and a few KiB (what a
  command may put there after a chmod stays in memory and is gone with the
  command; not remounting it read-only saves bwrap a mount-table scan, which
  is most of a mount's cost); a hidden file gets ``/dev/null`` bound
  read-only over it (reads see nothing);
- a read-only path is bound onto itself read-only;
- every directory between the workspace and a protected path is bound onto
  itself (read-write), so it is a mount point: ``mv a b`` of an ancestor fails
  with EBUSY instead of carrying the protected subtree to an unprotected name;
- a protected path that does not exist yet (read- or write-protected) gets a
  placeholder directory for the command's lifetime, so the command cannot
  create it, and what another writer makes there meanwhile stays hidden.

Each protected path is walked from the root one component at a time, links
not followed (:func:`_resolve`). A path the view cannot hold refuses the
command in one line naming the rule (:class:`ViewRefusedError`), before
anything runs: a file with more of the path below it, a link out of the
root, or (for a write rule) any link, which the command could re-point.
Binding such an ancestor read-only instead is not sound: a mount cannot sit
on a link (mounting follows it), and a bind over a file is detached as soon
as anyone outside the command's namespace unlinks the file, which no rule
forbids there (the rule covers ``/.github/workflows/**``, not ``/.github``).

Placeholders are shared state on the host, and removing a directory that is
a mount point in another namespace silently detaches that mount there. So a
placeholder is removed only by its last user: this process counts the
commands using each placeholder it made (under a lock), and every command
holds a shared lock on the root standing for each protected directory while
it runs (:mod:`filegate.backends.root_locks`, which every worker on the root
sees, whatever its temporary directory); removal leaves a placeholder another
worker's command still holds in place, empty, rather than pulling it from
under it.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

from filegate.backends.root_locks import RootHolds, in_use
from filegate.kernel.execute_gate import ProtectedPath, SandboxView

HIDDEN_TMPFS_BYTES = 16 * 1024
"""Size of the empty tmpfs over a hidden directory (nothing of it reaches the host)."""

BUILD_ATTEMPTS = 3
"""Views built again when a directory is replaced between the check and the lock."""


class ViewRefusedError(ValueError):
    """A protected path this command's view cannot hold; one line naming the rule."""


class _Registry:
    """The placeholders this process made and still has, with their users' count."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users: dict[str, int] = {}


_PLACEHOLDERS = _Registry()


@dataclass
class _Build:
    """One command's share of the host: what it made, counts and locks."""

    holds: RootHolds
    made: list[str] = field(default_factory=list)
    counted: set[str] = field(default_factory=set)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _refused(entry: ProtectedPath, why: str) -> ViewRefusedError:
    rule = entry.rule or f"the rule protecting {entry.path}"
    return ViewRefusedError(
        f"execute refused: {rule} cannot hold for this command: {why}; nothing ran."
    )


def _resolve(root: str, entry: ProtectedPath) -> str:
    """``entry``'s path on the host, walked without following links blindly.

    A read-only rule follows a link inside the root (hiding its target hides
    the content; a re-pointed link shows the command only its own files);
    anything else that could let the command put the protected path
    elsewhere raises :class:`ViewRefusedError`.
    """
    parts = [part for part in entry.path.split("/") if part]
    current = root
    for index, name in enumerate(parts):
        shown = "/" + "/".join(parts[: index + 1])
        here = os.path.join(current, name)
        try:
            info = os.lstat(here)
        except FileNotFoundError:
            return os.path.join(here, *parts[index + 1 :])
        except NotADirectoryError:
            raise _refused(entry, f"{os.path.dirname(shown) or '/'} is not a directory") from None
        if stat.S_ISLNK(info.st_mode):
            target = os.path.realpath(here)
            if not _inside(target, root):
                raise _refused(
                    entry, f"{shown} is a link out of the root, which the view cannot follow"
                )
            if entry.frozen:
                raise _refused(
                    entry,
                    f"{shown} is a link, which the command could re-point (write the rule "
                    "against the link's target)",
                )
            current = target
            continue
        if not stat.S_ISDIR(info.st_mode) and (index < len(parts) - 1 or not entry.itself):
            raise _refused(
                entry,
                f"{shown} is a file, which the command could replace with a directory "
                "holding the protected path",
            )
        current = here
    if not entry.itself and os.path.lexists(current) and not os.path.isdir(current):
        raise _refused(entry, f"{entry.path} leads to a file, which the command could replace")
    return current


def _make_placeholder(real: str, root: str, entry: ProtectedPath, build: _Build) -> None:
    """Create ``real`` (and missing parents below ``root``) as empty directories."""
    missing: list[str] = []
    probe = real
    while probe != root and not os.path.lexists(probe):
        missing.append(probe)
        probe = os.path.dirname(probe)
    if os.path.islink(probe) or not os.path.isdir(probe):
        raise _refused(entry, f"{probe[len(root) :] or '/'} is not a directory")
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            if os.path.isdir(path) and not os.path.islink(path):
                continue  # another worker process made it meanwhile: it is that one's
            raise _refused(entry, f"{path[len(root) :]} appeared as a non-directory") from None
        except OSError as exc:
            raise _refused(entry, f"its placeholder could not be made ({exc.strerror})") from None
        _PLACEHOLDERS.users[path] = 0
        build.made.append(path)


def _arguments(root: str, workspace: str, view: SandboxView, build: _Build) -> list[str]:
    protected: list[tuple[str, bool]] = []  # (host path, hidden), shallowest first
    for entry in view.protected:
        real = _resolve(root, entry)
        if any(_inside(real, outer) and (hid or not entry.hidden) for outer, hid in protected):
            continue  # resolved into a subtree that already protects it
        if not os.path.lexists(real):
            _make_placeholder(real, root, entry, build)
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
    for path in anchors | {real for real, _ in protected}:
        if path in _PLACEHOLDERS.users:
            _PLACEHOLDERS.users[path] += 1
            build.counted.add(path)
    steps: list[tuple[int, list[str]]] = []
    for parent in anchors:
        dest = inside_sandbox(parent)
        steps.append((parent.count(os.sep), ["--bind", parent, dest]))
    for real, hidden in protected:
        dest = inside_sandbox(real)
        depth = real.count(os.sep)
        is_dir = os.path.isdir(real) and not os.path.islink(real)
        if is_dir:
            _hold(real, build)
        if not hidden:
            steps.append((depth, ["--ro-bind", real, dest]))
        elif is_dir:
            tmpfs = ["--perms", "0555", "--size", str(HIDDEN_TMPFS_BYTES), "--tmpfs", dest]
            steps.append((depth, tmpfs))
        else:
            steps.append((depth, ["--ro-bind", os.devnull, dest]))
    steps.sort(key=lambda step: step[0])
    return [arg for _, args in steps for arg in args]


class _Replaced(Exception):
    """A directory changed between the check and the lock: build the view again."""


def _key(root: str, path: str) -> str:
    """The shared lock key of host directory ``path``: its name below ``root``."""
    return "view:" + os.path.relpath(path, root)


def _hold(path: str, build: _Build) -> None:
    """A shared hold on directory ``path`` for the command's lifetime.

    Checked after holding: a remover in another process may have taken the
    directory away between our look and our hold (:class:`_Replaced`).
    """
    build.holds.hold(_key(build.holds.root, path))
    try:
        now = os.lstat(path)
    except OSError:
        raise _Replaced(path) from None
    if not stat.S_ISDIR(now.st_mode):
        raise _Replaced(path)


def _remove(root: str, path: str) -> None:
    """Remove placeholder ``path`` if empty and no command of any worker holds it.

    A command of another worker may take its hold between the look and the
    removal; the look after the removal sees it, and the directory is made
    again (empty, as it was) before that command's mounts are made from it.
    """
    key = _key(root, path)
    if in_use(root, key):
        return
    try:
        os.rmdir(path)  # fails when not empty: what is in it stays
    except OSError:
        return
    if in_use(root, key):
        with suppress(OSError):
            os.mkdir(path, 0o755)


def _release(build: _Build) -> None:
    """Drop this command's locks and counts; remove placeholders nobody uses."""
    with _PLACEHOLDERS.lock:
        build.holds.close()
        for path in sorted(build.counted | set(build.made), key=len, reverse=True):
            users = _PLACEHOLDERS.users.get(path)
            if users is None:
                continue
            users -= 1 if path in build.counted else 0
            if users > 0:
                _PLACEHOLDERS.users[path] = users
                continue
            del _PLACEHOLDERS.users[path]
            _remove(build.holds.root, path)
        build.counted.clear()
        build.made.clear()


@contextmanager
def view_mounts(root: str, workspace: str, view: SandboxView) -> Iterator[list[str]]:
    """bwrap arguments that apply ``view`` to ``root`` bound at ``workspace``.

    A context manager: the placeholders and locks it takes are released when
    the command is over. Raises :class:`ViewRefusedError` (nothing made is
    left behind) when the view cannot hold a protected path.
    """
    for _ in range(BUILD_ATTEMPTS):
        build = _Build(RootHolds(root))
        try:
            with _PLACEHOLDERS.lock:
                arguments = _arguments(root, workspace, view, build)
        except _Replaced:
            _release(build)
            continue
        except OSError as exc:  # the host refused a placeholder or a lock: one line
            _release(build)
            raise ViewRefusedError(
                f"execute refused: the command's view could not be built ({exc}); nothing ran."
            ) from exc
        except BaseException:
            _release(build)
            raise
        try:
            yield arguments
        finally:
            _release(build)
        return
    raise ViewRefusedError(
        "execute refused: the workspace's protected directories kept changing while the "
        "command's view was built; nothing ran."
    )


__all__ = ["ViewRefusedError", "view_mounts"]
