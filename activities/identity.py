"""Whose call this is: the run chain, from the activity's own info (contract §11).

Keys of artifacts, transcripts and the idempotency journal carry the run chain
(:func:`~filegate.kernel.artifacts.chain_scope`): the workflow id from
``activity.info()``, never from the request, plus the chain's first run id.
The activity's info lacks the first run id, so the workflow sends it
(``ToolRequest.first_run_id`` / ``ModelTurn.first_run_id``); without it the
activity's own run id stands in.

A standalone activity (started by a client, no workflow: ``filegate call``,
the Deep Agents adapter outside a workflow) is a chain of its own:
``activity:<activity id>@<activity run id>``, both from its info, so it can
reach no workflow's artifacts or journal entries and a request's
``first_run_id`` is ignored.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from filegate.kernel import wire
from filegate.kernel.artifacts import chain_scope

IDENTITY_ERROR_TYPE = wire.INVALID_RUN_IDENTITY_ERROR
STANDALONE_SCOPE_PREFIX = "activity:"
"""Scopes of standalone activities start with this, kept apart from workflows' scopes."""


def run_scope(first_run_id: str = "") -> str:
    """``<workflow id>@<first run id>`` of the calling workflow's run chain.

    A standalone activity's own scope, ``activity:<activity id>@<activity run
    id>``, when no workflow started it. A non-retryable ApplicationError
    without an identity (no workflow id, no activity run id) or for a
    malformed run id.
    """
    info = activity.info()
    workflow_id = info.workflow_id
    run_id = first_run_id or info.workflow_run_id or ""
    if not workflow_id and info.activity_run_id and not info.is_local:
        workflow_id = STANDALONE_SCOPE_PREFIX + info.activity_id
        run_id = info.activity_run_id
    if not workflow_id:
        raise ApplicationError(
            "filegate activities serve workflows and standalone activities only: "
            "this activity has neither a workflow id nor an activity run id",
            type=IDENTITY_ERROR_TYPE,
            non_retryable=True,
        )
    try:
        return chain_scope(workflow_id, run_id)
    except ValueError as exc:
        raise ApplicationError(str(exc), type=IDENTITY_ERROR_TYPE, non_retryable=True) from None
