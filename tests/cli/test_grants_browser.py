"""Grants on the reviewer's desk, in a real headless Chromium against a real AgentWorkflow.

The reviewer approves a card with "remember" and a narrower pattern, the
agent's next write within it runs unasked, the "Grants" tab lists the grant
(scope, reviewer, uses) and its Revoke button ends it: the workflow records
who revoked, through the UI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect
from temporalio.client import Client

from filegate.workflows import AgentWorkflow, Decision
from tests.cli.test_ui_browser import CHROMIUM, card
from tests.cli.test_ui_desk_browser import SHOTS, reviewer_page
from tests.ui_support import REVIEWER, agent_stack, pending, tool_results, write_call

pytestmark = [
    pytest.mark.services,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium is not installed"),
]


def turn(*tool_calls: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": list(tool_calls)}


async def test_remember_on_a_card_then_list_and_revoke_the_grant(
    ui_url: str, temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    async with (
        agent_stack(temporal_client, root, tmp_path / "journal") as agents,
        reviewer_page(ui_url) as (page, problems),
    ):
        handle = await agents.start(
            write_call("w3", "/docs/notes.txt", "outside the grant\n"),
            before=(
                turn(write_call("w1", "/docs/a.md", "# a\n")),
                turn(write_call("w2", "/docs/b.md", "# b\n")),
            ),
        )
        [first] = await pending(handle, 1)
        asked = card(page, handle.id, first.id)
        await expect(asked).to_be_visible(timeout=20_000)
        await expect(asked.locator(".grant-scope")).to_have_text("write_file /docs/**")
        await asked.locator("input[name=remember]").check()
        await asked.locator("input[name=remember-pattern]").fill("/docs/*.md")
        await asked.locator("input[name=remember-for]").fill("1h")
        await asked.locator("button[data-decision=approve]").click()
        await expect(page.locator("#log")).to_contain_text(
            f"approve: approval {first.id} of {handle.id} (by {REVIEWER} via ui); "
            "remembered as grant g-"
        )
        # /docs/b.md ran on the grant; /docs/notes.txt is outside it and asks.
        [second] = await pending(handle, 1)
        assert second.args["file_path"] == "/docs/notes.txt"

        await page.locator("#tab-grants").click()
        [grant] = await handle.query(AgentWorkflow.grants)
        row = page.locator(f'.grant-row[data-workflow="{handle.id}"][data-id="{grant.id}"]')
        await expect(row).to_be_visible(timeout=10_000)
        await expect(row.locator(".scope")).to_contain_text("write_file /docs/*.md")
        await expect(row.locator(".who")).to_contain_text(f"{REVIEWER} via ui")
        await expect(row.locator(".uses")).to_have_text("1")
        await expect(row.locator(".lasting")).to_contain_text("until")
        await page.screenshot(path=str(SHOTS / "grants-tab.png"), full_page=True)
        await row.locator("button[data-revoke]").click()
        await expect(page.locator("#log")).to_contain_text(f"revoked: grant {grant.id}")
        await expect(row.locator(".status")).to_contain_text(f"revoked by {REVIEWER} via ui")
        await expect(row.locator("button[data-revoke]")).to_have_count(0)
        [revoked] = await handle.query(AgentWorkflow.grants)
        assert revoked.status == "revoked" and revoked.revoked_by == f"{REVIEWER} via ui"

        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=second.id, decision="approve")
        )
        result = await handle.result()
    assert problems == []
    out = tool_results(result)
    assert out["w2"]["content"].startswith(f"[allowed by grant {grant.id} (write_file /docs/*.md")
    assert (root / "docs" / "b.md").read_text() == "# b\n"
