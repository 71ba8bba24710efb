"""Pure text helpers shared by the in-memory and on-disk backends.

One definition of "a line", "binary", "a read window", "an exact edit" and
"a literal grep hit", so every backend answers the same call the same way.

Lines are separated by ``\\n`` only (like ``grep``/``rg``, unlike
``str.splitlines``); a trailing newline adds no line; one trailing ``\\r`` is
dropped from what is *shown* (CRLF files read cleanly). Edits work on the raw
text but follow the file's line endings (:func:`apply_edit`), because a model
copies ``old_string`` from what it was shown, or from bytes that carry CRLF.
"""

from __future__ import annotations

import hashlib

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


def nothing_requested(path: str, limit: int, total_lines: int) -> ReadResult:
    """A text read with ``limit <= 0``, once the file is known to be text.

    An empty file is still reported as an (empty) read, whatever the limit, as
    the reference does: "it exists and is empty" is true and useful. Any other
    text file gets :func:`bad_limit`: our results have no "nothing was asked"
    flag, so an empty window would be mistaken for an empty file. Binary files
    never get here (their bytes are returned whatever the limit).
    """
    if total_lines == 0:
        return ReadResult(path=path, total_lines=0)
    return bad_limit(path, limit)


def bad_max_count(max_count: int | None) -> GrepResult | None:
    """The error value for a grep ``max_count`` below 1; None when it is acceptable."""
    if max_count is not None and max_count < 1:
        return GrepResult(
            error=f"max_count must be at least 1, got {max_count}", code="invalid_argument"
        )
    return None


def window_result(
    path: str,
    window: list[str],
    offset: int,
    total_lines: int,
    ends_with_newline: bool = False,
) -> ReadResult:
    """Build the ReadResult for lines ``window`` starting at 0-based ``offset``.

    ``ends_with_newline``: whether the file's last line is terminated (see
    :class:`~filegate.kernel.protocol.ReadResult`).
    """
    if not window:
        return ReadResult(path=path, total_lines=total_lines, ends_with_newline=ends_with_newline)
    end_line = offset + len(window)
    return ReadResult(
        path=path,
        lines=[display_line(line) for line in window],
        total_lines=total_lines,
        start_line=offset + 1,
        end_line=end_line,
        next_offset=end_line if end_line < total_lines else None,
        ends_with_newline=ends_with_newline,
    )


def read_window(path: str, text: str, offset: int, limit: int) -> ReadResult:
    """Lines ``offset .. offset+limit`` of ``text`` (offset is 0-based, clamped at 0).

    Offset at or past the end of a non-empty file (or >0 on an empty one) is an
    ``invalid_argument`` error naming the line count; ``limit <= 0`` is
    :func:`nothing_requested`.
    """
    offset = max(offset, 0)
    lines = split_lines(text)
    total = len(lines)
    if reads_nothing(limit):
        return nothing_requested(path, limit, total)
    if offset > 0 and offset >= total:
        return offset_past_end(path, offset, total)
    return window_result(path, lines[offset : offset + limit], offset, total, text.endswith("\n"))


EOF_NEWLINE_HINT = "old_string ends with a newline but the file does not"
"""The start of the reason :func:`eof_newline_hint` gives."""


def eof_newline_hint(old: str, content: str) -> str | None:
    """Why ``old`` missed when only its trailing newline is wrong; None otherwise.

    As in the reference: the hint is given only when ``old`` without its
    newline is how the file ends, so it never sends the model after a newline
    when the text itself is wrong. When the shortened text occurs more than
    once, dropping the newline alone would fail again ("occurs N times"), so
    the hint says both. Line endings are compared as LF (CRLF files too).
    """
    count = _eof_newline_count(old, content)
    return _eof_newline_reason(count) if count else None


def _eof_newline_count(old: str, content: str) -> int:
    """How often ``old`` without its trailing newline occurs, when that is how the file
    ends (the case :func:`eof_newline_hint` explains); 0 otherwise."""
    old, content = _to_lf(old), _to_lf(content)
    stripped = old.removesuffix("\n")
    if stripped == old or not stripped or not content.endswith(stripped):
        return 0
    return content.count(stripped)


def _eof_newline_reason(count: int) -> str:
    """The hint's text when old_string without its newline occurs ``count`` times."""
    if count == 1:
        return (
            f"{EOF_NEWLINE_HINT}: drop the trailing newline from old_string "
            "(and from new_string if it ends with one)"
        )
    return (
        f"{EOF_NEWLINE_HINT}; without it, old_string occurs {count} times: drop the "
        "trailing newline and add surrounding context to make it unique"
    )


def _to_lf(text: str) -> str:
    return text.replace("\r\n", "\n")


def _to_crlf(text: str) -> str:
    return _to_lf(text).replace("\n", "\r\n")


def _edit_variants(content: str, old: str, new: str) -> list[tuple[str, str]]:
    """``(old, new)`` pairs to look for, in order; the first that occurs is applied.

    The file's line endings win. A file with CRLF tries the strings in CRLF
    first (a model copies LF text from a read, which drops the ``\\r``), then
    as given, then in LF (a mixed file's LF part). Any other file tries LF
    first (CRLF strings from ``download`` bytes or a Windows client), then as
    given. ``new`` always takes the form of the ``old`` it goes with, so an
    edit never mixes endings into a file nor rewrites the endings of lines it
    did not touch. A lone ``\\r`` is content, never a line ending.
    """
    if "\r\n" in content:
        pairs = [(_to_crlf(old), _to_crlf(new)), (old, new), (_to_lf(old), _to_lf(new))]
    else:
        pairs = [(_to_lf(old), _to_lf(new)), (old, new)]
    unique: list[tuple[str, str]] = []
    for pair in pairs:
        if all(pair[0] != seen for seen, _ in unique):
            unique.append(pair)
    return unique


def apply_edit(
    path: str, content: str, old: str, new: str, replace_all: bool
) -> tuple[str | None, EditResult]:
    """Exact string replacement, up to line endings; returns ``(new_content, result)``.

    ``new_content`` is None whenever ``result`` is an error (nothing to write).
    The match is exact except for CRLF vs LF (:func:`_edit_variants`), the
    reference's normalisation without its side effect (it rewrites a whole
    CRLF file with LF endings).
    """
    if old == "":
        return None, EditResult(
            path=path, error="old_string must not be empty", code="invalid_argument"
        )
    found = next(
        ((o, n, content.count(o)) for o, n in _edit_variants(content, old, new) if o in content),
        None,
    )
    if new == old or (found is not None and found[0] == found[1]):
        return None, EditResult(
            path=path,
            error="new_string is identical to old_string: nothing to change",
            code="unchanged",
        )
    if found is None:
        near = _eof_newline_count(old, content)
        message = "old_string not found" + (f"; {_eof_newline_reason(near)}" if near else "")
        return None, EditResult(
            path=path, error=message, code="no_match", error_path=path, occurrences=near
        )
    old, new, count = found
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


MISSING_FINGERPRINT = "missing"
"""The fingerprint of a path that does not exist."""


def fingerprint(data: bytes) -> str:
    """A file's content as one token (``sha256:<hex>``): what a preview was computed
    against, what the model last read, what a journaled write left on disk. Equal
    tokens mean equal bytes, so comparing them finds a change made by anyone."""
    return "sha256:" + hashlib.sha256(data).hexdigest()
