"""One backend operation from workflow code: :func:`run_operation` and :class:`OperationWorkflow`.

:func:`run_operation` schedules one :class:`~filegate.kernel.operation_types.Operation`'s
activity from the current workflow (the Deep Agents adapter calls it inside a
caller's workflow). :class:`OperationWorkflow` (``filegate.Operation``) runs the
same function for a caller outside any workflow where the server runs no
standalone activities (:mod:`filegate.operations` starts the activity itself
otherwise, with the same options, :mod:`filegate.activities.operation_stubs`).
Every tools worker hosts it (:func:`filegate.worker.tools_worker`).

Its commands are a replay contract: histories recorded on f71da99
(``tests/histories/f71da99/operation-*.json``) must keep replaying.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from filegate.activities.contract import outcome_for_activity_error
from filegate.activities.operation_stubs import (
    download_files,
    read_window,
    tool_options,
    transfer_activity_options,
    upload_files,
)
from filegate.activities.stubs import STUBS, new_call_id
from filegate.kernel import wire
from filegate.kernel.operation_types import TRANSFER_KINDS, Operation, OperationResult, Scoped


def _identified(op: Operation) -> Operation:
    """Fill the call id and run chain from the running workflow (replay-stable)."""
    first_run = workflow.info().first_execution_run_id
    update: dict[str, Any] = {}
    if op.tool is not None and not op.tool.tool_call_id:
        tool_update = {"tool_call_id": new_call_id(), "first_run_id": first_run}
        update["tool"] = op.tool.model_copy(update=tool_update)
    for name in TRANSFER_KINDS:
        scoped: Scoped | None = getattr(op, name)
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

    The fallback of :mod:`filegate.operations` where the server runs no
    standalone activities (or ``operation_path="workflow"``); it adds no check
    of its own. Why a workflow and not the backend object itself: the call
    takes the same path as an agent's (the tools worker's policies, permission
    gate, idempotency journal, heartbeats, timeouts and S3 payload offload),
    and the calling process needs a Temporal connection only, never the files
    or the tools worker's credentials.
    """

    @workflow.run
    async def run(self, op: Operation) -> OperationResult:
        return await run_operation(unapproved(op))


def unapproved(op: Operation) -> Operation:
    """``op`` without a claimed approval: the caller is outside any workflow.

    Why: the tools worker believes ``approved`` on an activity a workflow
    schedules, since a workflow that hosts ``FileTools`` sets it only after a
    reviewer's decision in its own history. This workflow holds no decision;
    it only forwards its starter's request. Passed on, a claimed approval
    would waive an ``interrupt`` rule for anyone who can start a workflow,
    where the same request sent as a standalone activity is refused
    (``FileToolActivities._call``). So it is dropped here too, and an
    interrupt rule refuses the call as a deny.
    """
    if op.tool is None or not (op.tool.approved or op.tool.approved_by):
        return op
    cleared = op.tool.model_copy(update={"approved": False, "approved_by": None})
    return op.model_copy(update={"tool": cleared})


__all__ = ["OperationWorkflow", "run_operation", "unapproved"]
