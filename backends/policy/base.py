"""What a policy sees and says: :class:`Call`, :class:`Refusal`, the :class:`Policy` base.

Every other module of the package builds on these, so they live apart from the
wrapper and from the policy kinds (no import cycle, one definition of a call).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from filegate.kernel.protocol import (
    PROTOCOL_METHODS,
    BackendProtocol,
    ErrorCode,
)

ProtocolOperation = Literal[
    "ls", "read", "write", "edit", "delete", "glob", "grep", "upload", "download", "execute"
]
WriteOperation = Literal["write", "edit", "delete", "upload"]
ContentOperation = Literal["write", "edit", "upload"]

if set(get_args(ProtocolOperation)) != set(PROTOCOL_METHODS):  # pragma: no cover
    raise TypeError("ProtocolOperation is out of date with PROTOCOL_METHODS")


# --------------------------------------------------------------------------- #
# What a policy sees and says
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Call:
    """One target of one protocol call, as policies see it.

    ``path`` is the validated virtual path (the search root for glob/grep;
    None for execute). ``content`` is the text a write or text upload would
    store; ``old``/``new``/``replace_all`` describe an edit.
    """

    operation: str
    path: str | None
    content: str | None = None
    data: bytes | None = None
    old: str | None = None
    new: str | None = None
    replace_all: bool = False
    command: str | None = None


@dataclass(frozen=True)
class Refusal:
    """Why a call was refused. ``policy`` is None for the wrapper's own path check.

    ``message`` never names the call's path: the error value carries it as
    ``error_path`` (kernel.protocol), so it can be shown in virtual form.
    """

    policy: str | None
    rule: str
    message: str
    code: ErrorCode = "permission_denied"


class Policy:
    """Base class: a policy allows everything until a hook says otherwise.

    Hooks must be thread-safe: sync activities call the same wrapped backend
    from several threads.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def permits(self, operation: str) -> bool:
        """False when the operation is refused outright (hides the capability)."""
        return True

    def admit(self, operation: str) -> Refusal | None:
        """Called once per protocol call, before any target is checked."""
        return None

    def check(self, call: Call, inner: BackendProtocol) -> Refusal | None:
        """Called once per target; may read through ``inner`` (not audited)."""
        return None


OPERATION_ALIASES: dict[str, str] = {"download": "read", "upload": "write"}
"""The batch operations are the single ones in bulk: a policy naming ``read`` also
judges ``download`` (a change preview reads through it), one naming ``write``
also judges ``upload``, in every policy kind."""


def names_operation(operations: frozenset[str], operation: str) -> bool:
    """Whether ``operations`` (a policy's list) covers ``operation`` or its alias."""
    return operation in operations or OPERATION_ALIASES.get(operation) in operations


WRITE_OPERATIONS: tuple[WriteOperation, ...] = ("write", "edit", "delete", "upload")
CONTENT_OPERATIONS: tuple[ContentOperation, ...] = ("write", "edit", "upload")
