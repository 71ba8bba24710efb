"""Whose call this is: the run chain, from the activity's own info (contract §11).

Keys of artifacts, transcripts and the idempotency journal carry the run chain
(:func:`~filegate.kernel.artifacts.chain_scope`): the workflow id from
``activity.info()``, never from the request, plus the chain's first run id.
The activity's info lacks the first run id, so the workflow sends it
(``ToolRequest.first_run_id`` / ``ModelTurn.first_run_id``); without it the
activity's own run id stands in.
"""

from __future__ import annotations

from filegate.kernel.artifacts import chain_scope
from temporalio import activity
from temporalio.exceptions import ApplicationError

IDENTITY_ERROR_TYPE = "InvalidRunIdentity"


def run_scope(first_run_id: str = "") -> str:
    """``<workflow id>@<first run id>`` of the calling workflow's run chain.

    A non-retryable ApplicationError outside a workflow (no workflow id) or
    for a malformed run id.
    """
    info = activity.info()
    workflow_id = info.workflow_id
    run_id = first_run_id or info.workflow_run_id or ""
    if not workflow_id:
        raise ApplicationError(
            "filegate activities serve workflows only: this activity has no workflow id",
            type=IDENTITY_ERROR_TYPE,
            non_retryable=True,
        )
    try:
        return chain_scope(workflow_id, run_id)
    except ValueError as exc:
        raise ApplicationError(str(exc), type=IDENTITY_ERROR_TYPE, non_retryable=True) from None
