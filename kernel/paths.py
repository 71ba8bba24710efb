"""Virtual path validation, shared by every tool, backend and permission check.

A virtual path is absolute, ``/``-separated and normalised. Anything that could
climb out of a root (``..`` components, ``~``) or name a host location (Windows
drives, NUL bytes) is refused before any backend sees it.
"""

from __future__ import annotations

import re

_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:([\\/]|$)")
MAX_PATH_LENGTH = 4096


def validate_path(path: str | None) -> str:
    """Return the normalised absolute form of ``path``; raise ValueError on refusal.

    ``None``, ``""`` and ``"."`` mean the root. ``/./a//b/`` becomes ``/a/b``.
    A name that merely contains two dots (``a..b.txt``) is legal.
    """
    if path is None:
        return "/"
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
    if "\\" in stripped:
        raise ValueError(f"backslashes are not allowed in paths: {path!r}")
    parts: list[str] = []
    for part in stripped.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            raise ValueError(f"path traversal not allowed: {path!r}")
        parts.append(part)
    return "/" + "/".join(parts)


def join_path(parent: str, name: str) -> str:
    """Join a validated directory path and a child name."""
    return parent.rstrip("/") + "/" + name


def is_within(path: str, root: str) -> bool:
    """True when validated ``path`` equals ``root`` or lies below it (whole components)."""
    if root == "/":
        return True
    return path == root or path.startswith(root.rstrip("/") + "/")
