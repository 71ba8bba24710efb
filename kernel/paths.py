"""Virtual path validation, shared by every tool, backend and permission check.

A virtual path is absolute, ``/``-separated and normalised. Anything that could
climb out of a root (``..`` components, ``~``) or name a host location (Windows
drives, NUL bytes) is refused before any backend sees it.

:func:`validate_path` returns a :class:`ValidPath`, and hands one back as it is:
the tool path validates each path once (the workflow's gate, the activity's
argument check) and every later layer (router, policies, backends) gets the
marked value, so its own check costs an ``isinstance``. A plain string, what a
direct caller of a backend passes, is still checked in full.
"""

from __future__ import annotations

import re

_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:([\\/]|$)")
MAX_PATH_LENGTH = 4096


class ValidPath(str):
    """A path :func:`validate_path` accepted: absolute, normalised, no traversal.

    Only this module makes one (:func:`validate_path`, :func:`below`,
    :func:`under`), so the mark cannot be put on an unchecked string by
    accident; constructing it directly raises. Anything derived from it with
    ``str`` operations (slices, concatenation) is a plain ``str`` again and
    is checked in full where it is used. Copies and pickles are plain strings.
    """

    __slots__ = ()

    def __new__(cls, value: object = "") -> ValidPath:
        raise TypeError("ValidPath values come from validate_path only")

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        return (str, (str(self),))


def _mark(path: str) -> ValidPath:
    return str.__new__(ValidPath, path)


ROOT = _mark("/")


def validate_path(path: str | None) -> ValidPath:
    """Return the normalised absolute form of ``path``; raise ValueError on refusal.

    ``None``, ``""`` and ``"."`` mean the root. ``/./a//b/`` becomes ``/a/b``;
    backslashes are separators (``src\\app.py`` is ``/src/app.py``).
    A name that merely contains two dots (``a..b.txt``) is legal. A
    :class:`ValidPath` is already all of that and is returned unchanged.
    """
    if type(path) is ValidPath:
        return path
    if path is None:
        return ROOT
    if not isinstance(path, str):
        raise ValueError(f"path must be a string, got {type(path).__name__}")
    if "\x00" in path:
        raise ValueError("path contains a NUL byte")
    if len(path) > MAX_PATH_LENGTH:
        raise ValueError(f"path longer than {MAX_PATH_LENGTH} characters")
    stripped = path
    if stripped.startswith("~"):
        raise ValueError("path traversal not allowed: '~' is not supported")
    if _WINDOWS_DRIVE.match(stripped) or stripped.startswith("\\\\"):
        raise ValueError(f"Windows paths are not supported: {path!r}")
    # As in the reference: a model writing Windows separators means slashes. The
    # drive and UNC checks above ran first, and ``..`` is checked after, so
    # ``..\\x`` is still traversal.
    stripped = stripped.replace("\\", "/")
    parts: list[str] = []
    for part in stripped.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            raise ValueError(f"path traversal not allowed: {path!r}")
        parts.append(part)
    return _mark("/" + "/".join(parts))


def mount_of(prefix: str, path: ValidPath) -> ValidPath | None:
    """Route ``prefix`` (``/`` or ``/a/b/``) as a path, when it owns validated ``path``.

    None when ``prefix`` is not a whole-component prefix of ``path`` (or is not
    of the canonical form). Needs no check of its own: a whole-component
    prefix of a normalised path is normalised.
    """
    if prefix == "/":
        return ROOT
    if not prefix.startswith("/") or not prefix.endswith("/"):
        return None
    base = prefix[:-1]
    if path == base or path.startswith(prefix):
        return _mark(base)
    return None


def below(path: ValidPath, mount: ValidPath) -> ValidPath:
    """``path`` relative to ``mount`` (which owns it, see :func:`mount_of`), as a path."""
    if mount == "/":
        return path
    return _mark(path[len(mount) :] or "/")


def under(mount: ValidPath, local: ValidPath) -> ValidPath:
    """Backend-local ``local`` of the route mounted at ``mount``, as a virtual path."""
    if mount == "/":
        return local
    return mount if local == "/" else _mark(mount + local)


def join_path(parent: str, name: str) -> str:
    """Join a validated directory path and a child name."""
    return parent.rstrip("/") + "/" + name


def is_within(path: str, root: str) -> bool:
    """True when validated ``path`` equals ``root`` or lies below it (whole components)."""
    if root == "/":
        return True
    return path == root or path.startswith(root.rstrip("/") + "/")
