"""Recent decisions of a closed run, read from its recorded history.

A closed run's workers are usually gone, so "recent decisions" reads who
decided what from the history. It read only single ``decide`` updates and
signals: a turn decided as a whole vanished once its run closed (issue 36).
The history here was recorded on f71da99 (tests/workflows/test_replay_new_histories.py):
single decisions by update and signal, a turn decision bounced because a
target changed since its preview, then that turn approved, then a turn rejected.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter

from filegate.cli.ui.decided import decisions_in

HISTORY = (
    Path(__file__).parents[1]
    / "histories"
    / "f71da99"
    / "agent-approvals-grant-turn-decisions.json"
)


async def _rows() -> list[dict[str, object]]:
    history = WorkflowHistory.from_json("recorded", HISTORY.read_text())
    return await decisions_in(history, pydantic_data_converter)


async def test_turn_decisions_of_a_closed_run_are_listed_per_approval() -> None:
    rows = await _rows()
    turns = [r for r in rows if "decided as a whole" in str(r["summary"])]
    by_turn = Counter(
        (str(r["summary"]).split("(turn ")[1].split(",")[0], r["decision"]) for r in turns
    )
    # The bounced attempt applied nothing, so turn 6 counts once, as approved.
    assert by_turn == {("6", "approve"): 2, ("7", "reject"): 2}, by_turn
    assert len({r["id"] for r in turns}) == 4


async def test_single_decisions_are_still_listed() -> None:
    rows = await _rows()
    singles = Counter((r["decision"], r["via"]) for r in rows if "turn" not in str(r["summary"]))
    assert singles == {
        ("approve", "cli"): 1,
        ("approve", "api"): 1,
        ("edit", "api"): 1,
        ("reject", "signal"): 1,
        ("respond", "api"): 1,
    }, singles
