"""deepagents backends whose every operation is a Filegate activity.

:class:`FilegateBackend` is a ``SandboxBackendProtocol`` (files and
``execute``); ``FilegateBackend(..., can_execute=False)`` is a
:class:`FilegateFileBackend`, a plain ``BackendProtocol`` (files only), which
deepagents' own permission rules accept.

Inside a workflow (a Deep Agents graph run by a Temporal workflow), each call
schedules the activity from that workflow, so it gets Filegate's per-tool
timeouts and retries, the idempotency journal for mutations and the S3
payload codec, and is recorded in that workflow's history. Outside a
workflow (a script, a notebook, the langchain-tests suite) each call is the
very same activity, started through a Temporal client: a standalone activity
where the server runs those, else one short
:class:`~filegate.workflows.operation.OperationWorkflow` (:mod:`filegate.operations`,
``operation_path``).

Only the async methods (``aread``, ``awrite``, ...) work inside a workflow: a
workflow must never block its thread. The sync methods are for callers
outside one and run the call on a private event loop thread, so they work
from plain code and from inside another running event loop alike.
"""

from __future__ import annotations

import threading
from collections.abc import Coroutine, Sequence
from datetime import timedelta
from typing import Any, Literal, TypedDict, TypeVar, Unpack, overload

from deepagents.backends.protocol import (
    BackendProtocol,
    DeleteResult,
    EditResult,
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
    GlobResult,
    GrepResult,
    LsResult,
    ReadResult,
    SandboxBackendProtocol,
    WriteResult,
)
from temporalio import workflow
from temporalio.client import Client

from filegate.integrations.calls import adapter_calls
from filegate.kernel.network_rules import NetworkPermission
from filegate.kernel.operation_types import (
    UploadFile,
)
from filegate.kernel.permissions import FilesystemPermission
from filegate.operations import (
    DEFAULT_OPERATION_TIMEOUT,
    OperationPath,
)

from . import convert
from .convert import Mount
from .gate import check_gate
from .portal import Portal

T = TypeVar("T")


class FilegateFileBackend(BackendProtocol):
    """deepagents' ``BackendProtocol`` (files only, no ``execute``) over one Filegate backend.

    ``backend`` and ``task_queue`` name the backend and the tools worker's
    queue (as ``BackendRef(kind="remote")`` does). ``client`` is needed only
    outside a workflow and an activity (in an activity, its client is the
    default): each call is then a standalone activity on
    ``task_queue`` where the server runs those, else an
    :class:`~filegate.workflows.operation.OperationWorkflow` on
    ``operation_task_queue`` (default: ``task_queue``; every tools worker, a plain
    ``filegate worker --role tools`` included, serves both).
    ``operation_path`` forces one of the two (``"standalone"``, ``"workflow"``;
    default ``"auto"``, or ``FILEGATE_OPERATION_PATH``); see :mod:`filegate.operations`.
    ``mount`` is where Filegate's ``/`` appears in deepagents' paths
    (``"/workspace"`` for the bwrap sandbox, whose commands see the files
    there). ``permissions`` and ``policies`` travel with every call as they
    do from ``AgentWorkflow``: a path an ``interrupt`` rule covers is refused
    (approvals belong to deepagents' own ``interrupt_on`` here).

    Why a class without ``execute``: deepagents decides whether a backend runs
    commands by ``isinstance(backend, SandboxBackendProtocol)``, and its
    ``FilesystemMiddleware(permissions=...)`` refuses any backend that does
    (it cannot hold path rules for a shell). This class is what
    ``FilegateBackend(..., can_execute=False)`` returns, so deepagents' own
    rules work over Filegate's files.
    """

    can_execute: bool = False
    """Whether ``execute`` is offered (only :class:`FilegateBackend` offers it)."""
    sandboxed: bool = False
    """Whether commands run in Filegate's bubblewrap sandbox (declared, never probed)."""

    def __init__(
        self,
        *,
        backend: str,
        task_queue: str,
        client: Client | None = None,
        operation_task_queue: str | None = None,
        mount: str = "/",
        permissions: Sequence[FilesystemPermission] = (),
        policies: Sequence[str] | None = None,
        network: Sequence[NetworkPermission] = (),
        operation_timeout: timedelta | float = DEFAULT_OPERATION_TIMEOUT,
        search_timeout: float | None = None,
        sandbox_id: str | None = None,
        operation_path: OperationPath | None = None,
    ) -> None:
        # fmt: off
        self.calls = adapter_calls(
            "FilegateBackend", self.can_execute, backend, task_queue, client,
            operation_task_queue, permissions, policies, network, operation_timeout,
            operation_path, search_timeout,
        )
        # fmt: on
        self.mount = Mount(mount.rstrip("/") or "/")
        self._id = sandbox_id or f"filegate:{backend}@{task_queue}"
        self._portal: Portal | None = None
        self._portal_lock = threading.Lock()

    @property
    def id(self) -> str:
        return self._id

    def close(self) -> None:
        """Stop the private event loop of the sync methods (if one was started)."""
        with self._portal_lock:
            if self._portal is not None:
                self._portal.close()
                self._portal = None

    # ----------------------------------------------------------------------- plumbing

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        if workflow.in_workflow():
            coro.close()
            raise RuntimeError(
                "inside a workflow use the async methods (aread, awrite, aexecute, ...): "
                "a workflow must not block"
            )
        with self._portal_lock:
            if self._portal is None:
                self._portal = Portal()
            portal = self._portal
        return portal.run(coro)

    # ----------------------------------------------------------------------- async operations

    async def als(self, path: str) -> LsResult:
        try:
            local = self.mount.inward(path)
        except ValueError as exc:
            return LsResult(error=f"Error: Invalid path '{path}': {exc}")
        outcome = await self.calls.tool("ls", {"path": local})
        return convert.ls_result(self.mount, path, _raw(outcome, "ls"), outcome)

    async def aread(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        try:
            local = self.mount.inward(file_path)
        except ValueError as exc:
            # No "Error: " here: deepagents' read_file adds it to a read's error.
            return ReadResult(error=f"Invalid path '{file_path}': {exc}")
        # limit <= 0 reads one line from the top: a binary file still comes back
        # whole and an empty one as empty, as on deepagents' own backends, and
        # any offset is fine because no line is shown (convert.read_result).
        if limit <= 0:
            offset, window = 0, 1
        else:
            offset, window = max(offset, 0), limit
        read = await self.calls.read_window(local, offset, window)
        return convert.read_result(self.mount, file_path, read, limit=limit)

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        try:
            local = self.mount.inward(file_path)
        except ValueError as exc:
            return WriteResult(error=f"Error: Invalid path '{file_path}': {exc}")
        outcome = await self.calls.tool("write_file", {"file_path": local, "content": content})
        error = convert.write_error(file_path, local, outcome)
        return WriteResult(error=error) if error else WriteResult(path=file_path)

    async def aedit(
        self,
        file_path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,
    ) -> EditResult:
        try:
            local = self.mount.inward(file_path)
        except ValueError as exc:
            return EditResult(error=f"Error: Invalid path '{file_path}': {exc}")
        args = {
            "file_path": local,
            "old_string": old_string,
            "new_string": new_string,
            "replace_all": replace_all,
        }
        outcome = await self.calls.tool("edit_file", args)
        return convert.edit_result(file_path, local, old_string, outcome)

    async def adelete(self, file_path: str) -> DeleteResult:
        try:
            local = self.mount.inward(file_path)
        except ValueError as exc:
            return DeleteResult(error=f"Error: Invalid path '{file_path}': {exc}")
        outcome = await self.calls.tool("delete", {"file_path": local})
        error = convert.delete_error(file_path, local, outcome)
        return DeleteResult(error=error) if error else DeleteResult(path=file_path)

    async def agrep(
        self,
        pattern: str,
        path: str | None = None,
        glob: str | None = None,
        *,
        max_count: int | None = None,
    ) -> GrepResult:
        shown = path or self.mount.at
        try:
            local = self.mount.inward(shown)
        except ValueError as exc:
            return GrepResult(error=f"Error: Invalid path '{shown}': {exc}")
        args: dict[str, Any] = {"pattern": pattern, "glob": glob, "output_mode": "content"}
        if path is not None:  # none: where the backend searches by default (its root_dir)
            args["path"] = local
        if max_count is not None:
            args["max_count"] = max_count
        outcome = await self.calls.tool("grep", args)
        return convert.grep_result(self.mount, shown, _raw(outcome, "grep"), outcome)

    async def aglob(self, pattern: str, path: str | None = None) -> GlobResult:
        shown = path or self.mount.at
        try:
            local = self.mount.inward(shown)
        except ValueError as exc:
            return GlobResult(error=f"Error: Invalid path '{shown}': {exc}")
        args: dict[str, Any] = {"pattern": pattern}
        if path is not None:  # none: where the backend searches by default (its root_dir)
            args["path"] = local
        outcome = await self.calls.tool("glob", args)
        return convert.glob_result(self.mount, shown, _raw(outcome, "glob"), outcome)

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        answers: dict[int, FileUploadResponse] = {}
        wanted: list[tuple[int, UploadFile]] = []
        for index, (path, content) in enumerate(files):
            try:
                wanted.append((index, UploadFile(path=self.mount.inward(path), content=content)))
            except ValueError:
                answers[index] = FileUploadResponse(path=path, error="invalid_path")
        if wanted:
            uploaded = await self.calls.upload([item for _, item in wanted])
            done = convert.upload_responses(self.mount, uploaded)
            for (index, _), response in zip(wanted, done, strict=True):
                answers[index] = FileUploadResponse(path=files[index][0], error=response.error)
        return [answers[i] for i in range(len(files))]

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        answers: dict[int, FileDownloadResponse] = {}
        wanted: list[tuple[int, str]] = []
        for index, path in enumerate(paths):
            try:
                wanted.append((index, self.mount.inward(path)))
            except ValueError:
                answers[index] = FileDownloadResponse(path=path, error="invalid_path")
        if wanted:
            downloaded = await self.calls.download([local for _, local in wanted])
            done = convert.download_responses(self.mount, downloaded)
            for (index, _), response in zip(wanted, done, strict=True):
                answers[index] = FileDownloadResponse(
                    path=paths[index], content=response.content, error=response.error
                )
        return [answers[i] for i in range(len(paths))]

    # ----------------------------------------------------------------------- sync operations

    def ls(self, path: str) -> LsResult:
        return self._sync(self.als(path))

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        return self._sync(self.aread(file_path, offset, limit))

    def write(self, file_path: str, content: str) -> WriteResult:
        return self._sync(self.awrite(file_path, content))

    def edit(
        self,
        file_path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,
    ) -> EditResult:
        return self._sync(self.aedit(file_path, old_string, new_string, replace_all))

    def delete(self, file_path: str) -> DeleteResult:
        return self._sync(self.adelete(file_path))

    def grep(
        self,
        pattern: str,
        path: str | None = None,
        glob: str | None = None,
        *,
        max_count: int | None = None,
    ) -> GrepResult:
        return self._sync(self.agrep(pattern, path, glob, max_count=max_count))

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        return self._sync(self.aglob(pattern, path))

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        return self._sync(self.aupload_files(files))

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        return self._sync(self.adownload_files(paths))


class _Where(TypedDict):
    backend: str
    task_queue: str


class BackendOptions(_Where, total=False):
    """:class:`FilegateFileBackend`'s constructor arguments, for ``FilegateBackend``'s typing.

    (Required keys by inheritance, not ``Required[...]``: postponed annotations
    would hide those from ``__required_keys__`` at runtime.)
    """

    client: Client | None
    operation_task_queue: str | None
    mount: str
    permissions: Sequence[FilesystemPermission]
    policies: Sequence[str] | None
    network: Sequence[NetworkPermission]
    operation_timeout: timedelta | float
    search_timeout: float | None
    sandbox_id: str | None
    operation_path: OperationPath | None


class FilegateBackend(FilegateFileBackend, SandboxBackendProtocol):
    """deepagents' ``SandboxBackendProtocol`` over one Filegate backend on a tools worker.

    The file operations and arguments of :class:`FilegateFileBackend`, plus
    ``execute``. ``can_execute`` and ``sandboxed`` mirror ``BackendRef``; they
    are declared because the adapter cannot probe the tools worker:

    - ``can_execute=False`` returns a :class:`FilegateFileBackend` instead, so
      deepagents sees no shell (and takes ``FilesystemMiddleware(permissions=...)``);
    - ``sandboxed=True``: the worker serves the backend with Filegate's bubblewrap
      sandbox, which compiles the permission rules into each command's view.

    Protecting rules (``deny``/``interrupt``) that a command could bypass are
    refused right here, before any tool runs (:class:`ExecuteGateError`, naming
    the rule): on a host shell any such rule, in the sandbox a rule that does
    not compile to mounts (only literal paths and ``dir/**`` do). The tools
    worker applies the same gate to every command anyway, so rules changed
    after construction are refused there (``execute refused: ...``).
    """

    can_execute = True

    @overload
    def __new__(
        cls,
        *,
        can_execute: Literal[True] = ...,
        sandboxed: bool = ...,
        **options: Unpack[BackendOptions],
    ) -> FilegateBackend: ...

    @overload
    def __new__(  # type: ignore[misc]  # typing spec: a non-subclass skips __init__
        cls, *, can_execute: bool, sandboxed: bool = ..., **options: Unpack[BackendOptions]
    ) -> FilegateFileBackend: ...

    def __new__(  # type: ignore[misc]  # typing spec: a non-subclass skips __init__
        cls,
        *,
        can_execute: bool = True,
        sandboxed: bool = False,
        **options: Unpack[BackendOptions],
    ) -> FilegateFileBackend:
        if sandboxed and not can_execute:
            raise ValueError(f"backend {options.get('backend')!r}: sandboxed needs can_execute")
        if can_execute:
            return super().__new__(cls)
        if cls is not FilegateBackend:
            raise TypeError(
                f"{cls.__name__}(can_execute=False) would lose the subclass: "
                "subclass FilegateFileBackend for a backend without execute"
            )
        return FilegateFileBackend(**options)  # not a FilegateBackend: __init__ is skipped

    def __init__(
        self,
        *,
        can_execute: bool = True,
        sandboxed: bool = False,
        **options: Unpack[BackendOptions],
    ) -> None:
        # can_execute is True here: __new__ returned a FilegateFileBackend otherwise.
        super().__init__(**options)
        self.sandboxed = sandboxed
        calls = self.calls
        check_gate(
            calls.permissions, backend=calls.backend, sandboxed=sandboxed, network=calls.network
        )

    async def aexecute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        # deepagents' 0 means "no timeout"; Filegate always bounds a command
        # (the worker's FILEGATE_EXEC_MAX_SECONDS), so 0 takes the default.
        args: dict[str, Any] = {"command": command}
        if timeout:
            args["timeout"] = float(timeout)
        outcome = await self.calls.tool("execute", args)
        return convert.execute_response(outcome)

    # ----------------------------------------------------------------------- sync operations

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        return self._sync(self.aexecute(command, timeout=timeout))


def _raw(outcome: Any, tool: str) -> Any:
    return getattr(outcome.raw, tool) if outcome.raw is not None else None
