"""Turn approvals in a real headless Chromium: "Approve all N" and "Reject all N".

Two agents each wait on one model turn of several gated writes. The page
shows a bar per turn above its cards; one click approves all three calls of
the first turn, and the second turn is rejected with a reason typed in the
bar. Each is a single ``decide_turn`` update naming the previews the cards
showed, so both runs finish with exactly those outcomes, attributed to the
logged-in reviewer, and the page runs without a CSP violation.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from playwright.async_api import ConsoleMessage, Page, async_playwright, expect
from temporalio.client import Client

from tests.cli.test_ui_browser import CHROMIUM, CHROMIUM_ARGS, card
from tests.ui_support import (
    REVIEWER,
    TOKEN,
    agent_stack,
    artifacts_dir,
    pending,
    tool_results,
    write_call,
)

pytestmark = [
    pytest.mark.services,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium is not installed"),
]


def watch_page(page: Page) -> list[str]:
    violations: list[str] = []

    def watch(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text or "Refused to" in message.text:
            violations.append(message.text)

    page.on("console", watch)
    page.on("pageerror", lambda error: violations.append(str(error)))
    return violations


async def test_approve_all_and_reject_all_of_a_turn(
    ui_url: str, temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    async with (
        agent_stack(temporal_client, root, tmp_path / "journal") as agents,
        async_playwright() as pw,
    ):
        three = await agents.start(*(write_call(n, f"/docs/{n}.md", f"{n}\n") for n in "abc"))
        two = await agents.start(*(write_call(n, f"/docs/{n}.md", f"{n}\n") for n in "de"))
        first = await pending(three, 3)
        second = await pending(two, 2)
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1100, "height": 900})
            violations = watch_page(page)
            await page.goto(f"{ui_url}?token={TOKEN}")
            approve_bar = page.locator(f'.card.turn[data-key="turn/{three.id}/1"]')
            reject_bar = page.locator(f'.card.turn[data-key="turn/{two.id}/1"]')
            await expect(approve_bar).to_be_visible(timeout=20_000)
            await expect(reject_bar).to_be_visible(timeout=20_000)
            for approval in [*first, *second]:  # every card is there, with its preview
                wf = three.id if approval in first else two.id
                await expect(card(page, wf, approval.id).locator(".preview")).to_be_visible(
                    timeout=10_000
                )
            await page.screenshot(path=str(artifacts_dir("ui-turns") / "bars.png"), full_page=True)

            await approve_bar.locator("button[data-turn-decision=approve]").click()
            await expect(approve_bar.locator(".answer")).to_have_text(
                f"approved 3 tool calls of turn 1 of {three.id} (by {REVIEWER} via ui)",
                timeout=15_000,
            )
            reject_all = reject_bar.locator("button[data-turn-decision=reject]")
            await expect(reject_all).to_have_text("Reject all 2", timeout=10_000)
            await reject_bar.locator("input[name=turn-reason]").fill("not in this release")
            await reject_bar.locator("input[name=turn-reason]").press("Enter")
            await expect(reject_bar.locator(".answer")).to_have_text(
                f"rejected 2 tool calls of turn 1 of {two.id} (by {REVIEWER} via ui)",
                timeout=15_000,
            )
            for approval in first:
                await expect(
                    card(page, three.id, approval.id).locator(".decision")
                ).to_contain_text(f"approved by {REVIEWER} via ui")
            assert not violations, violations
        finally:
            await browser.close()
        approved, rejected = await asyncio.wait_for(
            asyncio.gather(three.result(), two.result()), 30
        )
    for name in "abc":
        assert f"approved by {REVIEWER} via ui" in tool_results(approved)[name]["content"]
        assert (root / "docs" / f"{name}.md").read_text() == f"{name}\n"
    for name in "de":
        outcome = tool_results(rejected)[name]
        assert outcome["status"] == "error" and "not in this release" in outcome["content"]
        assert not (root / "docs" / f"{name}.md").exists()
