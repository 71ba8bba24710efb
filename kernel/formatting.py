"""What the model sees for each tool call (contract §2, §7).

Pure functions from typed backend results to text. They run both inside the
agent workflow (State backend) and inside the tool activities, so they do no
I/O and import nothing from Temporal: the same result always renders to the
same text, which keeps workflow replays deterministic and lets tests pin the
wording.

Errors are returned as ``Rendered(is_error=True)``; the caller turns that into
a tool result with an error status. Messages are short, stable and tell the
model what to do next. A result's error text is composed here from its
``error`` and its (already virtual) ``error_path`` by
:func:`~filegate.kernel.protocol.error_message`; no message is ever rewritten.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from filegate.kernel.limits import (
    CHARS_PER_TOKEN,
    LIST_CHAR_LIMIT,
    OFFLOAD_HEAD_LINES,
    OFFLOAD_TAIL_LINES,
    PREVIEW_LINE_CHARS,
    TOOL_TOKEN_LIMIT,
)
from filegate.kernel.network_rules import host_port
from filegate.kernel.protocol import (
    BackendResult,
    DeleteResult,
    EditResult,
    ExecuteResult,
    GlobResult,
    GrepMatch,
    GrepResult,
    LsResult,
    NetworkUse,
    OutcomeCode,
    WriteResult,
)
from filegate.kernel.textops import split_lines

NO_FILES_FOUND = "No files found"
NO_MATCHES_FOUND = "No matches found"

GrepOutputMode = Literal["files_with_matches", "content", "count"]


@dataclass(frozen=True)
class Rendered:
    """Text for the model, whether the tool result carries an error status, and which
    error it is (for callers that act on it: adapters, metrics; never read from the text)."""

    text: str
    is_error: bool = False
    code: OutcomeCode | None = None


# --------------------------------------------------------------------------- shared


@dataclass(frozen=True)
class NumberedRow:
    """A rendered line: source line number, marker shown (``12`` or ``12.1``), text."""

    line_no: int
    marker: str
    chunk: str


def render_rows(rows: Sequence[NumberedRow]) -> list[str]:
    """``cat -n`` rows: markers right-aligned to the widest marker on the page."""
    width = max((len(row.marker) for row in rows), default=1)
    return [f"{row.marker:>{width}}  {row.chunk}" for row in rows]


def format_error(message: str, code: OutcomeCode) -> Rendered:
    """An error result. ``Error: `` is added once so the model cannot miss it."""
    text = message if message.startswith("Error") else f"Error: {message}"
    return Rendered(text, is_error=True, code=code)


def result_error(result: BackendResult) -> Rendered:
    """The error of a failed result, naming its ``error_path`` (contract §1)."""
    return format_error(result.error_text or "unknown error", result.code or "io_error")


def permission_denied(operation: str, path: str) -> Rendered:
    """Entry-gate refusal: the backend was not touched."""
    return format_error(
        f"permission denied: {operation} access to {path} is not allowed by the "
        "filesystem permission rules. Do not retry; choose a different path.",
        "denied",
    )


RULE_REFUSAL_MARKS = (
    "filesystem permission rules",
    "write-deny rules",
    "not allowed by the permission rules",
    "leads to a protected location",
    "needs human approval",
)
"""Phrases only a permission rule's refusal carries (an OS ``permission denied`` has none)."""


def is_rule_refusal(text: str) -> bool:
    """Whether ``text`` (a tool result) is a permission rule's refusal: the
    tools worker's ``filegate_denials_total`` counts these."""
    head = text[:2000].lower()
    return "permission denied" in head[:40] and any(mark in head for mark in RULE_REFUSAL_MARKS)


def delete_blocked(path: str, patterns: Sequence[str]) -> Rendered:
    """Recursive delete refused because the subtree overlaps write-deny rules."""
    listed = ", ".join(patterns)
    return format_error(
        f"permission denied: delete of {path} would remove paths protected by "
        f"write-deny rules ({listed}). Delete individual allowed files instead.",
        "denied",
    )


def cut_to_budget(rows: Sequence[str], budget: int) -> int:
    """How many leading rows fit in ``budget`` characters when joined with ``\\n``."""
    used = 0
    for index, row in enumerate(rows):
        cost = len(row) + (1 if index else 0)
        if used + cost > budget:
            return index
        used += cost
    return len(rows)


# --------------------------------------------------------------------------- ls / glob


def _list_cut(rows: list[str], noun: str, notes: list[str]) -> str:
    """Join rows, then notes; above ``LIST_CHAR_LIMIT`` keep whole rows and say how to narrow.

    The rows are cut before the notes are appended so a note is never cut off.
    """
    text = "\n".join(rows)
    notes_cost = len("\n".join(notes)) + 2 if notes else 0
    if len(text) + notes_cost <= LIST_CHAR_LIMIT:
        return "\n\n".join([text, "\n".join(notes)]) if notes else text
    notice_cost = len(_list_cut_notice(len(rows), len(rows), noun)) + 2
    kept = cut_to_budget(rows, LIST_CHAR_LIMIT - notice_cost - notes_cost)
    footer = "\n".join([_list_cut_notice(kept, len(rows), noun), *notes])
    return "\n".join(rows[:kept]) + "\n\n" + footer


def _list_cut_notice(kept: int, total: int, noun: str) -> str:
    return (
        f"[Output truncated at {LIST_CHAR_LIMIT} characters: showing {kept} of {total} "
        f"{noun}. Narrow the path or pattern to see the rest.]"
    )


GLOB_TRUNCATED_NOTE = (
    "[The search stopped early: the paths above are valid but incomplete. "
    "Use a narrower pattern or path to see the rest.]"
)
GLOB_NARROW = "Use a narrower pattern or path to see the rest."
GREP_NARROW = "Narrow path or glob to see more."


def search_stopped_note(seconds: float, narrow: str) -> str:
    """A glob/grep cut by its time limit (``stopped_after``): say so, and for how long it ran.

    Why the time is named: "incomplete" alone reads like a result cap, which a
    narrower pattern may not fix; a time limit tells the model the tree is big.
    """
    return (
        f"[Search stopped after {seconds:g} s (its time limit); results are partial: "
        f"those above are valid but incomplete. {narrow}]"
    )


def format_ls(result: LsResult) -> Rendered:
    """One path per line, in the backend's order (directories end with ``/``)."""
    if result.error is not None:
        return result_error(result)
    if not result.entries:
        return Rendered(NO_FILES_FOUND)
    return Rendered(_list_cut([entry.path for entry in result.entries], "entries", []))


def format_glob(result: GlobResult) -> Rendered:
    """One matching path per line, in the backend's order."""
    if result.error is not None:
        return result_error(result)
    extra = [GLOB_TRUNCATED_NOTE] if result.truncated else []
    if result.stopped_after is not None:
        extra = [search_stopped_note(result.stopped_after, GLOB_NARROW)]
    if not result.matches:
        return Rendered("\n\n".join([NO_FILES_FOUND, *extra]))
    return Rendered(_list_cut(list(result.matches), "paths", extra))


# --------------------------------------------------------------------------- grep

_REGEX_SIGNS = re.compile(
    r"""
      \|                    # alternation
    | \.[*+?]               # .* .+ .?
    | \\[dDwWsSbB.()\[\]{}|+*?^$]   # escapes that only mean something in a regex
    | ^\^ | (?<!\\)\$$      # anchors
    | \[[^\]]+\]            # character class
    | [^\s\\]\{\d+(,\d*)?\} # {n} / {n,m} quantifier
    | \(\?                  # (?: (?i) ...
    | [)\]][*+?]            # group / class with a quantifier
    """,
    re.VERBOSE,
)


def looks_like_regex(pattern: str) -> bool:
    """Whether ``pattern`` is probably meant as a regex (it would match literally)."""
    return bool(_REGEX_SIGNS.search(pattern))


def _grep_truncated_note() -> str:
    return (
        "[The search stopped early (match limit or time limit): the results above are "
        "valid but incomplete. Narrow path or glob, or set max_count, to see more.]"
    )


def _regex_hint(pattern: str) -> str:
    return (
        f"[Hint: grep searches for literal text, not regular expressions; {pattern!r} "
        "was matched character for character. Search for a plain substring instead, "
        "or run one grep per alternative.]"
    )


def _sorted_matches(matches: Sequence[GrepMatch]) -> list[GrepMatch]:
    return sorted(matches, key=lambda match: (match.path, match.line))


def _grep_rows(matches: list[GrepMatch], output_mode: GrepOutputMode) -> list[str]:
    if output_mode == "content":
        rows: list[str] = []
        current: str | None = None
        for match in matches:
            if match.path != current:
                current = match.path
                rows.append(f"{match.path}:")
            rows.append(f"  {match.line}: {match.text}")
        return rows
    counts: dict[str, int] = {}
    for match in matches:
        counts[match.path] = counts.get(match.path, 0) + 1
    if output_mode == "count":
        return [f"{path}: {count}" for path, count in counts.items()]
    return list(counts)


def format_grep(
    result: GrepResult,
    *,
    pattern: str,
    output_mode: GrepOutputMode,
) -> Rendered:
    """Render grep matches in one of the three output modes, files sorted by path.

    Nothing here may depend on files the permission rules hide: the backend
    skipped them during its walk, so the hint and notes see permitted files only.
    """
    if result.error is not None:
        return result_error(result)
    extra = [_grep_truncated_note()] if result.truncated else []
    if result.stopped_after is not None:
        extra = [search_stopped_note(result.stopped_after, GREP_NARROW)]
    if not result.matches:
        parts = [NO_MATCHES_FOUND]
        if looks_like_regex(pattern):
            parts.append(_regex_hint(pattern))
        return Rendered("\n\n".join([*parts, *extra]))
    rows = _grep_rows(_sorted_matches(result.matches), output_mode)
    return Rendered(_list_cut(rows, "lines" if output_mode == "content" else "files", extra))


# --------------------------------------------------------------------------- write / edit / delete


def format_write(result: WriteResult) -> Rendered:
    if result.error is not None:
        return result_error(result)
    return Rendered(f"Successfully wrote {result.path}.")


def edit_multiple_message(path: str, occurrences: int) -> str:
    """old_string is ambiguous: say how often it occurs and how to resolve it."""
    return (
        f"old_string occurs {occurrences} times in {path}. Pass replace_all=true to "
        "replace every occurrence, or include more surrounding context to make it unique."
    )


def not_read_before_edit(path: str) -> Rendered:
    """The workflow refuses edits to files the agent has not read in this thread."""
    return format_error(
        f"{path} has not been read in this conversation. Call read_file on it first, "
        "then edit using the exact text you saw.",
        "not_read",
    )


def format_edit(result: EditResult) -> Rendered:
    """Success reports the replacement count; errors keep the backend's wording.

    An ambiguous match is re-worded from the structured count so it always says
    N and how to resolve it, whatever the backend wrote.
    """
    if result.error is not None:
        if result.code == "multiple_matches" and result.occurrences > 1:
            return format_error(
                edit_multiple_message(result.path, result.occurrences), "multiple_matches"
            )
        return result_error(result)
    count = result.occurrences
    noun = "occurrence" if count == 1 else "occurrences"
    return Rendered(f"Successfully replaced {count} {noun} in {result.path}.")


def format_delete(result: DeleteResult) -> Rendered:
    if result.error is not None:
        return result_error(result)
    return Rendered(f"Successfully deleted {result.path}.")


# --------------------------------------------------------------------------- execute

EXECUTE_TRUNCATED_NOTE = (
    "[Output truncated: only the beginning is shown. Redirect the output to a file "
    "and read it in pieces, or filter it (e.g. | head, | tail, | grep).]"
)


def format_execute(result: ExecuteResult) -> Rendered:
    """Output, the network lines (a command with network rules), then the exit-code
    footer, then a truncation notice when cut.

    A non-zero exit code is a normal result (the tool worked; the command
    failed); only backend errors such as a timeout carry the error status.
    """
    parts: list[str] = []
    if result.output:
        parts.append(result.output.rstrip("\n"))
    parts.extend(_network_lines(result.network))  # before the footer
    if result.error is not None:
        parts.append(result_error(result).text)
    footer = _execute_footer(result.exit_code, failed=result.error is not None)
    if footer is not None:
        parts.append(footer)
    if result.truncated:
        parts.append(EXECUTE_TRUNCATED_NOTE)
    if result.error is None:
        return Rendered("\n".join(parts))
    return Rendered("\n".join(parts), is_error=True, code=result.code or "io_error")


def _execute_footer(exit_code: int | None, *, failed: bool) -> str | None:
    """The exit-code line; a failed command (a timeout: 124, as the shell's ``timeout``
    says) has one only when it has a code."""
    if exit_code == 0 and not failed:
        return "[Command succeeded with exit code 0]"
    if exit_code is None:
        return None if failed else "[Command finished without an exit code]"
    return f"[Command failed with exit code {exit_code}]"


def command_output(text: str, *, exit_code: int | None, failed: bool, truncated: bool) -> str:
    """What :func:`format_execute` wrote before its footer: the output (with the network
    lines, and a failure's reason), for an adapter that returns the exit code and the
    cut as fields of its own. Text that does not end as it would (an output offloaded
    to a stored result: its preview) comes back as it is."""
    if truncated:
        text = text.removesuffix(EXECUTE_TRUNCATED_NOTE).removesuffix("\n")
    footer = _execute_footer(exit_code, failed=failed)
    if footer is None:
        return text
    if text == footer:
        return ""
    return text.removesuffix("\n" + footer)


def _network_lines(uses: list[NetworkUse]) -> list[str]:
    """One line per host and port the command reached or was refused, refusals
    with their reason: the model learns why ``pip`` failed, not only that it did."""
    lines = []
    for use in uses:
        where = host_port(use.host, use.port)
        times = "" if use.connections == 1 else f" ({use.connections} connections)"
        if use.allowed:
            lines.append(f"[network: reached {where}{times}]")
        else:
            lines.append(f"[network: refused {where}{times}: {use.reason}]")
    return lines


# --------------------------------------------------------------------------- offload stubs (§7)


def needs_offload(text: str, token_limit: int = TOOL_TOKEN_LIMIT) -> bool:
    """Whether a result is over ``4 x token_limit`` characters and must be offloaded."""
    return len(text) > CHARS_PER_TOKEN * token_limit


def _preview_line(line: str) -> str:
    if len(line) <= PREVIEW_LINE_CHARS:
        return line
    return f"{line[:PREVIEW_LINE_CHARS]} ... [{len(line) - PREVIEW_LINE_CHARS} chars cut]"


def offload_stub(
    location: str,
    text: str,
    head: int = OFFLOAD_HEAD_LINES,
    tail: int = OFFLOAD_TAIL_LINES,
    *,
    what: str = "Tool result",
) -> str:
    """Stand-in for an offloaded result: where it is, plus numbered head/tail lines.

    Line numbers are the stored text's own, so the model can jump there with
    ``read_file(location, offset=..., limit=...)``.
    """
    lines = split_lines(text)
    total = len(lines)
    header = (
        f"{what} too large for the context ({len(text)} characters, {total} lines); "
        f"the full text is saved at {location}. Read it with "
        f'read_file(file_path="{location}", offset=..., limit=...) '
        "or search it with grep."
    )
    if total <= head + tail:
        shown = [NumberedRow(i, str(i), _preview_line(line)) for i, line in enumerate(lines, 1)]
        return "\n".join([header, "", *render_rows(shown)]) if shown else header
    head_rows = [NumberedRow(i, str(i), _preview_line(lines[i - 1])) for i in range(1, head + 1)]
    tail_rows = [
        NumberedRow(i, str(i), _preview_line(lines[i - 1]))
        for i in range(total - tail + 1, total + 1)
    ]
    rendered = render_rows(head_rows + tail_rows)
    gap = f"... [{total - head - tail} lines truncated] ..."
    return "\n".join([header, "", *rendered[:head], gap, *rendered[head:]])
