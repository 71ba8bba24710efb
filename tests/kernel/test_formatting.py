"""What the model sees: exact rendering rules of backends.formatting (contract §2, §7)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

import pytest

from filegate.kernel.formatting import (
    NO_FILES_FOUND,
    NO_MATCHES_FOUND,
    GrepOutputMode,
    Rendered,
    delete_blocked,
    edit_multiple_message,
    format_delete,
    format_edit,
    format_error,
    format_execute,
    format_glob,
    format_grep,
    format_ls,
    format_write,
    looks_like_regex,
    needs_offload,
    not_read_before_edit,
    offload_stub,
    permission_denied,
)
from filegate.kernel.limits import (
    DEFAULT_GREP_MAX,
    LIST_CHAR_LIMIT,
    MAX_LINE_CHARS,
    PREVIEW_LINE_CHARS,
    READ_OUTPUT_CHAR_LIMIT,
)
from filegate.kernel.protocol import (
    DeleteResult,
    EditResult,
    ErrorCode,
    ExecuteResult,
    FileInfo,
    GlobResult,
    GrepMatch,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
)
from filegate.kernel.read_format import ReadPlan, format_read, plan_read
from filegate.kernel.textops import eof_newline_hint, split_lines

HINT = re.compile(
    r"\[Read (\d+) lines \(lines (\d+)-(\d+) of (\d+) total\)\. "
    r"(\d+) lines remaining from offset (\d+)\.\]"
)


def window(content: str, offset: int, limit: int, path: str = "/f.txt") -> ReadResult:
    """A ReadResult the way a backend builds it from a file's content."""
    lines = split_lines(content)
    page = lines[offset : offset + limit]
    end = offset + len(page)
    return ReadResult(
        path=path,
        lines=page,
        total_lines=len(lines),
        start_line=offset + 1 if page else 0,
        end_line=end if page else 0,
        next_offset=end if end < len(lines) else None,
    )


def read(content: str, offset: int = 0, limit: int = 100) -> Rendered:
    plan = plan_read(offset, limit)
    return format_read(window(content, plan.offset, plan.limit), plan)


def marker_of(row: str) -> str:
    return row.lstrip(" ").split("  ", 1)[0]


def chunk_of(row: str) -> str:
    return row.lstrip(" ").split("  ", 1)[1]


def numbered(n: int) -> str:
    return "".join(f"line{i}\n" for i in range(1, n + 1))


# --------------------------------------------------------------------------- split_lines


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("a", ["a"]),
        ("a\n", ["a"]),
        ("a\nb", ["a", "b"]),
        ("a\n\n", ["a", ""]),
        ("\n", [""]),
        ("a\r\nb\r\n", ["a\r", "b\r"]),
    ],
)
def test_split_lines_trailing_newline_adds_no_row(text: str, expected: list[str]) -> None:
    assert split_lines(text) == expected


# --------------------------------------------------------------------------- numbering


@pytest.mark.parametrize(
    ("n_lines", "offset", "expected_first", "expected_last"),
    [
        (9, 0, "1  line1", "9  line9"),
        (10, 0, " 1  line1", "10  line10"),
        (99, 0, " 1  line1", "99  line99"),
        (100, 0, "  1  line1", "100  line100"),
        (100, 95, " 96  line96", "100  line100"),
        (99, 95, "96  line96", "99  line99"),
        (1000, 998, " 999  line999", "1000  line1000"),
    ],
)
def test_numbers_right_aligned_to_widest_on_page(
    n_lines: int, offset: int, expected_first: str, expected_last: str
) -> None:
    rendered = read(numbered(n_lines), offset=offset, limit=200)
    rows = rendered.text.split("\n")
    assert not rendered.is_error
    assert rows[0] == expected_first
    assert rows[-1] == expected_last
    marker_widths = {len(row.split("  line")[0]) for row in rows}
    assert len(marker_widths) == 1, "every marker padded to one width"


def test_width_follows_the_page_not_the_file() -> None:
    # lines 1-9 of a 100-line file: widest number on the page is 9 -> width 1
    rendered = read(numbered(100), offset=0, limit=9)
    assert rendered.text.startswith("1  line1\n2  line2\n")


def test_trailing_newline_adds_no_row_in_read() -> None:
    with_nl = read("a\nb\n")
    without_nl = read("a\nb")
    assert with_nl == without_nl == Rendered("1  a\n2  b")


def test_blank_lines_are_kept_as_rows() -> None:
    assert read("a\n\nb\n").text == "1  a\n2  \n3  b"


# --------------------------------------------------------------------------- continuation rows


@pytest.mark.parametrize(
    ("length", "markers"),
    [
        (MAX_LINE_CHARS - 1, ["1"]),
        (MAX_LINE_CHARS, ["1"]),
        (MAX_LINE_CHARS + 1, ["1", "1.1"]),
        (2 * MAX_LINE_CHARS, ["1", "1.1"]),
        (2 * MAX_LINE_CHARS + 1, ["1", "1.1", "1.2"]),
        (3 * MAX_LINE_CHARS + 7, ["1", "1.1", "1.2", "1.3"]),
    ],
)
def test_long_lines_split_into_continuation_rows(length: int, markers: list[str]) -> None:
    line = "".join(chr(ord("a") + i % 26) for i in range(length))
    rows = read(line + "\n").text.split("\n")
    width = max(len(m) for m in markers)
    assert [row[:width].strip() for row in rows] == markers
    chunks = [row[width + 2 :] for row in rows]
    assert "".join(chunks) == line
    assert all(len(chunk) <= MAX_LINE_CHARS for chunk in chunks)


def test_continuation_rows_between_normal_lines() -> None:
    content = "short\n" + "x" * (MAX_LINE_CHARS + 3) + "\nafter\n"
    rows = read(content).text.split("\n")
    assert rows[0] == "  1  short"
    assert rows[1] == "  2  " + "x" * MAX_LINE_CHARS
    assert rows[2] == "2.1  xxx"
    assert rows[3] == "  3  after"


def test_continuation_rows_do_not_eat_the_line_limit() -> None:
    # limit counts source lines: 3 long lines still all show with limit=3
    content = "y" * (MAX_LINE_CHARS * 2) + "\nz\nw\nv\n"
    rendered = read(content, limit=3)
    assert "3  w" in rendered.text
    hint = HINT.search(rendered.text)
    assert hint is not None and hint.groups() == ("3", "1", "3", "4", "1", "3")


# --------------------------------------------------------------------------- pagination hint


@pytest.mark.parametrize(
    ("total", "offset", "limit", "expected"),
    [
        (25, 0, 10, (10, 1, 10, 25, 15, 10)),
        (25, 10, 10, (10, 11, 20, 25, 5, 20)),
        (250, 100, 100, (100, 101, 200, 250, 50, 200)),
        (2, 1, 1, None),  # reads the last line: nothing remains
        (25, 20, 10, None),  # window reaches the end
        (25, 15, 10, None),  # exactly the end
        (26, 15, 10, (10, 16, 25, 26, 1, 25)),
    ],
)
def test_pagination_hint_arithmetic(
    total: int, offset: int, limit: int, expected: tuple[int, ...] | None
) -> None:
    rendered = read(numbered(total), offset=offset, limit=limit)
    match = HINT.search(rendered.text)
    if expected is None:
        assert match is None
        assert "[Read" not in rendered.text
    else:
        assert match is not None
        assert tuple(int(g) for g in match.groups()) == expected
        assert rendered.text.endswith(match.group(0))


def test_hint_offset_continues_without_gaps_or_overlap() -> None:
    content = numbered(37)
    seen: list[str] = []
    offset = 0
    for _ in range(10):
        rendered = read(content, offset=offset, limit=10)
        seen += [chunk_of(row) for row in rendered.text.split("\n\n")[0].split("\n")]
        match = HINT.search(rendered.text)
        if match is None:
            break
        offset = int(match.group(6))
    assert seen == [f"line{i}" for i in range(1, 38)]


# --------------------------------------------------------------------------- offsets and limits


@pytest.mark.parametrize("offset", [-1, -5, -1000])
def test_negative_offset_reads_from_line_one_and_says_so(offset: int) -> None:
    plan = plan_read(offset, 10)
    assert plan.offset == 0 and plan.limit == 10 and plan.early is None
    assert plan.note is not None and str(offset) in plan.note and "line 1" in plan.note
    rendered = read(numbered(3), offset=offset, limit=10)
    assert rendered.text.split("\n")[0] == plan.note
    assert rendered.text.split("\n")[1:] == ["1  line1", "2  line2", "3  line3"]
    assert not rendered.is_error


@pytest.mark.parametrize("limit", [0, -1, -100])
def test_limit_not_positive_reads_nothing_and_says_why(limit: int) -> None:
    plan = plan_read(3, limit)
    assert plan.early is not None
    assert f"limit={limit}" in plan.early.text and "limit >= 1" in plan.early.text
    # the early answer wins even if a caller passes a result anyway
    assert format_read(window(numbered(5), 0, 5), plan) == plan.early


def test_negative_offset_and_zero_limit_keep_both_explanations() -> None:
    plan = plan_read(-2, 0)
    rendered = format_read(ReadResult(), plan)
    assert plan.note is not None and plan.early is not None
    assert rendered.text == f"{plan.note}\n{plan.early.text}"


def test_plan_passes_normal_arguments_through() -> None:
    assert plan_read(7, 30) == ReadPlan(7, 30)


@pytest.mark.parametrize(("total", "offset"), [(10, 10), (10, 11), (1, 500), (3000, 3000)])
def test_offset_past_end_is_an_error_naming_the_length(total: int, offset: int) -> None:
    rendered = read(numbered(total), offset=offset)
    assert rendered.is_error
    assert rendered.text.startswith("Error: ")
    assert f"{total} lines" in rendered.text
    assert str(offset) in rendered.text and "/f.txt" in rendered.text


def test_last_valid_offset_is_not_an_error() -> None:
    rendered = read(numbered(10), offset=9)
    assert rendered == Rendered("10  line10")


@pytest.mark.parametrize("offset", [0, 5, -1])
def test_empty_file_is_a_reminder_not_an_error(offset: int) -> None:
    rendered = read("", offset=offset)
    assert not rendered.is_error
    assert rendered.text.endswith("System reminder: the file /f.txt exists but is empty.")


def test_empty_binary_file_is_the_empty_reminder() -> None:
    result = ReadResult(path="/e.png", data=b"", encoding="base64")
    assert format_read(result, plan_read(0, 100)).text == (
        "System reminder: the file /e.png exists but is empty."
    )


def test_binary_result_gets_a_placeholder_note() -> None:
    result = ReadResult(path="/i.png", data=b"\x89PNG....", encoding="base64", size=8)
    rendered = format_read(result, plan_read(0, 100))
    assert not rendered.is_error
    assert "/i.png" in rendered.text and "8 bytes" in rendered.text


def test_backend_error_passes_through_as_error() -> None:
    result = ReadResult(error="file not found: /nope", code="file_not_found")
    assert format_read(result, plan_read(0, 100)) == Rendered(
        "Error: file not found: /nope", is_error=True, code="file_not_found"
    )


# --------------------------------------------------------------------------- the 80 000-char cut


def _rows_and_footer(text: str) -> tuple[list[str], str]:
    body, footer = text.split("\n\n", 1)
    return body.split("\n"), footer


def test_small_output_is_not_cut() -> None:
    content = ("a" * 990 + "\n") * 79  # ~79 000 chars rendered
    rendered = read(content, limit=79)
    assert "truncated" not in rendered.text
    assert len(rendered.text) <= READ_OUTPUT_CHAR_LIMIT


@pytest.mark.parametrize(("line_len", "n_lines", "total"), [(1000, 100, 300), (999, 100, 100)])
def test_output_over_limit_cut_at_whole_line_with_recomputed_hint(
    line_len: int, n_lines: int, total: int
) -> None:
    content = "".join(f"{i:04d}" + "q" * (line_len - 4) + "\n" for i in range(1, total + 1))
    rendered = read(content, limit=n_lines)
    assert len(rendered.text) <= READ_OUTPUT_CHAR_LIMIT
    rows, footer = _rows_and_footer(rendered.text)
    last_shown = int(marker_of(rows[-1]))
    assert 70 <= last_shown < n_lines
    # every shown row is a whole line
    assert all(len(chunk_of(row)) == line_len for row in rows)
    assert f"after line {last_shown}" in footer
    match = HINT.search(footer)
    assert match is not None
    k, s, e, t, r, o = (int(g) for g in match.groups())
    assert (k, s, e, t, r, o) == (last_shown, 1, last_shown, total, total - last_shown, last_shown)
    # the next page starts exactly after the last row shown
    assert read(content, offset=o, limit=1).text.startswith(f"{o + 1}  {o + 1:04d}")


def test_cut_keeps_continuation_rows_of_a_line_together() -> None:
    long_line = "L" * (MAX_LINE_CHARS * 3)
    content = "".join(long_line + "\n" for _ in range(10))
    rendered = read(content, limit=10)
    rows, footer = _rows_and_footer(rendered.text)
    markers = [marker_of(row) for row in rows]
    shown = sorted({int(m.split(".")[0]) for m in markers})
    for line_no in shown:
        assert [m for m in markers if m.split(".")[0] == str(line_no)] == [
            str(line_no),
            f"{line_no}.1",
            f"{line_no}.2",
        ]
    match = HINT.search(footer)
    assert match is not None and int(match.group(3)) == shown[-1] == int(match.group(6))
    assert len(rendered.text) <= READ_OUTPUT_CHAR_LIMIT


def test_cut_when_window_reached_end_still_gives_a_hint() -> None:
    content = ("b" * 2000 + "\n") * 60  # all 60 lines requested, they do not fit
    rendered = read(content, limit=100)
    match = HINT.search(rendered.text)
    assert match is not None
    assert int(match.group(4)) == 60 and int(match.group(5)) == 60 - int(match.group(3))


def test_single_line_longer_than_budget_shows_what_fits() -> None:
    content = "s" * 200_000 + "\nnext\n"
    rendered = read(content)
    assert len(rendered.text) <= READ_OUTPUT_CHAR_LIMIT
    rows, footer = _rows_and_footer(rendered.text)
    assert marker_of(rows[0]) == "1" and len(rows) > 10
    assert [marker_of(row) for row in rows[1:]] == [f"1.{k}" for k in range(1, len(rows))]
    assert "inside line 1" in footer and "200000 characters" in footer
    match = HINT.search(footer)
    assert match is not None and match.groups() == ("1", "1", "1", "2", "1", "1")


def test_note_counts_against_the_budget() -> None:
    content = ("n" * 1000 + "\n") * 100
    rendered = read(content, offset=-1, limit=100)
    assert rendered.text.startswith("[Note: offset -1")
    assert len(rendered.text) <= READ_OUTPUT_CHAR_LIMIT


# --------------------------------------------------------------------------- ls / glob


def test_ls_lists_paths_in_backend_order() -> None:
    result = LsResult(
        entries=[
            FileInfo(path="/b.txt", size=3),
            FileInfo(path="/a/", is_dir=True),
            FileInfo(path="/c.md", size=1),
        ]
    )
    assert format_ls(result) == Rendered("/b.txt\n/a/\n/c.md")


@pytest.mark.parametrize(
    ("rendered",),
    [(format_ls(LsResult()),), (format_glob(GlobResult()),)],
)
def test_empty_listing_says_no_files_found(rendered: Rendered) -> None:
    assert rendered == Rendered(NO_FILES_FOUND) == Rendered("No files found")


def test_glob_lists_matches() -> None:
    assert format_glob(GlobResult(matches=["/x.py", "/d/y.py"])).text == "/x.py\n/d/y.py"


def test_glob_truncated_says_incomplete() -> None:
    text = format_glob(GlobResult(matches=["/x.py"], truncated=True)).text
    assert text.startswith("/x.py\n\n[")
    assert "incomplete" in text and "narrower" in text


@pytest.mark.parametrize(
    ("make", "n"),
    [
        (lambda paths: format_ls(LsResult(entries=[FileInfo(path=p) for p in paths])), 3000),
        (lambda paths: format_glob(GlobResult(matches=paths)), 3000),
        (lambda paths: format_glob(GlobResult(matches=paths, truncated=True)), 5000),
    ],
)
def test_listing_over_limit_cut_at_whole_lines(
    make: Callable[[list[str]], Rendered], n: int
) -> None:
    paths = [f"/dir/{i:05d}/" + "p" * 40 for i in range(n)]
    rendered = make(paths)
    assert len(rendered.text) <= LIST_CHAR_LIMIT
    body, footer = rendered.text.split("\n\n", 1)
    shown = body.split("\n")
    assert shown == paths[: len(shown)]
    assert f"showing {len(shown)} of {n}" in footer and "Narrow" in footer
    assert len(body) > LIST_CHAR_LIMIT - 1000


def test_listing_at_limit_is_not_cut() -> None:
    paths = ["/" + "p" * 99] * (LIST_CHAR_LIMIT // 101)
    text = format_glob(GlobResult(matches=paths)).text
    assert "truncated" not in text and text.count("\n") == len(paths) - 1


@pytest.mark.parametrize(
    "rendered",
    [
        format_ls(LsResult(error="not a directory: /f", code="not_a_directory")),
        format_glob(GlobResult(error="not a directory: /f", code="not_a_directory")),
        format_grep(
            GrepResult(error="not a directory: /f", code="not_a_directory"),
            pattern="x",
            output_mode="content",
        ),
    ],
)
def test_list_errors_pass_through(rendered: Rendered) -> None:
    assert rendered == Rendered("Error: not a directory: /f", is_error=True, code="not_a_directory")


# --------------------------------------------------------------------------- grep

MATCHES = [
    GrepMatch(path="/src/b.py", line=7, text="hello world"),
    GrepMatch(path="/a.txt", line=12, text="say hello"),
    GrepMatch(path="/src/b.py", line=2, text="hello"),
    GrepMatch(path="/a.txt", line=3, text="hello again"),
    GrepMatch(path="/Z.md", line=1, text="hello"),
]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("files_with_matches", "/Z.md\n/a.txt\n/src/b.py"),
        ("count", "/Z.md: 1\n/a.txt: 2\n/src/b.py: 2"),
        (
            "content",
            "/Z.md:\n  1: hello\n/a.txt:\n  3: hello again\n  12: say hello\n"
            "/src/b.py:\n  2: hello\n  7: hello world",
        ),
    ],
)
def test_grep_modes_sorted_by_path(mode: GrepOutputMode, expected: str) -> None:
    rendered = format_grep(GrepResult(matches=MATCHES), pattern="hello", output_mode=mode)
    assert rendered == Rendered(expected)


@pytest.mark.parametrize("mode", ["files_with_matches", "content", "count"])
def test_grep_truncated_says_valid_but_incomplete(mode: GrepOutputMode) -> None:
    text = format_grep(
        GrepResult(matches=MATCHES, truncated=True), pattern="hello", output_mode=mode
    ).text
    body, note = text.rsplit("\n\n", 1)
    assert "valid but incomplete" in note and "max_count" in note
    assert body == format_grep(GrepResult(matches=MATCHES), pattern="hello", output_mode=mode).text


def test_default_grep_cap() -> None:
    assert DEFAULT_GREP_MAX == 1000


def test_grep_over_limit_cut_before_note_is_appended() -> None:
    matches = [GrepMatch(path=f"/f{i:05d}.txt", line=1, text="x" * 200) for i in range(2000)]
    text = format_grep(
        GrepResult(matches=matches, truncated=True), pattern="x", output_mode="content"
    ).text
    assert len(text) <= LIST_CHAR_LIMIT
    assert text.endswith("to see more.]")
    assert "valid but incomplete" in text and "Output truncated" in text
    body = text.split("\n\n", 1)[0].split("\n")
    assert body[0] == "/f00000.txt:" and body[1] == "  1: " + "x" * 200


REGEXY = [
    "a|b",
    "foo.*bar",
    "x.+",
    r"\d+",
    r"file\.txt",
    "^start",
    "end$",
    "[abc]",
    r"\w+",
    "colou?r{2}",
    "(?i)foo",
    "(ab)+",
    "a{2,3}",
    ".?",
]
LITERAL = ["hello", "a.b", "foo()", "x + y", "price: $5", "C++", "what?", "1.5", "a-b_c", ""]


@pytest.mark.parametrize("pattern", REGEXY)
def test_looks_like_regex(pattern: str) -> None:
    assert looks_like_regex(pattern)


@pytest.mark.parametrize("pattern", LITERAL)
def test_plain_text_does_not_look_like_regex(pattern: str) -> None:
    assert not looks_like_regex(pattern)


@pytest.mark.parametrize("pattern", REGEXY)
def test_no_match_regex_pattern_gets_literal_hint(pattern: str) -> None:
    rendered = format_grep(GrepResult(), pattern=pattern, output_mode="files_with_matches")
    assert not rendered.is_error
    assert rendered.text.startswith(NO_MATCHES_FOUND)
    assert "literal" in rendered.text and repr(pattern) in rendered.text


@pytest.mark.parametrize("pattern", LITERAL)
def test_no_match_literal_pattern_gets_no_hint(pattern: str) -> None:
    rendered = format_grep(GrepResult(), pattern=pattern, output_mode="content")
    assert rendered == Rendered(NO_MATCHES_FOUND)


def test_the_hint_has_no_permission_channel() -> None:
    """Hidden matches never reach the formatter: it cannot tell (no oracle, contract §11)."""
    assert "removed_by_permissions" not in inspect.signature(format_grep).parameters
    rendered = format_grep(GrepResult(), pattern="a|b", output_mode="count")
    assert "literal" in rendered.text


def test_no_hint_when_something_matched() -> None:
    text = format_grep(
        GrepResult(matches=[GrepMatch(path="/x", line=1, text="a|b")]),
        pattern="a|b",
        output_mode="content",
    ).text
    assert "literal" not in text


def test_no_match_but_truncated_keeps_note() -> None:
    text = format_grep(GrepResult(truncated=True), pattern="zz", output_mode="content").text
    assert text.startswith(NO_MATCHES_FOUND) and "incomplete" in text


# --------------------------------------------------------------------------- write / edit / delete


def test_write_and_delete_success() -> None:
    assert format_write(WriteResult(path="/a.txt")) == Rendered("Successfully wrote /a.txt.")
    assert format_delete(DeleteResult(path="/d")) == Rendered("Successfully deleted /d.")


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (1, "Successfully replaced 1 occurrence in /a.py."),
        (2, "Successfully replaced 2 occurrences in /a.py."),
        (17, "Successfully replaced 17 occurrences in /a.py."),
    ],
)
def test_edit_success_reports_replacements(count: int, expected: str) -> None:
    assert format_edit(EditResult(path="/a.py", occurrences=count)) == Rendered(expected)


def test_edit_multiple_matches_says_n_and_how_to_fix() -> None:
    rendered = format_edit(
        EditResult(path="/a.py", occurrences=4, error="ambiguous", code="multiple_matches")
    )
    assert rendered.is_error
    assert "4 times" in rendered.text
    assert "replace_all" in rendered.text and "context" in rendered.text
    assert rendered.text == "Error: " + edit_multiple_message("/a.py", 4)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ("old_string not found", "no_match"),
        ("new_string is identical to old_string: nothing to change", "unchanged"),
        ("file not found: /a.py", "file_not_found"),
        ("ambiguous (count unknown)", "multiple_matches"),
    ],
)
def test_edit_errors_pass_through(error: str, code: ErrorCode) -> None:
    rendered = format_edit(EditResult(path="/a.py", error=error, code=code))
    assert rendered == Rendered(f"Error: {error}", is_error=True, code=code)


@pytest.mark.parametrize(
    ("old", "content", "hint"),
    [
        ("last line\n", "first\nlast line", True),
        ("last line\n", "first\nlast line\n", False),
        ("last line", "first\nlast", False),
        # As the reference: only when old_string minus its newline ends the file.
        ("x\n", "", False),
        ("typo\n", "first\nlast line", False),
        ("last line\r\n", "first\r\nlast line", True),
    ],
)
def test_edit_not_found_trailing_newline_hint(old: str, content: str, hint: bool) -> None:
    message = eof_newline_hint(old, content)
    assert ("trailing newline" in (message or "")) is hint


def test_edit_unchanged_and_not_read_messages() -> None:
    rendered = not_read_before_edit("/a.py")
    assert rendered.is_error and "read_file" in rendered.text and "/a.py" in rendered.text


@pytest.mark.parametrize(
    "rendered",
    [
        format_write(WriteResult(error="is a directory: /d", code="is_directory")),
        format_delete(DeleteResult(error="is a directory: /d", code="is_directory")),
    ],
)
def test_write_delete_errors(rendered: Rendered) -> None:
    assert rendered == Rendered("Error: is a directory: /d", is_error=True, code="is_directory")


# --------------------------------------------------------------------------- errors / permissions


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("boom", "Error: boom"),
        ("Error: already prefixed", "Error: already prefixed"),
    ],
)
def test_format_error(message: str, expected: str) -> None:
    assert format_error(message, "io_error") == Rendered(expected, is_error=True, code="io_error")


def test_permission_denied_names_operation_and_path() -> None:
    rendered = permission_denied("write", "/secrets/.env")
    assert rendered.is_error
    assert "permission denied" in rendered.text
    assert "write" in rendered.text and "/secrets/.env" in rendered.text


def test_delete_blocked_lists_patterns() -> None:
    rendered = delete_blocked("/data", ["/data/keep/**", "/data/*.lock"])
    assert rendered.is_error
    assert "/data/keep/**, /data/*.lock" in rendered.text and "/data" in rendered.text


# --------------------------------------------------------------------------- execute


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (ExecuteResult(output="hi\n", exit_code=0), "hi\n[Command succeeded with exit code 0]"),
        (ExecuteResult(output="hi", exit_code=0), "hi\n[Command succeeded with exit code 0]"),
        (ExecuteResult(output="", exit_code=0), "[Command succeeded with exit code 0]"),
        (
            ExecuteResult(output="[stderr] bad\n", exit_code=2),
            "[stderr] bad\n[Command failed with exit code 2]",
        ),
        (ExecuteResult(output="", exit_code=-9), "[Command failed with exit code -9]"),
        (ExecuteResult(output="x", exit_code=None), "x\n[Command finished without an exit code]"),
    ],
)
def test_execute_footer(result: ExecuteResult, expected: str) -> None:
    assert format_execute(result) == Rendered(expected)


def test_execute_truncation_notice_after_footer() -> None:
    text = format_execute(ExecuteResult(output="a" * 10, exit_code=1, truncated=True)).text
    lines = text.split("\n")
    assert lines[0] == "a" * 10
    assert lines[1] == "[Command failed with exit code 1]"
    assert lines[2].startswith("[Output truncated")


def test_execute_error_keeps_partial_output() -> None:
    rendered = format_execute(
        ExecuteResult(output="partial\n", error="command timed out after 5s", code="timeout")
    )
    assert rendered == Rendered(
        "partial\nError: command timed out after 5s", is_error=True, code="timeout"
    )


def test_execute_timeout_shows_exit_code_124() -> None:
    result = ExecuteResult(
        output="", exit_code=124, error="command timed out after 5 s and was killed", code="timeout"
    )
    assert format_execute(result) == Rendered(
        "Error: command timed out after 5 s and was killed\n[Command failed with exit code 124]",
        is_error=True,
        code="timeout",
    )


# --------------------------------------------------------------------------- offload stubs


def test_needs_offload_threshold() -> None:
    assert not needs_offload("x" * 80_000)
    assert needs_offload("x" * 80_001)
    assert not needs_offload("x" * 400, token_limit=100)
    assert needs_offload("x" * 401, token_limit=100)


def _stub_rows(stub: str) -> list[str]:
    return stub.split("\n\n", 1)[1].split("\n")


def test_stub_head_tail_and_gap() -> None:
    text = "\n".join(f"row {i}" for i in range(1, 101)) + "\n"
    stub = offload_stub("/large_tool_results/call_1", text)
    assert "/large_tool_results/call_1" in stub.split("\n")[0]
    assert 'read_file(file_path="/large_tool_results/call_1"' in stub
    rows = _stub_rows(stub)
    assert rows == [
        "  1  row 1",
        "  2  row 2",
        "  3  row 3",
        "  4  row 4",
        "  5  row 5",
        "... [90 lines truncated] ...",
        " 96  row 96",
        " 97  row 97",
        " 98  row 98",
        " 99  row 99",
        "100  row 100",
    ]


@pytest.mark.parametrize(("n", "gap"), [(10, None), (11, 1), (12, 2), (3, None), (1, None)])
def test_stub_gap_boundaries(n: int, gap: int | None) -> None:
    text = "\n".join(f"r{i}" for i in range(1, n + 1))
    rows = _stub_rows(offload_stub("/x", text))
    gaps = [row for row in rows if row.startswith("...")]
    if gap is None:
        assert gaps == [] and len(rows) == n
    else:
        assert gaps == [f"... [{gap} lines truncated] ..."] and len(rows) == 11


def test_stub_custom_head_tail_and_label() -> None:
    text = "\n".join(f"r{i}" for i in range(1, 21))
    stub = offload_stub("/conversation_history/m.md", text, head=2, tail=1, what="Message")
    assert stub.startswith("Message too large")
    assert _stub_rows(stub) == [" 1  r1", " 2  r2", "... [17 lines truncated] ...", "20  r20"]


def test_stub_caps_huge_preview_lines() -> None:
    stub = offload_stub("/x", "h" * 500_000)
    assert len(stub) < PREVIEW_LINE_CHARS + 1000
    assert "chars cut" in stub


def test_stub_of_empty_text_is_just_the_header() -> None:
    stub = offload_stub("/x", "")
    assert "\n" not in stub and "/x" in stub
