"""Moved to the core; these names stay importable from here.

The operation wire models are :mod:`filegate.kernel.operation_types`, the
transfer stubs and options :mod:`filegate.activities.operation_stubs`, and
:func:`run_operation` / :class:`OperationWorkflow` :mod:`filegate.workflows.operation`
(every tools worker hosts them, so ``filegate call`` and the adapter reach a plain
``filegate worker --role tools``). Workflow-safe, as before: no deepagents, no
backends.
"""

from __future__ import annotations

from filegate.activities.operation_stubs import (
    TRANSFER_STUBS,
    download_files,
    read_window,
    tool_options,
    transfer_activity_options,
    upload_files,
)
from filegate.kernel.operation_types import (
    MAX_BINARY_BYTES,
    TRANSFER_ACTIVITY_NAMES,
    DownloadRequest,
    Operation,
    OperationResult,
    ReadWindow,
    ReadWindowRequest,
    Scoped,
    TransferAnswer,
    UploadFile,
    UploadRequest,
)
from filegate.workflows.operation import OperationWorkflow, run_operation

_Scoped = Scoped
"""The old private name of :class:`~filegate.kernel.operation_types.Scoped`."""

__all__ = [
    "MAX_BINARY_BYTES",
    "TRANSFER_ACTIVITY_NAMES",
    "TRANSFER_STUBS",
    "DownloadRequest",
    "Operation",
    "OperationResult",
    "OperationWorkflow",
    "ReadWindow",
    "ReadWindowRequest",
    "TransferAnswer",
    "UploadFile",
    "UploadRequest",
    "download_files",
    "read_window",
    "run_operation",
    "tool_options",
    "transfer_activity_options",
    "upload_files",
]
