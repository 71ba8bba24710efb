"""``filegate approve --all`` / ``reject --all``: every pending call of one turn at once.

A model turn's calls wait side by side and the model is asked again only once
all of them have a result, so deciding them one by one leaves the turn half
decided in between. These commands send one ``decide_turn`` update instead
(workflows/approvals/turn_decisions.py): the workflow applies it to every pending call of
the turn, or, when anything changed since the reviewer looked, to none.

The turn is the one pending (``--turn`` picks one when several are, which only
a workflow of one's own that runs turns side by side can have). Like a single
``approve``, ``approve --all`` waits while previews are being computed and
names the fingerprint of every preview it decided on.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowHandle

from filegate.cli.approvals import PREVIEW_WAIT_SECONDS, fingerprint_shown, listed_now
from filegate.cli.errors import CliError
from filegate.cli.progress import counted
from filegate.kernel.wire import DECIDE_TURN_UPDATE, DECIDED


def turns_of(approvals: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Pending approvals by turn, turns in the order they first appear. Approvals
    without a turn (a worker from before turn approvals) are left out."""
    turns: dict[str, list[dict[str, Any]]] = {}
    for approval in approvals:
        if approval.get("turn"):
            turns.setdefault(str(approval["turn"]), []).append(approval)
    return turns


def _turns_text(turns: dict[str, list[dict[str, Any]]]) -> str:
    """``turn 3: 2 tool calls, turn 4: 1 tool call``."""
    return ", ".join(f"turn {t}: {counted(len(a), 'tool call')}" for t, a in turns.items())


def chosen_turn(
    approvals: list[dict[str, Any]], turn: str | None, workflow_id: str
) -> tuple[str, list[dict[str, Any]]]:
    """The turn to decide (``turn``, or the only one pending) and its approvals;
    a missing or ambiguous turn is one line, exit 1."""
    turns = turns_of(approvals)
    if turn is not None:
        if turn not in turns:
            pending = f" (pending: {_turns_text(turns)})" if turns else ""
            raise CliError(f"no pending approvals in turn {turn} of {workflow_id}{pending}")
        return turn, turns[turn]
    if not turns:
        older = " that carry a turn: decide them one by one" if approvals else ""
        raise CliError(f"workflow {workflow_id} has no pending approvals{older}")
    if len(turns) > 1:
        raise CliError(
            f"workflow {workflow_id} has {len(turns)} turns pending ({_turns_text(turns)}): "
            "pick one with --turn"
        )
    return next(iter(turns.items()))


async def _ready_turn(
    handle: WorkflowHandle[Any, Any], args: argparse.Namespace
) -> tuple[str, list[dict[str, Any]]]:
    """The turn and its approvals; for an approve, once every preview is shown."""
    deadline = asyncio.get_running_loop().time() + PREVIEW_WAIT_SECONDS
    while True:
        listed = await listed_now(handle, args.timeout)
        turn, approvals = chosen_turn(listed, args.turn, args.workflow)
        if args.decision != "approve" or not any(a.get("preview_pending") for a in approvals):
            return turn, approvals
        if asyncio.get_running_loop().time() > deadline:
            raise CliError(
                f"the previews of turn {turn} are not ready after {PREVIEW_WAIT_SECONDS:g} s"
            )
        await asyncio.sleep(0.1)


def turn_payload(
    decision: dict[str, Any], turn: str, approvals: list[dict[str, Any]]
) -> dict[str, Any]:
    """The ``decide_turn`` payload (the workflow's TurnDecision) from a ``decide`` one."""
    payload = {
        "turn": turn,
        "decision": decision["decision"],
        "fingerprints": {a["id"]: fingerprint_shown(a) for a in approvals},
        "reviewer": decision["reviewer"],
        "via": decision["via"],
    }
    if decision.get("reason") is not None:
        payload["reason"] = decision["reason"]
    return payload


async def decide_turn(
    handle: WorkflowHandle[Any, Any], decision: dict[str, Any], args: argparse.Namespace
) -> str:
    """Send the turn decision; the line to print. Errors as for ``decide``
    (cli/approvals.py); a target that changed since its preview: one line, exit 1."""
    turn, approvals = await _ready_turn(handle, args)
    ack: dict[str, Any] = await handle.execute_update(
        DECIDE_TURN_UPDATE,
        turn_payload(decision, turn, approvals),
        rpc_timeout=timedelta(seconds=args.timeout),
    )
    changed = list(ack.get("changed_since_preview") or [])
    done = DECIDED[ack["decision"]]
    if changed:
        raise CliError(
            f"nothing {done}: the target of {counted(len(changed), 'tool call')}"
            f" of turn {turn} changed since its preview ({', '.join(changed)}); the turn stays "
            "open with fresh previews: look at them again, then decide"
        )
    by = f"{ack.get('reviewer', decision['reviewer'])} via {ack.get('via', 'cli')}"
    calls = counted(len(ack["ids"]), "tool call")
    return f"{done} {calls} of turn {turn} of {args.workflow} (by {by})"
