"""Filegate's answers as deepagents' result types, and our error codes in deepagents' words.

Every answer carries a Filegate :data:`~filegate.kernel.protocol.OutcomeCode`
(structured answers: ls, glob, grep, the transfer activities; the mutations'
:class:`~filegate.kernel.tool_types.ToolOutcome`: write, edit, delete,
execute, with the replacement count and the exit code beside it), mapped here
to the message a deepagents backend gives for the same condition, so prompts
and middleware written for deepagents read what they expect. Nothing here
reads the model's text to learn what happened: a change of wording in the
kernel cannot change what the adapter answers.
"""

from __future__ import annotations

import base64

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
from filegate.kernel.formatting import command_output, permission_denied
from filegate.kernel.gates import approval_missing
from filegate.kernel.mount import Mount
from filegate.kernel.operation_types import ReadWindow, TransferAnswer
from filegate.kernel.protocol import OutcomeCode, as_error_code
from filegate.kernel.tool_types import ToolOutcome

# --------------------------------------------------------------------------- structured answers

_FILE_OPERATION_ERRORS = frozenset(
    {"file_not_found", "permission_denied", "is_directory", "invalid_path"}
)


def _file_operation_error(code: OutcomeCode | None, error: str | None) -> str | None:
    """An upload/download error as deepagents' ``FileOperationError`` literal where one fits."""
    if error is None:
        return None
    code = as_error_code(code) if code is not None else None  # a rule's refusal: denied
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
    refusal = _gate_refusal(mount, window)
    if refusal is not None:
        return refusal
    if window.code == "permission_denied":
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


def _gate_refusal(mount: Mount, window: ReadWindow) -> str | None:
    """An entry-gate refusal said again about the path in deepagents' space (or None)."""
    path = mount.outward(window.path)
    if window.code == "denied":
        return permission_denied("read", path).text.removeprefix("Error: ")
    if window.code == "approval_required":
        return approval_missing("read", path).text.removeprefix("Error: ")
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


# --------------------------------------------------------------------------- tool answers


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


def write_error(path: str, local: str, outcome: ToolOutcome) -> str | None:
    """deepagents' message for a failed write, or None when it succeeded."""
    if outcome.status != "error":
        return None
    return f"Error writing file '{path}': {_reason(_text(outcome), local)}"


def edit_result(path: str, local: str, old: str, outcome: ToolOutcome) -> EditResult:
    """deepagents' edit answer, from the outcome's code and occurrence count."""
    if outcome.status != "error":
        return EditResult(path=path, occurrences=outcome.occurrences)
    count = outcome.occurrences or 0
    if outcome.code == "multiple_matches" and count > 1:
        return EditResult(
            error=f"Error: String '{old}' appears multiple times "
            f"({count} occurrences). Use replace_all=True to replace all "
            "occurrences, or include more context to make it unique."
        )
    if outcome.code == "no_match" and count:
        return EditResult(error=_eof_newline_error(count))
    if outcome.code == "no_match":
        return EditResult(error=f"Error: String not found in file: '{old}'")
    if outcome.code == "file_not_found":
        return EditResult(error=f"Error: File '{path}' not found")
    return EditResult(error=f"Error editing file '{path}': {_reason(_text(outcome), local)}")


def _eof_newline_error(count: int) -> str:
    """The kernel's trailing-newline hint in deepagents' words (``perform_string_replacement``):
    ``count`` is how often old_string without its newline occurs."""
    head = "Error: old_string ends with a newline, but the file does not end with a newline."
    if count == 1:
        return (
            f"{head} Retry with the trailing newline removed from old_string (and from "
            "new_string if it also ends with a newline)."
        )
    return (
        f"{head} With the trailing newline removed, old_string would appear "
        f"{count} times in the file. Retry with the trailing newline removed "
        "and add surrounding context so the match is unique."
    )


def delete_error(path: str, local: str, outcome: ToolOutcome) -> str | None:
    """deepagents' message for a failed delete, or None when it succeeded."""
    if outcome.status != "error":
        return None
    if outcome.code == "file_not_found":
        return f"Error: '{path}' not found"
    return f"Error deleting '{path}': {_reason(_text(outcome), local)}"


def execute_response(outcome: ToolOutcome) -> ExecuteResponse:
    """Output, exit code and truncation of ``execute``, from the outcome's fields.

    An output that was offloaded to S3 stays the stub the model would see (a
    preview and the path to page it from), as deepagents' own large-output
    offload does. A tool error keeps its error text in the output; its exit
    code is the command's when it had one (a timeout: 124, an empty command:
    1, as deepagents' shell reports them), else None (an unsupported backend,
    a refused command).
    """
    output = command_output(
        _text(outcome),
        exit_code=outcome.exit_code,
        failed=outcome.status == "error",
        truncated=outcome.truncated,
    )
    return ExecuteResponse(output=output, exit_code=outcome.exit_code, truncated=outcome.truncated)
