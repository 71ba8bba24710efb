"""The approval UI in a real headless Chromium (Debian's ``chromium``, never downloaded).

uvicorn serves the app from its own thread on a free loopback port; Playwright
drives the browser from the test's loop, where the agent and tools workers
run. The browser logs in through the token URL the UI prints (the guard sets
the session cookie; the page's script sends the CSRF token), and the page must
run without a single Content-Security-Policy violation. Two agents wait on
approvals: the page approves one's write and rejects the other's edit with a
reason (after the validator refused a bad edit), and both workflows must
finish with exactly those outcomes, attributed to the logged-in reviewer.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from playwright.async_api import ConsoleMessage, Locator, Page, async_playwright, expect
from temporalio.client import Client

from filegate.cli.ui.web_guard import SESSION_COOKIE
from tests.ui_support import (
    REVIEWER,
    TOKEN,
    agent_stack,
    artifacts_dir,
    edit_call,
    pending,
    tool_results,
    write_call,
)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = [
    pytest.mark.services,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium is not installed"),
]


def card(page: Page, workflow_id: str, approval_id: str) -> Locator:
    return page.locator(f'.card[data-key="{workflow_id}/{approval_id}"]')


async def test_approve_and_reject_in_a_real_browser(
    ui_url: str, temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "setup.py").write_text('version = "1.0"\n')
    read_first = {
        "tool_calls": [{"id": "r0", "name": "read_file", "args": {"file_path": "/docs/setup.py"}}]
    }
    async with (
        agent_stack(temporal_client, root, tmp_path / "journal") as agents,
        async_playwright() as pw,
    ):
        approved = await agents.start(write_call("w1", "/docs/report.md", "# Report\n\nall good\n"))
        rejected = await agents.start(
            edit_call("e1", "/docs/setup.py", 'version = "1.0"\n', 'version = "2.0"\n'),
            before=(read_first,),  # an edit of an unread file is refused before anyone is asked
        )
        [write_approval] = await pending(approved, 1)
        [edit_approval] = await pending(rejected, 1)
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1100, "height": 900})
            violations: list[str] = []

            def watch(message: ConsoleMessage) -> None:
                if "Content Security Policy" in message.text or "Refused to" in message.text:
                    violations.append(message.text)  # (HTTP errors are expected: 401, 409)

            page.on("console", watch)
            page.on("pageerror", lambda error: violations.append(str(error)))
            anonymous = await page.goto(ui_url)
            assert anonymous is not None and anonymous.status == 401  # no login yet
            await page.goto(f"{ui_url}?token={TOKEN}")
            assert page.url == ui_url  # the token left the address bar
            [session] = [c for c in await page.context.cookies() if c["name"] == SESSION_COOKIE]
            assert session["httpOnly"] and session["sameSite"] == "Strict"
            write_card = card(page, approved.id, write_approval.id)
            edit_card = card(page, rejected.id, edit_approval.id)
            # Polling brings both in even if visibility lagged at first load.
            await expect(write_card).to_be_visible(timeout=20_000)
            await expect(edit_card).to_be_visible(timeout=20_000)
            await expect(write_card.locator(".preview")).to_contain_text("all good")
            await expect(edit_card.locator("tr.del td.text")).to_have_text('-version = "1.0"')
            await expect(edit_card.locator("tr.add td.text")).to_have_text('+version = "2.0"')
            await expect(edit_card.locator(".rule")).to_contain_text("write /docs/** -> interrupt")
            await page.screenshot(
                path=str(artifacts_dir("ui-browser") / "two-agents.png"), full_page=True
            )

            # A bad edit: the validator's refusal is shown, the card stays.
            await edit_card.locator("details.edit summary").click()
            await edit_card.locator("[data-arg=file_path]").fill("/docs/../../x")
            await edit_card.locator("button[data-action=edit-preview]").click()
            await edit_card.locator("button[data-decision=edit]").click()
            await expect(edit_card.locator(".answer.error")).to_contain_text(
                "edited args refused", timeout=10_000
            )

            await write_card.locator("button[data-decision=approve]").click()
            await edit_card.locator("input[name=reason]").fill("keep version 1")
            await edit_card.locator("button[data-decision=reject]").click()
            log = page.locator("#log")
            await expect(log).to_contain_text(
                f"approve: approval {write_approval.id} of {approved.id} (by {REVIEWER} via ui)"
            )
            await expect(log).to_contain_text(
                f"reject: approval {edit_approval.id} of {rejected.id} (by {REVIEWER} via ui)"
            )
            # Decided cards stay, saying who decided, until the page is reloaded.
            await expect(write_card.locator(".decision")).to_contain_text(
                f"approved by {REVIEWER} via ui"
            )
            await expect(edit_card.locator(".decision")).to_contain_text(
                f"rejected by {REVIEWER} via ui"
            )
            await page.reload()
            await expect(write_card).to_have_count(0, timeout=10_000)
            await expect(edit_card).to_have_count(0, timeout=10_000)
            assert not violations, violations
        finally:
            await browser.close()
        ran, refused = await asyncio.wait_for(
            asyncio.gather(approved.result(), rejected.result()), 30
        )
    assert tool_results(ran)["w1"]["status"] == "success"
    assert (root / "docs" / "report.md").read_text() == "# Report\n\nall good\n"
    outcome = tool_results(refused)["e1"]
    assert outcome["status"] == "error"
    assert "rejected" in outcome["content"] and "keep version 1" in outcome["content"]
    assert f"({REVIEWER} via ui)" in outcome["content"]
    assert (root / "docs" / "setup.py").read_text() == 'version = "1.0"\n'  # not edited
