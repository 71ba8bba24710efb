"""Finding approvals at scale: one visibility query, then every candidate asked at once.

Shared by ``filegate approvals`` and the approval UI, and free of web
dependencies. The workflows keep two Int search attributes up to date
(``FilegatePendingApprovals``: approvals waiting now; ``FilegateDecidedApprovals``:
approvals decided so far), so one visibility query names the workflows worth
asking, whatever their type: with thousands of running agents the listing asks
the few that wait on a human, not all of them. A running workflow without the
attribute at all (started without the counters, or another type) is asked
too, since nothing says it has no approvals (:func:`waiting_or_unknown`); the
types of such runs that answer are remembered (:func:`learn_host`), so their
decisions stay listed once they close (:mod:`filegate.cli.ui.decided`).

A server without those attributes (an older ``filegate dev``, a cluster where
nobody registered them) refuses the query with ``invalid search attribute``.
That is detected and remembered per server and namespace for
:data:`ATTRIBUTE_RECHECK` seconds, and the listing falls back to every running
workflow, asking each; one that does not know the query is not a Filegate one.

Each candidate gets :data:`LISTING_TIMEOUT`; one that does not answer (no
worker, a stuck worker) is reported as unreachable, never waited for longer
and never silently left out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from filegate.cli.errors import undecodable, unknown_query
from filegate.kernel.wire import DECIDED_ATTRIBUTE, PENDING_ATTRIBUTE, PENDING_QUERY

log = logging.getLogger("filegate.approvals")


LISTING_TIMEOUT = 1.5
"""Seconds one workflow gets to answer the listing's query.

Short, because the listing asks every candidate at once and waits for the
slowest: a workflow whose worker is gone (or busy) must cost one refresh of
the approval page 1.5 s, not the 5 s of the CLI's ``QUERY_TIMEOUT``, and is
reported as unreachable rather than waited for or silently left out."""

PARALLEL_QUERIES = 64
"""Queries in flight at once: enough for hundreds of workflows per second,
few enough that a big namespace does not open thousands of RPCs together."""

ATTRIBUTE_RECHECK = 300.0
"""Seconds a server's missing search attribute is remembered before asking
again (an operator may register it while a UI keeps running)."""

RECENT_WINDOW = timedelta(hours=24)
"""How long after closing a workflow's decisions still show as recent."""

RECENT_WORKFLOWS = 100
"""At most this many workflows are asked for their decisions (newest first)."""

RUNNING = "ExecutionStatus = 'Running'"


def waiting_or_unknown(attribute: str) -> str:
    """``attribute > 0``, or not set at all.

    A run started without the counters (by code that does not pass
    ``initial_search_attributes()``, or another workflow type) never publishes
    them; it must still be asked, or its approvals would silently vanish from
    every listing. Runs that publish ``0`` (idle agents, the common case at
    scale) are the ones left out.
    """
    return f"({attribute} > 0 OR {attribute} IS NULL)"


def quoted(value: str) -> str:
    """A visibility-query string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


_missing: dict[tuple[str, str, str], float] = {}
"""(server, namespace, attribute) -> when the server said it lacks the attribute."""


def _namespace_key(client: Client) -> tuple[str, str]:
    return (client.service_client.config.target_host, client.namespace)


def _server_key(client: Client, attribute: str) -> tuple[str, str, str]:
    return (*_namespace_key(client), attribute)


def attribute_missing(client: Client, attribute: str) -> bool:
    """Whether this server recently refused ``attribute`` (so the fallback is used)."""
    since = _missing.get(_server_key(client, attribute))
    return since is not None and time.monotonic() - since < ATTRIBUTE_RECHECK


def _is_missing_attribute(exc: RPCError, attribute: str) -> bool:
    return exc.status == RPCStatusCode.INVALID_ARGUMENT and attribute in exc.message


@dataclass(frozen=True)
class Candidate:
    """A workflow worth asking: its id, run and type from the visibility record."""

    workflow_id: str
    run_id: str
    workflow_type: str
    running: bool = True
    counted: bool = False
    """It carries the listing's search attribute (keeps its approval counters)."""
    counters: tuple[int | None, int | None] = (None, None)
    """Its pending and decided approval counters, as visibility last recorded them."""


HOST_TYPES_KEPT = 50
"""Workflow types remembered per server and namespace as hosting approvals without
the counters (:func:`learn_host`); the oldest is forgotten first."""

_host_types: dict[tuple[str, str], dict[str, None]] = {}
"""(server, namespace) -> types (insertion-ordered) whose runs answered the approval
queries without carrying the counters."""


def learn_host(client: Client, wf: Candidate) -> None:
    """Remember ``wf``'s type: it answered the approval queries without the counters.

    A run started without them is found only while it runs (``IS NULL`` matches
    running workflows only); once closed, nothing in visibility tells it from
    any other workflow but its type. The recent-decisions tab asks the recently
    closed runs of the types learnt here (:func:`host_types`).
    """
    if wf.counted:
        return
    types = _host_types.setdefault(_namespace_key(client), {})
    types.pop(wf.workflow_type, None)
    types[wf.workflow_type] = None
    while len(types) > HOST_TYPES_KEPT:
        del types[next(iter(types))]


def host_types(client: Client) -> list[str]:
    """The types :func:`learn_host` remembered for this server and namespace."""
    return list(_host_types.get(_namespace_key(client), {}))


async def candidates(
    client: Client, attribute: str, narrowed: str, fallback: str, limit: int | None = None
) -> list[Candidate]:
    """Workflows matching ``narrowed`` (which uses ``attribute``), or ``fallback``
    when the server lacks the attribute; the refusal is remembered."""
    query = fallback if attribute_missing(client, attribute) else narrowed

    key = SearchAttributeKey.for_int(attribute)
    pending, decided = (
        SearchAttributeKey.for_int(a) for a in (PENDING_ATTRIBUTE, DECIDED_ATTRIBUTE)
    )

    async def listed(text: str) -> list[Candidate]:
        found: dict[str, Candidate] = {}
        async for wf in client.list_workflows(text, limit=limit):
            if wf.id not in found:  # newest run first: keep it
                running = wf.status is None or wf.status.name == "RUNNING"
                attributes = wf.typed_search_attributes
                counted = attributes.get(key) is not None
                counters = (attributes.get(pending), attributes.get(decided))
                found[wf.id] = Candidate(
                    wf.id, wf.run_id, wf.workflow_type, running, counted, counters
                )
        return sorted(found.values(), key=lambda c: c.workflow_id)

    try:
        return await listed(query)
    except RPCError as exc:
        if query == fallback or not _is_missing_attribute(exc, attribute):
            raise
    log.info("%s is not a search attribute here: listing every running workflow", attribute)
    _missing[_server_key(client, attribute)] = time.monotonic()
    return await listed(fallback)


NOT_OURS = ""
"""An answer meaning "not a Filegate workflow (or closed meanwhile)": skipped."""

LATE = f"did not answer in {LISTING_TIMEOUT:g} s"
"""Reason of a workflow whose query ran out of time (or was refused: :func:`refused`)."""


def refused(reason: str) -> bool:
    """Whether an unreachable workflow's ``reason`` is the server refusing its query
    at once (``no poller seen for task queue recently``, a frontend still loading),
    rather than a worker that took the query and did not answer in time.

    A refusal costs no wait and may pass within seconds: a restarted Temporal
    knows no poller of any task queue until the workers poll again, so the
    listing of a live run is refused for its first seconds.
    """
    return reason.startswith(f"{LATE} (")


async def ask(
    client: Client, wf: Candidate, query: str, *, by_run: bool = False
) -> list[Any] | str:
    """``query`` of one workflow within :data:`LISTING_TIMEOUT`: its answer, or why
    it is unreachable (:data:`NOT_OURS` for a workflow without the query)."""
    handle = client.get_workflow_handle(wf.workflow_id, run_id=wf.run_id if by_run else None)
    budget = timedelta(seconds=LISTING_TIMEOUT)
    try:
        found = await asyncio.wait_for(
            handle.query(query, rpc_timeout=budget), LISTING_TIMEOUT + 0.5
        )
        return found if isinstance(found, list) else NOT_OURS
    except TimeoutError:
        return LATE
    except WorkflowQueryFailedError as exc:
        return NOT_OURS if unknown_query(exc) else f"query failed: {exc}"
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return NOT_OURS  # closed (and gone) since the visibility query
        if exc.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
            return LATE
        return f"{LATE} ({exc.message})"
    except Exception as exc:  # a payload this client cannot decode
        log.debug("%s of %s: %s", query, wf.workflow_id, exc)
        # A card stored in S3 by reference (an older worker) waits all the same:
        # listed as unreadable with the fix, never left out as "not ours".
        return undecodable(exc) or NOT_OURS


async def ask_all(
    found: list[Candidate],
    asking: Callable[[Candidate], Awaitable[list[Any] | str]],
    soft_deadline: float | None = None,
) -> list[list[Any] | str | None]:
    """``asking`` of every candidate, :data:`PARALLEL_QUERIES` at a time.

    With ``soft_deadline`` (seconds), answers still missing then are ``None``
    (their queries are cancelled): a page renders what it has at once and its
    next refresh shows the rest, instead of waiting for a stuck workflow.
    """
    gate = asyncio.Semaphore(PARALLEL_QUERIES)

    async def one(wf: Candidate) -> list[Any] | str:
        async with gate:
            return await asyncio.wait_for(asking(wf), LISTING_TIMEOUT + 1.0)

    tasks = [asyncio.ensure_future(one(wf)) for wf in found]
    if not tasks:
        return []
    _, late = await asyncio.wait(tasks, timeout=soft_deadline)
    for task in late:
        task.cancel()
    out: list[list[Any] | str | None] = []
    for task in tasks:
        if task in late:
            out.append(None)
        elif task.exception() is not None:
            out.append(f"did not answer in {LISTING_TIMEOUT:g} s")
        else:
            out.append(task.result())
    return out


WAITING = "has not answered yet"
"""Reason of a workflow still being asked when the page's soft deadline passed."""


@dataclass
class Listing:
    """Pending approvals and the workflows that did not answer (``workflow_id``,
    ``reason``, and ``waiting`` when the answer may still come on the next refresh)."""

    approvals: list[dict[str, Any]] = field(default_factory=list)
    unreachable: list[dict[str, Any]] = field(default_factory=list)
    narrowed: bool = True
    """Found through the search attribute (False: every running workflow was asked)."""


def late_entry(wf: Candidate, answer: str | None) -> dict[str, Any]:
    return {
        "workflow_id": wf.workflow_id,
        "run_id": wf.run_id,
        "reason": answer or WAITING,
        "waiting": answer is None,
        "closed": not wf.running,
        "undecodable": answer is not None and _undecodable_reason(answer),
    }


def _undecodable_reason(reason: str) -> bool:
    """Whether an unreachable workflow's reason is an answer this terminal cannot read
    (it answered: its worker is up, the terminal lacks the run's S3 settings)."""
    return "stored in S3 by reference" in reason


CARDS_RECHECK = 10.0
"""Seconds a waiting workflow's cards are reused while its counters stand still.

Why: every query is a billed Temporal Action, and the approval page refreshes
every 2 s: one query per waiting workflow per refresh was 30 Actions a minute
for a card nobody touched (``bench/actions.py``). A card changes when an
approval opens or is decided (both move the workflow's counters, which the
visibility query reads for free) or when its preview becomes ready (never
reused while one is pending); anything else (an escalation, a decision that
another process sent and the run bounced with a fresh preview) shows within
this many seconds. A decision sent through this process forgets the run's
cards at once (:func:`forget_cards`)."""

CARDS_KEPT = 1000
_cards: OrderedDict[tuple[str, str, str, str], tuple[tuple[Any, ...], list[Any], float]] = (
    OrderedDict()
)
"""(server, namespace, workflow id, run id) -> (its counters, its cards, when asked)."""


def _reused(client: Client, wf: Candidate) -> list[Any] | None:
    if not wf.counted:
        return None
    hit = _cards.get((*_namespace_key(client), wf.workflow_id, wf.run_id))
    if hit is None or hit[0] != wf.counters or time.monotonic() - hit[2] > CARDS_RECHECK:
        return None
    return hit[1]


def _keep(client: Client, wf: Candidate, answer: list[Any]) -> None:
    if not wf.counted or any(isinstance(a, dict) and a.get("preview_pending") for a in answer):
        return
    key = (*_namespace_key(client), wf.workflow_id, wf.run_id)
    _cards[key] = (wf.counters, answer, time.monotonic())
    _cards.move_to_end(key)
    while len(_cards) > CARDS_KEPT:
        _cards.popitem(last=False)


def forget_cards(client: Client, workflow_id: str) -> None:
    """Ask ``workflow_id`` anew on the next listing (this process just decided on it:
    a bounced decision refreshes a preview without moving any counter)."""
    prefix = (*_namespace_key(client), workflow_id)
    for key in [k for k in _cards if k[:3] == prefix]:
        del _cards[key]


async def _cards_of(client: Client, wf: Candidate) -> list[Any] | str:
    """The workflow's pending approvals: reused (:data:`CARDS_RECHECK`) or asked."""
    reused = _reused(client, wf)
    if reused is not None:
        return reused
    answer = await ask(client, wf, PENDING_QUERY)
    if isinstance(answer, list):
        _keep(client, wf, answer)
    return answer


ASK_AGAIN_EVERY = 0.5
"""Seconds between the rounds of :func:`ask_refused_again`."""


async def ask_refused_again(client: Client, listing: Listing, grace: float) -> None:
    """Ask the workflows whose query the server refused (:func:`refused`) again,
    every :data:`ASK_AGAIN_EVERY` s for up to ``grace`` s, moving their answers into
    ``listing``; those still refused then stay unreachable with the last reason.

    For a command that concludes from one listing (``approvals`` exits 3 for "a
    worker may be down"), not for a page that asks again on its next refresh.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while True:
        again = [u for u in listing.unreachable if refused(u["reason"])]
        if not again or loop.time() >= deadline:
            return
        await asyncio.sleep(ASK_AGAIN_EVERY)
        answers = await asyncio.gather(
            *(
                ask(client, Candidate(u["workflow_id"], u["run_id"], ""), PENDING_QUERY)
                for u in again
            )
        )
        for entry, answer in zip(again, answers, strict=True):
            if isinstance(answer, str) and answer != NOT_OURS:
                entry["reason"] = answer
                entry["undecodable"] = _undecodable_reason(answer)
                continue
            listing.unreachable.remove(entry)
            if isinstance(answer, list):
                listing.approvals.extend(
                    {**a, "workflow_id": entry["workflow_id"], "run_id": entry["run_id"]}
                    for a in answer
                    if isinstance(a, dict)
                )
        listing.approvals.sort(key=lambda a: a["workflow_id"])  # stable: each run's order stays


async def approval_listing(
    client: Client, workflow_id: str | None = None, soft_deadline: float | None = None
) -> Listing:
    """Pending approvals of every workflow that has some (or of one workflow).

    Each approval is the workflow's own record (``id``, ``tool``, ``args``,
    ``rule``, ``preview``, ``description``...) plus ``workflow_id``, ``run_id``
    and ``workflow_type``. See the module docstring for the visibility query
    and its fallback; ``soft_deadline`` as in :func:`ask_all`.
    """
    only = f" AND WorkflowId = {quoted(workflow_id)}" if workflow_id else ""
    narrowed = f"{RUNNING} AND {waiting_or_unknown(PENDING_ATTRIBUTE)}{only}"
    found = await candidates(client, PENDING_ATTRIBUTE, narrowed, RUNNING + only)
    answers = await ask_all(found, lambda wf: _cards_of(client, wf), soft_deadline)
    listing = Listing(narrowed=not attribute_missing(client, PENDING_ATTRIBUTE))
    for wf, answer in zip(found, answers, strict=True):
        if answer is None or isinstance(answer, str):
            if answer != NOT_OURS:
                listing.unreachable.append(late_entry(wf, answer))
            continue
        learn_host(client, wf)
        listing.approvals.extend(
            {
                **a,
                "workflow_id": wf.workflow_id,
                "run_id": wf.run_id,
                "workflow_type": wf.workflow_type,
            }
            for a in answer
            if isinstance(a, dict)
        )
    return listing
