"""The transfer activities on the tools worker: a read window as data, upload, download.

What ``filegate call`` and the Deep Agents adapter need besides the tools
(:mod:`filegate.kernel.operation_types`); every tools worker serves them.

They serve the same backends as the worker's
:class:`~filegate.activities.tools.FileToolActivities` (one instance wraps
it), with the same guards in the same order: the worker's policies wrap the
backend, every operation is audited under the run chain and call id, the
request's permission rules are checked on each path (as written and its
in-root target) before the backend is touched, and the work runs on a tool
thread while the activity heartbeats. Expected failures are values with an
error code, never exceptions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from temporalio import activity

from filegate.activities.tools import FileToolActivities
from filegate.kernel import wire
from filegate.kernel.gates import entry_refused
from filegate.kernel.operation_types import (
    DownloadRequest,
    ReadWindow,
    ReadWindowRequest,
    Scoped,
    TransferAnswer,
    UploadRequest,
)
from filegate.kernel.paths import validate_path
from filegate.kernel.protocol import BackendProtocol, OutcomeCode
from filegate.kernel.reach import judged_at_reach, reach_for
from filegate.kernel.tool_types import (
    ToolName,
    ToolRequest,
)

_Operation = Literal["read", "write"]


class TransferActivities:
    """``filegate.transfer.read`` / ``upload`` / ``download`` for the backends of ``tools``.

    Register them next to the tool activities::

        tools = FileToolActivities({"sandbox": backend}, journal_dir)
        Worker(client, task_queue=q, activities=[*tools.activities(),
               *TransferActivities(tools).activities()])

    (:func:`filegate.wiring.roles.with_preview` does this, so every tools worker serves them.)
    """

    def __init__(self, tools: FileToolActivities) -> None:
        self.tools = tools

    def activities(self) -> list[Callable[..., Any]]:
        return [self.read_window, self.upload_files, self.download_files]

    async def _run(
        self, request: Scoped, fn: Callable[[BackendProtocol], Any], *, interruptible: bool
    ) -> Any:
        """``fn`` on the request's backend behind the tools worker's own guards.

        The backend judges what each operation reached with the request's rules
        too (kernel.reach), as the tool activities do through ``run_tool``.
        """
        reach = reach_for(request.permissions)

        def judged(backend: BackendProtocol) -> Any:
            with judged_at_reach(reach):
                return fn(backend)

        return await self.tools.run_on(
            request.backend,
            request.policies,
            request.first_run_id,
            request.call_id,
            judged,
            interruptible=interruptible,
        )

    @activity.defn(name=wire.TRANSFER_READ_ACTIVITY)
    async def read_window(self, request: ReadWindowRequest) -> ReadWindow:
        def read(backend: BackendProtocol) -> ReadWindow:
            refused = _refused(backend, request, request.file_path, "read")
            if refused is not None:
                return ReadWindow(path=request.file_path, error=refused[0], code=refused[1])
            result = backend.read(request.file_path, request.offset, request.limit)
            if result.error is not None:
                return ReadWindow(
                    path=request.file_path,
                    error=result.error,
                    code=result.code,
                    error_path=result.error_path,
                )
            if result.data is not None:
                size = len(result.data)
                if size > request.max_binary_bytes:
                    return ReadWindow(
                        path=request.file_path,
                        binary=True,
                        size=size,
                        code="too_large",
                        error=f"Binary file exceeds maximum preview size of "
                        f"{request.max_binary_bytes} bytes",
                    )
                return ReadWindow(path=request.file_path, binary=True, data=result.data, size=size)
            return ReadWindow(
                path=request.file_path,
                lines=result.lines,
                total_lines=result.total_lines,
                start_line=result.start_line,
                end_line=result.end_line,
                next_offset=result.next_offset,
                ends_with_newline=result.ends_with_newline,
            )

        window: ReadWindow = await self._run(request, read, interruptible=True)
        return window

    @activity.defn(name=wire.TRANSFER_UPLOAD_ACTIVITY)
    async def upload_files(self, request: UploadRequest) -> list[TransferAnswer]:
        def upload(backend: BackendProtocol) -> list[TransferAnswer]:
            answers: dict[int, TransferAnswer] = {}
            allowed: list[tuple[int, str, bytes]] = []
            for index, item in enumerate(request.files):
                refused = _refused(backend, request, item.path, "write")
                if refused is None:
                    allowed.append((index, item.path, item.content))
                else:
                    answers[index] = TransferAnswer(
                        path=item.path, error=refused[0], code=refused[1]
                    )
            done = backend.upload([(path, content) for _, path, content in allowed])
            for (index, path, _), result in zip(allowed, done, strict=True):
                answers[index] = TransferAnswer(
                    path=path, error=result.error_text, code=result.code
                )
            return [answers[i] for i in range(len(request.files))]

        # Not interruptible: a half-written upload is worse than a late cancel.
        answers: list[TransferAnswer] = await self._run(request, upload, interruptible=False)
        return answers

    @activity.defn(name=wire.TRANSFER_DOWNLOAD_ACTIVITY)
    async def download_files(self, request: DownloadRequest) -> list[TransferAnswer]:
        def download(backend: BackendProtocol) -> list[TransferAnswer]:
            answers: dict[int, TransferAnswer] = {}
            allowed: list[tuple[int, str]] = []
            for index, path in enumerate(request.paths):
                refused = _refused(backend, request, path, "read")
                if refused is None:
                    allowed.append((index, path))
                else:
                    answers[index] = TransferAnswer(path=path, error=refused[0], code=refused[1])
            done = backend.download([path for _, path in allowed])
            for (index, path), result in zip(allowed, done, strict=True):
                answers[index] = TransferAnswer(
                    path=path, error=result.error_text, code=result.code, content=result.content
                )
            return [answers[i] for i in range(len(request.paths))]

        answers: list[TransferAnswer] = await self._run(request, download, interruptible=True)
        return answers


def _refused(
    backend: BackendProtocol, request: Scoped, path: str, operation: _Operation
) -> tuple[str, OutcomeCode] | None:
    """Why ``path`` may not be touched (message, code), or None.

    The same entry gate the tools apply (:func:`~filegate.kernel.gates.entry_refused`),
    so a rule or an ``interrupt`` without approval refuses here as it does there.
    """
    try:
        valid = validate_path(path)
    except ValueError as exc:
        return str(exc), "invalid_path"
    if not request.permissions:
        return None
    tool: ToolName = "read_file" if operation == "read" else "write_file"
    probe = ToolRequest(
        tool=tool,
        backend=request.backend,
        args={"file_path": str(valid)},
        tool_call_id=request.call_id or "transfer",
        permissions=request.permissions,
    )
    refusal = entry_refused(backend, probe, operation, valid)
    if refusal is None:
        return None
    return refusal.text.removeprefix("Error: "), refusal.code or "denied"


__all__ = ["TransferActivities"]
