"""The eight file tools as Temporal activities (``filegate.<tool>``).

Each activity resolves the backend by name on this worker, runs the one shared
implementation (:func:`filegate.kernel.dispatch.run_tool`) on a tool thread of its
own (kept between calls, :mod:`activities.tool_threads`) while the event loop
heartbeats, and returns a :class:`ToolOutcome`. Mutating tools
go through the idempotency journal so a retry never applies twice.

Cancellation really stops the work (the reference only abandons its thread):
when the activity is cancelled, or a search exceeds its time budget, the
tool's thread is interrupted with an asynchronous exception and every child
process it started (``rg``, a shell command) is killed with its process
group. Read-only and search tools and ``execute`` are interruptible;
write/edit/delete are short and are let finish, since stopping one half-way
could leave a half-written file.

Policies (contract §8, worker-held): the worker's :class:`PolicyConfig` wraps the
backend per call with the ``required`` policies plus those the request names
(``ToolRequest.policies``; None = the config's defaults), and every backend
operation of the call is audited under the workflow id and tool-call id. A
name the worker does not configure fails the call for good (``UnknownPolicy``),
which the workflow turns into an error tool result.

How the workflow schedules these activities (names, timeouts, retries, the
mapping of failures to tool results) is the contract in
:mod:`filegate.kernel.tool_types` and :mod:`filegate.activities.contract`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio import activity
from temporalio.exceptions import (
    ApplicationError,
)

from filegate.activities.contract import search_timeout_message
from filegate.activities.idempotency import open_journal
from filegate.activities.identity import run_scope
from filegate.activities.journal_faults import JournalUnavailable, unrecorded_error
from filegate.activities.network_asks import run_asker
from filegate.activities.stored_results import is_offloaded, offload_large, read_offloaded
from filegate.activities.telemetry import CallReport, measuring, tool_call_telemetry
from filegate.activities.tool_threads import Job, ToolThreads
from filegate.backends.audit import audit_context
from filegate.backends.filesystem.search_clock import search_time_limit
from filegate.backends.media import media_blocks
from filegate.backends.policy import PolicyConfig, build_policy_chain
from filegate.backends.sandbox_network import network_questions
from filegate.kernel import wire
from filegate.kernel.dispatch import InvalidToolRequest, parse_args, run_tool
from filegate.kernel.limits import DEFAULT_SEARCH_TIMEOUT, partial_search_seconds
from filegate.kernel.protocol import BackendProtocol
from filegate.kernel.registry import TOOLS
from filegate.kernel.tool_types import (
    BATCH_RESULT_CHARS,
    HEARTBEAT_INTERVAL,
    SEARCH_MARGIN,
    ReadFileArgs,
    ToolBatch,
    ToolBatchResult,
    ToolName,
    ToolOutcome,
    ToolRequest,
)
from filegate.processes.reaper import kills_reported

if TYPE_CHECKING:
    from filegate.backends.artifacts import ArtifactStore


# --------------------------------------------------------------------------- interruptible runs

T = TypeVar("T")


class _DeadlineExceeded(Exception):
    pass


_THREADS = ToolThreads()
"""The tool threads of this process (interruptible calls)."""


async def run_blocking(
    fn: Callable[[], T],
    *,
    interruptible: bool,
    deadline: float | None = None,
    heartbeat_interval: float = HEARTBEAT_INTERVAL,
) -> T:
    """Run ``fn`` on a thread, heartbeating; stop it on cancel or at ``deadline``.

    ``deadline`` is a ``time.monotonic()`` value; reaching it raises
    :class:`_DeadlineExceeded` after the thread is stopped. A non-interruptible
    call is awaited to the end even when cancelled, then the cancel propagates.
    """
    loop = asyncio.get_running_loop()
    work: Job[T] | None = None
    started: asyncio.Future[None] | None = None
    if interruptible or deadline is not None:
        # A tool thread of its own, so it can be interrupted. A new thread is
        # started off the event loop (Thread.start waits for the new thread to
        # run, which under load stalls every other activity and workflow task).
        work = Job(fn, loop)
        runner = _THREADS.submit(work)
        if runner is not None:
            started = loop.run_in_executor(_pool(), runner.start)
        future: asyncio.Future[T] = work.future
    else:
        # Never stopped midway (a mutation runs to its end): a pooled thread will do.
        future = loop.run_in_executor(_pool(), fn)
    try:
        if started is not None:
            # Heartbeat also while the thread is still starting (a busy pool);
            # asyncio.wait never cancels what it waits for.
            while not (await asyncio.wait({started}, timeout=heartbeat_interval))[0]:
                activity.heartbeat()
            started.result()
        while True:
            wait = heartbeat_interval
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - time.monotonic()))
            done, _ = await asyncio.wait({future}, timeout=wait)
            if done:
                return future.result()
            if work is not None and deadline is not None and time.monotonic() >= deadline:
                await work.stop()
                raise _DeadlineExceeded
            activity.heartbeat()
    except asyncio.CancelledError:
        if interruptible and work is not None:
            if started is not None:
                await started  # a thread that is still starting cannot be stopped yet
            await work.stop()
        else:
            with contextlib.suppress(BaseException):
                await asyncio.shield(future)
        raise


_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
POOL_THREADS = 64
"""Threads shared by the tool calls that need no thread of their own (mutations, and
starting the dedicated threads of interruptible calls)."""


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(
                POOL_THREADS, thread_name_prefix="filegate-tool"
            )
        return _POOL


# --------------------------------------------------------------------------- activities


def _result_chars(outcome: ToolOutcome) -> int:
    """About how much of a history payload ``outcome`` takes (text length; blocks dumped)."""
    if isinstance(outcome.content, str):
        return len(outcome.content) + sum(len(b.model_dump_json()) for b in outcome.media)
    return len(outcome.model_dump_json())


def _within_budget(
    requests: list[ToolRequest], outcomes: list[ToolOutcome | None]
) -> list[ToolOutcome | None]:
    """``outcomes`` with the read-only results that overflow :data:`BATCH_RESULT_CHARS`
    dropped (None); the first read-only result is always kept.

    A dropped read runs again on its own activity. A mutation's result (short)
    is always kept, so a mutation never runs twice.
    """
    size = sum(
        _result_chars(outcome)
        for request, outcome in zip(requests, outcomes, strict=True)
        if outcome is not None and request.tool in TOOLS.mutating
    )
    kept: list[ToolOutcome | None] = []
    read_kept = False
    for request, outcome in zip(requests, outcomes, strict=True):
        if outcome is not None and request.tool not in TOOLS.mutating:
            chars = _result_chars(outcome)
            if read_kept and size + chars > BATCH_RESULT_CHARS:
                outcome = None
            else:
                size, read_kept = size + chars, True
        kept.append(outcome)
    return kept


def answer_here(
    backend: BackendProtocol, policies: PolicyConfig, request: ToolRequest, scope: str
) -> ToolOutcome | None:
    """A read answered in the calling process, outside any activity, as the read
    activity answers it: ``policies`` around ``backend`` (with their audit line under
    ``scope``, the run chain), then the kernel's tool path. None for a read of an
    offloaded result (kept in the artifact store: the long way answers it).

    For ``filegate mcp --root``'s reads the rules alone allow (``cli.mcp_fast``): a
    read changes nothing and waits for nobody, so it needs no journal, heartbeat
    or retry. Blocking; the caller runs it off its event loop.
    """
    args = parse_args(request)
    if isinstance(args, ReadFileArgs) and is_offloaded(request, args):
        return None
    guarded = build_policy_chain(backend, policies, names=request.policies)
    with audit_context(scope, request.tool_call_id, None):
        return run_tool(guarded, request, media=media_blocks, args=args)


class FileToolActivities:
    """The file tool activities for the backends this worker holds.

    ``backends`` maps the names the workflow routes to (``ToolRequest.backend``)
    onto configured backend objects; credentials stay here, only names travel.
    """

    def __init__(
        self,
        backends: Mapping[str, BackendProtocol],
        journal_dir: str | os.PathLike[str],
        *,
        search_timeout: float | None = None,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
        artifacts: ArtifactStore | None = None,
        policies: PolicyConfig | None = None,
        batch_calls: bool = True,
        journal_fsync: bool = False,
    ) -> None:
        """``artifacts`` enables contract §7 offload: large execute output is stored there
        (only a stub enters history), and ``read_file`` of
        ``/large_tool_results/<id>`` and ``/conversation_history/<name>`` (the
        agent worker's archive of evicted messages) is answered from it here.
        ``policies`` (None = none configured) wraps every call's backend; its
        audit file is opened here so a bad path fails at worker start.
        ``batch_calls`` False hands every ``filegate.tool_batch`` back unfinished,
        so each call runs as an activity of its own: for a worker whose task
        queue has a rate limit, which counts activities, not calls.
        ``journal_fsync`` flushes every journal entry to disk (:class:`ToolJournal`)."""
        self.backends = dict(backends)
        self.artifacts = artifacts
        self.policies = policies if policies is not None else PolicyConfig()
        self.policies.audit_sink()
        # probed: JournalUnavailable
        self.journal = open_journal(Path(journal_dir), fsync=journal_fsync)
        self.search_timeout = search_timeout
        self.heartbeat_interval = heartbeat_interval
        self.batch_calls = batch_calls
        self.journal.prune()

    def activities(self) -> list[Callable[..., Any]]:
        """The bound activity methods, for ``Worker(activities=...)``: the eight
        tools and ``filegate.tool_batch``, which runs several of them."""
        return [self.tool_batch, *(getattr(self, tool.name) for tool in TOOLS)]

    def _search_budget(self, *, batched: bool = False) -> float:
        """The search's own time limit: explicit, else derived from start_to_close.

        In a batch, start_to_close is the whole batch's, so a batched search gets
        the budget its own activity would get from the workflow
        (:func:`~filegate.activities.contract.tool_activity_options`).
        """
        if self.search_timeout is not None:
            return self.search_timeout
        if batched:
            return DEFAULT_SEARCH_TIMEOUT
        start_to_close = activity.info().start_to_close_timeout
        if start_to_close is None:
            return DEFAULT_SEARCH_TIMEOUT
        seconds = start_to_close.total_seconds()
        return seconds - SEARCH_MARGIN if seconds > SEARCH_MARGIN else seconds / 2

    def _backend(self, request: ToolRequest) -> BackendProtocol:
        return self._named(request.backend)

    def _named(self, name: str) -> BackendProtocol:
        backend = self.backends.get(name)
        if backend is None:
            raise ApplicationError(
                f"backend {name!r} is not configured on this worker "
                f"(known: {', '.join(sorted(self.backends)) or 'none'})",
                type=wire.UNKNOWN_BACKEND_ERROR,
                non_retryable=True,
            )
        return backend

    def _guarded(self, backend: BackendProtocol, request: ToolRequest) -> BackendProtocol:
        """``backend`` wrapped in the worker's required policies plus those the request names."""
        return self._with_policies(backend, request.policies)

    def _with_policies(self, backend: BackendProtocol, names: list[str] | None) -> BackendProtocol:
        try:
            return build_policy_chain(backend, self.policies, names=names)
        except ValueError as exc:
            raise ApplicationError(
                str(exc), type=wire.UNKNOWN_POLICY_ERROR, non_retryable=True
            ) from exc

    async def run_read_only(self, request: ToolRequest, fn: Callable[[BackendProtocol], T]) -> T:
        """Run ``fn`` on the request's backend as a call of ``request`` would see it.

        For read-only helpers such as the ``filegate.preview`` activity: the same
        backend by name, wrapped in the same policies, audited under the run and
        tool-call id, on an interruptible tool thread (cancel stops it), with no
        journal since nothing is written.
        """
        return await self.run_on(
            request.backend, request.policies, request.first_run_id, request.tool_call_id, fn
        )

    async def run_on(
        self,
        backend: str,
        policies: list[str] | None,
        first_run_id: str,
        call_id: str | None,
        fn: Callable[[BackendProtocol], T],
        *,
        interruptible: bool = True,
    ) -> T:
        """Run ``fn`` on backend ``backend`` behind the worker's guards, on a tool thread.

        The guards every operation of this worker gets: the worker's policies
        (required ones plus ``policies``) wrap the backend, the work is audited
        under the run chain and ``call_id``, and it runs on a tool thread while
        the activity heartbeats (``interruptible``: a cancel stops it). No
        journal: for helpers whose effects the caller keys itself, or none.
        """
        guarded = self._with_policies(self._named(backend), policies)
        scope = run_scope(first_run_id)

        def call() -> T:
            # In the tool thread: contextvars do not follow a new thread.
            with audit_context(scope, call_id or None, None):
                return fn(guarded)

        return await run_blocking(
            call, interruptible=interruptible, heartbeat_interval=self.heartbeat_interval
        )

    async def _run(
        self, tool: ToolName, request: ToolRequest, *, batched: bool = False
    ) -> ToolOutcome:
        """Run one call: the eight activities and each call of a batch come through here,
        so its span and metrics (:func:`~filegate.activities.telemetry.tool_call_telemetry`)
        are taken here, once."""
        report = CallReport()
        if not measuring():  # traces and metrics off: nothing else to pay
            return await self._call(tool, request, report, batched=batched)
        with tool_call_telemetry(request, report):
            report.outcome = await self._call(tool, request, report, batched=batched)
            return report.outcome

    async def _call(
        self, tool: ToolName, request: ToolRequest, report: CallReport, *, batched: bool
    ) -> ToolOutcome:
        if request.tool != tool:
            raise ApplicationError(
                f"request for {request.tool!r} sent to the {tool} activity",
                type=wire.INVALID_REQUEST_ERROR,
                non_retryable=True,
            )
        if request.approved and not activity.info().in_workflow:
            # A standalone activity has no workflow history that could hold a
            # reviewer's decision: a claimed approval is not on record, so an
            # interrupt rule refuses the call as it would any unapproved one.
            request = request.model_copy(update={"approved": False, "approved_by": None})
        backend = self._backend(request)
        scope = run_scope(request.first_run_id)
        try:
            args = parse_args(request)
        except InvalidToolRequest as exc:
            raise ApplicationError(
                str(exc), type=wire.INVALID_REQUEST_ERROR, non_retryable=True
            ) from exc
        guarded = self._guarded(backend, request)

        store = self.artifacts
        budget = self._search_budget(batched=batched) if tool in TOOLS.searching else 0.0
        # A backend that watches it answers with partial results before the hard
        # stop (contract §1); both limits count from this instant.
        soft = partial_search_seconds(budget) if tool in TOOLS.searching else None
        started = time.monotonic()
        asker = run_asker(request)

        def call() -> ToolOutcome:
            # Set in the tool thread: contextvars do not follow a new thread.
            with (
                audit_context(scope, request.tool_call_id, request.approved_by),
                search_time_limit(soft, since=started),
                kills_reported(report.killed),
                network_questions(asker),
            ):
                return run_tool(guarded, request, media=media_blocks, args=args)

        fn = call
        if store is not None and isinstance(args, ReadFileArgs) and is_offloaded(request, args):

            def fn() -> ToolOutcome:
                return read_offloaded(store, scope, request, args)

        elif tool in TOOLS.mutating:

            def journaled() -> ToolOutcome:
                return self.journal.run(request.backend, backend, request, args, call, scope=scope)

            fn = journaled
            if store is not None and tool in TOOLS.offloaded:

                def fn() -> ToolOutcome:
                    return offload_large(store, scope, request, journaled(), report.offloaded)

        deadline = started + budget if tool in TOOLS.searching else None
        try:
            return await run_blocking(
                fn,
                interruptible=tool not in TOOLS.changing_files,
                deadline=deadline,
                heartbeat_interval=self.heartbeat_interval,
            )
        except _DeadlineExceeded:
            activity.logger.info("%s stopped after its %.1fs budget", tool, budget)
            return ToolOutcome(content=search_timeout_message(tool, budget), status="error")
        except JournalUnavailable as exc:  # nothing applied; one sentence, no retries
            raise unrecorded_error(tool, exc) from None

    @activity.defn(name=wire.TOOL_BATCH_ACTIVITY)
    async def tool_batch(self, batch: ToolBatch) -> ToolBatchResult:
        """Run a turn's calls, each exactly as its own activity would.

        Why one activity for several calls: every activity has a fixed cost
        beyond its work, to the worker (a local activity) or to the Temporal
        server (a regular one), several times what a quick file operation
        costs (``bench/local_batch.py``, ``bench/throughput.py``).

        A call that raises comes back unfinished (None) and the workflow runs
        it on its own activity, so retries, timeouts and error texts stay the
        tool's; a retried mutation meets its journal entry, as any activity
        retry does. One after another (``concurrent`` False), the first such
        call ends the batch, so the calls still run in the order asked, and no
        call starts once the results hold :data:`BATCH_RESULT_CHARS`. Side by
        side, read-only results past that budget come back unfinished instead.
        """
        if not self.batch_calls:
            return ToolBatchResult(outcomes=[None] * len(batch.requests))
        if batch.concurrent:
            outcomes = await asyncio.gather(*(self._batched(r) for r in batch.requests))
            return ToolBatchResult(outcomes=_within_budget(batch.requests, outcomes))
        done: list[ToolOutcome | None] = []
        size = 0
        for request in batch.requests:
            outcome = await self._batched(request) if size < BATCH_RESULT_CHARS else None
            if outcome is None:
                break
            done.append(outcome)
            size += _result_chars(outcome)
        return ToolBatchResult(outcomes=done + [None] * (len(batch.requests) - len(done)))

    async def _batched(self, request: ToolRequest) -> ToolOutcome | None:
        """One call of a batch; None when it must run on its own activity."""
        if request.tool not in TOOLS.batched:
            return None
        try:
            return await self._run(request.tool, request, batched=True)
        except Exception as exc:  # a cancel (BaseException) ends the whole activity
            activity.logger.info("%s left the batch to run alone: %s", request.tool_call_id, exc)
            return None

    @activity.defn(name=TOOLS["ls"].activity)
    async def ls(self, request: ToolRequest) -> ToolOutcome:
        return await self._run("ls", request)

    @activity.defn(name=TOOLS["read_file"].activity)
    async def read_file(self, request: ToolRequest) -> ToolOutcome:
        return await self._run("read_file", request)

    @activity.defn(name=TOOLS["write_file"].activity)
    async def write_file(self, request: ToolRequest) -> ToolOutcome:
        return await self._run("write_file", request)

    @activity.defn(name=TOOLS["edit_file"].activity)
    async def edit_file(self, request: ToolRequest) -> ToolOutcome:
        return await self._run("edit_file", request)

    @activity.defn(name=TOOLS["delete"].activity)
    async def delete(self, request: ToolRequest) -> ToolOutcome:
        return await self._run("delete", request)

    @activity.defn(name=TOOLS["glob"].activity)
    async def glob(self, request: ToolRequest) -> ToolOutcome:
        return await self._run("glob", request)

    @activity.defn(name=TOOLS["grep"].activity)
    async def grep(self, request: ToolRequest) -> ToolOutcome:
        return await self._run("grep", request)

    @activity.defn(name=TOOLS["execute"].activity)
    async def execute(self, request: ToolRequest) -> ToolOutcome:
        return await self._run("execute", request)
