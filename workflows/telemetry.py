"""Filegate's metrics and approval spans from workflow code, replay-safe.

What the workflow alone knows: which calls a ``deny`` rule refused before any
backend saw them, how long each approval waited and who decided it, which
calls a grant let through, and how many approvals wait now. Metrics go through
``workflow.metric_meter()``, which drops whatever replay records again, so a
worker that replays a history counts nothing twice; none of this adds a
command to history. The ``approval_wait`` span is handed to the worker's
tracer through an extern function (``ToolSpans``, registered only on a worker
that traces), outside replay only. On a worker with neither, the meter is the
SDK's no-op one and no extern is looked up twice.

Names: :mod:`filegate.kernel.observability`; docs/observability.md.
"""

from __future__ import annotations

import threading
import weakref
from datetime import datetime

from temporalio import workflow

from filegate.kernel import observability as names

GroupKey = tuple[str, str, str]
"""(namespace, task queue, workflow type): the labels the workflow meter adds."""


def denied(tool: str, call_id: str) -> None:
    """A ``deny`` rule refused a call of ``tool`` in the workflow's gate: counted, and an
    ``execute_tool {tool}`` span with the decision (no backend saw the call, so no
    tools worker records one; issue 54)."""
    workflow.metric_meter().create_counter(names.DENIALS, "Calls a permission rule refused").add(
        1, {"tool": tool}
    )
    now = _ns(workflow.now())
    _span(f"{names.EXECUTE_TOOL} {tool}", {
        names.OPERATION_NAME: names.EXECUTE_TOOL, names.TOOL_NAME: tool,
        names.TOOL_CALL_ID: call_id, names.TOOL_TYPE: "function",
        names.STATUS: "error", names.RULE_DECISION: "deny", names.ERROR_TYPE: "permission_denied",
    }, now, now)  # fmt: skip


def _span(name: str, attributes: dict[str, object], start_ns: int, end_ns: int) -> None:
    """Hand a finished span to the worker's tracer (outside replay; none without tracing)."""
    if workflow.unsafe.is_replaying():
        return
    record = workflow.extern_functions().get(names.APPROVAL_SPAN_EXTERN)
    if record is not None:
        record(name, attributes, start_ns, end_ns)


def grant_used(tool: str) -> None:
    """A grant (a remembered approval) let a call of ``tool`` through unasked."""
    workflow.metric_meter().create_counter(
        names.GRANT_USES, "Calls a grant let through unasked"
    ).add(1, {"tool": tool})


def approval_decided(
    *,
    approval_id: str,
    tool: str,
    call_id: str,
    decision: str,
    reviewer: str | None,
    via: str | None,
    opened: datetime,
) -> None:
    """An approval opened at ``opened`` was decided now: its wait, and its span."""
    now = workflow.now()
    seconds = max((now - opened).total_seconds(), 0.0)
    workflow.metric_meter().create_histogram_float(
        names.APPROVAL_WAIT, "Seconds from a pending approval to its decision", "s"
    ).record(seconds, {"tool": tool, "decision": decision})
    attributes: dict[str, object] = {
        names.TOOL_NAME: tool,
        names.TOOL_CALL_ID: call_id,
        names.APPROVAL_ID: approval_id,
        names.APPROVAL_DECISION: decision,
        names.APPROVAL_DECIDED_BY: reviewer or "unknown",
        names.APPROVAL_VIA: via or "signal",
        names.APPROVAL_WAIT_SECONDS: seconds,
    }
    _span(f"{names.APPROVAL_WAIT_SPAN} {tool}", attributes, _ns(opened), _ns(now))


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


class PendingTally:
    """Approvals waiting now, per run this worker holds, summed per :data:`GroupKey`.

    A gauge, not a counter: each run reports its own count whenever it changes
    (``ApprovalHandlers.publish``), replays included, and the gauge is set to the
    sum over the runs of its group. A run is held weakly: one this worker no
    longer holds (finished, evicted, terminated) stops counting. Shared by every
    run of the process: this module passes through the workflow sandbox.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: weakref.WeakKeyDictionary[object, tuple[GroupKey, int]] = (
            weakref.WeakKeyDictionary()
        )

    def set(self, owner: object, group: GroupKey, count: int) -> int:
        """Record ``owner``'s count; return its group's sum."""
        with self._lock:
            if count:
                self._counts[owner] = (group, count)
            else:
                self._counts.pop(owner, None)
            return sum(n for key, n in list(self._counts.values()) if key == group)


PENDING = PendingTally()


def approvals_waiting(owner: object, count: int) -> None:
    """``owner`` (one run's approval handlers) has ``count`` approvals waiting now."""
    if not workflow.in_workflow():
        return
    info = workflow.info()
    total = PENDING.set(owner, (info.namespace, info.task_queue, info.workflow_type), count)
    workflow.metric_meter().create_gauge(
        names.APPROVALS_PENDING, "Approvals waiting for a decision in the runs this worker holds"
    ).set(total)
