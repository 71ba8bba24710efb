"""The reviewer's desk in a real headless Chromium, against real AgentWorkflow runs.

Each card kind as the tools worker previews it (a write over an existing
file, a new file, an edit with context and real line numbers, a delete, an
execute with its working directory and ``interrupt_on`` description), an edit
made through the per-argument form with the edited diff shown before sending,
the keyboard shortcuts, the recent-decisions tab, a file that changed after
its preview, and a page that does not wait for a workflow whose worker is
stopped. Screenshots go to ``$FILEGATE_TEST_ARTIFACTS`` (default
``.filegate/test-artifacts``).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from playwright.async_api import ConsoleMessage, Page, async_playwright, expect
from temporalio.client import Client

from filegate.workflows import ApprovalConfig
from tests.cli.test_approval_listing import stopped_worker_approval
from tests.cli.test_ui_browser import CHROMIUM, CHROMIUM_ARGS, card
from tests.ui_support import (
    REVIEWER,
    TOKEN,
    WEB_UI,
    agent_stack,
    artifacts_dir,
    delete_call,
    edit_call,
    execute_call,
    pending,
    tool_results,
    write_call,
)

pytestmark = [
    pytest.mark.services,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium is not installed"),
]

SHOTS = artifacts_dir("ui-desk")


@asynccontextmanager
async def reviewer_page(url: str) -> AsyncIterator[tuple[Page, list[str]]]:
    """A logged-in page and the CSP violations / script errors it reports."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1100, "height": 900})
            problems: list[str] = []

            def watch(message: ConsoleMessage) -> None:
                if "Content Security Policy" in message.text or "Refused to" in message.text:
                    problems.append(message.text)

            page.on("console", watch)
            page.on("pageerror", lambda error: problems.append(str(error)))
            await page.goto(f"{url}?token={TOKEN}")
            yield page, problems
        finally:
            await browser.close()


APP = "".join(f"line {n}\n" for n in range(1, 11))


async def test_each_card_kind(ui_url: str, temporal_client: Client, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "old.md").write_text("title\nold body\nend\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text(APP)
    (root / "build").mkdir()
    (root / "build" / "a.o").write_text("a")
    (root / "build" / "b.o").write_text("b")
    gates = {tool: {"always": True} for tool in ("write_file", "edit_file", "delete")} | {
        "execute": {"always": True, "description": "commands run on the shared host"}
    }
    read = {"tool_calls": [{"id": "r1", "name": "read_file", "args": {"file_path": "/src/app.py"}}]}
    async with (
        agent_stack(temporal_client, root, tmp_path / "journal", shell=True) as agents,
        reviewer_page(ui_url) as (page, problems),
    ):
        handle = await agents.start(
            write_call("w-old", "/docs/old.md", "title\nnew body\nend\n"),
            write_call("w-new", "/docs/new.md", "hello\nworld\n"),
            edit_call("e1", "/src/app.py", "line 6\n", "line six\n"),
            delete_call("d1", "/build"),
            execute_call("x1", "ls docs"),
            task="Tidy the repository",
            said="I'll update the docs, then tidy up.",
            interrupt_on=gates,
            approvals=ApprovalConfig(timeout_seconds=900, on_timeout="escalate"),
            before=(read,),
        )
        found = {a.tool_call_id: a for a in await pending(handle, 5)}
        cards = {k: card(page, handle.id, a.id) for k, a in found.items()}
        for one in cards.values():
            await expect(one).to_be_visible(timeout=20_000)

        over = cards["w-old"]
        await expect(over.locator(".kind-overwrite")).to_contain_text("/docs/old.md")
        await expect(over.locator("tr.del")).to_have_text(re.compile(r"^\s*2\s*-old body\s*$"))
        await expect(over.locator("tr.add")).to_have_text(re.compile(r"^\s*2\s*\+new body\s*$"))
        new = cards["w-new"]
        await expect(new.locator(".kind-new")).to_contain_text("/docs/new.md")
        await expect(new.locator("tr.add td.text")).to_have_text(["+hello", "+world"])
        await expect(new.locator("tr.add td.no").nth(1)).to_have_text("1")
        edit = cards["e1"]
        await expect(edit.locator(".kind-edit")).to_contain_text("/src/app.py")
        await expect(edit.locator("tr.hunk")).to_contain_text("@@ -3,7 +3,7 @@")
        await expect(edit.locator("tr.del")).to_have_text(re.compile(r"^\s*6\s*-line 6\s*$"))
        await expect(edit.locator("tr.ctx td.text")).to_have_count(6)
        await expect(edit.locator("tr.ctx").first).to_have_text(re.compile(r"^\s*3\s*3\s*line 3"))
        gone = cards["d1"]
        # Every entry that goes, the directory itself first (issue 26).
        await expect(gone.locator(".kind-delete")).to_contain_text("deletes 3 entries")
        await expect(gone.locator("ul.deleted li")).to_have_text(
            ["/build/", "/build/a.o", "/build/b.o"]
        )
        run = cards["x1"]
        await expect(run.locator("pre.command")).to_have_text("ls docs")
        await expect(run.locator("code.cwd")).to_have_text(str(root))
        await expect(run.locator(".rule")).to_have_text("commands run on the shared host")
        run_id = handle.result_run_id
        for name, one in cards.items():
            await expect(one.locator(".task")).to_have_text("Tidy the repository")
            await expect(one.locator(".assistant")).to_have_text(
                "I'll update the docs, then tidy up."
            )
            await expect(one.locator(".countdown")).to_have_text(re.compile(r"^1[45]m \d+s left$"))
            await expect(one.locator(".on-timeout")).to_have_text("escalated")
            link = await one.locator("a.web-link").get_attribute("href")
            assert link == f"{WEB_UI}/namespaces/default/workflows/{handle.id}/{run_id}/history"
            await one.screenshot(path=str(SHOTS / f"card-{name}.png"))
        await page.screenshot(path=str(SHOTS / "all-kinds.png"), full_page=True)

        for key in ("w-old", "w-new", "e1"):
            await cards[key].locator("button[data-decision=approve]").click()
            await expect(cards[key].locator(".decision")).to_contain_text(
                f"approved by {REVIEWER}", timeout=20_000
            )
        await gone.locator("header .tool").click()  # select it, then the shortcut r
        await expect(gone).to_have_class(re.compile(r"\bselected\b"))
        await page.keyboard.press("r")
        await expect(gone.locator("input[name=reason]")).to_be_focused()
        await page.keyboard.type("keep the build")
        await page.keyboard.press("Enter")  # Enter in the reason box rejects
        await expect(gone.locator(".decision")).to_contain_text(
            f"rejected by {REVIEWER}", timeout=20_000
        )
        await run.locator("input[name=message]").fill("no need, the docs are listed above")
        await run.locator("button[data-decision=respond]").click()
        await expect(run.locator(".decision")).to_contain_text(
            f"answered by {REVIEWER}", timeout=20_000
        )
        result = await asyncio.wait_for(handle.result(), 30)
        assert not problems, problems
    out = tool_results(result)
    assert (root / "docs" / "old.md").read_text() == "title\nnew body\nend\n"
    assert (root / "docs" / "new.md").read_text() == "hello\nworld\n"
    assert (root / "src" / "app.py").read_text() == APP.replace("line 6\n", "line six\n")
    assert (root / "build" / "a.o").exists() and "keep the build" in out["d1"]["content"]
    assert out["x1"]["content"].endswith("answered it instead]\nno need, the docs are listed above")


async def test_edit_through_the_form_with_keyboard_and_recent_decisions(
    ui_url: str, temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    async with (
        agent_stack(temporal_client, root, tmp_path / "journal") as agents,
        reviewer_page(ui_url) as (page, problems),
    ):
        handle = await agents.start(
            write_call("w1", "/docs/a.md", "first draft\n"), write_call("w2", "/docs/b.md", "b\n")
        )
        by_call = {a.tool_call_id: a for a in await pending(handle, 2)}
        first, second = (
            card(page, handle.id, by_call["w1"].id),
            card(page, handle.id, by_call["w2"].id),
        )
        await expect(first).to_be_visible(timeout=20_000)
        await expect(second).to_be_visible(timeout=20_000)
        await expect(page.locator("#help")).to_contain_text("next / previous card")
        order = await page.locator(".card[data-id]").evaluate_all("cs => cs.map(c => c.dataset.id)")
        target = first if order[0] == by_call["w1"].id else second
        other = second if target is first else first

        await page.locator("body").press("j")  # select the first card
        await expect(page.locator(".card.selected")).to_have_count(1)
        if target is not first:
            await page.locator("body").press("j")
        target = page.locator(".card.selected")
        await page.keyboard.press("e")  # opens the form, focus in the first field
        await expect(target.locator("details.edit")).to_have_attribute("open", "")
        content = target.locator("textarea[data-arg=content]")
        await expect(content).to_have_value(re.compile(r"^(first draft|b)\n$"))
        edited = "reviewed draft\nwith a second line\n"
        await content.fill(edited)
        send = target.locator("button[data-decision=edit]")
        await expect(send).to_be_disabled()  # the edited change must be seen first
        await target.locator("button[data-action=edit-preview]").click()
        shown = target.locator(".edit-preview")
        await expect(shown).to_contain_text(
            "your changes to the proposed content (changed: content)"
        )
        await expect(shown.locator("tr.add td.text")).to_have_text(
            ["+reviewed draft", "+with a second line"]
        )
        await target.screenshot(path=str(SHOTS / "edit-form.png"))
        await send.click()
        await expect(target.locator(".decision")).to_contain_text(f"edited by {REVIEWER} via ui")
        edited_id = await target.get_attribute("data-id")

        await page.locator("body").press("j")  # the next undecided card
        await expect(other).to_have_class(re.compile(r"\bselected\b"))
        await page.keyboard.press("a")
        await expect(other.locator(".decision")).to_contain_text(f"approved by {REVIEWER} via ui")
        result = await asyncio.wait_for(handle.result(), 30)

        await page.locator("#tab-decided").click()
        rows = page.locator(f'#decided tr.decision-row[data-workflow="{handle.id}"]')
        await expect(rows).to_have_count(2, timeout=15_000)
        await expect(rows.locator(".who")).to_have_text([f"{REVIEWER} via ui"] * 2)
        edited_row = page.locator(f'#decided tr[data-id="{edited_id}"]')
        await expect(edited_row.locator(".outcome")).to_have_text("edit")
        await page.screenshot(path=str(SHOTS / "recent-decisions.png"), full_page=True)
        assert not problems, problems
    out = tool_results(result)
    edited_call = next(k for k, a in by_call.items() if a.id == edited_id)
    names = {"w1": ("a.md", "first draft\n"), "w2": ("b.md", "b\n")}
    kept_name, kept = names["w2" if edited_call == "w1" else "w1"]
    assert (root / "docs" / names[edited_call][0]).read_text() == edited
    assert (root / "docs" / kept_name).read_text() == kept
    assert sum("reviewer changed" in m["content"] for m in out.values()) == 1


async def test_a_file_changed_since_its_preview(
    ui_url: str, temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "c.md").write_text("v1\n")
    async with (
        agent_stack(temporal_client, root, tmp_path / "journal") as agents,
        reviewer_page(ui_url) as (page, problems),
    ):
        handle = await agents.start(write_call("w1", "/docs/c.md", "v2\n"))
        [approval] = await pending(handle, 1)
        one = card(page, handle.id, approval.id)
        await expect(one.locator("tr.del td.text")).to_have_text("-v1", timeout=20_000)
        (root / "docs" / "c.md").write_text("v1 and a later change\n")
        await one.locator("button[data-decision=approve]").click()
        # The answer line says it at once, but a refresh may already have swapped
        # in the fresh card, whose note is what lasts: wait for that.
        await expect(one.locator(".changed-note")).to_be_visible()
        await expect(one.locator(".changed-note")).to_contain_text("nothing ran")
        # The fresh preview replaces the card, which says why.
        await expect(one.locator("tr.del td.text")).to_have_text(
            "-v1 and a later change", timeout=10_000
        )
        await expect(one.locator(".changed-note")).to_be_visible()
        await one.screenshot(path=str(SHOTS / "changed-since-preview.png"))
        assert (root / "docs" / "c.md").read_text() == "v1 and a later change\n"  # nothing ran
        await one.locator("button[data-decision=approve]").click()
        await expect(one.locator(".decision")).to_contain_text(
            f"approved by {REVIEWER}", timeout=20_000
        )
        await asyncio.wait_for(handle.result(), 30)
        assert not problems, problems
    assert (root / "docs" / "c.md").read_text() == "v2\n"


@pytest.mark.timing
async def test_a_stuck_workflow_does_not_delay_the_page(
    ui_url: str, temporal_client: Client, tmp_path: Path
) -> None:
    stuck, _ = await stopped_worker_approval(temporal_client, tmp_path)
    async with (
        agent_stack(temporal_client, tmp_path / "ws", tmp_path / "journal") as agents,
        async_playwright() as pw,
    ):
        handle = await agents.start(write_call("w1", "/docs/fine.md", "fine\n"))
        [approval] = await pending(handle, 1)
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            await page.goto(f"{ui_url}?token={TOKEN}")
            started = time.monotonic()
            await page.goto(ui_url, wait_until="load")
            took = time.monotonic() - started
            healthy = card(page, handle.id, approval.id)
            await expect(healthy).to_be_visible(timeout=100)  # in the first HTML already
            assert took < 1.0, f"the page took {took:.2f} s with a stuck workflow"
            late = page.locator(f'.card[data-key="unreachable/{stuck}"]')
            await expect(late).to_contain_text("did not answer in 1.5 s", timeout=10_000)
            await page.screenshot(path=str(SHOTS / "stuck-workflow.png"), full_page=True)
        finally:
            await browser.close()
        await handle.terminate("test over")
    await temporal_client.get_workflow_handle(stuck).terminate("test over")
