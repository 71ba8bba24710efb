"""What the model sees of ``read_file`` (contract §2, §7): numbered, windowed, cut to budget.

Split from :mod:`filegate.kernel.formatting` because the read window is the one
renderer with its own planning (offset/limit checks before the backend call)
and its own continuation rules for very long lines. Pure, like the rest of
the kernel: the State backend renders reads inside the workflow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from filegate.kernel.formatting import (
    NumberedRow,
    Rendered,
    cut_to_budget,
    format_error,
    render_rows,
    result_error,
)
from filegate.kernel.limits import (
    DEFAULT_READ_FILE_LIMIT,
    MAX_LINE_CHARS,
    READ_OUTPUT_CHAR_LIMIT,
    reads_nothing,
)
from filegate.kernel.protocol import ReadResult


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


def _rows_for(lines: Sequence[str], start_line: int) -> list[list[NumberedRow]]:
    """Rows per source line: the first chunk keeps the number, the rest get ``N.k``."""
    grouped: list[list[NumberedRow]] = []
    for index, line in enumerate(lines):
        number = start_line + index
        chunks = [line[i : i + MAX_LINE_CHARS] for i in range(0, len(line), MAX_LINE_CHARS)]
        rows = [NumberedRow(number, str(number), chunks[0] if chunks else "")]
        rows += [
            NumberedRow(number, f"{number}.{k}", chunk) for k, chunk in enumerate(chunks[1:], 1)
        ]
        grouped.append(rows)
    return grouped


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
    if reads_nothing(limit):
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
        return _with_note(plan.note, result_error(result))
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
                f"{result.total_lines} lines. Use an offset from 0 to {result.total_lines - 1}.",
                "invalid_argument",
            ),
        )
    return _with_note(plan.note, _render_window(result, plan))


def _with_note(note: str | None, rendered: Rendered) -> Rendered:
    if note is None:
        return rendered
    return Rendered(f"{note}\n{rendered.text}", rendered.is_error, rendered.code)


def _render_window(result: ReadResult, plan: ReadPlan) -> Rendered:
    start = result.start_line or plan.offset + 1
    end = start + len(result.lines) - 1
    total = max(result.total_lines, end)
    groups = _rows_for(result.lines, start)
    all_rows = [row for group in groups for row in group]
    body = render_rows(all_rows)
    footer = [_pagination_hint(start, end, total)] if end < total else []
    note_cost = len(plan.note) + 1 if plan.note else 0
    text = "\n".join(body)
    if footer:
        text += "\n\n" + footer[0]
    if note_cost + len(text) <= READ_OUTPUT_CHAR_LIMIT:
        return Rendered(text)
    return _cut_window(groups, start, total, note_cost)


def _cut_window(
    groups: list[list[NumberedRow]], start: int, total: int, note_cost: int
) -> Rendered:
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
    width_rows = render_rows(all_rows)
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
        count = max(1, cut_to_budget(width_rows[: len(first)], budget))
        kept = first[:count]
        end = start
        notice = _read_partial_line_notice(start, first_len)
    body = "\n".join(render_rows(kept))
    footer = notice
    if end < total:
        footer += "\n" + _pagination_hint(start, end, total)
    return Rendered(f"{body}\n\n{footer}")
