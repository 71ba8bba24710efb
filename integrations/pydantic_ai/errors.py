"""Filegate's error codes as the builtin exceptions Pydantic AI's workspace contract names.

The contract (``pydantic_ai.workspaces.protocol``): builtin file errors for
path-level failures, ``TypeError``/``ValueError`` for bad arguments,
``WorkspaceTimeoutError`` for a timeout. Filegate's structured answers carry
an :data:`~filegate.kernel.protocol.ErrorCode`; this is the one mapping, so a
tool that catches ``FileNotFoundError`` works the same over Filegate as over
Pydantic AI's local backend. The ``OSError`` subclasses carry their errno, so
they cross a durable boundary as Pydantic AI rebuilds them (by errno).
"""

from __future__ import annotations

import errno
from typing import NoReturn

from pydantic_ai.workspaces import WorkspaceError, WorkspaceTimeoutError

_OS_ERRORS: dict[str, tuple[type[OSError], int]] = {
    "file_not_found": (FileNotFoundError, errno.ENOENT),
    "is_directory": (IsADirectoryError, errno.EISDIR),
    "not_a_directory": (NotADirectoryError, errno.ENOTDIR),
    "permission_denied": (PermissionError, errno.EACCES),
    "denied": (PermissionError, errno.EACCES),
    "approval_required": (PermissionError, errno.EACCES),
    "rejected": (PermissionError, errno.EACCES),
    "invalid_path": (PermissionError, errno.EACCES),
}
"""Codes about the path; a rule's refusal, a missing approval and a reviewer's no are
the OS's ``permission_denied`` to a caller. ``invalid_path`` is a path the backend refuses to reach
(a link out of its root, a name it cannot hold): not the caller's argument, which the
adapter checks before sending, but a place this workspace has no access to."""


def raise_for(code: str | None, message: str, path: str) -> NoReturn:
    """Raise the exception for Filegate error ``code`` about ``path`` (``message`` says why)."""
    found = _OS_ERRORS.get(code or "")
    if found is not None:
        kind, number = found
        raise kind(number, message, path)
    if code == "timeout":
        raise WorkspaceTimeoutError(message)
    if code in ("invalid_argument", "binary_file"):
        raise ValueError(message)
    if code == "unsupported":
        raise NotImplementedError(message)
    if code == "too_large":
        raise WorkspaceError(message)
    raise OSError(errno.EIO, message, path)


__all__ = ["raise_for"]
