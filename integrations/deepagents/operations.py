"""The adapter's operations as Temporal calls: wire models, stubs and the one-operation workflow.

Workflow-safe on purpose (kernel, the activity stubs and Temporal only; no
deepagents, no backends): the adapter runs :func:`run_operation` inside the
caller's workflow, and :class:`OperationWorkflow` runs the same function for a
caller outside any workflow (where the server has no standalone activities:
:mod:`.direct` starts the activity itself otherwise, with the same options
from :func:`tool_options` / :func:`transfer_activity_options`).

Most operations are the ``filegate.<tool>`` activities themselves. Three
things the model-facing tools do not answer in structured form get activities
of their own (:mod:`.transfer` implements them on the tools worker): a read
window as raw lines or bytes (``read_file`` answers numbered text for a
model), and ``upload_files`` / ``download_files`` (no tool moves bytes).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from filegate.activities.contract import (
    FILE_OP_TIMEOUT,
    HEARTBEAT_TIMEOUT,
    RETRY_INITIAL_INTERVAL,
    outcome_for_activity_error,
    tool_activity_options,
)
from filegate.activities.stubs import STUBS, new_call_id
from filegate.kernel import wire
from filegate.kernel.limits import DEFAULT_READ_LIMIT
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.protocol import ErrorCode
from filegate.kernel.tool_types import NON_RETRYABLE_ERROR_TYPES, ToolOutcome, ToolRequest
from pydantic import BaseModel, ConfigDict, Field
from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

MAX_BINARY_BYTES = 500 * 1024
"""Largest binary file a read returns (deepagents' ``MAX_BINARY_BYTES``): a bigger
one is an error the model reads, not megabytes of base64 in its context."""

TRANSFER_ACTIVITY_NAMES = {
    "read": "filegate.transfer.read",
    "upload": "filegate.transfer.upload",
    "download": "filegate.transfer.download",
}


class _Wire(BaseModel):
    """Bytes travel as base64 (pydantic's default, UTF-8, breaks on binary data)."""

    model_config = ConfigDict(extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")


class _Scoped(_Wire):
    """What every transfer request carries besides its own arguments (as ToolRequest does)."""

    backend: str
    permissions: list[FilesystemPermission] = Field(default_factory=list)
    policies: list[str] | None = None
    call_id: str = ""
    first_run_id: str = ""


class ReadWindowRequest(_Scoped):
    file_path: str
    offset: int = 0
    limit: int = DEFAULT_READ_LIMIT
    max_binary_bytes: int = MAX_BINARY_BYTES


class ReadWindow(_Wire):
    """A read as data: the window's lines (no terminators), or a binary file's bytes.

    ``binary`` with an error means a binary file over ``max_binary_bytes`` (its
    bytes were not sent). ``error`` is the backend's reason and ``error_path``
    the (Filegate-side) path it is about, kept apart as in the kernel's results
    so the adapter names the path once, in deepagents' path space.
    ``ends_with_newline``: the file's last line is terminated (the raw window
    deepagents expects keeps that newline).
    """

    path: str
    error: str | None = None
    code: ErrorCode | None = None
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


class UploadRequest(_Scoped):
    files: list[UploadFile]


class DownloadRequest(_Scoped):
    paths: list[str]


class TransferAnswer(_Wire):
    """One file of an upload or download, in request order."""

    path: str
    error: str | None = None
    code: ErrorCode | None = None
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


# --------------------------------------------------------------------------- stubs


def _unreachable(name: str) -> RuntimeError:
    return RuntimeError(f"{name} is a reference; a Filegate tools worker runs it")


@activity.defn(name=TRANSFER_ACTIVITY_NAMES["read"])
async def read_window(request: ReadWindowRequest) -> ReadWindow:
    """A read window as data (served by :class:`~.transfer.TransferActivities`)."""
    raise _unreachable(TRANSFER_ACTIVITY_NAMES["read"])


@activity.defn(name=TRANSFER_ACTIVITY_NAMES["upload"])
async def upload_files(request: UploadRequest) -> list[TransferAnswer]:
    """Write files' bytes (served by :class:`~.transfer.TransferActivities`)."""
    raise _unreachable(TRANSFER_ACTIVITY_NAMES["upload"])


@activity.defn(name=TRANSFER_ACTIVITY_NAMES["download"])
async def download_files(request: DownloadRequest) -> list[TransferAnswer]:
    """Read files' bytes (served by :class:`~.transfer.TransferActivities`)."""
    raise _unreachable(TRANSFER_ACTIVITY_NAMES["download"])


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
    """Options of the tool activity of ``op``: the tool's own, as an agent's call gets.

    One place for both ways of running an operation (the workflow here and a
    standalone activity, :mod:`.direct`), so they cannot drift apart.
    """
    if op.tool is None:
        raise ValueError("tool_options needs an Operation with a tool request")
    request = op.tool
    if op.search_timeout is not None and request.tool in ("glob", "grep"):
        return tool_activity_options(request.tool, search_timeout=op.search_timeout)
    timeout = request.args.get("timeout") if request.tool == "execute" else None
    return tool_activity_options(request.tool, execute_timeout=timeout)


TRANSFER_STUBS = {"read": read_window, "upload": upload_files, "download": download_files}
"""Stub per transfer kind (the :class:`Operation` field naming it)."""


# --------------------------------------------------------------------------- running one


def _identified(op: Operation) -> Operation:
    """Fill the call id and run chain from the running workflow (replay-stable)."""
    first_run = workflow.info().first_execution_run_id
    update: dict[str, Any] = {}
    if op.tool is not None and not op.tool.tool_call_id:
        tool_update = {"tool_call_id": new_call_id(), "first_run_id": first_run}
        update["tool"] = op.tool.model_copy(update=tool_update)
    for name in ("read", "upload", "download"):
        scoped: _Scoped | None = getattr(op, name)
        if scoped is not None and not scoped.call_id:
            update[name] = scoped.model_copy(
                update={"call_id": new_call_id(), "first_run_id": first_run}
            )
    return op.model_copy(update=update) if update else op


async def run_operation(op: Operation) -> OperationResult:
    """Run one operation from the current workflow; a tool that failed for good is a result.

    Only a transfer that failed for good raises (``ActivityError``): its caller
    has no model text to show instead.
    """
    op = _identified(op)
    queue = op.task_queue
    if op.tool is not None:
        request = op.tool
        try:
            outcome = await workflow.execute_activity(
                STUBS[request.tool], request, task_queue=queue, **tool_options(op)
            )
        except ActivityError as exc:
            outcome = outcome_for_activity_error(request.tool, exc)
        return OperationResult(outcome=outcome)
    options = transfer_activity_options()
    if op.read is not None:
        window = await workflow.execute_activity(read_window, op.read, task_queue=queue, **options)
        return OperationResult(read=window)
    if op.upload is not None:
        files = await workflow.execute_activity(
            upload_files, op.upload, task_queue=queue, **options
        )
        return OperationResult(files=files)
    if op.download is not None:
        files = await workflow.execute_activity(
            download_files, op.download, task_queue=queue, **options
        )
        return OperationResult(files=files)
    raise ValueError("an Operation needs one of tool, read, upload or download")


@workflow.defn(name=wire.OPERATION_WORKFLOW_TYPE)
class OperationWorkflow:
    """One backend operation for a caller outside any workflow (one short run each).

    The fallback of :mod:`.direct` where the server runs no standalone
    activities (or ``operation_path="workflow"``); it adds no check of its
    own. Why a workflow and not the backend object itself: the call takes the same
    path as an agent's (the tools worker's policies, permission gate,
    idempotency journal, heartbeats, timeouts and S3 payload offload), and the
    calling process needs a Temporal connection only, never the files or the
    tools worker's credentials.
    """

    @workflow.run
    async def run(self, op: Operation) -> OperationResult:
        return await run_operation(op)
