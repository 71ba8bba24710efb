"""Filegate's answers as deepagents' result types, and our error codes in deepagents' words.

Structured answers (ls, glob, grep, the transfer activities) carry a Filegate
:data:`~filegate.kernel.protocol.ErrorCode`, mapped here to the message a
deepagents backend gives for the same condition, so prompts and middleware
written for deepagents read what they expect. The mutations (write, edit,
delete, execute) run as the journaled ``filegate.<tool>`` activities, whose
answer is the model text: the few facts deepagents needs from it (the
replacement count, the exit code, which failure it was) are read back with
patterns built *from the kernel's own formatters* at import time, so a change
of wording there changes the patterns too instead of silently breaking them.
"""

from __future__ import annotations

import base64
import errno
import os
import re

from deepagents.backends.protocol import (
    EditResult,
    ExecuteResponse,
    FileDownloadResponse,
    FileInfo,
    FileUploadResponse,
    GlobResult,
    GrepMatch,
    GrepResult,
    LsResult,
    ReadResult,
)
from deepagents.backends.utils import EMPTY_CONTENT_WARNING

from filegate.kernel import protocol as fg
from filegate.kernel.formatting import (
    EXECUTE_TRUNCATED_NOTE,
    edit_multiple_message,
    format_edit,
    format_execute,
    permission_denied,
)
from filegate.kernel.gates import approval_missing
from filegate.kernel.mount import Mount
from filegate.kernel.operation_types import ReadWindow, TransferAnswer
from filegate.kernel.textops import EOF_NEWLINE_HINT, eof_newline_reason
from filegate.kernel.tool_types import ToolOutcome

_PATH = "\x00path\x00"
"""A sentinel no real path contains, for turning kernel messages into patterns."""


def _pattern(message: str, **groups: str) -> re.Pattern[str]:
    """A kernel message with its sentinel parts turned into named groups."""
    pattern = re.escape(message)
    for name, sentinel in groups.items():
        pattern = pattern.replace(re.escape(sentinel), f"(?P<{name}>.+?)", 1)
    return re.compile(pattern)


# --------------------------------------------------------------------------- structured answers

_FILE_OPERATION_ERRORS = frozenset(
    {"file_not_found", "permission_denied", "is_directory", "invalid_path"}
)


def _file_operation_error(code: str | None, error: str | None) -> str | None:
    """An upload/download error as deepagents' ``FileOperationError`` literal where one fits."""
    if error is None:
        return None
    if code in _FILE_OPERATION_ERRORS:
        return code
    if code == "not_a_directory":
        return "invalid_path"  # a parent of the path is a file
    return f"{code or 'io_error'}: {error}"


def ls_result(
    mount: Mount, path: str, listing: fg.LsResult | None, outcome: ToolOutcome
) -> LsResult:
    if listing is None or listing.error is not None:
        code = listing.code if listing is not None else None
        if code == "file_not_found":
            return LsResult(error=f"Path '{path}': path_not_found")
        if code == "not_a_directory":
            return LsResult(error=f"Path '{path}': not_a_directory")
        why = _why(listing, outcome, mount.inward(path))
        return LsResult(error=f"Error listing '{path}': {why}")
    entries: list[FileInfo] = []
    for entry in listing.entries:
        info = FileInfo(path=mount.outward(entry.path.rstrip("/") or "/"), is_dir=entry.is_dir)
        if entry.size is not None:
            info["size"] = entry.size
        if entry.modified_at is not None:
            info["modified_at"] = entry.modified_at
        entries.append(info)
    return LsResult(entries=entries)


def glob_result(
    mount: Mount, path: str, listing: fg.GlobResult | None, outcome: ToolOutcome
) -> GlobResult:
    if listing is None or listing.error is not None:
        why = _why(listing, outcome, mount.inward(path))
        return GlobResult(error=f"Error globbing path '{path}': {why}")
    matches = [FileInfo(path=mount.outward(match), is_dir=False) for match in listing.matches]
    if listing.truncated:  # Filegate stops a glob at its time budget or result cap
        return GlobResult(matches=matches, truncated=True, truncation_reason="budget")
    return GlobResult(matches=matches)


def grep_result(
    mount: Mount, path: str, listing: fg.GrepResult | None, outcome: ToolOutcome
) -> GrepResult:
    if listing is None or listing.error is not None:
        why = _why(listing, outcome, mount.inward(path))
        return GrepResult(error=f"Error searching path '{path}': {why}")
    matches = [
        GrepMatch(path=mount.outward(match.path), line=match.line, text=match.text)
        for match in listing.matches
    ]
    return GrepResult(matches=matches, truncated=listing.truncated)


def _why(listing: fg.BackendResult | None, outcome: ToolOutcome, local: str) -> str:
    """The error's reason: the structured one (it does not name the path), else the
    model text (an entry-gate refusal has no structured result)."""
    if listing is not None and listing.error:
        return listing.error
    return _reason(_text(outcome), local)


def read_result(mount: Mount, path: str, window: ReadWindow, *, limit: int) -> ReadResult:
    """deepagents' raw read window: its lines joined with LF, and the file's final newline.

    Joined with ``\\n`` as deepagents' sandbox backends answer (langchain-tests'
    sandbox suite checks that a page is exactly that, so pages joined with
    ``\\n`` give the file back). A window that reaches the end of a file ending
    in a newline keeps that newline, as deepagents' Filesystem and State
    backends do: an ``old_string`` copied from the read then matches the end of
    the file, or gets the trailing-newline hint (the sandbox backend drops it).
    An empty file answers the reference's reminder; ``limit <= 0`` (the
    caller read one line to learn what the file is) answers a binary file's
    bytes, an empty file's reminder, and otherwise an empty window flagged
    ``no_lines_requested``.
    """
    if window.error is not None:
        return ReadResult(error=_read_error(mount, path, window))
    if window.binary:
        encoded = base64.b64encode(window.data or b"").decode("ascii")
        return ReadResult(file_data={"content": encoded, "encoding": "base64"})
    if not window.lines and window.total_lines == 0:
        return ReadResult(file_data={"content": EMPTY_CONTENT_WARNING, "encoding": "utf-8"})
    if limit <= 0 or not window.lines:
        return ReadResult(
            file_data={"content": "", "encoding": "utf-8"}, no_lines_requested=limit <= 0
        )
    content = "\n".join(window.lines)
    if window.end_line >= window.total_lines and window.ends_with_newline:
        content += "\n"
    return ReadResult(
        file_data={"content": content, "encoding": "utf-8"},
        total_lines=window.total_lines,
        start_line=window.start_line,
        end_line=window.end_line,
        next_offset=window.next_offset,
    )


def _read_error(mount: Mount, path: str, window: ReadWindow) -> str:
    """A failed read in deepagents' words, naming ``path`` once and nothing Filegate-side.

    Never starts with ``Error:``: deepagents' ``read_file`` puts that in front
    of a backend's read error itself. The forms are the reference backends':
    ``File '<path>' not found``, ``File '<path>': <reason>`` (its sandbox's, for
    a bad request: a directory, an offset past the end, a binary file too big),
    and ``Error reading file '<path>': <reason>`` (its filesystem's, for an
    I/O failure); a permission rule's refusal is the gate's own sentence.
    """
    reason = _read_reason(mount, window)
    if window.code == "file_not_found":
        return f"File '{path}' not found"
    if window.code == "permission_denied":
        refusal = _gate_refusal(mount, window)
        if refusal is not None:
            return refusal
        return f"Permission denied reading file '{path}': {reason}"
    if window.code == "is_directory":
        return f"File '{path}': is a directory, not a file"
    if window.code in {"invalid_argument", "invalid_path", "too_large", "binary_file"}:
        return f"File '{path}': {reason}"
    return f"Error reading file '{path}': {reason}"


def _read_reason(mount: Mount, window: ReadWindow) -> str:
    """The backend's reason; the path it is about only when that is another path
    (a parent, a link's target), mapped out of the mount."""
    reason = window.error or "unknown error"
    if window.error_path is None:  # a worker from before error_path: "<path>: <reason>"
        return reason.removeprefix(f"{window.path}: ")
    if window.error_path != window.path:
        return f"{mount.outward(window.error_path)}: {reason}"
    return reason


_GATE_REFUSALS = tuple(
    _pattern(render("read", _PATH).text.removeprefix("Error: "), path=_PATH)
    for render in (permission_denied, approval_missing)
)
"""The entry gate's refusals (the transfer sends their text), with the path as a group."""


def _gate_refusal(mount: Mount, window: ReadWindow) -> str | None:
    """An entry-gate refusal said again about the path in deepagents' space (or None)."""
    text = window.error or ""
    for render, pattern in zip((permission_denied, approval_missing), _GATE_REFUSALS, strict=True):
        found = pattern.fullmatch(text)
        if found is not None and found["path"] == window.path:
            return render("read", mount.outward(window.path)).text.removeprefix("Error: ")
    return None


def upload_responses(mount: Mount, answers: list[TransferAnswer]) -> list[FileUploadResponse]:
    return [
        FileUploadResponse(
            path=mount.outward(answer.path), error=_file_operation_error(answer.code, answer.error)
        )
        for answer in answers
    ]


def download_responses(mount: Mount, answers: list[TransferAnswer]) -> list[FileDownloadResponse]:
    return [
        FileDownloadResponse(
            path=mount.outward(answer.path),
            content=answer.content if answer.error is None else None,
            error=_file_operation_error(answer.code, answer.error),
        )
        for answer in answers
    ]


# --------------------------------------------------------------------------- model-text answers


_MULTIPLE = _pattern(edit_multiple_message(_PATH, 987654), count="987654", path=_PATH)
_EOF_AMBIGUOUS = _pattern(eof_newline_reason(987654), count="987654")
"""The trailing-newline hint when the shortened old_string occurs several times."""
_STRING_MISSING = re.compile(r"\bold_string\b[^.]*\bnot found", re.IGNORECASE)
"""An edit whose old_string is absent: the kernel's wording ("old_string was not found
in ...") and the backends' reason ("old_string not found") alike."""
_REPLACED = _pattern(
    format_edit(fg.EditResult(path=_PATH, occurrences=987654)).text, count="987654", path=_PATH
)
_REPLACED_ONE = _pattern(format_edit(fg.EditResult(path=_PATH, occurrences=1)).text, path=_PATH)
_NOT_FOUND = tuple(
    reason
    for reason in (
        getattr(fg, "FILE_NOT_FOUND", "file not found"),
        getattr(fg, "PATH_NOT_FOUND", "path not found"),
        os.strerror(errno.ENOENT).lower(),
    )
)
"""How a missing target reads in a tool's error text (the kernel's reasons, the OS's)."""


def _text(outcome: ToolOutcome) -> str:
    content = outcome.content
    return content if isinstance(content, str) else "\n".join(str(b) for b in content)


def _reason(text: str, local: str) -> str:
    """A tool error's reason without the ``Error:`` mark and the (Filegate-side) path.

    The kernel writes a failure about a path as ``<path>: <reason>``; the
    adapter names the path itself, the way deepagents does, in its own form.
    """
    reason = text.removeprefix("Error: ")
    return reason.removeprefix(f"{local}: ")


def _missing(text: str) -> bool:
    lowered = text.lower()
    return any(reason in lowered for reason in _NOT_FOUND)


def write_error(path: str, local: str, outcome: ToolOutcome) -> str | None:
    """deepagents' message for a failed write, or None when it succeeded."""
    if outcome.status != "error":
        return None
    return f"Error writing file '{path}': {_reason(_text(outcome), local)}"


def edit_result(path: str, local: str, old: str, outcome: ToolOutcome) -> EditResult:
    text = _text(outcome)
    if outcome.status == "error":
        multiple = _MULTIPLE.search(text)
        if multiple is not None:
            return EditResult(
                error=f"Error: String '{old}' appears multiple times "
                f"({multiple['count']} occurrences). Use replace_all=True to replace all "
                "occurrences, or include more context to make it unique."
            )
        if EOF_NEWLINE_HINT in text:
            return EditResult(error=_eof_newline_error(text))
        if _STRING_MISSING.search(text):
            return EditResult(error=f"Error: String not found in file: '{old}'")
        if _missing(text):
            return EditResult(error=f"Error: File '{path}' not found")
        return EditResult(error=f"Error editing file '{path}': {_reason(text, local)}")
    replaced = _REPLACED.fullmatch(text)
    if replaced is not None:
        return EditResult(path=path, occurrences=int(replaced["count"]))
    return EditResult(path=path, occurrences=1 if _REPLACED_ONE.fullmatch(text) else None)


def _eof_newline_error(text: str) -> str:
    """The kernel's trailing-newline hint in deepagents' words (``perform_string_replacement``)."""
    head = "Error: old_string ends with a newline, but the file does not end with a newline."
    ambiguous = _EOF_AMBIGUOUS.search(text)
    if ambiguous is None:
        return (
            f"{head} Retry with the trailing newline removed from old_string (and from "
            "new_string if it also ends with a newline)."
        )
    return (
        f"{head} With the trailing newline removed, old_string would appear "
        f"{ambiguous['count']} times in the file. Retry with the trailing newline removed "
        "and add surrounding context so the match is unique."
    )


def delete_error(path: str, local: str, outcome: ToolOutcome) -> str | None:
    """deepagents' message for a failed delete, or None when it succeeded."""
    if outcome.status != "error":
        return None
    text = _text(outcome)
    if _missing(text):
        return f"Error: '{path}' not found"
    return f"Error deleting '{path}': {_reason(text, local)}"


_EXIT_OK = format_execute(fg.ExecuteResult(exit_code=0)).text
_EXIT_NONE = format_execute(fg.ExecuteResult(exit_code=None)).text
_EXIT_FAILED = _pattern(format_execute(fg.ExecuteResult(exit_code=987654)).text, code="987654")


def execute_response(outcome: ToolOutcome) -> ExecuteResponse:
    """Output, exit code and truncation from ``execute``'s text (footer lines at the end).

    An output that was offloaded to S3 stays the stub the model would see (a
    preview and the path to page it from), as deepagents' own large-output
    offload does. A tool error keeps its error text in the output; its exit
    code is the footer's when it has one (a timeout: 124, an empty command:
    1, as deepagents' shell reports them), else None (an unsupported backend,
    a refused command).
    """
    text = _text(outcome)
    truncated = text.endswith(EXECUTE_TRUNCATED_NOTE)
    if truncated:
        text = text[: -len(EXECUTE_TRUNCATED_NOTE)].removesuffix("\n")
    if outcome.status == "error":
        head, _, footer = text.rpartition("\n")
        failed = _EXIT_FAILED.fullmatch(footer)
        if failed is not None:
            return ExecuteResponse(output=head, exit_code=int(failed["code"]), truncated=truncated)
        return ExecuteResponse(output=text, exit_code=None, truncated=truncated)
    output, _, footer = text.rpartition("\n")
    if footer == _EXIT_OK:
        return ExecuteResponse(output=output, exit_code=0, truncated=truncated)
    failed = _EXIT_FAILED.fullmatch(footer)
    if failed is not None:
        return ExecuteResponse(output=output, exit_code=int(failed["code"]), truncated=truncated)
    if footer == _EXIT_NONE:
        return ExecuteResponse(output=output, exit_code=None, truncated=truncated)
    return ExecuteResponse(output=text, exit_code=None, truncated=truncated)
