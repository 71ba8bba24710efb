"""What one approval card shows: the change, the context, the edit form.

Pure functions over the listing's records (no Temporal, no web framework), so
every card kind is testable without a browser. The preview comes from the
workflow (``PendingApproval.preview``, computed by a read-only activity on the
tools worker, with real line numbers); a workflow that sends none (older
workers, other workflow types) gets the preview the arguments alone allow:
``old_string`` against ``new_string``, or the content to be written. The UI
itself never reads the agent's workspace.

What the model wrote reaches the reviewer through :func:`visible`: a control
character or an invisible formatting one (a bidi override such as U+202E, a
zero-width space, a BOM, a tag character) is shown as its code point,
``⟨U+202E⟩``, instead of being rendered raw, so a diff, a path or an argument
cannot read differently from its bytes. It is applied in one place per
output: the templates' ``finalize`` (every ``{{ }}``; :class:`Raw` marks the
few values that must stay bytes-exact, such as edit-form values and data
attributes the script sends back) and :func:`page_json` for the JSON the
page's script displays. Diff rows are split on ``\\n`` only: a U+2028 or a lone
CR inside a line stays on that line's row, spelled out, instead of starting a
row of its own (unnumbered, unmarked, and shifting the line numbers after it).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from typing import Any
from urllib.parse import quote

from markupsafe import Markup

from filegate.kernel.registry import TOOLS
from filegate.kernel.wire import CONNECT_TOOL

PREVIEW_LIMIT = 20_000
"""Characters of a write's content or an edit's diff shown; history may hold more."""

MULTILINE_ARGS = frozenset({"content", "old_string", "new_string", "command"})
"""Arguments edited in a textarea (real newlines, not JSON ``\\n`` escapes)."""

PATH_ARGS = ("file_path", "path", "pattern", "command")

DIFF_KINDS = frozenset({"new_file", "overwrite", "edit"})
"""Computed preview kinds that carry a diff (none when the call would fail)."""

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")

_HIDDEN = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 but tab and newline, DEL, C1
    "\u00ad\u034f\u061c\u0600-\u0605\u06dd\u070f\u0890\u0891\u08e2"
    "\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164"  # zero-width, bidi, invisible
    "\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\ufffe\uffff\ud800-\udfff"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff"  # tags, variation selectors
)
"""Characters that render as nothing, or as something else than they are:
every control (Cc), format (Cf), separator (Zl, Zp) and surrogate (Cs)
character, plus invisible fillers and variation selectors (tests/cli/test_ui_cards.py
checks this against ``unicodedata``)."""
_HIDDEN_IN_TEXT = re.compile(f"[{_HIDDEN}]")
_HIDDEN_IN_LINE = re.compile(f"[{_HIDDEN}\t\n]")


def _mark(match: re.Match[str]) -> str:
    return f"\u27e8U+{ord(match[0]):04X}\u27e9"


def visible(text: str, *, layout: bool = True) -> str:
    """``text`` with every hidden character shown as ``⟨U+XXXX⟩``.

    ``layout`` keeps tab and newline (a diff line, a file's content, a
    command); without it they are shown too (a path, an id on one line).
    """
    return (_HIDDEN_IN_TEXT if layout else _HIDDEN_IN_LINE).sub(_mark, text)


def _hidden_marks(text: str) -> list[str]:
    """The hidden characters (but tab and newline) in ``text``, as ``U+XXXX``."""
    return sorted({f"U+{ord(c):04X}" for c in _HIDDEN_IN_TEXT.findall(text)})


class Raw(str):
    """A template value that must reach the page byte for byte (the ``raw``
    filter): an edit field's value or a data attribute the script sends back,
    where ``⟨U+202E⟩`` would silently change the call."""


def shown(value: Any) -> Any:
    """The templates' ``finalize``: every printed string made :func:`visible`.

    Markup is HTML a template already rendered (its values passed here), so
    it is left alone, and so is :class:`Raw`.
    """
    if isinstance(value, str) and not isinstance(value, Markup | Raw):
        return visible(value)
    return value


def oneline(value: Any) -> str:
    """The ``oneline`` filter: a path or id, with tab and newline shown too."""
    return visible(str(value), layout=False)


def page_json(value: Any) -> Any:
    """A JSON answer the page's script displays, every string :func:`visible`.

    Only for the answers the page shows (a decision, an edit preview);
    ``/api/approvals`` stays exact for scripts that need the bytes.
    """
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {k: page_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [page_json(v) for v in value]
    return value


def _lines(text: str) -> list[str]:
    """``text`` split after each ``\\n`` only, newlines kept (``str.splitlines``
    also splits at U+2028, a lone CR, a form feed and more, which the page
    would show as rows of their own)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


def _clip(text: str) -> tuple[str, bool]:
    if len(text) <= PREVIEW_LIMIT:
        return text, False
    return text[:PREVIEW_LIMIT], True


def _unified(old: str, new: str, before: str, after: str) -> str:
    lines = difflib.unified_diff(_lines(old), _lines(new), before, after, n=3)
    # difflib leaves the last line of a text without a newline unterminated.
    return "".join(ln if ln.endswith("\n") else ln + "\n" for ln in lines)


def preview(tool: str, args: dict[str, Any]) -> dict[str, Any] | None:
    """What a reviewer can see of a file change from the call's arguments alone.

    ``edit_file``: unified diff of old_string -> new_string; ``write_file``:
    the content to be written. Other tools: None (their arguments say it all).
    The fallback when the workflow sent no computed preview.
    """
    path = str(args.get("file_path", ""))
    if tool in TOOLS.editing:
        old, new = str(args.get("old_string", "")), str(args.get("new_string", ""))
        text, clipped = _clip(_unified(old, new, f"{path} (old_string)", f"{path} (new_string)"))
        return {
            "kind": "diff",
            "text": text,
            "clipped": clipped,
            "replace_all": bool(args.get("replace_all", False)),
        }
    if tool in TOOLS.writing:
        text, clipped = _clip(str(args.get("content", "")))
        return {"kind": "content", "text": text, "clipped": clipped}
    return None


def diff_rows(diff: str) -> list[dict[str, Any]]:
    """A unified diff as table rows: class, old and new line numbers, text.

    The numbers come from the ``@@ -a,b +c,d @@`` headers, so a preview
    computed against the file shows the file's own line numbers.
    """
    rows: list[dict[str, Any]] = []
    old_no = new_no = 0
    in_hunk = False  # later "---"/"+++" lines are removed/added content, not headers
    for line in (ln.removesuffix("\n") for ln in _lines(diff)):
        row: dict[str, Any] = {"text": line, "old": "", "new": ""}
        if line.startswith(("---", "+++")) and not in_hunk:
            row["cls"] = "meta"
        elif match := _HUNK.match(line):
            old_no, new_no, in_hunk = int(match[1]), int(match[2]), True
            row["cls"] = "hunk"
        elif line.startswith("+"):
            row.update(cls="add", new=new_no)
            new_no += 1
        elif line.startswith("-"):
            row.update(cls="del", old=old_no)
            old_no += 1
        elif line.startswith("\\"):
            row["cls"] = "meta"  # "\ No newline at end of file"
        else:
            row.update(cls="ctx", old=old_no, new=new_no)
            old_no, new_no = old_no + 1, new_no + 1
        rows.append(row)
    return rows


def describe_rule(rule: dict[str, Any] | None) -> str:
    if not rule:
        return "(no rule recorded)"
    ops = ", ".join(rule.get("operations", []))
    paths = ", ".join(rule.get("paths", []))
    index = f"#{rule['index'] + 1} " if isinstance(rule.get("index"), int) else ""
    return f"{index}{rule.get('mode', '?')} {ops} on {paths}"


def why_text(approval: dict[str, Any]) -> str:
    """Why the call waits: the workflow's description, else the rule described.

    An ``interrupt_on`` trigger has no permission rule (no mode, operations or
    paths: described as a rule it read ``? on``); its description is what the
    operator wrote, and is what the reviewer needs.
    """
    if approval.get("description"):
        return str(approval["description"])
    rule = approval.get("rule")
    if rule and rule.get("description"):  # the trigger's own line (workflows/gate.py)
        return str(rule["description"])
    if rule and (rule.get("paths") or rule.get("operations")):
        return "rule " + describe_rule(rule)
    if rule and rule.get("source") == "interrupt_on":
        return f"interrupt_on[{rule.get('tool') or approval.get('tool')}]"
    if rule and rule.get("mode"):
        return f"{rule['mode']} for {approval.get('tool')}"
    return describe_rule(rule)


def card_preview(approval: dict[str, Any]) -> dict[str, Any] | None:
    """The change to show: the workflow's computed preview, else the args fallback.

    Shape: ``kind`` (``new_file``, ``overwrite``, ``edit``, ``delete``,
    ``execute``, ``unavailable``; fallbacks ``diff`` and ``content``),
    ``source`` (``worker`` or ``args``), ``rows`` (diff rows), ``text``,
    ``deleted``, ``command``, ``cwd``, ``truncated``, ``error``.
    """
    args = approval.get("args") or {}
    tool = str(approval.get("tool"))
    computed = approval.get("preview")
    if isinstance(computed, dict) and computed.get("kind"):
        shown: dict[str, Any] = {
            "source": "worker",
            "kind": computed["kind"],
            "path": computed.get("path"),
            "rows": diff_rows(str(computed.get("diff") or "")),
            "deleted": list(computed.get("deleted") or []),
            "deleted_links": list(computed.get("deleted_links") or []),
            "deleted_more": int(computed.get("deleted_more") or 0),
            "deleted_hidden": int(computed.get("deleted_hidden") or 0),
            "command": computed.get("command"),
            "cwd": computed.get("cwd") or approval.get("cwd"),
            "truncated": bool(computed.get("truncated")),
            "error": computed.get("error"),
            "replace_all": bool(args.get("replace_all", False)),
        }
        if shown["kind"] == "unavailable" or (shown["kind"] in DIFF_KINDS and not shown["rows"]):
            shown["fallback"] = _args_preview(tool, args, approval)  # what the arguments say
        return shown
    return _args_preview(tool, args, approval)


def _args_preview(
    tool: str, args: dict[str, Any], approval: dict[str, Any]
) -> dict[str, Any] | None:
    if tool == CONNECT_TOOL:  # a command's connection an interrupt network rule holds
        return {
            "source": "args",
            "kind": "connect",
            "host": args.get("host"),
            "port": args.get("port"),
            "command": args.get("command"),
            "cwd": approval.get("cwd"),
            "truncated": False,
        }
    if tool in TOOLS.running:
        return {
            "source": "args",
            "kind": "execute",
            "command": args.get("command"),
            "cwd": approval.get("cwd"),
            "truncated": False,
        }
    old = preview(tool, args)
    if old is None:
        return None
    return {
        "source": "args",
        "kind": old["kind"],
        "rows": diff_rows(old["text"]) if old["kind"] == "diff" else [],
        "text": old["text"],
        "truncated": old["clipped"],
        "replace_all": old.get("replace_all", False),
    }


def edit_fields(args: dict[str, Any]) -> list[dict[str, Any]]:
    """One form field per argument: ``textarea`` for text that may span lines,
    ``text``, ``number``, ``bool``, or ``json`` for lists and objects."""
    fields = []
    for name, value in args.items():
        shown: Any
        if isinstance(value, bool):
            kind, shown = "bool", value
        elif isinstance(value, int | float):
            kind, shown = "number", value
        elif isinstance(value, str):
            kind = "textarea" if name in MULTILINE_ARGS or "\n" in value else "text"
            shown = value
        else:
            kind, shown = "json", json.dumps(value, indent=2, ensure_ascii=False)
        rows = min(max(str(shown).count("\n") + 2, 3), 20) if kind in ("textarea", "json") else 1
        marks = _hidden_marks(shown) if isinstance(shown, str) else []
        fields.append({"name": name, "kind": kind, "value": shown, "rows": rows, "marks": marks})
    return fields


def edited_preview(tool: str, original: dict[str, Any], edited: dict[str, Any]) -> dict[str, Any]:
    """What the edited call would do, shown before it is sent.

    ``edit_file``: the edited old_string -> new_string; ``write_file``: the
    reviewer's changes to the proposed content; anything else: the changed
    arguments. Also lists the arguments whose value changed.
    """
    changed = sorted(k for k in original.keys() | edited.keys() if original.get(k) != edited.get(k))
    path = str(edited.get("file_path", ""))
    if tool in TOOLS.editing:
        old, new = str(edited.get("old_string", "")), str(edited.get("new_string", ""))
        diff = _unified(old, new, f"{path} (old_string)", f"{path} (new_string)")
        label = "the edited call replaces old_string with new_string"
    elif tool in TOOLS.writing:
        before, after = str(original.get("content", "")), str(edited.get("content", ""))
        diff = _unified(before, after, f"{path} (proposed)", f"{path} (edited)")
        label = "your changes to the proposed content"
    else:
        dump = lambda a: json.dumps(a, indent=2, ensure_ascii=False, sort_keys=True) + "\n"  # noqa: E731
        diff = _unified(dump(original), dump(edited), "arguments (proposed)", "arguments (edited)")
        label = "your changes to the arguments"
    text, clipped = _clip(diff)
    return {"label": label, "rows": diff_rows(text), "truncated": clipped, "changed": changed}


def _target_of(approval: dict[str, Any]) -> str:
    computed = approval.get("preview") or {}
    if isinstance(computed, dict) and computed.get("path"):
        return str(computed["path"])
    args = approval.get("args") or {}
    return next((str(args[k]) for k in PATH_ARGS if args.get(k)), "")


def web_link(base: str | None, namespace: str, workflow_id: str, run_id: str | None) -> str | None:
    """The Temporal Web UI page of one run (``base``: e.g. ``http://127.0.0.1:8233``)."""
    if not base:
        return None
    run = f"/{quote(run_id, safe='')}" if run_id else ""
    wf = quote(workflow_id, safe="")
    return f"{base.rstrip('/')}/namespaces/{quote(namespace, safe='')}/workflows/{wf}{run}/history"


def version_of(approval: dict[str, Any]) -> str:
    """Changes when what the card shows changes (a fresh preview, an escalation),
    so the page replaces that card while keeping the others' typed text."""
    seen = {k: approval.get(k) for k in ("preview", "escalated", "args", "timeout_at")}
    return hashlib.sha256(json.dumps(seen, sort_keys=True, default=str).encode()).hexdigest()[:16]


def enrich(
    approval: dict[str, Any], web_base: str | None = None, namespace: str = "default"
) -> dict[str, Any]:
    """An approval as a card shows it: key, why, preview, fields, links, version."""
    args = approval.get("args") or {}
    wf, run = str(approval["workflow_id"]), approval.get("run_id")
    return {
        **approval,
        "key": f"{wf}/{approval['id']}",
        "rule_text": why_text(approval),
        "target": _target_of(approval),
        "card_preview": card_preview(approval),
        "fields": edit_fields(args),
        "args_json": json.dumps(args, indent=2, ensure_ascii=False),
        "web_link": web_link(web_base, namespace, wf, run),
        "version": version_of(approval),
        "fingerprint": shown_fingerprint(approval),
    }


def shown_fingerprint(approval: dict[str, Any]) -> str | None:
    """What an approve or edit from this card names (``Decision.preview_fingerprint``):
    the fingerprint of the preview the card shows, ``""`` for one without; None
    when the card shows no computed preview (the workflow then decides)."""
    computed = approval.get("preview")
    if not isinstance(computed, dict) or approval.get("preview_pending"):
        return None
    return str(computed.get("fingerprint") or "")


def enrich_decision(
    decision: dict[str, Any], web_base: str | None = None, namespace: str = "default"
) -> dict[str, Any]:
    """One row of the recent-decisions tab: what, who, when, outcome, link."""
    wf = str(decision.get("workflow_id", ""))
    what = decision.get("summary") or " ".join(
        str(x) for x in (decision.get("tool"), decision.get("path")) if x
    )
    return {
        **decision,
        "what": what,
        "web_link": web_link(web_base, namespace, wf, decision.get("run_id")),
    }
