"""Turn approvals on the reviewer's desk: "Approve all N" / "Reject all N" per model turn.

A model turn's calls wait side by side and the model is asked again only once
all of them have a result, so the page offers one decision for all of a
turn's pending calls (the workflow's ``decide_turn`` update,
workflows/approvals/turn_decisions.py). Pure functions over the listing's cards (no
Temporal, no web framework): which card opens a turn's bar, and the line the
page shows for the answer. The page's script collects the fingerprint of
every preview the turn's cards show and sends them with the decision, so the
workflow takes it only for what the reviewer saw.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from filegate.cli.progress import counted
from filegate.kernel.wire import DECIDED

TURN_BAR_MIN = 2
"""Pending calls of one turn from which the page offers a decision for all of them."""


def mark_turns(cards: list[dict[str, Any]]) -> None:
    """Give the first card of every turn with :data:`TURN_BAR_MIN` or more pending
    calls a ``turn_bar``: key, workflow, turn, count, ids and a version that
    changes with the set of calls (so the page replaces the bar when one of
    them is decided on its own)."""
    turns: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for card in cards:
        if card.get("turn"):
            turns.setdefault((str(card["workflow_id"]), str(card["turn"])), []).append(card)
    for (workflow_id, turn), members in turns.items():
        if len(members) < TURN_BAR_MIN:
            continue
        ids = [str(m["id"]) for m in members]
        versions = json.dumps([[m["id"], m.get("version")] for m in members])
        members[0]["turn_bar"] = {
            "key": f"turn/{workflow_id}/{turn}",
            "workflow_id": workflow_id,
            "turn": turn,
            "count": len(members),
            "ids": ids,
            "version": hashlib.sha256(versions.encode()).hexdigest()[:16],
        }


def turn_decision_text(ack: dict[str, Any], workflow_id: str) -> str:
    """The line the page shows for a turn decision the workflow took (or bounced)."""
    verb = DECIDED.get(ack["decision"], ack["decision"])
    changed = list(ack.get("changed_since_preview") or [])
    if changed:
        return (
            f"nothing {verb} in turn {ack['turn']} of {workflow_id}: the target of "
            f"{counted(len(changed), 'tool call')} changed since the preview you saw "
            f"({', '.join(changed)}); the turn is still open with fresh previews"
        )
    calls = counted(len(ack["ids"]), "tool call")
    by = f"{ack.get('reviewer')} via {ack.get('via')}"
    return f"{verb} {calls} of turn {ack['turn']} of {workflow_id} (by {by})"
