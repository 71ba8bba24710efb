"""How one :class:`~filegate.kernel.operation_types.Operation` is scheduled: stubs and options.

The transfer activities' references (``filegate.transfer.read`` / ``upload`` /
``download``, implemented by :class:`filegate.activities.transfer.TransferActivities`
on the tools worker) and the options of an operation's activity. One place for
both ways an operation runs, from a workflow
(:func:`filegate.workflows.operation.run_operation`) and as a standalone activity
(:mod:`filegate.operations`), so the two cannot drift apart.

Workflow-safe like :mod:`filegate.activities.stubs`: the kernel, the activities'
contract and Temporal's common types only.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.common import RetryPolicy

from filegate.activities.contract import (
    FILE_OP_TIMEOUT,
    HEARTBEAT_TIMEOUT,
    RETRY_INITIAL_INTERVAL,
    tool_activity_options,
)
from filegate.kernel import wire
from filegate.kernel.operation_types import (
    DownloadRequest,
    Operation,
    ReadWindow,
    ReadWindowRequest,
    TransferAnswer,
    UploadRequest,
)
from filegate.kernel.registry import TOOLS
from filegate.kernel.tool_types import NON_RETRYABLE_ERROR_TYPES


def _unreachable(name: str) -> RuntimeError:
    return RuntimeError(f"{name} is a reference; a Filegate tools worker runs it")


@activity.defn(name=wire.TRANSFER_READ_ACTIVITY)
async def read_window(request: ReadWindowRequest) -> ReadWindow:
    """A read window as data (served by :mod:`filegate.activities.transfer`)."""
    raise _unreachable(wire.TRANSFER_READ_ACTIVITY)


@activity.defn(name=wire.TRANSFER_UPLOAD_ACTIVITY)
async def upload_files(request: UploadRequest) -> list[TransferAnswer]:
    """Write files' bytes (served by :mod:`filegate.activities.transfer`)."""
    raise _unreachable(wire.TRANSFER_UPLOAD_ACTIVITY)


@activity.defn(name=wire.TRANSFER_DOWNLOAD_ACTIVITY)
async def download_files(request: DownloadRequest) -> list[TransferAnswer]:
    """Read files' bytes (served by :mod:`filegate.activities.transfer`)."""
    raise _unreachable(wire.TRANSFER_DOWNLOAD_ACTIVITY)


TRANSFER_STUBS = {"read": read_window, "upload": upload_files, "download": download_files}
"""Stub per transfer kind (the :class:`Operation` field naming it)."""


def transfer_activity_options() -> dict[str, Any]:
    """Options of a transfer: a file operation's (60 s, heartbeat, six attempts).

    Retrying is safe: a read or download has no effect, and an upload writes the
    same bytes again, which converges (unlike an edit, no journal is needed).
    """
    return {
        "start_to_close_timeout": FILE_OP_TIMEOUT,
        "heartbeat_timeout": HEARTBEAT_TIMEOUT,
        "retry_policy": RetryPolicy(
            initial_interval=RETRY_INITIAL_INTERVAL,
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=30),
            maximum_attempts=6,
            non_retryable_error_types=list(NON_RETRYABLE_ERROR_TYPES),
        ),
    }


def tool_options(op: Operation) -> dict[str, Any]:
    """Options of the tool activity of ``op``: the tool's own, as an agent's call gets."""
    if op.tool is None:
        raise ValueError("tool_options needs an Operation with a tool request")
    request = op.tool
    if op.search_timeout is not None and request.tool in TOOLS.searching:
        return tool_activity_options(request.tool, search_timeout=op.search_timeout)
    timeout = request.args.get("timeout") if request.tool in TOOLS.running else None
    return tool_activity_options(request.tool, execute_timeout=timeout)


__all__ = [
    "TRANSFER_STUBS",
    "download_files",
    "read_window",
    "tool_options",
    "transfer_activity_options",
    "upload_files",
]
