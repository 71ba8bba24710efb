"""Pure text helpers shared by the in-memory and on-disk backends.

One definition of "a line", "binary", "a read window", "an exact edit" and
"a literal grep hit", so every backend answers the same call the same way.

Lines are separated by ``\\n`` only (like ``grep``/``rg``, unlike
``str.splitlines``); a trailing newline adds no line; one trailing ``\\r`` is
dropped from what is *shown* (CRLF files read cleanly) but edits see raw text.
"""

from __future__ import annotations

from filegate.kernel.limits import reads_nothing
from filegate.kernel.protocol import EditResult, GrepMatch, GrepResult, ReadResult

_NUL = b"\x00"


def decode_text(data: bytes) -> str | None:
    """The UTF-8 text of ``data``, or None when it is binary (NUL byte or invalid UTF-8)."""
    if _NUL in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def display_line(line: str) -> str:
    """A raw line (without ``\\n``) as shown to the model: one trailing ``\\r`` removed."""
    return line[:-1] if line.endswith("\r") else line


def split_lines(text: str) -> list[str]:
    """Split on ``\\n``; a trailing newline adds no line; ``""`` has no lines."""
    if not text:
        return []
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


def offset_past_end(path: str, offset: int, total_lines: int) -> ReadResult:
    """The error value for an offset beyond the last line (names the file length)."""
    return ReadResult(
        path=path,
        total_lines=total_lines,
        error=(
            f"offset {offset} is past the end of the file ({total_lines} lines); "
            f"use an offset below {total_lines}"
            if total_lines
            else f"offset {offset} is past the end: the file is empty (0 lines)"
        ),
        code="invalid_argument",
        error_path=path,
    )


def bad_limit(path: str, limit: int) -> ReadResult:
    return ReadResult(
        path=path, error=f"limit must be positive, got {limit}", code="invalid_argument"
    )


def bad_max_count(max_count: int | None) -> GrepResult | None:
    """The error value for a grep ``max_count`` below 1; None when it is acceptable."""
    if max_count is not None and max_count < 1:
        return GrepResult(
            error=f"max_count must be at least 1, got {max_count}", code="invalid_argument"
        )
    return None


def window_result(path: str, window: list[str], offset: int, total_lines: int) -> ReadResult:
    """Build the ReadResult for lines ``window`` starting at 0-based ``offset``."""
    if not window:
        return ReadResult(path=path, total_lines=total_lines)
    end_line = offset + len(window)
    return ReadResult(
        path=path,
        lines=[display_line(line) for line in window],
        total_lines=total_lines,
        start_line=offset + 1,
        end_line=end_line,
        next_offset=end_line if end_line < total_lines else None,
    )


def read_window(path: str, text: str, offset: int, limit: int) -> ReadResult:
    """Lines ``offset .. offset+limit`` of ``text`` (offset is 0-based, clamped at 0).

    Offset at or past the end of a non-empty file (or >0 on an empty one) is an
    ``invalid_argument`` error naming the line count; ``limit <= 0`` likewise.
    """
    if reads_nothing(limit):
        return bad_limit(path, limit)
    offset = max(offset, 0)
    lines = split_lines(text)
    total = len(lines)
    if offset > 0 and offset >= total:
        return offset_past_end(path, offset, total)
    return window_result(path, lines[offset : offset + limit], offset, total)


def apply_edit(
    path: str, content: str, old: str, new: str, replace_all: bool
) -> tuple[str | None, EditResult]:
    """Exact string replacement; returns ``(new_content, result)``.

    ``new_content`` is None whenever ``result`` is an error (nothing to write).
    """
    if old == "":
        return None, EditResult(
            path=path, error="old_string must not be empty", code="invalid_argument"
        )
    if new == old:
        return None, EditResult(
            path=path,
            error="new_string is identical to old_string: nothing to change",
            code="unchanged",
        )
    count = content.count(old)
    if count == 0:
        message = "old_string not found"
        if old.endswith("\n") and not content.endswith("\n"):
            message += (
                "; old_string ends with a newline but the file does not: "
                "drop the trailing newline from old_string"
            )
        return None, EditResult(path=path, error=message, code="no_match", error_path=path)
    if count > 1 and not replace_all:
        return None, EditResult(
            path=path,
            occurrences=count,
            error=(
                f"old_string occurs {count} times; add surrounding context to "
                "make it unique, or set replace_all=true to replace every occurrence"
            ),
            code="multiple_matches",
            error_path=path,
        )
    if replace_all:
        return content.replace(old, new), EditResult(path=path, occurrences=count)
    return content.replace(old, new, 1), EditResult(path=path, occurrences=1)


def grep_text(literal: str, path: str, text: str, limit: int | None) -> list[GrepMatch]:
    """Lines of ``text`` containing ``literal`` (1-based numbers), at most ``limit``.

    To know whether a search was cut, ask for ``limit + 1`` and compare. A
    literal containing a newline never matches (matching is per line).
    """
    if limit is not None and limit <= 0:
        return []
    if literal not in text:
        return []
    out: list[GrepMatch] = []
    for number, line in enumerate(split_lines(text), start=1):
        if literal in line:
            out.append(GrepMatch.model_construct(path=path, line=number, text=display_line(line)))
            if limit is not None and len(out) >= limit:
                break
    return out


def merge_grep_budget(
    matches: list[GrepMatch], max_count: int | None
) -> tuple[list[GrepMatch], bool]:
    """Sort matches by (path, line) and apply a shared ``max_count`` budget.

    Returns ``(kept, truncated)``.
    """
    matches.sort(key=lambda m: (m.path, m.line))
    if max_count is not None and len(matches) > max_count:
        return matches[: max(max_count, 0)], True
    return matches, False
