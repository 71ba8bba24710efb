"""What the model sees for each tool call (contract §2, §7).

Pure functions from typed backend results to text. They run both inside the
agent workflow (State backend) and inside the tool activities, so they do no
I/O and import nothing from Temporal: the same result always renders to the
same text, which keeps workflow replays deterministic and lets tests pin the
wording.

Errors are returned as ``Rendered(is_error=True)``; the caller turns that into
a tool result with an error status. Messages are short, stable and tell the
model what to do next.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from filegate.kernel.protocol import (
    DeleteResult,
    EditResult,
    ExecuteResult,
    GlobResult,
    GrepMatch,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
)

CHARS_PER_TOKEN = 4
"""Rough characters-per-token ratio used for every size budget."""

TOOL_TOKEN_LIMIT = 20_000
"""Default ``tool_token_limit_before_evict`` (tokens)."""

MAX_LINE_CHARS = 5000
"""Source lines longer than this are split into ``N.1``, ``N.2`` continuation rows."""

READ_OUTPUT_CHAR_LIMIT = CHARS_PER_TOKEN * TOOL_TOKEN_LIMIT
"""read_file output is cut (at a whole line) above this many characters."""

LIST_CHAR_LIMIT = CHARS_PER_TOKEN * TOOL_TOKEN_LIMIT
"""ls / glob / grep output is cut (at a whole line) above this many characters."""

DEFAULT_GREP_MAX = 1000
"""Matches a grep returns when the model gives no ``max_count``."""

DEFAULT_READ_FILE_LIMIT = 100
"""Lines read_file shows when the model gives no ``limit``."""

OFFLOAD_HEAD_LINES = 5
OFFLOAD_TAIL_LINES = 5
PREVIEW_LINE_CHARS = 1000
"""A preview line in an offload stub is cut to this many characters, so one huge
line cannot make the stub itself large."""

NO_FILES_FOUND = "No files found"
NO_MATCHES_FOUND = "No matches found"

GrepOutputMode = Literal["files_with_matches", "content", "count"]


@dataclass(frozen=True)
class Rendered:
    """Text for the model plus whether the tool result carries an error status."""

    text: str
    is_error: bool = False


@dataclass(frozen=True)
class ReadPlan:
    """read_file arguments after normalisation.

    ``early`` is set when no backend call is needed (the result is already
    known); ``note`` is prepended to whatever the read renders.
    """

    offset: int
    limit: int
    note: str | None = None
    early: Rendered | None = None


# --------------------------------------------------------------------------- shared


def format_error(message: str) -> Rendered:
    """An error result. ``Error: `` is added once so the model cannot miss it."""
    text = message if message.startswith("Error") else f"Error: {message}"
    return Rendered(text, is_error=True)


def permission_denied(operation: str, path: str) -> Rendered:
    """Entry-gate refusal: the backend was not touched."""
    return format_error(
        f"permission denied: {operation} access to {path} is not allowed by the "
        "filesystem permission rules. Do not retry; choose a different path."
    )


def delete_blocked(path: str, patterns: Sequence[str]) -> Rendered:
    """Recursive delete refused because the subtree overlaps write-deny rules."""
    listed = ", ".join(patterns)
    return format_error(
        f"permission denied: delete of {path} would remove paths protected by "
        f"write-deny rules ({listed}). Delete individual allowed files instead."
    )


def split_lines(text: str) -> list[str]:
    """Split on ``\\n``; a trailing newline ends the last line and adds no row.

    ``""`` has no lines; ``"a\\n"`` has one; ``"a\\n\\n"`` has two (the second empty).
    """
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def _cut_to_budget(rows: Sequence[str], budget: int) -> int:
    """How many leading rows fit in ``budget`` characters when joined with ``\\n``."""
    used = 0
    for index, row in enumerate(rows):
        cost = len(row) + (1 if index else 0)
        if used + cost > budget:
            return index
        used += cost
    return len(rows)


# --------------------------------------------------------------------------- read_file


@dataclass(frozen=True)
class _Row:
    line_no: int
    marker: str
    chunk: str


def _rows_for(lines: Sequence[str], start_line: int) -> list[list[_Row]]:
    """Rows per source line: the first chunk keeps the number, the rest get ``N.k``."""
    grouped: list[list[_Row]] = []
    for index, line in enumerate(lines):
        number = start_line + index
        chunks = [line[i : i + MAX_LINE_CHARS] for i in range(0, len(line), MAX_LINE_CHARS)]
        rows = [_Row(number, str(number), chunks[0] if chunks else "")]
        rows += [_Row(number, f"{number}.{k}", chunk) for k, chunk in enumerate(chunks[1:], 1)]
        grouped.append(rows)
    return grouped


def _render_rows(rows: Sequence[_Row]) -> list[str]:
    """``cat -n`` rows: markers right-aligned to the widest marker on the page."""
    width = max((len(row.marker) for row in rows), default=1)
    return [f"{row.marker:>{width}}  {row.chunk}" for row in rows]


def number_lines(lines: Sequence[str], start_line: int = 1) -> str:
    """Number ``lines`` (first is ``start_line``) the way read_file shows them."""
    return "\n".join(_render_rows([row for group in _rows_for(lines, start_line) for row in group]))


def _pagination_hint(start: int, end: int, total: int) -> str:
    return (
        f"[Read {end - start + 1} lines (lines {start}-{end} of {total} total). "
        f"{total - end} lines remaining from offset {end}.]"
    )


def _read_cut_notice(end: int) -> str:
    return (
        f"[Output truncated at {READ_OUTPUT_CHAR_LIMIT} characters after line {end}. "
        f"Continue with offset={end}, or use a smaller limit. If lines are very long "
        "(e.g. minified JSON), reformat the file into shorter lines first.]"
    )


def _read_partial_line_notice(line_no: int, length: int) -> str:
    return (
        f"[Output truncated at {READ_OUTPUT_CHAR_LIMIT} characters inside line {line_no}, "
        f"which is {length} characters long and cannot be shown whole. Search it with grep, "
        "or reformat the file into shorter lines.]"
    )


def plan_read(offset: int, limit: int) -> ReadPlan:
    """Normalise read_file's ``offset``/``limit`` before calling the backend."""
    note = None
    if offset < 0:
        note = f"[Note: offset {offset} is negative; reading from line 1 (offset 0).]"
        offset = 0
    if limit <= 0:
        return ReadPlan(
            offset,
            limit,
            note,
            early=Rendered(
                f"No lines read: limit={limit} asks for no lines. Pass limit >= 1 "
                f"(default {DEFAULT_READ_FILE_LIMIT}) to read the file."
            ),
        )
    return ReadPlan(offset, limit, note)


def empty_file_message(path: str) -> str:
    return f"System reminder: the file {path} exists but is empty."


def format_read(result: ReadResult, plan: ReadPlan) -> Rendered:
    """Render a text window ``cat -n`` style with pagination and the size cut.

    Binary results (``result.data``) are turned into media content blocks by
    the media module; here they only get a short placeholder note so a caller
    that lacks media support still says something true.
    """
    if plan.early is not None:
        return _with_note(plan.note, plan.early)
    if result.error is not None:
        return _with_note(plan.note, format_error(result.error))
    path = result.path or "the file"
    if result.data is not None:
        if not result.data:
            return _with_note(plan.note, Rendered(empty_file_message(path)))
        return _with_note(
            plan.note,
            Rendered(
                f"[Binary file {path} ({len(result.data)} bytes); "
                "it is shown as media content, not text.]"
            ),
        )
    if not result.lines:
        if result.total_lines == 0:
            return _with_note(plan.note, Rendered(empty_file_message(path)))
        return _with_note(
            plan.note,
            format_error(
                f"offset {plan.offset} is past the end of {path}, which has "
                f"{result.total_lines} lines. Use an offset from 0 to {result.total_lines - 1}."
            ),
        )
    return _with_note(plan.note, _render_window(result, plan))


def _with_note(note: str | None, rendered: Rendered) -> Rendered:
    if note is None:
        return rendered
    return Rendered(f"{note}\n{rendered.text}", rendered.is_error)


def _render_window(result: ReadResult, plan: ReadPlan) -> Rendered:
    start = result.start_line or plan.offset + 1
    end = start + len(result.lines) - 1
    total = max(result.total_lines, end)
    groups = _rows_for(result.lines, start)
    all_rows = [row for group in groups for row in group]
    body = _render_rows(all_rows)
    footer = [_pagination_hint(start, end, total)] if end < total else []
    note_cost = len(plan.note) + 1 if plan.note else 0
    text = "\n".join(body)
    if footer:
        text += "\n\n" + footer[0]
    if note_cost + len(text) <= READ_OUTPUT_CHAR_LIMIT:
        return Rendered(text)
    return _cut_window(groups, start, total, note_cost)


def _cut_window(groups: list[list[_Row]], start: int, total: int, note_cost: int) -> Rendered:
    """Keep the whole source lines that fit; recompute the hint from the last one.

    Markers are measured at the full page's width first; re-rendering the kept
    rows can only narrow them, so the result still fits.
    """
    # Room for the worst-case footer (numbers never exceed ``total``).
    first_len = sum(len(row.chunk) for row in groups[0])
    footer_room = (
        max(len(_read_cut_notice(total)), len(_read_partial_line_notice(total, first_len)))
        + len(_pagination_hint(total, total, total))
        + 3
    )
    budget = READ_OUTPUT_CHAR_LIMIT - note_cost - footer_room
    all_rows = [row for group in groups for row in group]
    width_rows = _render_rows(all_rows)
    kept_lines = 0
    used = 0
    position = 0
    for group in groups:
        cost = sum(len(width_rows[position + i]) + 1 for i in range(len(group)))
        if used + cost - 1 > budget:
            break
        used += cost
        position += len(group)
        kept_lines += 1
    if kept_lines:
        kept = [row for group in groups[:kept_lines] for row in group]
        end = start + kept_lines - 1
        notice = _read_cut_notice(end)
    else:
        # Not even the first source line fits: show the continuation rows that do.
        first = groups[0]
        count = max(1, _cut_to_budget(width_rows[: len(first)], budget))
        kept = first[:count]
        end = start
        notice = _read_partial_line_notice(start, first_len)
    body = "\n".join(_render_rows(kept))
    footer = notice
    if end < total:
        footer += "\n" + _pagination_hint(start, end, total)
    return Rendered(f"{body}\n\n{footer}")


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
    kept = _cut_to_budget(rows, LIST_CHAR_LIMIT - notice_cost - notes_cost)
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


def format_ls(result: LsResult) -> Rendered:
    """One path per line, in the backend's order (directories end with ``/``)."""
    if result.error is not None:
        return format_error(result.error)
    if not result.entries:
        return Rendered(NO_FILES_FOUND)
    return Rendered(_list_cut([entry.path for entry in result.entries], "entries", []))


def format_glob(result: GlobResult) -> Rendered:
    """One matching path per line, in the backend's order."""
    if result.error is not None:
        return format_error(result.error)
    extra = [GLOB_TRUNCATED_NOTE] if result.truncated else []
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


def grep_truncated_note() -> str:
    return (
        "[The search stopped early (match limit or time limit): the results above are "
        "valid but incomplete. Narrow path or glob, or set max_count, to see more.]"
    )


def regex_hint(pattern: str) -> str:
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
    removed_by_permissions: int = 0,
) -> Rendered:
    """Render grep matches in one of the three output modes, files sorted by path.

    ``removed_by_permissions`` is how many backend matches the permission filter
    dropped: when matches existed the "grep is literal" hint would mislead.
    """
    if result.error is not None:
        return format_error(result.error)
    extra = [grep_truncated_note()] if result.truncated else []
    if not result.matches:
        parts = [NO_MATCHES_FOUND]
        if removed_by_permissions == 0 and looks_like_regex(pattern):
            parts.append(regex_hint(pattern))
        return Rendered("\n\n".join([*parts, *extra]))
    rows = _grep_rows(_sorted_matches(result.matches), output_mode)
    return Rendered(_list_cut(rows, "lines" if output_mode == "content" else "files", extra))


# --------------------------------------------------------------------------- write / edit / delete


def format_write(result: WriteResult) -> Rendered:
    if result.error is not None:
        return format_error(result.error)
    return Rendered(f"Successfully wrote {result.path}.")


def edit_not_found_message(path: str, old: str, content: str) -> str:
    """For backends: old_string absent, with the trailing-newline hint when it applies."""
    message = (
        f"old_string was not found in {path}. It must match exactly, including "
        "whitespace and indentation; read the file again and copy the text."
    )
    if old.endswith("\n") and not content.endswith("\n"):
        message += (
            " Hint: old_string ends with a newline but the file does not; "
            "drop the trailing newline from old_string."
        )
    return message


def edit_multiple_message(path: str, occurrences: int) -> str:
    """old_string is ambiguous: say how often it occurs and how to resolve it."""
    return (
        f"old_string occurs {occurrences} times in {path}. Pass replace_all=true to "
        "replace every occurrence, or include more surrounding context to make it unique."
    )


def edit_unchanged_message(path: str) -> str:
    return (
        f"new_string is identical to old_string, so {path} would not change. "
        "Provide a different new_string."
    )


def not_read_before_edit(path: str) -> Rendered:
    """The workflow refuses edits to files the agent has not read in this thread."""
    return format_error(
        f"{path} has not been read in this conversation. Call read_file on it first, "
        "then edit using the exact text you saw."
    )


def format_edit(result: EditResult) -> Rendered:
    """Success reports the replacement count; errors keep the backend's wording.

    An ambiguous match is re-worded from the structured count so it always says
    N and how to resolve it, whatever the backend wrote.
    """
    if result.error is not None:
        if result.code == "multiple_matches" and result.occurrences > 1:
            return format_error(edit_multiple_message(result.path, result.occurrences))
        return format_error(result.error)
    count = result.occurrences
    noun = "occurrence" if count == 1 else "occurrences"
    return Rendered(f"Successfully replaced {count} {noun} in {result.path}.")


def format_delete(result: DeleteResult) -> Rendered:
    if result.error is not None:
        return format_error(result.error)
    return Rendered(f"Successfully deleted {result.path}.")


# --------------------------------------------------------------------------- execute

EXECUTE_TRUNCATED_NOTE = (
    "[Output truncated: only the beginning is shown. Redirect the output to a file "
    "and read it in pieces, or filter it (e.g. | head, | tail, | grep).]"
)


def format_execute(result: ExecuteResult) -> Rendered:
    """Output, then the exit-code footer, then a truncation notice when cut.

    A non-zero exit code is a normal result (the tool worked; the command
    failed); only backend errors such as a timeout carry the error status.
    """
    parts: list[str] = []
    if result.output:
        parts.append(result.output.rstrip("\n"))
    if result.error is not None:
        parts.append(format_error(result.error).text)
    elif result.exit_code == 0:
        parts.append("[Command succeeded with exit code 0]")
    elif result.exit_code is None:
        parts.append("[Command finished without an exit code]")
    else:
        parts.append(f"[Command failed with exit code {result.exit_code}]")
    if result.truncated:
        parts.append(EXECUTE_TRUNCATED_NOTE)
    return Rendered("\n".join(parts), is_error=result.error is not None)


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
        shown = [_Row(i, str(i), _preview_line(line)) for i, line in enumerate(lines, 1)]
        return "\n".join([header, "", *_render_rows(shown)]) if shown else header
    head_rows = [_Row(i, str(i), _preview_line(lines[i - 1])) for i in range(1, head + 1)]
    tail_rows = [
        _Row(i, str(i), _preview_line(lines[i - 1])) for i in range(total - tail + 1, total + 1)
    ]
    rendered = _render_rows(head_rows + tail_rows)
    gap = f"... [{total - head - tail} lines truncated] ..."
    return "\n".join([header, "", *rendered[:head], gap, *rendered[head:]])
