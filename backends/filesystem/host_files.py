"""What every backend over real host files shares: limits, errors, call tokens.

:class:`~filegate.backends.filesystem.FilesystemBackend` and the sandbox
backends (:mod:`filegate.backends.sandbox`, :mod:`filegate.backends.bwrap`)
map the same failures to the same error values, name their temporary files
after the same call token, and skip the same undecodable names; one module
keeps them from drifting apart.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import TypeVar

from filegate.kernel.protocol import (
    BackendResult,
    ErrorCode,
)
from filegate.kernel.reach import entry_visible

DEFAULT_MAX_FILE_BYTES = 64 * 1024 * 1024
"""Largest file returned whole (binary read, download, edit)."""
MAX_GLOB_RESULTS = 100_000
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CALL_TOKEN: ContextVar[str | None] = ContextVar("filegate_call_token", default=None)


def call_token() -> str | None:
    """The token :func:`named_for_call` set for this call, if any."""
    return _CALL_TOKEN.get()


@contextmanager
def named_for_call(token: str) -> Iterator[None]:
    """Name the temporary files of writes in this block after ``token``.

    A write goes to a temporary file renamed over the target. A worker killed
    between the two leaves that file behind; with a random name it stayed in
    the workspace for good. The idempotency journal runs each mutating call
    under its key, so the retry of a killed call reuses the same temporary name
    and renames it away. Calls with one key never run at once (the journal
    locks the key), so the name cannot collide. ``token``: letters and digits.
    """
    if not token.isalnum():
        raise ValueError(f"call token must be alphanumeric: {token!r}")
    reset = _CALL_TOKEN.set(token)
    try:
        yield
    finally:
        _CALL_TOKEN.reset(reset)


R = TypeVar("R", bound=BackendResult)


class PathEscapeError(Exception):
    """A path that resolves (through a symlink) outside the root."""


class NotRegularFileError(Exception):
    """Device, FIFO, socket...: never opened for content."""


_ERRNO_CODES: dict[int, ErrorCode] = {
    errno.ENOENT: "file_not_found",
    errno.EISDIR: "is_directory",
    errno.ENOTDIR: "not_a_directory",
    errno.EACCES: "permission_denied",
    errno.EPERM: "permission_denied",
    errno.ELOOP: "invalid_path",
    errno.ENAMETOOLONG: "invalid_path",
    errno.EINVAL: "invalid_path",
    errno.EFBIG: "too_large",
    errno.EROFS: "permission_denied",
}


ESCAPES_ROOT = "path escapes the root (symlink)"
NOT_REGULAR = "not a regular file"
SYMLINK_LOOP = "is a symbolic link that cannot be followed"
_REASONS: dict[ErrorCode, str] = {
    "file_not_found": "no such file or directory",
    "is_directory": "is a directory",
    "not_a_directory": "not a directory",
    "permission_denied": "permission denied",
}
_ERRNO_REASONS: dict[int, str] = {
    errno.ENOSPC: "no space left on the workspace's disk",
    errno.EDQUOT: "disk quota of the workspace exceeded",
    errno.EROFS: "read-only file system",
}
"""Reasons for errors whose code alone says too little (kept free of host paths)."""


def error_value(result_type: type[R], path: str, exc: BaseException) -> R:
    """Map an expected failure about ``path`` to an error value of ``result_type``.

    The reason does not name the path: it travels as ``error_path``
    (kernel.protocol), so a route can show its virtual form.
    """
    code: ErrorCode
    error_path: str | None = path
    if isinstance(exc, ValueError):
        code, reason, error_path = "invalid_path", str(exc), None
    elif isinstance(exc, PathEscapeError):
        code, reason = "invalid_path", ESCAPES_ROOT
    elif isinstance(exc, NotRegularFileError):
        code, reason = "invalid_path", NOT_REGULAR
    elif isinstance(exc, OSError):
        code = _ERRNO_CODES.get(exc.errno or 0, "io_error")
        reason = _ERRNO_REASONS.get(exc.errno or 0) or _REASONS.get(
            code, exc.strerror or "I/O error"
        )
        if exc.errno == errno.ELOOP:
            reason = SYMLINK_LOOP
    else:  # pragma: no cover - callers only pass the types above
        code, reason = "io_error", str(exc)
    result = result_type(error=reason, code=code, error_path=error_path)
    if "path" in result_type.model_fields:
        result.path = path  # type: ignore[attr-defined]
    return result


EXPECTED_ERRORS = (OSError, ValueError, PathEscapeError, NotRegularFileError)


def replaceable(dfd: int, name: str, vpath: str) -> os.stat_result | None:
    """The stat of the regular file ``name`` a write will replace (None: a new file).

    A write replaces the file by renaming a temporary file over it, which its
    directory's permission alone allows: so the file itself must be writable by
    this process, as a write in place would need. Asked of the kernel by opening
    it for writing (no truncation, closed at once), so modes, ACLs, the
    immutable flag and read-only mounts count; a running program (ETXTBSY) may
    be replaced. Raises IsADirectoryError, NotRegularFileError, PermissionError.
    """
    try:
        old = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(old.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory")
    if not stat.S_ISREG(old.st_mode):
        raise NotRegularFileError(vpath)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as exc:
        if exc.errno == errno.ETXTBSY:
            return old
        raise
    os.close(fd)
    return old


def keep_owner_and_mode(fd: int, old: os.stat_result) -> None:
    """Give the new file at ``fd`` the replaced file's owner, group and mode.

    As far as this process may: root sets both ids, another user only a group
    it belongs to (what it may not set stays its own, as it would be had it
    written the file itself). Owner first: a chown clears setuid bits."""
    st = os.fstat(fd)
    if (st.st_uid, st.st_gid) != (old.st_uid, old.st_gid):
        try:
            os.fchown(fd, old.st_uid, old.st_gid)
        except PermissionError:
            with suppress(OSError):
                os.fchown(fd, -1, old.st_gid)
    os.fchmod(fd, stat.S_IMODE(old.st_mode))


_PROC_FD = "/proc/self/fd"


def existing_root(root_dir: str | os.PathLike[str]) -> str:
    """``root_dir`` resolved, or a one-line refusal when it is not a directory.

    Why refuse rather than make it: a typo in a root must not become a new,
    empty workspace the agent then fills; ``--root`` refuses it on the command
    line, and the Python API refuses the same (issue 54).
    """
    if not os.path.isdir(root_dir):
        raise FileNotFoundError(
            f"root_dir {os.fspath(root_dir)}: no such directory (create it first)"
        )
    return os.path.realpath(root_dir)


def resolve_host(host: str) -> str:
    """``os.path.realpath(host)``, answered by the kernel when ``host`` exists.

    realpath walks the path in Python with one ``lstat`` per component, a tenth
    of a small tool call's CPU. An ``O_PATH`` open resolves every symlink in one
    system call and ``/proc/self/fd`` names the result. A missing path (or a
    system without ``/proc``) falls back to realpath, which resolves the
    existing prefix the same way.
    """
    try:
        fd = os.open(host, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return _realpath(host)
    try:
        real = os.readlink(f"{_PROC_FD}/{fd}")
    except OSError:
        return _realpath(host)
    finally:
        os.close(fd)
    return real if real.startswith("/") else _realpath(host)


def _realpath(host: str) -> str:
    """``os.path.realpath(host)``, walked again when a link changes under the walk.

    realpath lstats a component, then reads the link: a link removed or
    replaced in between (a command re-pointing it) makes it raise
    FileNotFoundError or EINVAL instead of answering.
    """
    for _ in range(16):
        try:
            return os.path.realpath(host)
        except OSError:
            continue
    return os.path.realpath(host)


def resolve_in_root(root: str, vpath: str, prefix: str | None = None) -> str | None:
    """The virtual path ``vpath`` resolves to below host directory ``root`` (symlinks followed).

    A missing tail resolves as far as it exists (a file about to be created
    lands where its parent points). None when it leads outside the root or
    the path is invalid: the backend refuses such a path itself. ``prefix``:
    see :func:`resolve_under`.
    """
    rel = vpath.strip("/")
    if not rel:
        return "/"
    if any(part in ("", ".", "..") for part in rel.split("/")):
        return None
    return _below_root(root, resolve_under(root, os.path.join(root, rel), prefix))


MAX_LINKS = 40
"""Links followed in one resolution before it fails (ELOOP), as the kernel's limit."""


def resolve_under(root: str, host: str, prefix: str | None) -> str:
    """:func:`resolve_host`, except that with ``prefix`` (where a sandboxed command sees
    ``root``: ``/workspace``) an absolute link target at or below ``prefix`` leads to
    the same place below ``root``, as it does for the command that made it (issue 54:
    ``ln -s /workspace/data/x.csv latest.csv`` in the sandbox was refused by the file
    tools as leaving the root). Whatever it reaches is judged there by the same rules
    (kernel.reach); every other absolute target is the host's, outside the root.
    """
    real = resolve_host(host)
    if prefix is None or _below_root(root, real) is not None:
        return real
    try:
        return _walk_mapped(root, host, prefix)
    except OSError:  # a loop, or a link changed under the walk: the kernel's answer stands
        return real


def _walk_mapped(root: str, host: str, prefix: str) -> str:
    """``host`` resolved one component at a time, links read (not followed) and an
    absolute target under ``prefix`` re-rooted at ``root``; a missing tail is kept."""
    current = "/"
    pending = [part for part in host.split("/") if part]
    links = 0
    while pending:
        part = pending.pop(0)
        if part == ".":
            continue
        if part == "..":
            current = os.path.dirname(current) or "/"
            continue
        candidate = os.path.join(current, part)
        try:
            info = os.lstat(candidate)
        except OSError:
            tail = [p for p in pending if p != "."]
            if ".." in tail:  # the kernel stops at the missing component: ENOENT
                raise OSError(errno.ENOENT, "no such file or directory", host) from None
            return os.path.join(candidate, *tail)
        if not stat.S_ISLNK(info.st_mode):
            current = candidate
            continue
        links += 1
        if links > MAX_LINKS:
            raise OSError(errno.ELOOP, "too many levels of symbolic links", host)
        target = os.readlink(candidate)
        if target == prefix or target.startswith(prefix.rstrip("/") + "/"):
            target = root.rstrip("/") + target[len(prefix.rstrip("/")) :]
        if target.startswith("/"):
            current = "/"
        pending = [p for p in target.split("/") if p] + pending
    return current


def _below_root(root: str, host: str) -> str | None:
    """The virtual path of host path ``host`` below directory ``root`` (None if outside)."""
    if host == root:
        return "/"
    prefix = root.rstrip("/") + "/"
    if not host.startswith(prefix):
        return None
    return "/" + host[len(prefix) :]


_DELETED = " (deleted)"


def _unlinked(fd: int) -> bool:
    try:
        return os.fstat(fd).st_nlink == 0
    except OSError:
        return False


def reached_path(root: str, fd: int, parts: list[str]) -> str:
    """The virtual path of the object open at ``fd``: where an operation really is.

    Asked of the kernel after the open, so a link re-pointed or a directory
    renamed meanwhile is seen; the rules then judge this path
    (:mod:`filegate.kernel.reach`) before a byte is read or written.
    ``parts``: the components the caller opened, the answer where ``/proc``
    is missing. Raises :class:`PathEscapeError` for an object that was moved
    out of the root while it was open.
    """
    try:
        real = os.readlink(f"{_PROC_FD}/{fd}")
    except OSError:
        return "/" + "/".join(parts)
    if real.endswith(_DELETED) and _unlinked(fd):
        # Removed or replaced since the open: the kernel names it "<path> (deleted)",
        # which no rule would match (``**/*.pem``); it is judged by the name it had.
        real = real[: -len(_DELETED)]
    vpath = _below_root(root, real)
    if vpath is None:
        raise PathEscapeError(real)
    return vpath


def link_target_stat(
    root: str, dfd: int, name: str, prefix: str | None = None
) -> os.stat_result | None:
    """What the link ``name`` in directory ``dfd`` leads to, when a listing may describe it.

    The target is opened once and judged where it is: outside the root it is
    not ours to show, under a read-protected path it is not shown. Raises
    OSError for a dangling link. ``prefix``: a target under it is read below
    the root (:func:`resolve_under`).
    """
    try:
        fd = os.open(name, os.O_PATH | os.O_CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        if prefix is None:
            raise
        fd = None
    if fd is not None:
        try:
            target = _below_root(root, os.readlink(f"{_PROC_FD}/{fd}"))
            if target is not None:
                return os.fstat(fd) if entry_visible(target) else None
        finally:
            os.close(fd)
        if prefix is None:
            return None
    assert prefix is not None
    here = os.readlink(f"{_PROC_FD}/{dfd}")
    mapped = resolve_under(root, os.path.join(here, name), prefix)
    if _below_root(root, mapped) is None:
        return None
    fd = os.open(mapped, os.O_PATH | os.O_CLOEXEC)  # judged where it really is, as above
    try:
        target = _below_root(root, os.readlink(f"{_PROC_FD}/{fd}"))
        if target is None or not entry_visible(target):
            return None
        return os.fstat(fd)
    finally:
        os.close(fd)


def utf8_name(name: str) -> bool:
    """False for names with undecodable bytes (surrogate escapes): never reported."""
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
