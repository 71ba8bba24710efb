"""One operation for a caller outside any workflow: a standalone activity, else a workflow.

Where the Temporal server runs standalone activities (Temporal CLI 1.9 /
Server 1.32 and later), an operation is its ``filegate.<tool>`` (or
``filegate.transfer.*``) activity itself, started by the client: one task
through the server instead of a workflow task, an activity task and a
second workflow task (``bench/standalone.py``). Elsewhere it runs as one
short :class:`~filegate.workflows.operation.OperationWorkflow` per operation.
Every tools worker serves both (:func:`filegate.worker.tools_worker` hosts the
tool and transfer activities and the workflow), so ``filegate call`` and the
Deep Agents adapter reach a plain ``filegate worker --role tools``.

Both paths are equally strict, because every check lives on the tools
worker: the request carries the permission rules and policy names, and the
activity applies its entry gate, the execute gate, the policies, the
idempotency journal and the audit log as for any call. ``OperationWorkflow``
adds no gate of its own (it only schedules the activity). A standalone
activity is its own run scope (:mod:`filegate.activities.identity`) and
cannot carry a human approval: there is no workflow history to hold one, so
an ``interrupt`` rule refuses its call as a deny.

Which path: ``operation_path`` ``"auto"`` (the default) tries a standalone
activity once per client and remembers the answer; a server that refuses
the RPC as unimplemented or disabled gets the workflow from then on (one
debug log line). ``"standalone"`` or ``"workflow"`` force one path
(``FILEGATE_OPERATION_PATH`` sets the default). A refused start runs
nothing, so falling back never runs an operation twice.

How long: ``operation_timeout`` bounds the whole operation, fallback included,
on the server (the standalone activity's schedule-to-close, the workflow's
execution timeout), so an operation that timed out never runs later. Past it
:class:`OperationTimedOut` says which task queue no worker polls, if one.

Client-side only (``temporalio.client``): never imported by a workflow. Wiring
layer, beside :mod:`filegate.worker` (``.importlinter``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, TypeVar, cast, get_args

from temporalio import activity
from temporalio import workflow as temporal_workflow
from temporalio.client import ActivityFailureError, Client, WorkflowFailureError
from temporalio.exceptions import FailureError, TimeoutError, TimeoutType
from temporalio.service import RPCError, RPCStatusCode

from filegate.activities.contract import outcome_for_activity_error
from filegate.activities.operation_stubs import (
    TRANSFER_STUBS,
    tool_options,
    transfer_activity_options,
)
from filegate.activities.stubs import STUBS, tool_request
from filegate.kernel.formatting import format_error
from filegate.kernel.limits import DEFAULT_SEARCH_TIMEOUT
from filegate.kernel.network_rules import NetworkPermission
from filegate.kernel.operation_types import (
    DownloadRequest,
    Operation,
    OperationResult,
    ReadWindow,
    ReadWindowRequest,
    TransferAnswer,
    UploadFile,
    UploadRequest,
    operation_kind,
)
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.tool_types import ToolName, ToolOutcome
from filegate.workflows.operation import OperationWorkflow, run_operation

log = logging.getLogger(__name__)
T = TypeVar("T")

OperationPath = Literal["auto", "standalone", "workflow"]
"""How an operation outside a workflow runs (see the module docstring)."""
OPERATION_PATHS: tuple[str, ...] = get_args(OperationPath)
OPERATION_PATH_ENV = "FILEGATE_OPERATION_PATH"
"""Environment variable with the default :data:`OperationPath`."""
DEFAULT_OPERATION_PATH: OperationPath = "auto"
DEFAULT_OPERATION_TIMEOUT = timedelta(minutes=70)
"""Longest one operation may take end to end (the workflow's execution timeout, the
standalone activity's schedule-to-close): above the longest ``execute`` with its
retries, so only a call no worker ever picks up reaches it."""


def checked_timeout(value: timedelta | float) -> timedelta:
    """``operation_timeout`` as given to an adapter: a ``timedelta`` or seconds, positive.

    Checked where the adapter is built, so a wrong value is one line there
    instead of an ``AttributeError`` on the first call."""
    if isinstance(value, bool) or not isinstance(value, timedelta | int | float):
        raise TypeError(
            f"operation_timeout must be a timedelta or seconds, not {type(value).__name__}"
        )
    timeout = value if isinstance(value, timedelta) else timedelta(seconds=value)
    if timeout <= timedelta(0):
        raise ValueError(f"operation_timeout must be positive, not {value!r}")
    return timeout


MIN_FALLBACK_TIMEOUT = timedelta(seconds=1)
"""The least a fallback workflow is given of what remains of the deadline."""

Via = Literal["standalone", "workflow"]


class StandaloneUnavailable(RuntimeError):
    """``operation_path="standalone"`` on a server that does not run standalone activities."""


class OperationTimedOut(RuntimeError):
    """The operation got no answer within its timeout (and did not run after it).

    ``unpolled`` is the task queue no worker polled when the time was up (the
    tools queue, or the fallback workflow's queue), None when every queue had a
    worker (the operation was slow) or the server did not say. The message is
    one line naming it.
    """

    def __init__(self, message: str, *, via: Via, task_queue: str, unpolled: str | None) -> None:
        super().__init__(message)
        self.via = via
        self.task_queue = task_queue
        self.unpolled = unpolled


@dataclass(frozen=True)
class Ran:
    """An operation's result and the path it took."""

    result: OperationResult
    via: Via


def operation_path_from(environ: Mapping[str, str]) -> OperationPath:
    """The :data:`OperationPath` ``FILEGATE_OPERATION_PATH`` names in ``environ`` (unset:
    ``auto``). The caller passes the environment: it is read at the edges (the CLI, the
    Deep Agents adapter's default), never here."""
    raw = environ.get(OPERATION_PATH_ENV, "")
    value = raw.strip().lower()
    if not value:
        return DEFAULT_OPERATION_PATH
    return checked_path(value, f"{OPERATION_PATH_ENV}={raw.strip()!r}")


def checked_path(value: str, what: str = "operation_path") -> OperationPath:
    """``value`` as an :data:`OperationPath`; ValueError naming ``what`` otherwise."""
    if value not in OPERATION_PATHS:
        raise ValueError(f"{what}: not one of {', '.join(OPERATION_PATHS)}")
    return cast(OperationPath, value)


_SUPPORT: weakref.WeakKeyDictionary[Client, bool] = weakref.WeakKeyDictionary()
"""Per client: whether its server ran a standalone activity (absent: not tried yet)."""


def standalone_known(client: Client) -> bool | None:
    """What ``auto`` has learnt about ``client``'s server (None: not tried yet)."""
    return _SUPPORT.get(client)


def standalone_refused(exc: RPCError) -> bool:
    """The server refused to start a standalone activity because it has none.

    An older server does not know the RPC (``UNIMPLEMENTED``); a newer one
    with ``activity.enableStandalone`` off says it is disabled (also
    ``UNIMPLEMENTED`` on Server 1.32). Any other error is a real failure.
    """
    text = exc.message.lower()
    return exc.status == RPCStatusCode.UNIMPLEMENTED or (
        "standalone" in text and ("disabled" in text or "not enabled" in text)
    )


class _Refused(Exception):
    """The start RPC was refused as unsupported (nothing ran)."""


class _TimedOut(Exception):
    """The server timed the operation out (nothing runs after this)."""


UNSERVED_CHECK_AFTER = timedelta(seconds=10)
"""When an operation still waiting asks once whether any worker polls its tools queue:
a mistyped queue fails in one line then, not at the 70-minute operation timeout
(issue 54). A queue a worker polled lately passes; the operation then waits on."""


async def run_outside(
    client: Client,
    op: Operation,
    *,
    operation_task_queue: str,
    operation_timeout: timedelta = DEFAULT_OPERATION_TIMEOUT,
    path: OperationPath = DEFAULT_OPERATION_PATH,
) -> Ran:
    """Run ``op`` from outside any workflow, on the path ``path`` asks for (see
    :func:`_run_outside`); an operation on a queue no worker polls fails after
    :data:`UNSERVED_CHECK_AFTER` with :class:`OperationTimedOut` naming it."""
    running = _run_outside(
        client, op, operation_task_queue=operation_task_queue,
        operation_timeout=operation_timeout, path=path,
    )  # fmt: skip
    if operation_timeout <= UNSERVED_CHECK_AFTER:
        return await running  # its own timeout comes first and names the queue
    work = asyncio.ensure_future(running)
    check = UNSERVED_CHECK_AFTER.total_seconds()
    watch = asyncio.ensure_future(_unpolled_after(client, op.task_queue, check))
    try:
        try:
            await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            await _cancelled(work)  # the caller's Ctrl-C stops the operation on the server
            raise
        if work.done() or watch.result() is None:
            return await work
        await _cancelled(work)
        standalone = path != "workflow" and _SUPPORT.get(client) is not False
        via: Via = "standalone" if standalone else "workflow"
        message = (
            f"no worker polls task queue '{op.task_queue}': the {operation_kind(op)} call got "
            f"no answer within {check:g} s and nothing serves that queue; start a Filegate "
            "tools worker on it, or name the queue of a running one"
        )
        raise OperationTimedOut(message, via=via, task_queue=op.task_queue, unpolled=op.task_queue)
    finally:
        watch.cancel()
        work.cancel()


async def _cancelled(work: asyncio.Future[Ran]) -> None:
    """Cancel ``work`` and wait until its cancellation has gone to the server."""
    work.cancel()
    with contextlib.suppress(BaseException):
        await work


async def _unpolled_after(client: Client, queue: str, seconds: float) -> str | None:
    """``queue`` when no worker polls it ``seconds`` from now; None when one does or the
    server cannot say."""
    await asyncio.sleep(seconds)
    try:
        return None if await has_pollers(client, queue, workflow=False) else queue
    except RPCError:
        return None


async def _run_outside(
    client: Client,
    op: Operation,
    *,
    operation_task_queue: str,
    operation_timeout: timedelta,
    path: OperationPath,
) -> Ran:
    """Run ``op`` from outside any workflow, on the path ``path`` asks for.

    The standalone activity goes to ``op.task_queue`` (the tools worker); the
    fallback workflow to ``operation_task_queue`` (a worker hosting
    :class:`OperationWorkflow`: every tools worker does). A tool that failed
    for good is an error outcome on both paths; a transfer that failed for
    good raises (``ActivityFailureError`` / ``WorkflowFailureError``).
    ``operation_timeout`` bounds the whole operation, a fallback included;
    past it :class:`OperationTimedOut`.
    """
    deadline = time.monotonic() + operation_timeout.total_seconds()
    fell_back = False
    if path == "standalone" or (path == "auto" and _SUPPORT.get(client) is not False):
        try:
            answer = await _run_standalone(client, op, timeout=operation_timeout)
            return Ran(answer, "standalone")
        except _Refused as refused:
            if path == "standalone":
                raise StandaloneUnavailable(
                    f"the Temporal server runs no standalone activities ({refused}); "
                    "use operation_path 'auto' or 'workflow'"
                ) from None
            _SUPPORT[client] = False
            fell_back = True
            log.debug("no standalone activities (%s): operations run as workflows", refused)
        except _TimedOut:
            raise await _timed_out(client, op, operation_timeout, via="standalone") from None
    remaining = timedelta(seconds=deadline - time.monotonic())
    started = await client.start_workflow(
        OperationWorkflow.run,
        op,
        id=f"filegate-op-{operation_kind(op)}-{uuid.uuid4().hex}",  # readable in the Web UI
        task_queue=operation_task_queue,
        execution_timeout=max(remaining, MIN_FALLBACK_TIMEOUT),
    )
    try:
        result: OperationResult = await _until_done(started.result(), started.cancel)
    except WorkflowFailureError as exc:
        if not isinstance(exc.cause, TimeoutError):
            raise
        raise await _timed_out(
            client, op, operation_timeout, via="workflow",
            workflow_queue=operation_task_queue, fell_back=fell_back,
        ) from None  # fmt: skip
    return Ran(result, "workflow")


@dataclass
class OperationClient:
    """One Filegate backend's operations for a framework adapter: the one client both
    the Deep Agents backend and the Pydantic AI workspace map their interface onto.

    ``backend`` and ``task_queue`` name the backend and its tools worker's queue
    (as ``BackendRef(kind="remote")`` does); ``permissions``, ``policies`` and
    ``network`` travel with every call, as from ``AgentWorkflow``, and the tools
    worker enforces them. Inside a workflow a call schedules the activity from
    that workflow (:func:`~filegate.workflows.operation.run_operation`). Outside
    one it is started through ``client``, else the running activity's client
    (an adapter called from a tool activity), on the path ``operation_path``
    names; None there means ``default_path()``, asked at call time, because an
    adapter may be built inside a workflow, where its edge may not read the
    environment. ``operation_task_queue`` is where the fallback
    ``OperationWorkflow`` runs (default: ``task_queue``; every tools worker
    serves it). ``owner`` names the adapter in its one-line errors.

    Why one class: the two adapters had each grown their own copy, and the
    copies had drifted (one fell back to the activity's client, one read the
    environment at call time); a fix in one never reached the other.
    """

    backend: str
    task_queue: str
    owner: str
    client: Client | None = None
    operation_task_queue: str | None = None
    permissions: list[FilesystemPermission] = field(default_factory=list)
    policies: list[str] | None = None
    network: list[NetworkPermission] = field(default_factory=list)
    operation_timeout: timedelta = DEFAULT_OPERATION_TIMEOUT
    search_timeout: float | None = None
    operation_path: OperationPath | None = None
    default_path: Callable[[], OperationPath] = lambda: DEFAULT_OPERATION_PATH

    def __post_init__(self) -> None:
        if not self.backend or not self.task_queue:
            raise ValueError(f"{self.owner} needs backend= and task_queue= (non-empty)")
        self.operation_task_queue = self.operation_task_queue or self.task_queue
        self.permissions = list(self.permissions)
        self.network = list(self.network)
        self.policies = None if self.policies is None else list(self.policies)
        self.operation_timeout = checked_timeout(self.operation_timeout)
        if self.operation_path is not None:
            self.operation_path = checked_path(self.operation_path)

    def tool_operation(self, tool: ToolName, args: Mapping[str, Any]) -> Operation:
        """The operation of one ``filegate.<tool>`` call (arguments checked here)."""
        request = tool_request(
            tool,
            args,
            backend=self.backend,
            tool_call_id="",  # filled by the workflow or the standalone activity that runs it
            permissions=self.permissions,
            policies=self.policies,
            network=self.network,
        )
        return Operation(
            task_queue=self.task_queue, tool=request, search_timeout=self.search_timeout
        )

    async def run(self, op: Operation) -> OperationResult:
        """Run ``op``: from the workflow this is called in, else through a client."""
        if temporal_workflow.in_workflow():
            return await run_operation(op)
        client = self.client
        if client is None and activity.in_activity():
            client = activity.client()
        if client is None:
            raise RuntimeError(
                f"{self.owner} outside a workflow or activity needs client=...: it starts "
                "each operation's activity (or a short workflow) through it"
            )
        ran = await run_outside(
            client,
            op,
            operation_task_queue=self.operation_task_queue or self.task_queue,
            operation_timeout=self.operation_timeout,
            path=self.operation_path or self.default_path(),
        )
        return ran.result

    async def tool(self, tool: ToolName, args: Mapping[str, Any]) -> ToolOutcome:
        """One tool call's outcome (its :attr:`~ToolOutcome.code` says what went wrong)."""
        outcome = (await self.run(self.tool_operation(tool, args))).outcome
        if outcome is None:
            raise RuntimeError(f"the Filegate {tool} call returned no outcome")
        return outcome

    async def upload(self, files: list[UploadFile]) -> list[TransferAnswer]:
        """Write each file's bytes (one answer per file, in order)."""
        request = UploadRequest(files=files, **self._scope())
        return await self._files(Operation(task_queue=self.task_queue, upload=request))

    async def download(self, paths: list[str]) -> list[TransferAnswer]:
        """Read each file's bytes (one answer per path, in order)."""
        request = DownloadRequest(paths=paths, **self._scope())
        return await self._files(Operation(task_queue=self.task_queue, download=request))

    async def read_window(self, path: str, offset: int, limit: int) -> ReadWindow:
        """Lines ``offset`` to ``offset + limit`` of a text file, as data (or its error)."""
        request = ReadWindowRequest(file_path=path, offset=offset, limit=limit, **self._scope())
        window = (await self.run(Operation(task_queue=self.task_queue, read=request))).read
        if window is None:
            raise RuntimeError("the Filegate read operation returned no window")
        return window

    def _scope(self) -> dict[str, Any]:
        return {"backend": self.backend, "permissions": self.permissions, "policies": self.policies}

    async def _files(self, op: Operation) -> list[TransferAnswer]:
        files = (await self.run(op)).files
        if not files:
            raise RuntimeError("the Filegate transfer returned no answer")
        return files


async def _run_standalone(client: Client, op: Operation, *, timeout: timedelta) -> OperationResult:
    """``op`` as one standalone activity with the options an agent's call gets.

    The activity id doubles as the call id (the idempotency journal's key
    within the activity's own run scope), so a retried attempt meets its
    journal entry. Raises :class:`_Refused` when the server has no
    standalone activities, :class:`_TimedOut` past ``timeout``.
    """
    kind = operation_kind(op)
    activity_id = f"filegate-op-{kind}-{uuid.uuid4().hex}"
    stub: Any
    if op.tool is not None:
        request = op.tool
        if not request.tool_call_id:
            request = request.model_copy(update={"tool_call_id": activity_id})
        stub, arg, options = STUBS[request.tool], request, tool_options(op)
    else:
        scoped = getattr(op, kind)
        if not scoped.call_id:
            scoped = scoped.model_copy(update={"call_id": activity_id})
        stub, arg, options = TRANSFER_STUBS[kind], scoped, transfer_activity_options()
    try:
        handle = await client.start_activity(
            stub,
            arg,
            id=activity_id,
            task_queue=op.task_queue,
            schedule_to_close_timeout=timeout,
            **options,
        )
    except RPCError as exc:
        if standalone_refused(exc):
            raise _Refused(exc.message) from exc
        raise
    _SUPPORT[client] = True
    try:
        answer = await _until_done(handle.result(), handle.cancel)
    except ActivityFailureError as exc:
        if _overall_timeout(exc.cause):
            raise _TimedOut from exc
        if op.tool is None:
            raise
        return OperationResult(outcome=_failed(op, exc))
    if op.tool is not None:
        return OperationResult(outcome=answer)
    if kind == "read":
        return OperationResult(read=answer)
    return OperationResult(files=answer)


async def _until_done(result: Awaitable[T], cancel: Callable[[], Awaitable[None]]) -> T:
    """``result``; a caller cancelled meanwhile cancels the operation on the server too.

    Why: the operation runs on a tools worker, not in this task, so cancelling
    the caller alone would leave a command running to its timeout. The
    cancellation reaches the activity with its next heartbeat (a second),
    which stops the command; it is sent even while this task is being
    cancelled, and its own failure (the server gone) is only logged.
    """
    try:
        return await result
    except asyncio.CancelledError:
        try:
            await asyncio.shield(cancel())
        except Exception as exc:  # the caller's cancellation is what matters here
            log.debug("cancelling the operation on the server failed: %s", exc)
        raise


def _overall_timeout(cause: BaseException) -> bool:
    """The standalone activity's own deadline passed (not one attempt's timeout)."""
    return isinstance(cause, TimeoutError) and cause.type in (
        TimeoutType.SCHEDULE_TO_START,
        TimeoutType.SCHEDULE_TO_CLOSE,
    )


def _failed(op: Operation, exc: ActivityFailureError) -> ToolOutcome:
    """The tool result of an activity that failed for good, as ``run_operation`` makes it."""
    assert op.tool is not None
    tool = op.tool.tool
    cause = exc.cause
    if isinstance(cause, FailureError):
        budget = op.search_timeout if op.search_timeout is not None else DEFAULT_SEARCH_TIMEOUT
        return outcome_for_activity_error(tool, cause, search_timeout=budget)
    text = format_error(f"the {tool} tool failed: {cause}", "failed").text
    return ToolOutcome(content=text, status="error", code="failed")


async def _timed_out(
    client: Client,
    op: Operation,
    timeout: timedelta,
    *,
    via: Via,
    workflow_queue: str | None = None,
    fell_back: bool = False,
) -> OperationTimedOut:
    """The :class:`OperationTimedOut` of ``op``, naming a queue no worker polls if one."""
    kind = operation_kind(op)
    within = f"within {_seconds(timeout)}"
    how = ""
    if fell_back:
        how = " (the server runs no standalone activities, so it ran as an OperationWorkflow)"
    # The tools queue first: no tools worker at all is the likelier cause.
    checks = [(op.task_queue, False, "worker")]
    if workflow_queue is not None:
        checks.append((workflow_queue, True, "worker hosting OperationWorkflow"))
    unpolled: tuple[str, str] | None = None
    for queue, workflow, who in checks:
        try:
            if not await has_pollers(client, queue, workflow=workflow):
                unpolled = (queue, who)
                break
        except RPCError:  # a server that does not describe queues: say what is known
            break
    if unpolled is not None:
        message = (
            f"no {unpolled[1]} polls task queue '{unpolled[0]}': the {kind} call got no answer "
            f"{within}{how}; start a Filegate tools worker on that queue, or name the "
            "queue of a running one"
        )
    else:
        message = f"the {kind} call on task queue '{op.task_queue}' got no answer {within}{how}"
    queue_left = unpolled[0] if unpolled is not None else None
    return OperationTimedOut(message, via=via, task_queue=op.task_queue, unpolled=queue_left)


def _seconds(span: timedelta) -> str:
    seconds = span.total_seconds()
    return f"{seconds:g} s"


async def has_pollers(client: Client, task_queue: str, *, workflow: bool) -> bool:
    """Whether a worker polled ``task_queue`` lately (workflow or activity tasks)."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    kind = TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
    if workflow:
        kind = TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW
    request = DescribeTaskQueueRequest(
        namespace=client.namespace, task_queue=TaskQueue(name=task_queue), task_queue_type=kind
    )
    answer = await client.workflow_service.describe_task_queue(request)
    return bool(answer.pollers)


__all__ = [
    "DEFAULT_OPERATION_PATH",
    "DEFAULT_OPERATION_TIMEOUT",
    "OPERATION_PATHS",
    "OPERATION_PATH_ENV",
    "OperationClient",
    "OperationPath",
    "OperationTimedOut",
    "Ran",
    "StandaloneUnavailable",
    "Via",
    "checked_path",
    "has_pollers",
    "operation_kind",
    "operation_path_from",
    "run_outside",
    "standalone_known",
    "standalone_refused",
]
