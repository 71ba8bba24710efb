"""Pydantic AI workspace backends whose every operation is a Filegate operation.

:class:`FilegateWorkspace` implements Pydantic AI's ``WorkspaceBackend``,
``SupportsFilesystem`` and ``SupportsCommands`` over one backend on a Filegate
tools worker; :class:`FilegateFileWorkspace` is the same without commands.
Each call is one :class:`~filegate.kernel.operation_types.Operation`:

- inside a workflow, scheduled from it by the kit's
  :func:`~filegate.workflows.operation.run_operation` (recorded in its history,
  replay-stable call ids);
- outside one, started through a Temporal client by
  :func:`filegate.operations.run_outside` (a standalone activity, else one short
  ``OperationWorkflow``). Inside an activity, such as the tool activity of a
  Pydantic AI agent under Temporal, the activity's own client serves when the
  workspace was built without one.

Either way the call takes an agent's path on the tools worker: its policies,
the permission rules carried in the request, the idempotency journal, the
audit log, timeouts and the S3 payload codec.

Why the mutations a rule may interrupt are checked here first: a workspace
call has no workflow history to hold a reviewer's decision (the tools worker
refuses a claimed approval on a standalone activity), so an ``interrupt`` rule
becomes Pydantic AI's deferred approval instead. Inside an agent run the call
raises ``ApprovalRequired`` with the Filegate call to approve in its metadata;
:class:`~.approvals.FilegateCapability` runs that call through ``FileTools`` in
the agent's workflow (Filegate's approval handlers, ``filegate approve``),
and the approved re-run of the tool finds the settled answer in
``ctx.tool_call_metadata`` instead of running it a second time (:mod:`.settled`).
"""

from __future__ import annotations

import base64
import copy
import errno
import posixpath
import shlex
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Self

from pydantic_ai import RunContext
from pydantic_ai.workspaces import (
    CommandResult,
    FileEntry,
    WorkspaceError,
    WorkspaceOutputLimitError,
    WorkspaceRef,
    WorkspaceTimeoutError,
)
from temporalio.client import Client

from filegate.integrations.calls import adapter_calls
from filegate.kernel.mount import Mount
from filegate.kernel.network_rules import NetworkPermission
from filegate.kernel.operation_types import (
    TransferAnswer,
    UploadFile,
)
from filegate.kernel.paths import validate_path
from filegate.kernel.permissions import FilesystemPermission, check_permission
from filegate.kernel.protocol import FileInfo, LsResult, as_error_code
from filegate.kernel.tool_types import ToolName, ToolOutcome
from filegate.operations import (
    DEFAULT_OPERATION_TIMEOUT,
    OperationPath,
)
from filegate.workflows.adapter_gate import check_adapter_gate
from filegate.workflows.inputs import BackendRef, BackendSpec, FileToolsConfig

from . import settled
from .errors import raise_for

PROVIDER = "filegate"
"""``WorkspaceRef.provider`` of a Filegate workspace."""

ADAPTER_REMEDIES = (
    "Through the Pydantic AI adapter: FilegateWorkspace(sandboxed=True) on a tools worker "
    "serving the bubblewrap sandbox, or FilegateFileWorkspace to offer no commands."
)
"""The kernel's remedies name ``BackendRef`` and ``interrupt_on``; these are the adapter's."""

"""The last line of a command the tools worker stopped at its timeout (from the kernel)."""

# Exit codes of make_dir's script: 100 plus the errno, as pydantic_ai's shell filesystem does.
_MKDIR_EXISTS = 117
_MKDIR_NOT_DIRECTORY = 120
_MKDIR_SCRIPT = (
    f'p=$1; if [ -e "$p" ] && [ ! -d "$p" ]; then exit {_MKDIR_EXISTS}; fi; q=$p; '
    'while [ "$q" != / ] && [ ! -e "$q" ]; do q=${q%/*}; [ -n "$q" ] || q=/; done; '
    f'[ -d "$q" ] || exit {_MKDIR_NOT_DIRECTORY}; mkdir -p -- "$p"'
)
"""``mkdir -p`` that tells a file in the way (the path, or an ancestor) from other failures."""


class FilegateFileWorkspace:
    """Pydantic AI's ``WorkspaceBackend`` and ``SupportsFilesystem`` over one Filegate backend.

    ``backend`` and ``task_queue`` name the backend and its tools worker's queue
    (as ``BackendRef(kind="remote")`` does). ``client`` serves calls outside a
    workflow (default: the running activity's client, if any);
    ``operation_task_queue`` is where the fallback ``OperationWorkflow`` runs
    (default: ``task_queue``; every tools worker serves it) and
    ``operation_path`` forces a path (:mod:`filegate.operations`; default
    ``FILEGATE_OPERATION_PATH``, else ``auto``). ``mount`` is
    where Filegate's ``/`` appears in the workspace's paths and is its working
    directory (``"/workspace"`` for the bwrap sandbox, whose commands see the
    files there). ``permissions`` and ``policies`` travel with every call, as
    from ``AgentWorkflow``.

    No commands: no ``run`` (Pydantic AI probes ``SupportsCommands``
    structurally), and ``make_dir`` raises ``NotImplementedError`` (Filegate
    has no directory operation but a command).
    """

    can_execute: bool = False
    """Whether ``run`` is offered (only :class:`FilegateWorkspace` offers it)."""
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
        operation_path: OperationPath | None = None,
    ) -> None:
        if not mount.startswith("/"):
            raise ValueError(f"mount {mount!r}: must be an absolute path")
        # fmt: off
        self.calls = adapter_calls(
            "FilegateWorkspace", self.can_execute, backend, task_queue, client,
            operation_task_queue, permissions, policies, network, operation_timeout,
            operation_path,
        )
        # fmt: on
        self.mount = Mount(posixpath.normpath(mount))
        self._ref = WorkspaceRef(provider=PROVIDER, id=f"{backend}@{task_queue}:{self.mount.at}")
        self._context: RunContext[Any] | None = None

    def for_context(self, ctx: RunContext[Any]) -> Self:
        """This workspace for the calls of one run context (a tool call's, in a durable unit).

        Why: an approved tool call's re-run finds its settled answer in
        ``ctx.tool_call_metadata``; Pydantic AI's Temporal integration hands a
        tool's context to the capability that rebuilds the workspace, not to the
        workspace's calls. A shallow copy: the same backend, client and rules.
        """
        bound = copy.copy(self)
        bound._context = ctx
        return bound

    # ----------------------------------------------------------------------- protocol

    @property
    def ref(self) -> WorkspaceRef:
        """``filegate`` / ``<backend>@<task_queue>:<mount>``, from construction.

        The tools worker's backend is the environment: it exists before the
        first call and outlives every run, so there is nothing to create.
        """
        return self._ref

    async def working_dir(self) -> str:
        return self.mount.at

    async def read_bytes(self, path: str) -> bytes:
        local = self._inward(path)
        self._refuse_interrupted_read(path, local)
        [answer] = await self.calls.download([local])
        _raise_answer(answer, path)
        return answer.content or b""

    async def write_bytes(self, path: str, data: bytes) -> None:
        local = self._inward(path)
        if self._interrupted("write", local):
            await self._approved_write(path, local, data)
            return
        [answer] = await self.calls.upload([UploadFile(path=local, content=data)])
        _raise_answer(answer, path)

    async def stat(self, path: str) -> FileEntry:
        local = self._inward(path)
        listing = await self._ls(local)
        name = posixpath.basename(path.rstrip("/")) or "/"
        if listing.error is None:
            return FileEntry(name=name, path=path, is_dir=True, size=None)
        if listing.code == "not_a_directory":
            return await self._file_entry(path, local)
        raise_for(listing.code, listing.error_text or "stat failed", path)

    async def _file_entry(self, path: str, local: str) -> FileEntry:
        """A path ``ls`` calls "not a directory": a file, or a path below one.

        ``ls`` answers the same for both, so the parent's listing decides (and
        gives the file's size); a name it does not list (below a file, or a
        special file Filegate does not serve) is missing.
        """
        parent = await self._ls(posixpath.dirname(local))
        if parent.error is not None:
            raise_for(parent.code, parent.error_text or "stat failed", path)
        for info in parent.entries:
            if info.path.rstrip("/") == local:
                entry = self._entry(info)
                return FileEntry(name=entry.name, path=path, is_dir=entry.is_dir, size=entry.size)
        raise FileNotFoundError(errno.ENOENT, "no such file or directory", path)

    async def list_dir(self, path: str) -> Sequence[FileEntry]:
        listing = await self._ls(self._inward(path))
        if listing.error is not None:
            raise_for(listing.code, listing.error_text or "listing failed", path)
        entries = [self._entry(info) for info in listing.entries]
        return sorted(entries, key=lambda entry: entry.path)

    async def make_dir(self, path: str) -> None:
        """``mkdir -p``: Filegate has no directory operation, but a write creates the
        parents of its file, so a marker file is written below ``path`` and removed
        again (two file operations, each through the gate and the worker's policies).
        A directory already there is fine; a file in the way is ``FileExistsError`` (the
        path) or ``NotADirectoryError`` (an ancestor). Where writes need a person's
        approval, use a write of a real file instead: that one approval makes the
        parents (``PermissionError`` here, nothing written)."""
        local = self._inward(path)
        try:
            found = await self.stat(path)
        except FileNotFoundError:
            found = None
        if found is not None:
            if found.is_dir:
                return
            raise FileExistsError(errno.EEXIST, "a file is in the way", path)
        marker = posixpath.join(local, f".filegate-mkdir-{uuid.uuid4().hex}")
        if self._interrupted("write", marker):
            raise PermissionError(
                f"{path}: writes there need a person's approval; write a file there instead "
                "(its approval creates the directory)"
            )
        [answer] = await self.calls.upload([UploadFile(path=marker, content=b"")])
        _raise_answer(answer, path)
        outcome = await self.calls.tool("delete", {"file_path": marker})
        if outcome.status == "error":
            raise_for(outcome.code, outcome.text, path)

    async def remove(self, path: str) -> None:
        if isinstance(path, str) and _contains(posixpath.normpath(path), self.mount.at):
            raise ValueError("cannot remove the workspace's working directory or its ancestor")
        local = self._inward(path)
        interrupted = self._interrupted("write", local)
        args = {"file_path": local}
        if interrupted and self._settled("delete", args, path):
            return  # the approved re-run: the workflow removed it (it is gone now)
        await self.stat(path)  # FileNotFoundError / NotADirectoryError, as the protocol wants
        if interrupted:
            settled.ask(settled.current(self._context), "delete", args, shown=path)
        outcome = await self.calls.tool("delete", {"file_path": local})
        if outcome.status == "error":
            raise_for(outcome.code, outcome.text, path)

    async def exists(self, path: str) -> bool:
        try:
            await self.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    # ----------------------------------------------------------------------- FileTools

    def backend_ref(self) -> BackendRef:
        """This backend as a ``BackendRef`` (the kit's description of a remote backend)."""
        return BackendRef(
            kind="remote",
            name=self.calls.backend,
            task_queue=self.calls.task_queue,
            can_execute=self.can_execute,
            sandboxed=self.sandboxed,
        )

    def file_tools_config(self) -> FileToolsConfig:
        """The ``FileToolsConfig`` of this workspace: its backend, rules and policies.

        Build the agent workflow's ``FileTools`` from it in ``@workflow.init``, so
        a call an ``interrupt`` rule stops is approved against the same rules
        (:class:`~.approvals.FilegateCapability`).
        """
        return FileToolsConfig(
            backend=BackendSpec(default=self.backend_ref()),
            permissions=self.calls.permissions,
            network=self.calls.network,
            policies=self.calls.policies,
        )

    # ----------------------------------------------------------------------- plumbing

    def _inward(self, path: str) -> str:
        """Filegate's path for ``path``: ``ValueError`` for a malformed one (a bad argument),
        ``PermissionError`` for one outside the mount (a place this workspace cannot reach)."""
        if not isinstance(path, str):
            raise TypeError(f"path must be a string, got {type(path).__name__}")
        if not path.startswith("/"):
            raise ValueError(f"path must be absolute, got {path!r}")
        try:
            validate_path(path)
        except ValueError as exc:
            raise ValueError(f"{path!r}: {exc}") from None
        try:
            return self.mount.inward(path)
        except ValueError as exc:
            raise PermissionError(f"{path}: {exc}: not in this Filegate workspace") from None

    def _entry(self, info: FileInfo) -> FileEntry:
        virtual = info.path.rstrip("/") or "/"
        shown = self.mount.outward(virtual)
        size = None if info.is_dir else info.size
        return FileEntry(name=posixpath.basename(shown), path=shown, is_dir=info.is_dir, size=size)

    def _interrupted(self, operation: str, local: str) -> bool:
        return check_permission(self.calls.permissions, operation, local) == "interrupt"

    def _refuse_interrupted_read(self, path: str, local: str) -> None:
        if self._interrupted("read", local):
            raise PermissionError(
                f"{path}: reading it needs human approval (an interrupt rule matches); the "
                "workspace reads bytes through a transfer no reviewer can approve"
            )

    async def _approved_write(self, path: str, local: str, data: bytes) -> None:
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            raise PermissionError(
                f"{path}: writing it needs human approval (an interrupt rule matches), and "
                "only a text (UTF-8) write can be approved: Filegate approves write_file calls"
            ) from None
        args = {"file_path": local, "content": content}
        if not self._settled("write_file", args, path):
            settled.ask(settled.current(self._context), "write_file", args, shown=path)

    def _settled(self, tool: ToolName, args: dict[str, Any], path: str) -> bool:
        """Whether this is the approved re-run of ``tool(args)``, which the workflow ran.

        True: it ran and succeeded (nothing is left to do); an outcome recorded
        as failed raises. False: not approved through Filegate yet.
        """
        answer = settled.answer_for(settled.current(self._context), tool, args)
        if answer is None:
            return False
        if not answer.ok:
            raise_for(answer.code, answer.text, path)
        return True

    async def _ls(self, local: str) -> LsResult:
        outcome = await self.calls.tool("ls", {"path": local})
        if outcome.raw is not None and outcome.raw.ls is not None:
            return outcome.raw.ls
        # An error before the backend answered (the entry gate, a policy): its code.
        return LsResult(error=outcome.text, code=as_error_code(outcome.code))


class FilegateWorkspace(FilegateFileWorkspace):
    """Pydantic AI's ``WorkspaceBackend``, ``SupportsFilesystem`` and ``SupportsCommands``.

    The arguments of :class:`FilegateFileWorkspace`, plus what the tools worker
    serves, declared because the adapter cannot probe it (as ``BackendRef``):
    ``sandboxed=True`` for a worker serving Filegate's bubblewrap sandbox,
    whose commands run in a view the rules compile to. Protecting rules a
    command could bypass are refused here, before any call
    (``ExecuteGateError`` naming the rule; inside a workflow an
    ``ExecuteGateFailure`` that fails it), as ``FileTools`` refuses them.

    ``run`` sends the command to Filegate's ``execute`` wrapped so that its
    standard output and error come back apart and byte-exact (each base64
    encoded between markers): ``execute`` itself answers one merged stream for
    a model. ``env`` is set on the command; ``timeout`` is ``execute``'s.
    """

    can_execute = True

    def __init__(self, *, sandboxed: bool = False, **options: Any) -> None:
        super().__init__(**options)
        self.sandboxed = sandboxed
        check_adapter_gate(
            self.calls.permissions,
            backend=self.calls.backend,
            sandboxed=sandboxed,
            remedies=ADAPTER_REMEDIES,
            network=self.calls.network,
        )

    async def run(
        self,
        command: str | Sequence[str],
        *,
        shell: bool = False,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        inner = _command_text(command, shell=shell)
        _check_timeout(timeout)
        marker = f"FILEGATE-{uuid.uuid4().hex}"
        args: dict[str, Any] = {"command": _wrapped(inner, env or {}, marker)}
        if timeout is not None:
            args["timeout"] = float(timeout)
        outcome = await self.calls.tool("execute", args)
        return _command_result(outcome, marker, timeout)

    async def make_dir(self, path: str) -> None:
        self._inward(path)
        script = f"sh -c {shlex.quote(_MKDIR_SCRIPT)} sh {shlex.quote(posixpath.normpath(path))}"
        outcome = await self.calls.tool("execute", {"command": script})
        result = _command_result(outcome, None, None)
        if result.exit_code == 0:
            return
        if result.exit_code == _MKDIR_EXISTS:
            raise FileExistsError(path)
        if result.exit_code == _MKDIR_NOT_DIRECTORY:
            raise NotADirectoryError(path)
        raise PermissionError(f"{path}: cannot create the directory: {result.stdout.strip()}")


def _command_text(command: str | Sequence[str], *, shell: bool) -> str:
    """The shell text of ``command``; ``TypeError`` when its form does not match ``shell``."""
    if isinstance(command, str):
        if not shell:
            raise TypeError("a string command requires shell=True; pass an argv sequence otherwise")
        return command
    if shell:
        raise TypeError("an argv sequence cannot be combined with shell=True")
    argv = list(command)
    if not argv or not all(isinstance(item, str) for item in argv):
        raise ValueError("command must be a non-empty sequence of strings")
    return shlex.join(argv)


def _check_timeout(timeout: float | None) -> None:
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError("timeout must be a positive finite number or None")
    if timeout == float("inf"):
        raise ValueError("timeout must be a positive finite number or None")


def _wrapped(inner: str, env: Mapping[str, str], marker: str) -> str:
    """``inner`` run by ``sh -c`` with stdin at EOF, its two streams base64 between markers.

    The wrapper exits with the command's own code, so Filegate's audit log and
    the execute footer show the real one.
    """
    for name in env:
        if not name.isidentifier() or not name.isascii():
            raise ValueError(f"env name {name!r}: not a shell variable name")
    assignments = "".join(f"{name}={shlex.quote(value)} " for name, value in env.items())
    return (
        "o=$(mktemp) && e=$(mktemp) || exit 125; "
        f'{assignments}sh -c {shlex.quote(inner)} </dev/null >"$o" 2>"$e"; s=$?; '
        f'echo {marker}-out; base64 <"$o"; echo {marker}-err; base64 <"$e"; '
        f'echo {marker}-end; rm -f "$o" "$e"; exit $s'
    )


def _command_result(
    outcome: ToolOutcome, marker: str | None, timeout: float | None
) -> CommandResult:
    """A ``CommandResult`` from ``execute``'s answer (see :func:`_wrapped`)."""
    text = outcome.text
    if outcome.code == "timeout":
        raise WorkspaceTimeoutError(f"command timed out after {timeout:g}s" if timeout else text)
    code = outcome.exit_code
    if marker is None:  # an unwrapped helper command: its merged output
        return CommandResult(exit_code=code if code is not None else 1, stdout=text, stderr="")
    lines = text.split("\n")
    if outcome.truncated or f"{marker}-end" not in lines:
        if outcome.status == "error":
            raise WorkspaceError(f"the Filegate execute call failed: {text}")
        raise WorkspaceOutputLimitError(
            "the command's output is larger than one Filegate execute answer; redirect it to a "
            "file and read that instead",
            limit=len(text),
        )
    stdout = _between(lines, f"{marker}-out", f"{marker}-err")
    stderr = _between(lines, f"{marker}-err", f"{marker}-end")
    return CommandResult(exit_code=code if code is not None else 0, stdout=stdout, stderr=stderr)


def _between(lines: list[str], start: str, end: str) -> str:
    chunk = "".join(lines[lines.index(start) + 1 : lines.index(end)])
    return base64.b64decode(chunk).decode("utf-8", errors="replace")


def _contains(directory: str, path: str) -> bool:
    """Whether ``path`` is ``directory`` or lies below it (both normalised, absolute)."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _raise_answer(answer: TransferAnswer, path: str) -> None:
    if answer.error is not None:
        raise_for(answer.code, answer.error, path)


__all__ = ["ADAPTER_REMEDIES", "PROVIDER", "FilegateFileWorkspace", "FilegateWorkspace"]
