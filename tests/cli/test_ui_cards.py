"""What an approval card shows (cli/ui/cards.py, the card templates): no services.

Each card kind is rendered from the records the workflow sends
(``PendingApproval`` with a ``ChangePreview``, built through the real models)
through the real templates, and the HTML is read back: line numbers of a
diff, a new file shown as such, a delete as its list, an execute as command
and working directory, the ``interrupt_on`` description instead of ``? on``.
"""

from __future__ import annotations

import html
import re
import sys
import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Any

from filegate.cli.ui.app import _TEMPLATES
from filegate.cli.ui.cards import (
    card_preview,
    diff_rows,
    edit_fields,
    edited_preview,
    enrich,
    enrich_decision,
    page_json,
    version_of,
    visible,
    web_link,
    why_text,
)
from filegate.kernel.previews import ChangePreview
from filegate.workflows.inputs import PendingApproval

EDIT_DIFF = """--- a/src/app.py
+++ b/src/app.py
@@ -4,3 +4,3 @@
 def main():
-    return 1
+    return 2
 # end
"""


def approval(tool: str, args: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A listed approval as the listing returns it: the workflow's record + ids."""
    record = PendingApproval(
        id="0123456789abcdef",
        tool=tool,
        args=args,
        rule=fields.pop("rule", None),
        requested_at="2026-12-01T10:00:00+00:00",
        tool_call_id="c1",
        **fields,
    )
    return {
        **record.model_dump(mode="json"),
        "workflow_id": "wf-1",
        "run_id": "run-1",
        "workflow_type": "AgentWorkflow",
    }


def render(*approvals: dict[str, Any], web: str | None = None) -> str:
    cards = [enrich(a, web, "default") for a in approvals]
    return _TEMPLATES.get_template("approval_cards.html").render(approvals=cards, unreachable=[])


def text_of(page: str) -> str:
    """The visible text, tags dropped and entities decoded, whitespace squeezed."""
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))
    return re.sub(r" ([:,])", r"\1", text)


def test_diff_rows_carry_the_files_line_numbers() -> None:
    rows = diff_rows(EDIT_DIFF)
    assert [r["cls"] for r in rows] == ["meta", "meta", "hunk", "ctx", "del", "add", "ctx"]
    assert [(r["old"], r["new"]) for r in rows[3:]] == [(4, 4), (5, ""), ("", 5), (6, 6)]
    # After a hunk began, "---" is a removed line starting with "--", not a header.
    assert diff_rows("@@ -1 +1 @@\n--- x\n+++ y\n")[1:] == [
        {"text": "--- x", "old": 1, "new": "", "cls": "del"},
        {"text": "+++ y", "old": "", "new": 1, "cls": "add"},
    ]


def test_edit_card_shows_numbered_coloured_diff() -> None:
    shown = ChangePreview(kind="edit", path="/src/app.py", diff=EDIT_DIFF, fingerprint="f1")
    page = render(approval("edit_file", {"file_path": "/src/app.py"}, preview=shown))
    assert "edit of <code>/src/app.py</code>" in page
    assert (
        '<tr class="del"><td class="no">5</td><td class="no"></td>'
        '<td class="text">-    return 1</td></tr>' in page
    )
    assert (
        '<tr class="add"><td class="no"></td><td class="no">5</td>'
        '<td class="text">+    return 2</td></tr>' in page
    )


def test_new_file_and_overwrite_are_told_apart() -> None:
    new = ChangePreview(
        kind="new_file", path="/n.md", diff="--- /dev/null\n+++ b/n.md\n@@ -0,0 +1 @@\n+hi\n"
    )
    over = ChangePreview(kind="overwrite", path="/o.md", diff="@@ -1 +1 @@\n-old\n+new\n")
    page = text_of(
        render(
            approval("write_file", {"file_path": "/n.md", "content": "hi\n"}, preview=new),
            approval("write_file", {"file_path": "/o.md", "content": "new\n"}, preview=over),
        )
    )
    assert "new file /n.md:" in page and "overwrites the existing file /o.md:" in page


def test_delete_lists_what_goes_and_execute_shows_command_and_cwd() -> None:
    gone = ChangePreview(kind="delete", path="/build", deleted=["/build/a.o", "/build/b.o"])
    run = ChangePreview(kind="execute", command="make test", cwd="/work")
    page = render(
        approval("delete", {"file_path": "/build"}, preview=gone),
        approval("execute", {"command": "make test"}, preview=run),
    )
    assert "deletes 2 entries under <code>/build</code>" in page
    assert (
        '<ul class="deleted"><li><code>/build/a.o</code></li><li><code>/build/b.o</code></li></ul>'
        in page
    )
    assert (
        '<pre class="command">make test</pre>' in page and '<code class="cwd">/work</code>' in page
    )


def test_without_a_computed_preview_the_arguments_are_shown() -> None:
    old = approval("execute", {"command": "ls -la"}, cwd="/ws")
    shown = card_preview(old)
    assert shown is not None
    assert shown == {
        **shown,
        "kind": "execute",
        "command": "ls -la",
        "cwd": "/ws",
        "source": "args",
    }
    edit = card_preview(
        approval("edit_file", {"file_path": "/a", "old_string": "x", "new_string": "y"})
    )
    assert edit is not None and edit["kind"] == "diff" and edit["source"] == "args"
    failed = ChangePreview(kind="unavailable", path="/a", error="the tools worker is down")
    page = text_of(
        render(approval("write_file", {"file_path": "/a", "content": "<b>z</b>"}, preview=failed))
    )
    assert "no preview: the tools worker is down" in page and "content to write: <b>z</b>" in page


def test_interrupt_on_description_replaces_the_rule_text() -> None:
    rule = {
        "source": "interrupt_on",
        "tool": "execute",
        "always": True,
        "description": "commands touch the shared cache",
    }
    assert (
        why_text(approval("execute", {"command": "x"}, rule=rule))
        == "commands touch the shared cache"
    )
    bare = {"source": "interrupt_on", "tool": "execute", "always": True}
    assert "?" not in why_text(approval("execute", {"command": "x"}, rule=bare))
    told = approval("execute", {"command": "x"}, rule=rule, description="the workflow's own words")
    assert why_text(told) == "the workflow's own words"
    page = text_of(render(approval("execute", {"command": "x"}, rule=rule)))
    assert "why commands touch the shared cache" in page and "rule: ?" not in page


def test_context_countdown_outcome_and_web_link() -> None:
    due = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    a = approval(
        "write_file",
        {"file_path": "/docs/a", "content": "x"},
        task="Fix the docs",
        assistant_text="I will now write the file.",
        timeout_at=due,
        on_timeout="escalate",
    )
    page = render(a, web="http://127.0.0.1:8233/")
    assert '<dd class="task">Fix the docs</dd>' in page
    assert '<dd class="assistant">I will now write the file.</dd>' in page
    assert f'data-deadline="{due}"' in page and '<b class="on-timeout">escalated</b>' in page
    assert 'href="http://127.0.0.1:8233/namespaces/default/workflows/wf-1/run-1/history"' in page
    assert "no timeout" in render(
        approval("ls", {"path": "/"})
    ) and "Temporal Web UI" not in render(approval("ls", {"path": "/"}))
    assert (
        web_link("http://h/", "n s", "a/b", None)
        == "http://h/namespaces/n%20s/workflows/a%2Fb/history"
    )


def test_edit_form_has_one_field_per_argument_with_real_newlines() -> None:
    fields = edit_fields(
        {
            "file_path": "/a.md",
            "content": "one\ntwo",
            "replace_all": True,
            "limit": 3,
            "paths": ["x"],
        }
    )
    kinds = {f["name"]: f["kind"] for f in fields}
    assert kinds == {
        "file_path": "text",
        "content": "textarea",
        "replace_all": "bool",
        "limit": "number",
        "paths": "json",
    }
    page = render(approval("write_file", {"file_path": "/a.md", "content": "one\ntwo <i>"}))
    assert (
        '<textarea data-arg="content" data-type="str" rows="3" spellcheck="false">'
        "one\ntwo &lt;i&gt;</textarea>" in page
    )
    assert "\\n" not in page.split('data-arg="content"')[1].split("</textarea>")[0]


def test_edited_preview_shows_what_the_reviewer_changed() -> None:
    shown = edited_preview(
        "write_file",
        {"file_path": "/a", "content": "one\ntwo\n"},
        {"file_path": "/a", "content": "one\n2\n"},
    )
    assert shown["changed"] == ["content"]
    assert [(r["cls"], r["text"]) for r in shown["rows"] if r["cls"] in ("add", "del")] == [
        ("del", "-two"),
        ("add", "+2"),
    ]
    edit = edited_preview(
        "edit_file", {"old_string": "a", "new_string": "b"}, {"old_string": "a", "new_string": "c"}
    )
    assert ("add", "+c") in [(r["cls"], r["text"]) for r in edit["rows"]]
    other = edited_preview("execute", {"command": "ls"}, {"command": "ls -l"})
    assert other["changed"] == ["command"] and "arguments" in other["label"]


def test_version_changes_with_a_fresh_preview() -> None:
    one = approval(
        "write_file", {"file_path": "/a"}, preview=ChangePreview(kind="overwrite", fingerprint="1")
    )
    two = approval(
        "write_file", {"file_path": "/a"}, preview=ChangePreview(kind="overwrite", fingerprint="2")
    )
    assert version_of(one) != version_of(two) and version_of(one) == version_of(dict(one))


def test_decision_rows() -> None:
    row = enrich_decision(
        {
            "workflow_id": "w",
            "run_id": "r",
            "tool": "write_file",
            "path": "/a",
            "decision": "approve",
            "reviewer": "ana",
            "via": "ui",
            "decided_at": "2026-12-01T10:00:00+00:00",
        },
        "http://t",
        "default",
    )
    assert row["what"] == "write_file /a" and row["web_link"].endswith("/workflows/w/r/history")
    page = _TEMPLATES.get_template("decided.html").render(decisions=[row], unreachable=[])
    assert "ana" in page and "approve" in page and "No decisions yet." not in page


def test_closed_workflows_without_workers_are_one_line() -> None:
    """A finished ``filegate run`` takes its workers with it: its decisions cannot be
    queried; many such runs make one summary line, a running one keeps its own."""
    late = [
        {"workflow_id": f"done-{n}", "reason": "is closed and no worker replays it", "closed": True}
        for n in range(3)
    ] + [{"workflow_id": "live", "reason": "did not answer in 1.5 s", "closed": False}]
    page = text_of(_TEMPLATES.get_template("decided.html").render(decisions=[], unreachable=late))
    assert page.count("could not be asked") == 1 and "3 recently closed workflows" in page
    assert "workflow live did not answer in 1.5 s: its decisions are not shown" in page


def test_an_escalated_approval_says_so() -> None:
    page = render(approval("write_file", {"file_path": "/a", "content": "x"}, escalated=True))
    assert '<span class="badge escalated">escalated</span>' in page
    assert "escalated" not in render(approval("write_file", {"file_path": "/a", "content": "x"}))


def test_every_control_format_and_separator_character_is_spelled_out() -> None:
    """The hidden set, checked against this Python's Unicode database: every Cc,
    Cf, Cs, Zl and Zp code point is shown (tab and newline only off layout)."""
    hidden = [
        chr(cp)
        for cp in range(sys.maxunicode + 1)
        if unicodedata.category(chr(cp)) in ("Cc", "Cf", "Cs", "Zl", "Zp")
    ]
    text = "".join(hidden)
    laid_out = visible(text)
    assert laid_out == "".join(c if c in "\t\n" else f"\u27e8U+{ord(c):04X}\u27e9" for c in hidden)
    assert "\t" not in visible(text, layout=False) and "\n" not in visible(text, layout=False)
    for extra in ("\u3164", "\ufe0f", "\U000e0041", "\u034f"):  # fillers, selectors, tags
        assert visible(extra) == f"\u27e8U+{ord(extra):04X}\u27e9"
    assert visible("plain text, ünïcödé, 日本語 and emoji \U0001f600") == (
        "plain text, ünïcödé, 日本語 and emoji \U0001f600"
    )


RLO = "\u202e"


def test_cards_spell_out_hidden_characters_but_the_form_keeps_the_bytes() -> None:
    """Paths, diffs, arguments, commands and ids show U+202E as ``⟨U+202E⟩``;
    the edit form and the data the script sends back are the call's own bytes."""
    diff = f"@@ -1 +1 @@\n-a\n+b{RLO}c\u2028-d\rx\n"
    edit = ChangePreview(kind="edit", path=f"/src/a{RLO}b.py", diff=diff, fingerprint="f")
    run = ChangePreview(kind="execute", command=f"echo {RLO}x", cwd=f"/w{RLO}")
    gone = ChangePreview(kind="delete", path="/b", deleted=[f"/b/x{RLO}\ny"])
    args = {"file_path": f"/src/a{RLO}b.py", "old_string": "a", "new_string": f"b{RLO}c"}
    page = render(
        approval("edit_file", args, preview=edit),
        approval("execute", {"command": f"echo {RLO}x"}, preview=run),
        approval("delete", {"file_path": "/b"}, preview=gone),
        approval("write_file", {"file_path": "/n\u200b.md", "content": f"{RLO}\x00"}),
    )
    shown = re.sub(r"<textarea[^>]*>.*?</textarea>|<[^>]*>", "", page, flags=re.S)
    assert RLO not in html.unescape(shown) and "\x00" not in shown
    assert "edit of <code>/src/a⟨U+202E⟩b.py</code>" in page
    # One row: U+2028 and a lone CR inside a line do not start rows of their own.
    assert '<td class="text">+b⟨U+202E⟩c⟨U+2028⟩-d⟨U+000D⟩x</td>' in page
    assert [r["cls"] for r in diff_rows(diff)] == ["hunk", "del", "add"]
    assert "echo ⟨U+202E⟩x" in page and "/w⟨U+202E⟩" in page
    assert "<code>/b/x⟨U+202E⟩⟨U+000A⟩y</code>" in page  # a newline in a path is shown
    assert "content to write:" in page and "⟨U+202E⟩⟨U+0000⟩" in page
    assert "/n⟨U+200B⟩.md" in page
    # What the script sends back stays exact.
    form = re.search(r'<textarea data-arg="new_string"[^>]*>(.*?)</textarea>', page, re.S)
    assert form and html.unescape(form.group(1)) == f"b{RLO}c"
    field = re.search(r'data-arg="file_path" data-type="str" value="([^"]*)"', page)
    assert field and html.unescape(field.group(1)) == f"/src/a{RLO}b.py"
    assert "contains invisible or control characters: U+202E" in page


def test_decided_rows_and_page_json_spell_hidden_characters_out() -> None:
    row = enrich_decision(
        {"workflow_id": f"wf{RLO}", "id": "1", "decision": "reject", "reviewer": f"bo{RLO}",
         "via": "ui", "reason": f"no{RLO}", "tool": "write_file", "path": f"/x{RLO}"}
    )  # fmt: skip
    page = _TEMPLATES.get_template("decided.html").render(decisions=[row], unreachable=[])
    shown = re.sub(r"<[^>]*>", "", page)
    assert RLO not in shown and "bo⟨U+202E⟩" in shown and "no⟨U+202E⟩" in shown
    assert f'data-workflow="wf{RLO}"' in page  # the row's key stays exact
    answer = page_json({"ok": False, "error": f"x{RLO}", "ack": {"reviewer": [f"y{RLO}", 1]}})
    assert answer == {"ok": False, "error": "x⟨U+202E⟩", "ack": {"reviewer": ["y⟨U+202E⟩", 1]}}


def test_a_delete_card_counts_what_it_cannot_list_and_names_the_preview_it_shows() -> None:
    gone = ChangePreview(
        kind="delete",
        path="/pub",
        deleted=["/pub/", "/pub/.env", "/pub/link"],
        deleted_links=["/pub/link"],
        deleted_more=7,
        deleted_hidden=3,
        fingerprint="sha256:abc",
    )
    page = render(approval("delete", {"file_path": "/pub"}, preview=gone))
    assert "deletes 13 entries under <code>/pub</code>" in page
    assert "<code>/pub/.env</code>" in page
    assert "<code>/pub/link</code> (symlink: the link goes, not its target)" in page
    assert "and 7 more" in page and "and 3 entries the rules hide" in page
    assert 'data-fingerprint="sha256:abc"' in page  # what an approve from this card names
    waiting = approval("write_file", {"file_path": "/a", "content": "x"}, preview=None)
    assert "data-fingerprint" not in render(waiting)


def test_a_held_connection_shows_host_port_command_and_cwd() -> None:
    """A ``connect`` approval (an interrupt network rule) says where the command
    connects, what the command is and where it runs; no edit makes sense of it."""
    asked = approval(
        "connect",
        {"host": "pypi.org", "port": 443, "command": "pip install <x>"},
        cwd="/workspace",
        description="network rule 1 (interrupt pypi.org): a command connects to pypi.org:443",
    )
    page = render(asked)
    assert '<code class="host">pypi.org:443</code>' in page
    assert '<pre class="command">pip install &lt;x&gt;</pre>' in page  # escaped
    assert '<code class="cwd">/workspace</code>' in page
    assert "a running command connects to" in text_of(page)


def test_no_pending_is_never_said_above_a_run_that_did_not_answer() -> None:
    """A run that does not answer may be waiting for a decision (the CLI exits 3 there):
    the page does not say "No pending approvals." above its card (issue 54)."""
    page = _TEMPLATES.get_template("approvals.html")
    silent = [{"workflow_id": "wf-stuck", "reason": "did not answer in 1.5 s", "waiting": False}]
    context: dict[str, Any] = {"timeout": 1.5, "refresh_ms": 3000, "csrf_token": "t" * 32}
    quiet = page.render(approvals=[], unreachable=silent, **context)
    assert '<p id="empty" hidden>' in quiet and 'data-key="unreachable/wf-stuck"' in quiet
    nothing = page.render(approvals=[], unreachable=[], **context)
    assert '<p id="empty">No pending approvals.</p>' in nothing
