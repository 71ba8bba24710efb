"""One backend operation on the wire: what a caller outside an agent sends and gets back.

An :class:`Operation` is one ``filegate.<tool>`` call (a :class:`ToolRequest`) or
one of three transfers the model-facing tools do not answer in structured
form: a read window as raw lines or bytes (``read_file`` answers numbered
text for a model), and files' bytes in (``upload``) and out (``download``).
``filegate call`` and the Deep Agents adapter send them; the tools worker
answers (:mod:`filegate.activities.transfer` for the transfers).

Pure (pydantic and the kernel only): the models cross workflow code
(:class:`~filegate.workflows.operation.OperationWorkflow`), the tools worker
and clients alike. Their shapes are a wire contract: recorded histories
(``tests/histories/f71da99/operation-*.json``) must keep decoding.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from filegate.kernel import wire
from filegate.kernel.limits import DEFAULT_READ_LIMIT
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.protocol import OutcomeCode
from filegate.kernel.tool_types import ToolOutcome, ToolRequest

MAX_BINARY_BYTES = 500 * 1024
"""Largest binary file a read returns (deepagents' ``MAX_BINARY_BYTES``): a bigger
one is an error the reader gets, not megabytes of base64."""

TRANSFER_ACTIVITY_NAMES = {
    "read": wire.TRANSFER_READ_ACTIVITY,
    "upload": wire.TRANSFER_UPLOAD_ACTIVITY,
    "download": wire.TRANSFER_DOWNLOAD_ACTIVITY,
}
"""Transfer kind (the :class:`Operation` field naming it) -> its activity name."""


class _Wire(BaseModel):
    """Bytes travel as base64 (pydantic's default, UTF-8, breaks on binary data)."""

    model_config = ConfigDict(extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")


class Scoped(_Wire):
    """What every transfer request carries besides its own arguments (as ToolRequest does)."""

    backend: str
    permissions: list[FilesystemPermission] = Field(default_factory=list)
    policies: list[str] | None = None
    call_id: str = ""
    first_run_id: str = ""


class ReadWindowRequest(Scoped):
    file_path: str
    offset: int = 0
    limit: int = DEFAULT_READ_LIMIT
    max_binary_bytes: int = MAX_BINARY_BYTES


class ReadWindow(_Wire):
    """A read as data: the window's lines (no terminators), or a binary file's bytes.

    ``binary`` with an error means a binary file over ``max_binary_bytes`` (its
    bytes were not sent). ``error`` is the backend's reason and ``error_path``
    the (Filegate-side) path it is about, kept apart as in the kernel's results
    so a caller names the path once, in its own path space.
    ``ends_with_newline``: the file's last line is terminated (a raw window
    keeps that newline).
    """

    path: str
    error: str | None = None
    code: OutcomeCode | None = None
    """The error's code: a backend's, or the entry gate's ``denied`` /
    ``approval_required`` (a rule refused the read)."""
    error_path: str | None = None
    lines: list[str] = Field(default_factory=list)
    total_lines: int = 0
    start_line: int = 0
    end_line: int = 0
    next_offset: int | None = None
    ends_with_newline: bool = False
    binary: bool = False
    data: bytes | None = None
    size: int | None = None


class UploadFile(_Wire):
    path: str
    content: bytes


class UploadRequest(Scoped):
    files: list[UploadFile]


class DownloadRequest(Scoped):
    paths: list[str]


class TransferAnswer(_Wire):
    """One file of an upload or download, in request order."""

    path: str
    error: str | None = None
    code: OutcomeCode | None = None
    """The error's code: a backend's, or the entry gate's ``denied`` /
    ``approval_required`` (a rule refused the file)."""
    content: bytes | None = None


class Operation(_Wire):
    """One backend operation: exactly one of the request fields is set."""

    task_queue: str
    tool: ToolRequest | None = None
    read: ReadWindowRequest | None = None
    upload: UploadRequest | None = None
    download: DownloadRequest | None = None
    search_timeout: float | None = None


class OperationResult(_Wire):
    """The answer to an :class:`Operation`, in the field named like its request."""

    outcome: ToolOutcome | None = None
    read: ReadWindow | None = None
    files: list[TransferAnswer] | None = None


TRANSFER_KINDS = ("read", "upload", "download")
"""The :class:`Operation` fields that hold a transfer request."""


def operation_kind(op: Operation) -> str:
    """The tool name, or ``read`` / ``upload`` / ``download`` for a transfer."""
    if op.tool is not None:
        return op.tool.tool
    for name in TRANSFER_KINDS:
        if getattr(op, name) is not None:
            return name
    raise ValueError("an Operation needs one of tool, read, upload or download")


__all__ = [
    "MAX_BINARY_BYTES",
    "TRANSFER_ACTIVITY_NAMES",
    "TRANSFER_KINDS",
    "DownloadRequest",
    "Operation",
    "OperationResult",
    "ReadWindow",
    "ReadWindowRequest",
    "Scoped",
    "TransferAnswer",
    "UploadFile",
    "UploadRequest",
    "operation_kind",
]
