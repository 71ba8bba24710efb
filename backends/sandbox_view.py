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
holds a shared record lock standing for each protected directory while it
runs (:class:`_Locks`); removal takes the exclusive lock without waiting, so
a placeholder another worker process on this host still uses is left in
place, empty, rather than pulled from under it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

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

    made: list[str] = field(default_factory=list)
    counted: set[str] = field(default_factory=set)
    held: list[str] = field(default_factory=list)


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


class _Locks:
    """Cross-process locks standing for host directories: byte ranges of one file.

    The file is private to the worker's uid and outside every root and every
    sandbox (a command's ``/tmp`` is its own tmpfs), so no command can take
    these locks: a lock on the protected directory itself could be held
    exclusively by a command (``flock -x docs sleep 3600``) and stall every
    later command of the worker. Byte ``hash(path)`` stands for ``path``: no
    file per directory, one ``fcntl`` per lock. POSIX record locks belong to
    the process, not to a command, so this process's holds are counted and a
    range is unlocked only when its last holder here lets go; the registry's
    lock serialises every call.
    """

    def __init__(self) -> None:
        self.fd: int | None = None
        self.holds: dict[str, int] = {}

    def _file(self) -> int:
        if self.fd is None:
            folder = os.path.join(tempfile.gettempdir(), f"filegate-view-locks-{os.geteuid()}")
            with suppress(FileExistsError):
                os.mkdir(folder, 0o700)
            info = os.lstat(folder)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o77:
                raise ViewRefusedError(
                    f"execute refused: {folder} is not a private directory of this user, so "
                    "placeholders cannot be shared safely; nothing ran."
                )
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            self.fd = os.open(os.path.join(folder, "locks"), flags, 0o600)
        return self.fd

    @staticmethod
    def _offset(path: str) -> int:
        return int.from_bytes(hashlib.sha256(os.fsencode(path)).digest()[:7], "big")

    def hold(self, path: str) -> None:
        """A shared lock for ``path``; waits only while a remover in another
        process takes the directory away (then :func:`_hold` sees it gone)."""
        if path not in self.holds:
            fcntl.lockf(self._file(), fcntl.LOCK_SH, 1, self._offset(path))
        self.holds[path] = self.holds.get(path, 0) + 1

    def let_go(self, path: str) -> None:
        users = self.holds.pop(path) - 1
        if users:
            self.holds[path] = users
        elif self.fd is not None:
            fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, self._offset(path))

    def removable(self, path: str) -> bool:
        """Whether no command anywhere holds ``path``; locks it until :meth:`done`."""
        if path in self.holds:
            return False
        try:
            fcntl.lockf(self._file(), fcntl.LOCK_EX | fcntl.LOCK_NB, 1, self._offset(path))
        except (OSError, ViewRefusedError):
            return False  # another worker process's command still has a mount on it
        return True

    def done(self, path: str) -> None:
        if self.fd is not None:
            fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, self._offset(path))


_LOCKS = _Locks()


def _hold(path: str, build: _Build) -> None:
    """A shared lock for directory ``path`` for the command's lifetime.

    Checked after locking: a remover in another process may have taken the
    directory away between our look and our lock (:class:`_Replaced`).
    """
    _LOCKS.hold(path)
    build.held.append(path)
    try:
        now = os.lstat(path)
    except OSError:
        raise _Replaced(path) from None
    if not stat.S_ISDIR(now.st_mode):
        raise _Replaced(path)


def _remove(path: str) -> None:
    """Remove placeholder ``path`` if empty and no command anywhere holds it."""
    if not _LOCKS.removable(path):
        return
    try:
        os.rmdir(path)  # fails when not empty: what is in it stays
    except OSError:
        pass
    finally:
        _LOCKS.done(path)


def _release(build: _Build) -> None:
    """Drop this command's locks and counts; remove placeholders nobody uses."""
    with _PLACEHOLDERS.lock:
        for path in build.held:
            _LOCKS.let_go(path)
        build.held.clear()
        for path in sorted(build.counted | set(build.made), key=len, reverse=True):
            users = _PLACEHOLDERS.users.get(path)
            if users is None:
                continue
            users -= 1 if path in build.counted else 0
            if users > 0:
                _PLACEHOLDERS.users[path] = users
                continue
            del _PLACEHOLDERS.users[path]
            _remove(path)
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
        build = _Build()
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
