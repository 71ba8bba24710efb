"""The approval web UI (cli/ui/app.py) against real agent workflows.

Starlette's TestClient drives the app (on its own thread and event loop, as a
server would run it) while an agent worker and a Filesystem tools worker run
in the test's loop on the session Temporal server. Blocking TestClient calls go
through ``asyncio.to_thread`` so the workers keep polling meanwhile.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient
from temporalio.client import Client

from filegate.cli.ui.app import PREVIEW_LIMIT, describe_rule, preview
from filegate.devstack.servers import TemporalDevServer, is_listening
from tests.ui_support import (
    REVIEWER,
    agent_stack,
    edit_call,
    free_port,
    tool_results,
    write_call,
)

pytestmark = pytest.mark.services

CLI = [sys.executable, "-m", "filegate"]
"""The command line as users run it (``python -m filegate`` is the ``filegate`` script)."""


async def get(ui: TestClient, url: str) -> Any:
    response = await asyncio.to_thread(ui.get, url)
    assert response.status_code == 200, response.text
    return response


async def post_decision(ui: TestClient, **body: Any) -> tuple[int, dict[str, Any]]:
    response = await asyncio.to_thread(ui.post, "/api/decide", json=body)
    return response.status_code, response.json()


async def listed(ui: TestClient, workflow_id: str, count: int) -> list[dict[str, Any]]:
    """Poll the JSON endpoint until ``workflow_id`` shows ``count`` approvals."""
    deadline = time.monotonic() + 30
    while True:
        items = (await get(ui, "/api/approvals")).json()
        mine = [a for a in items if a["workflow_id"] == workflow_id]
        if len(mine) == count:
            return mine
        assert time.monotonic() < deadline, f"expected {count} approvals, last saw {mine}"
        await asyncio.sleep(0.2)


# --------------------------------------------------------------------------- pure parts


def test_preview_edit_is_a_unified_diff_of_the_strings() -> None:
    shown = preview(
        "edit_file",
        {"file_path": "/a.py", "old_string": "x = 1\ny = 2", "new_string": "x = 1\ny = 3"},
    )
    assert shown is not None and shown["kind"] == "diff" and not shown["replace_all"]
    lines = shown["text"].splitlines()
    assert lines[:2] == ["--- /a.py (old_string)", "+++ /a.py (new_string)"]
    assert lines[2].startswith("@@") and lines[3:] == [" x = 1", "-y = 2", "+y = 3"]
    every = preview(
        "edit_file", {"file_path": "/a", "old_string": "a", "new_string": "b", "replace_all": True}
    )
    assert every is not None and every["replace_all"]


def test_preview_write_shows_content_and_clips_huge_text() -> None:
    small = preview("write_file", {"file_path": "/n.md", "content": "# hi\n"})
    assert small == {"kind": "content", "text": "# hi\n", "clipped": False}
    big = preview("write_file", {"file_path": "/n.md", "content": "z" * (PREVIEW_LIMIT + 5)})
    assert big is not None and big["clipped"] and len(big["text"]) == PREVIEW_LIMIT
    assert preview("delete", {"file_path": "/docs"}) is None
    assert preview("ls", {"path": "/"}) is None


def test_describe_rule() -> None:
    rule = {"operations": ["write"], "paths": ["/docs/**"], "mode": "interrupt", "index": 0}
    assert describe_rule(rule) == "#1 interrupt write on /docs/**"
    assert describe_rule(None) == "(no rule recorded)"


# --------------------------------------------------------------------------- against Temporal


async def test_lists_approvals_and_decides_through_the_update(
    ui: TestClient, temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "b.py").write_text("x = 1\ny = 2\n")
    read_b = {
        "tool_calls": [{"id": "r0", "name": "read_file", "args": {"file_path": "/docs/b.py"}}]
    }
    async with agent_stack(temporal_client, root, tmp_path / "journal") as agents:
        handle = await agents.start(
            write_call("w1", "/docs/a.md", "alpha\n<b>beta</b>\n"),
            edit_call("e1", "/docs/b.py", "x = 1\ny = 2\n", "x = 1\ny = 3\n"),
            before=(read_b,),  # an edit of an unread file is refused before anyone is asked
        )
        wf = handle.id
        items = {a["tool"]: a for a in await listed(ui, wf, 2)}
        write, edit = items["write_file"], items["edit_file"]
        assert write["rule"]["mode"] == "interrupt" and write["rule"]["paths"] == ["/docs/**"]
        assert write["rule_text"] == "permission rule #1: write /docs/** -> interrupt"
        shown = write["card_preview"]
        if shown["source"] == "args":  # a workflow without computed previews
            assert shown["text"] == "alpha\n<b>beta</b>\n"
        else:  # the tools worker's: a new file, every line added
            assert shown["kind"] == "new_file"
            assert [r["text"] for r in shown["rows"] if r["cls"] == "add"] == [
                "+alpha",
                "+<b>beta</b>",
            ]
        shown = edit["card_preview"]
        if shown["source"] == "worker":
            assert shown["kind"] == "edit" and not shown["error"]
        edit_rows = [(r["cls"], r["text"]) for r in shown["rows"]]
        assert ("del", "-y = 2") in edit_rows and ("add", "+y = 3") in edit_rows

        page = (await get(ui, "/")).text
        assert f'data-key="{wf}/{write["id"]}"' in page and f'data-key="{wf}/{edit["id"]}"' in page
        assert "permission rule #1: write /docs/** -&gt; interrupt" in page
        assert '<td class="text">-y = 2</td>' in page and '<td class="text">+y = 3</td>' in page
        assert "&lt;b&gt;beta&lt;/b&gt;" in page and "<b>beta</b>" not in page  # escaped
        fragment = (await get(ui, "/fragment")).text
        assert fragment.count('class="card"') >= 2 and "<html" not in fragment

        # Refusals come back with the workflow validator's own message.
        code, body = await post_decision(ui, workflow_id=wf, id="a99", decision="approve")
        assert code == 409 and not body["ok"]
        assert "no pending approval with id 'a99'" in body["error"]
        code, body = await post_decision(
            ui, workflow_id=wf, id=write["id"], decision="edit",
            args={"file_path": "/docs/../../etc/passwd", "content": "x"},
        )  # fmt: skip
        assert code == 409 and "edited args refused" in body["error"]
        code, body = await post_decision(ui, workflow_id=wf, id=write["id"], decision="maybe")
        assert code == 400 and "decision" in body["error"]
        code, body = await post_decision(ui, id=write["id"], decision="approve")
        assert code == 400 and "workflow_id" in body["error"]
        bad_json = await asyncio.to_thread(
            ui.post, "/api/decide", content=b"{nope", headers={"Content-Type": "application/json"}
        )
        assert bad_json.status_code == 400 and "JSON" in bad_json.json()["error"]
        code, body = await post_decision(
            ui, workflow_id="ui-no-such-wf", id="a1", decision="approve"
        )
        assert code == 404 and "ui-no-such-wf" in body["error"]
        assert not (root / "docs" / "a.md").exists()  # nothing ran on a refusal

        code, body = await post_decision(ui, workflow_id=wf, id=write["id"], decision="approve")
        assert code == 200 and body["ok"], body
        assert body["ack"] == {
            **body["ack"], "id": write["id"], "decision": "approve", "reviewer": REVIEWER,
            "via": "ui",
        }  # fmt: skip
        assert not body["changed"] and not body["ack"].get("changed_since_preview")
        assert body["message"] == f"approve: approval {write['id']} of {wf} (by {REVIEWER} via ui)"
        code, body = await post_decision(
            ui, workflow_id=wf, id=edit["id"], decision="reject", reviewer="mallory"
        )
        assert code == 400 and "reviewer" in body["error"]  # identity is the login's
        code, body = await post_decision(
            ui, workflow_id=wf, id=edit["id"], decision="reject", reason="not this file"
        )
        assert code == 200 and body["ok"], body
        code, body = await post_decision(ui, workflow_id=wf, id=write["id"], decision="approve")
        assert code in (404, 409) and write["id"] in body["error"]  # decided (or finished)

        result = await asyncio.wait_for(handle.result(), 30)
    out = tool_results(result)
    assert out["w1"]["status"] == "success"
    assert f"approved by {REVIEWER} via ui" in out["w1"]["content"]
    assert (root / "docs" / "a.md").read_text() == "alpha\n<b>beta</b>\n"
    assert out["e1"]["status"] == "error"
    assert "rejected" in out["e1"]["content"] and "not this file" in out["e1"]["content"]
    assert f"({REVIEWER} via ui)" in out["e1"]["content"]
    assert result.stop_reason == "final_answer" and result.approvals == 2
    await listed(ui, wf, 0)


async def test_respond_and_edit_from_the_ui(
    ui: TestClient, temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    async with agent_stack(temporal_client, root, tmp_path / "journal") as agents:
        handle = await agents.start(
            write_call("w1", "/docs/one.md", "one"), write_call("w2", "/docs/two.md", "two")
        )
        by_path = {a["args"]["file_path"]: a for a in await listed(ui, handle.id, 2)}
        code, body = await post_decision(
            ui, workflow_id=handle.id, id=by_path["/docs/one.md"]["id"], decision="respond",
            message="skip it, already written",
        )  # fmt: skip
        assert code == 200 and body["ok"], body
        code, body = await post_decision(
            ui, workflow_id=handle.id, id=by_path["/docs/two.md"]["id"], decision="edit",
            args={"file_path": "/docs/two.md", "content": "two, reviewed"},
        )  # fmt: skip
        assert code == 200 and body["ok"], body
        result = await asyncio.wait_for(handle.result(), 30)
    out = tool_results(result)
    assert out["w1"]["status"] == "success"
    assert out["w1"]["content"].endswith(
        "(ana via ui) answered it instead]\nskip it, already written"
    )
    assert not (root / "docs" / "one.md").exists()
    assert out["w2"]["status"] == "success" and "reviewer changed" in out["w2"]["content"]
    assert f"edited by {REVIEWER} via ui" in out["w2"]["content"]
    assert (root / "docs" / "two.md").read_text() == "two, reviewed"


async def test_empty_page(ui: TestClient) -> None:
    page = (await get(ui, "/")).text
    assert "<title>Filegate approvals</title>" in page and "No pending approvals." in page
    assert 'data-refresh-ms="2000"' in page
    assert '<script src="static/approvals.js" defer></script>' in page
    assert "<script>" not in page  # CSP allows no inline script
    script = (await get(ui, "/static/approvals.js")).text
    assert "setInterval(refresh, refreshMs)" in script and '"X-CSRF-Token": csrfToken' in script
    assert "http://" not in page.replace("http://www.w3.org", "")  # no external assets


def test_filegate_ui_command_serves_the_page(temporal_server: TemporalDevServer) -> None:
    """``filegate ui`` as a real process: prints a login URL with a fresh random token,
    serves the page only to its holder, refuses a busy port and a short token."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FILEGATE_", "TEMPORAL_"))}
    env.update(
        TEMPORAL_ADDRESS=temporal_server.address, TEMPORAL_NAMESPACE=temporal_server.namespace
    )
    command = [*CLI, "ui", "--port", str(port)]
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while not is_listening("127.0.0.1", port):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "filegate ui did not start listening"
            time.sleep(0.1)
        assert proc.stdout is not None
        first = proc.stdout.readline()
        prefix = f"filegate ui: http://127.0.0.1:{port}/?token="
        assert first.startswith(prefix), first
        token = first.removeprefix(prefix).split()[0]
        assert len(token) >= 32
        base = f"http://127.0.0.1:{port}/"
        assert httpx.get(base, timeout=10).status_code == 401
        with httpx.Client(base_url=base, timeout=10) as browser:
            page = browser.get("/", params={"token": token}, follow_redirects=True)
            assert page.status_code == 200 and "<title>Filegate approvals</title>" in page.text
            assert browser.get("/api/approvals").json() is not None
        bearer = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{base}api/approvals", headers=bearer, timeout=10).status_code == 200
        busy = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
        assert busy.returncode == 2 and "already in use" in busy.stderr
        short = {**env, "FILEGATE_UI_TOKEN": "short"}
        weak = subprocess.run(command, env=short, capture_output=True, text=True, timeout=30)
        assert weak.returncode == 2 and "at least 16 characters" in weak.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)
    # Ctrl-C: uvicorn shuts down, then re-raises the signal; the CLI's usual 130.
    assert proc.returncode == 130 and "interrupted" in err, err
    assert token not in out and token not in err  # printed once, at start
