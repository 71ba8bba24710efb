"""Bounded-memory text passes over a readable byte stream.

Shared by every backend whose files arrive as streams (disk descriptors, S3
responses): they only need ``fh.read``, so the same window / grep / text
check serves them all and every backend answers a call the same way.
"""

from __future__ import annotations

import codecs
from typing import BinaryIO

from filegate.kernel.limits import reads_nothing
from filegate.kernel.protocol import GrepMatch, ReadResult
from filegate.kernel.textops import (
    decode_text,
    display_line,
    grep_text,
    nothing_requested,
    offset_past_end,
    window_result,
)

CHUNK = 1 << 20
"""Bytes read per call while streaming."""
WHOLE_FILE_SCAN = 8 << 20
"""grep reads files up to this size in one go (fast ``in`` pre-check)."""


def stream_text_window(fh: BinaryIO, path: str, offset: int, limit: int) -> ReadResult | None:
    """One pass over ``fh``: count lines, keep the window, validate UTF-8.

    Memory is one chunk plus the window, whatever the file size. ``offset``
    is clamped at 0. Returns None when the stream turns out to be binary.
    ``limit <= 0`` still scans the stream, so a binary file is returned as
    bytes and an empty one as empty whatever the limit
    (:func:`~filegate.kernel.textops.nothing_requested`).
    """
    offset = max(offset, 0)
    decoder = codecs.getincrementaldecoder("utf-8")()
    stop = offset + limit
    line_no = 0  # 0-based index of the line the cursor is in
    current: list[bytes] = []
    window: list[bytes] = []
    last = b""
    while True:
        chunk = fh.read(CHUNK)
        if not chunk:
            break
        if b"\x00" in chunk:
            return None
        try:
            decoder.decode(chunk)
        except UnicodeDecodeError:
            return None
        last = chunk[-1:]
        newlines = chunk.count(b"\n")
        if line_no + newlines < offset or line_no >= stop:
            line_no += newlines  # nothing of the window in this chunk
            continue
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            in_window = offset <= line_no < stop
            if nl == -1:
                if in_window:
                    current.append(chunk[start:])
                break
            if in_window:
                current.append(chunk[start:nl])
                window.append(b"".join(current))
                current = []
            line_no += 1
            start = nl + 1
            if line_no >= stop:
                line_no += chunk.count(b"\n", start)
                break
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return None
    total = line_no
    if last and last != b"\n":
        total += 1  # final line without a terminator
        if offset <= line_no < stop:
            window.append(b"".join(current))
    if reads_nothing(limit):
        return nothing_requested(path, limit, total)
    if offset > 0 and offset >= total:
        return offset_past_end(path, offset, total)
    lines = [w.decode("utf-8") for w in window]
    return window_result(path, lines, offset, total, ends_with_newline=last == b"\n")


def scan_stream(fh: BinaryIO, literal: str, path: str, limit: int | None) -> list[GrepMatch] | None:
    """Literal search of one open stream; None when it is binary.

    Small files are read whole (fast ``in`` pre-check); big ones are streamed
    line by line so memory stays bounded.
    """
    needle = literal.encode("utf-8")
    head = fh.read(WHOLE_FILE_SCAN + 1)
    if len(head) <= WHOLE_FILE_SCAN:
        if needle not in head:
            return [] if b"\x00" not in head else None
        text = decode_text(head)
        if text is None:
            return None
        return grep_text(literal, path, text, limit)
    return _scan_lines(fh, head, literal, path, limit)


def _scan_lines(
    fh: BinaryIO, head: bytes, literal: str, path: str, limit: int | None
) -> list[GrepMatch] | None:
    decoder = codecs.getincrementaldecoder("utf-8")()
    out: list[GrepMatch] = []
    pending = ""
    number = 0
    chunk = head
    while chunk:
        if b"\x00" in chunk:
            return None
        try:
            text = pending + decoder.decode(chunk)
        except UnicodeDecodeError:
            return None
        lines = text.split("\n")
        pending = lines.pop()
        for line in lines:
            number += 1
            if literal in line and (limit is None or len(out) < limit):
                out.append(
                    GrepMatch.model_construct(path=path, line=number, text=display_line(line))
                )
        chunk = fh.read(CHUNK)
    try:
        pending += decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return None
    if pending:
        number += 1
        if literal in pending and (limit is None or len(out) < limit):
            out.append(
                GrepMatch.model_construct(path=path, line=number, text=display_line(pending))
            )
    return out


def is_text_stream(fh: BinaryIO) -> bool:
    """Whole-stream check: no NUL byte and valid UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    while chunk := fh.read(CHUNK):
        if b"\x00" in chunk:
            return False
        try:
            decoder.decode(chunk)
        except UnicodeDecodeError:
            return False
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


__all__ = ["CHUNK", "WHOLE_FILE_SCAN", "is_text_stream", "scan_stream", "stream_text_window"]
