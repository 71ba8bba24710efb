"""Recent decisions: who decided what, when, with what outcome, across workflows.

The same visibility-then-parallel-queries scheme as pending approvals
(:mod:`filegate.cli.ui.listing`): workflows with ``FilegateDecidedApprovals > 0``
that are running or closed within :data:`RECENT_WINDOW` (plus running ones
that publish no counter, and the recently closed runs of the types known to
host approvals without it: :func:`_closed_hosts`), each asked for
``decided_approvals`` within :data:`LISTING_TIMEOUT`.

A closed run is usually one whose workers are gone (a finished ``filegate
run`` takes its in-process workers with it), so nothing can answer a query
of it. Its history still says who decided: each accepted ``decide`` update
and each ``decide`` signal carries the decision with its reviewer and
channel, at the event's time; an accepted ``decide_turn`` update, one row per
approval of the turn. Those rows name the approval id rather than the
tool and path (the workflow's state, not its history, holds those). A closed
run never changes, so what was learnt about it is kept (:data:`CLOSED_KEPT`
runs) and not asked again on every refresh.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client, WorkflowHistory, WorkflowQueryFailedError
from temporalio.converter import DataConverter
from temporalio.service import RPCError

from filegate.cli.ui.listing import (
    LISTING_TIMEOUT,
    NOT_OURS,
    RECENT_WINDOW,
    RECENT_WORKFLOWS,
    RUNNING,
    Candidate,
    ask,
    ask_all,
    candidates,
    host_types,
    late_entry,
    learn_host,
    log,
    quoted,
)
from filegate.kernel.wire import (
    DECIDE_TURN_UPDATE,
    DECIDE_UPDATE,
    DECIDED_ATTRIBUTE,
    DECIDED_QUERY,
    STATUS_QUERY,
)

CLOSED_KEPT = 1000
"""Closed runs whose decisions are remembered (they cannot change)."""

_closed: OrderedDict[tuple[str, str, str], list[dict[str, Any]]] = OrderedDict()
"""(namespace, workflow id, run id) -> the decisions of that closed run."""


@dataclass
class DecidedListing:
    """The latest decisions (newest first) and the workflows that did not answer."""

    decisions: list[dict[str, Any]] = field(default_factory=list)
    unreachable: list[dict[str, Any]] = field(default_factory=list)


RECENT_DECISIONS = 50
"""Decisions the "recent decisions" tab shows."""


async def _decided_of(client: Client, wf: Candidate) -> list[Any] | str:
    """``decided_approvals``, or, from a workflow that predates that query, the
    ``decided`` list of its ``status`` query; a closed run nobody answers for:
    its history (remembered, see the module docstring)."""
    key = (client.namespace, wf.workflow_id, wf.run_id)
    if not wf.running and key in _closed:
        _closed.move_to_end(key)
        return _closed[key]
    answer = await ask(client, wf, DECIDED_QUERY, by_run=True)
    if answer == NOT_OURS:
        status = await _status_of(client, wf)
        answer = status if isinstance(status, str) else status.get("decided") or []
    if wf.running:
        return answer
    if isinstance(answer, str):
        try:
            answer = await from_history(client, wf)
        except (RPCError, ValueError) as exc:
            log.debug("history of %s: %s", wf.workflow_id, exc)
            return answer
    _closed[key] = [d for d in answer if isinstance(d, dict)]
    while len(_closed) > CLOSED_KEPT:
        _closed.popitem(last=False)
    return _closed[key]


def _when(event: Any) -> str:
    return event.event_time.ToDatetime(tzinfo=UTC).isoformat()


async def from_history(client: Client, wf: Candidate) -> list[dict[str, Any]]:
    """The decisions recorded in a run's history: accepted ``decide`` updates whose
    outcome was not "changed since the preview", and ``decide`` signals."""
    handle = client.get_workflow_handle(wf.workflow_id, run_id=wf.run_id)
    history = await handle.fetch_history(rpc_timeout=timedelta(seconds=LISTING_TIMEOUT * 2))
    return await decisions_in(history, client.data_converter)


async def decisions_in(history: WorkflowHistory, convert: DataConverter) -> list[dict[str, Any]]:
    """:func:`from_history` on a history at hand (a recorded one, in the tests)."""
    accepted: dict[str, list[dict[str, Any]]] = {}
    found: list[dict[str, Any]] = []
    for event in history.events:
        if event.HasField("workflow_execution_update_accepted_event_attributes"):
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name not in _DECISIONS or not request.input.args.payloads:
                continue
            [decision] = await convert.decode(request.input.args.payloads[:1])
            if isinstance(decision, dict):
                rows = _rows(request.input.name, decision, _when(event))
                accepted[request.meta.update_id] = rows
                found += rows
        elif event.HasField("workflow_execution_update_completed_event_attributes"):
            done = event.workflow_execution_update_completed_event_attributes
            sent = accepted.get(done.meta.update_id)
            if sent is None or not done.outcome.success.payloads:
                continue
            [ack] = await convert.decode(done.outcome.success.payloads[:1])
            if isinstance(ack, dict) and ack.get("changed_since_preview"):
                for row in sent:  # not applied: the approvals stayed open
                    found.remove(row)
        elif event.HasField("workflow_execution_signaled_event_attributes"):
            signal = event.workflow_execution_signaled_event_attributes
            if signal.signal_name == DECIDE_UPDATE and signal.input.payloads:
                [decision] = await convert.decode(signal.input.payloads[:1])
                if isinstance(decision, dict):
                    found.append(_row(decision, _when(event), "signal"))
    return found


_DECISIONS = (DECIDE_UPDATE, DECIDE_TURN_UPDATE)
"""The updates that decide approvals: one at a time, or a whole turn at once."""


def _rows(update: str, decision: dict[str, Any], when: str) -> list[dict[str, Any]]:
    """The rows one accepted decision update adds: one, or one per approval of the
    turn it decided (a turn decision names them in its ``fingerprints``)."""
    if update == DECIDE_UPDATE:
        return [_row(decision, when, "api")]
    turn = decision.get("turn")
    rows = []
    for approval_id in decision.get("fingerprints") or {}:
        row = _row({**decision, "id": approval_id}, when, "api")
        row["summary"] = f"approval {approval_id} (turn {turn}, decided as a whole)"
        rows.append(row)
    return rows


def _row(decision: dict[str, Any], when: str, channel: str) -> dict[str, Any]:
    return {
        "id": decision.get("id"),
        "decision": decision.get("decision"),
        "reviewer": decision.get("reviewer") or "unknown",
        "via": decision.get("via") or channel,
        "reason": decision.get("reason"),
        "decided_at": when,
        "summary": f"approval {decision.get('id')}",
        "source": "history",
    }


async def _status_of(client: Client, wf: Candidate) -> dict[str, Any] | str:
    handle = client.get_workflow_handle(wf.workflow_id, run_id=wf.run_id)
    try:
        found = await asyncio.wait_for(
            handle.query(STATUS_QUERY, rpc_timeout=timedelta(seconds=LISTING_TIMEOUT)),
            LISTING_TIMEOUT + 0.5,
        )
    except (TimeoutError, WorkflowQueryFailedError, RPCError):
        return NOT_OURS
    except Exception:  # a payload this client cannot decode: not ours
        return NOT_OURS
    return found if isinstance(found, dict) else NOT_OURS


CLOSED = "ExecutionStatus IN ('Completed', 'Failed', 'Canceled', 'Terminated', 'TimedOut')"
"""A run that ended (not one that continued as new: its decisions went on with it)."""


async def _closed_hosts(client: Client, since: str, known: set[str]) -> list[Candidate]:
    """Runs closed since ``since`` that kept no counters, of the types known to host
    approvals (:func:`~filegate.cli.ui.listing.learn_host`), minus the ``known`` ids.

    Visibility cannot tell such a run from any other once it closed; its type
    can. A type this process never saw running (a UI started after the run
    ended) is not known, and the tab says so.
    """
    types = host_types(client)
    if not types:
        return []
    recent = (
        f"{CLOSED} AND CloseTime > {quoted(since)}"
        f" AND WorkflowType IN ({', '.join(quoted(t) for t in types)})"
    )
    narrowed = f"{DECIDED_ATTRIBUTE} IS NULL AND {recent}"
    found = await candidates(client, DECIDED_ATTRIBUTE, narrowed, recent, RECENT_WORKFLOWS)
    return [wf for wf in found if wf.workflow_id not in known]


async def decided_listing(client: Client, now: datetime | None = None) -> DecidedListing:
    """The last :data:`RECENT_DECISIONS` decisions of workflows that decided any,
    running or closed within :data:`RECENT_WINDOW` (fallback: running ones), and
    of the recently closed runs that kept no counters (:func:`_closed_hosts`)."""
    since = ((now or datetime.now(UTC)) - RECENT_WINDOW).strftime("%Y-%m-%dT%H:%M:%SZ")
    narrowed = (
        f"({DECIDED_ATTRIBUTE} > 0 AND ({RUNNING} OR CloseTime > {quoted(since)}))"
        f" OR ({DECIDED_ATTRIBUTE} IS NULL AND {RUNNING})"
    )
    found = await candidates(client, DECIDED_ATTRIBUTE, narrowed, RUNNING, RECENT_WORKFLOWS)
    found += await _closed_hosts(client, since, {wf.workflow_id for wf in found})
    answers = await ask_all(found, lambda wf: _decided_of(client, wf))
    listing = DecidedListing()
    for wf, answer in zip(found, answers, strict=True):
        if answer is None or isinstance(answer, str):
            if answer != NOT_OURS:
                if not wf.running:  # the usual case: its run's workers are gone
                    answer = f"is closed and no worker replays it for queries ({answer})"
                listing.unreachable.append(late_entry(wf, answer))
            continue
        learn_host(client, wf)
        listing.decisions.extend(
            {**d, "workflow_id": wf.workflow_id, "run_id": wf.run_id, "running": wf.running}
            for d in answer
            if isinstance(d, dict)
        )
    listing.decisions.sort(key=lambda d: str(d.get("decided_at", "")), reverse=True)
    del listing.decisions[RECENT_DECISIONS:]
    return listing
