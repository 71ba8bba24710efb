"""The backend protocol and its typed results.

Every backend answers the same sync methods with pydantic result objects.
Expected failures (missing file, bad path, OS permission denied, ...) are
*values* carried in ``error``/``code``, never exceptions: a backend call made
by an agent must always produce something the model can read.

Errors are structured so no layer ever rewrites message text: a backend only
knows its own (backend-local) paths, but the model must only see virtual ones
(route prefix + local path). So a backend puts the path an error is about in
``error_path`` and writes ``error`` *without* it; :func:`error_message` is the
one place that joins the two (``"<path>: <reason>"``), after the dispatcher or
router has mapped ``error_path`` into the virtual tree like any other path
field. A third-party backend that only fills ``error`` still works: its text
is shown as is (it may then name a backend-local path under a route).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol, Self, cast, get_args, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from filegate.kernel.limits import DEFAULT_READ_LIMIT

ErrorCode = Literal[
    "file_not_found",
    "is_directory",
    "not_a_directory",
    "invalid_path",
    "permission_denied",
    "too_large",
    "binary_file",
    "no_match",
    "multiple_matches",
    "unchanged",
    "invalid_argument",
    "unsupported",
    "timeout",
    "io_error",
]

_ERROR_CODES: frozenset[str] = frozenset(get_args(ErrorCode))

OutcomeCode = (
    ErrorCode
    | Literal[
        "denied",
        "approval_required",
        "rejected",
        "not_read",
        "conflict",
        "cancelled",
        "unserved",
        "failed",
    ]
)
"""What went wrong in a tool call, as :attr:`ToolOutcome.code
<filegate.kernel.tool_types.ToolOutcome.code>` says it: a backend's
:data:`ErrorCode`, or one of the gate's and the workflow's own. ``denied``: a
permission rule or policy refused (the OS's refusal is ``permission_denied``);
``approval_required``: an interrupt rule matched and the call carries no
approval; ``rejected``: a reviewer said no; ``not_read``: an edit of a file
not read in this conversation; ``conflict``: the file changed since it was
read, or a change raced this one; ``cancelled``: the caller cancelled the
call; ``unserved``: no worker serves the backend; ``failed``: the tool's
activity failed past its retries (or a command was interrupted mid-run).

Why a code beside the text: adapters map a result onto their framework's
errors (``PermissionError``, deepagents' messages) and metrics count refusals;
reading that back out of the model's text breaks when a sentence changes."""

REFUSALS: frozenset[OutcomeCode] = frozenset({"denied", "approval_required", "rejected"})
"""The codes of a call refused by a rule, a missing approval or a reviewer: nothing ran."""


def as_error_code(code: OutcomeCode | None) -> ErrorCode | None:
    """The backend :data:`ErrorCode` closest to ``code``, for a caller whose results carry
    only those: a refusal (:data:`REFUSALS`) is ``permission_denied``, a code only the
    gate or the workflow gives otherwise (``conflict``, ``cancelled``, ...) None."""
    if code in REFUSALS:
        return "permission_denied"
    return cast(ErrorCode, code) if code in _ERROR_CODES else None


# Error reasons shared by the backends; results name the path in ``error_path``.
IS_DIRECTORY = "is a directory"
NOT_A_DIRECTORY = "is a file, not a directory"
FILE_IN_THE_WAY = "is a file, so nothing can be created below it"
FILE_NOT_FOUND = "file not found"
DIR_NOT_FOUND = "directory not found"
PATH_NOT_FOUND = "path not found"
BINARY_EDIT = "is a binary file: cannot edit"
BINARY_GREP = "is a binary file: cannot grep"
EMPTY_COMMAND = "command must not be empty"
EMPTY_COMMAND_EXIT_CODE = 1
"""``execute("")``: refused with this exit code, as the reference's shells do; a shell
would run nothing and report 0, which reads as success to a model that sent no command."""


def error_message(reason: str | None, path: str | None) -> str | None:
    """The one composition of an error's text: ``"<path>: <reason>"``, or the reason alone.

    Why one helper: every backend's "missing file" reads the same, and the
    path is inserted, never searched for and replaced, so a reason quoting a
    pattern, a rule or file content that happens to contain the path stays exact.
    """
    if reason is None or path is None:
        return reason
    return f"{path}: {reason}"


class BackendResult(BaseModel):
    """Common shape: ``error`` is a short human message, ``code`` its category.

    ``error_path``: the backend-local path the error is about; when set,
    ``error`` does not name it (see the module docstring). Paths are mapped
    to the virtual tree as structured data; :attr:`error_text` is the text.
    """

    model_config = ConfigDict(frozen=False, extra="forbid")

    error: str | None = None
    code: ErrorCode | None = None
    error_path: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def error_text(self) -> str | None:
        """The full error message, naming ``error_path`` (None when there is no error)."""
        return error_message(self.error, self.error_path)


class FileInfo(BaseModel):
    """One ``ls`` entry. Directory paths end with ``/``."""

    path: str
    is_dir: bool = False
    size: int | None = None
    modified_at: str | None = None


TreeKind = Literal["file", "dir", "link", "other"]


class TreeEntry(BaseModel):
    """One entry a recursive delete would remove (``delete_tree``, optional).

    ``path`` is backend-local; a ``link`` is the link itself (never followed);
    ``size`` is set for regular files; ``modified`` is the mtime in ns, so a
    preview's fingerprint notices any change.
    """

    path: str
    kind: TreeKind
    size: int | None = None
    modified: int | None = None


class DeleteTree(BaseModel):
    """``delete_tree(path)``: what goes, target first; ``cut`` when the walk stopped early."""

    entries: list[TreeEntry] = Field(default_factory=list)
    cut: bool = False


class LsResult(BackendResult):
    entries: list[FileInfo] = Field(default_factory=list)


class ReadResult(BackendResult):
    """A window of text lines, or the whole file as bytes when it is binary.

    ``lines`` hold the window without line terminators. ``start_line`` and
    ``end_line`` are 1-based and inclusive (0 when the window is empty);
    ``next_offset`` is the offset to pass for the following window, or None
    when the window reached the end of the file. ``ends_with_newline`` says
    whether the file's last line has a terminator: the lines alone cannot
    tell ``"a\\n"`` from ``"a"``, and a caller that rebuilds the raw text (the
    Deep Agents adapter) needs it so an ``old_string`` copied from the read
    matches the file's end. False when unknown (binary data, a backend that
    does not say).
    """

    path: str = ""
    lines: list[str] = Field(default_factory=list)
    total_lines: int = 0
    start_line: int = 0
    end_line: int = 0
    next_offset: int | None = None
    ends_with_newline: bool = False
    data: bytes | None = None
    encoding: Literal["utf-8", "base64"] = "utf-8"
    size: int | None = None

    @property
    def is_binary(self) -> bool:
        return self.data is not None


class WriteResult(BackendResult):
    path: str = ""


class EditResult(BackendResult):
    path: str = ""
    occurrences: int = 0


class DeleteResult(BackendResult):
    path: str = ""


class _Search(BackendResult):
    """What glob and grep share: ``truncated`` and why, when it was the clock.

    ``stopped_after``: the search hit its time limit (that many seconds) and
    answers with what it had found so far (contract §1); ``truncated`` is then
    always set too (the validator makes it so), so a reader that only knows
    ``truncated`` still sees a partial answer. None: not cut by time
    (``truncated`` alone: a result cap or ``max_count``).
    """

    truncated: bool = False
    stopped_after: float | None = None

    @model_validator(mode="after")
    def _partial_is_truncated(self) -> Self:
        if self.stopped_after is not None:
            self.truncated = True
        return self


class GlobResult(_Search):
    matches: list[str] = Field(default_factory=list)


class GrepMatch(BaseModel):
    path: str
    line: int
    text: str


class GrepResult(_Search):
    matches: list[GrepMatch] = Field(default_factory=list)


class FileUploadResult(BackendResult):
    path: str = ""


class FileDownloadResult(BackendResult):
    path: str = ""
    content: bytes | None = None


class NetworkUse(BaseModel):
    """What a sandboxed command did with one host and port: allowed or refused,
    how often, how many bytes. Host, port and decision only: no URL, header or
    credential leaves the proxy (contract §11)."""

    host: str
    port: int
    allowed: bool
    reason: str = ""
    """Why refused (empty when allowed): the rule, or what was wrong with the ask."""
    connections: int = 1
    bytes_out: int = 0
    bytes_in: int = 0


class ExecuteResult(BackendResult):
    output: str = ""
    exit_code: int | None = None
    truncated: bool = False
    network: list[NetworkUse] = Field(default_factory=list)
    """The command's connections through the egress proxy (network rules only)."""


def refuse_empty_command(command: str) -> ExecuteResult | None:
    """The one answer to an empty command, or None when there is a command to run.

    Asked by every shell backend and by the dispatcher (which also serves the
    sandbox's rule view), so ``execute("")`` fails the same way everywhere:
    an ``invalid_argument`` error with exit code 1, as in the reference.
    """
    if command:
        return None
    return ExecuteResult(
        error=EMPTY_COMMAND, code="invalid_argument", exit_code=EMPTY_COMMAND_EXIT_CODE
    )


Visible = Callable[[str], bool]
"""A path predicate over backend-local virtual paths of regular files.

``glob`` and ``grep`` call it *during* their walk, before anything counts
against a budget (grep's ``max_count``, glob's result cap): a file it refuses
is treated exactly as if it did not exist, so no count, note or hint of the
answer can depend on it (contract §11, permission consistency). The
dispatcher builds it from the permission rules.
"""


@runtime_checkable
class BackendProtocol(Protocol):
    """What every backend provides.

    ``can_execute`` and ``can_delete`` are capabilities the workflow probes per
    model request to decide which tools the model may see. Signatures follow
    the deepagents reference: ``edit(path, old, new, replace_all)``, ``grep``
    takes ``max_count`` by keyword (the dispatcher passes it so), and the
    shipped backends also answer to ``upload_files``/``download_files``
    (:class:`ReferenceNames`). ``visible`` (glob,
    grep): see :data:`Visible`; walks never follow symlinks below the search
    root. Backends with symlinks also provide ``resolve_path`` (see
    :mod:`filegate.kernel.visibility`), which is optional.
    """

    @property
    def can_execute(self) -> bool:
        """Whether :meth:`execute` runs commands here: without it the workflow never
        offers ``execute`` (contract §3), and a call that comes anyway is ``unsupported``."""
        ...

    @property
    def can_delete(self) -> bool:
        """Whether :meth:`delete` removes anything here: without it ``delete`` is not offered."""
        ...

    def ls(self, path: str) -> LsResult:
        """The entries directly in directory ``path`` (one level, not recursive);
        a directory's path ends in ``/``. A missing path or a file is an error value."""
        ...

    def read(self, path: str, offset: int = 0, limit: int = DEFAULT_READ_LIMIT) -> ReadResult:
        """A window of ``limit`` source lines of text from line ``offset`` (0-based),
        or a binary file's bytes whole (``data``, whatever the window); an empty file
        comes back empty. ``limit < 1`` on other text is ``invalid_argument``."""
        ...

    def write(self, path: str, content: str) -> WriteResult:
        """Create or overwrite the file ``path`` with ``content``, making its parents."""
        ...

    def edit(self, path: str, old: str, new: str, replace_all: bool = False) -> EditResult:
        """Replace the exact text ``old`` by ``new`` in file ``path``: one occurrence, or
        every one with ``replace_all``; none is ``no_match`` and several without
        ``replace_all`` are ``multiple_matches``, and the file is left as it was.
        ``occurrences``: how many were replaced."""
        ...

    def delete(self, path: str) -> DeleteResult:
        """Remove ``path``: a file, or a directory with everything below it; a link is
        removed itself, never followed. Only where :attr:`can_delete`."""
        ...

    def glob(self, pattern: str, path: str = "/", visible: Visible | None = None) -> GlobResult:
        """The files below ``path`` whose paths match ``pattern`` (contract §2's glob
        rules); ``visible`` removes files during the walk as if absent. Out of time:
        the matches so far, with ``stopped_after`` (a partial answer, not an error)."""
        ...

    def grep(
        self,
        literal: str,
        path: str | None = None,
        glob: str | None = None,
        max_count: int | None = None,
        visible: Visible | None = None,
    ) -> GrepResult:
        """The lines containing ``literal`` (a substring, not a regex) in the files below
        ``path`` (or the file ``path``), only files whose names match ``glob`` when
        given, at most ``max_count`` matches (then ``truncated``); ``visible`` and time
        as for :meth:`glob`."""
        ...

    def upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResult]:
        """Write each ``(path, bytes)`` pair exactly; one result per item, in order, a bad
        item never stopping the others."""
        ...

    def download(self, paths: list[str]) -> list[FileDownloadResult]:
        """The bytes of each file in ``paths``; one result per item, in order, each with
        ``content`` or an error value."""
        ...

    def execute(self, command: str, timeout: float | None = None) -> ExecuteResult:
        """Run ``command`` in a shell: its output, exit code and whether the output was
        cut; ``timeout`` in seconds (None: the backend's default). An empty command is
        ``invalid_argument`` (:func:`refuse_empty_command`). Only where :attr:`can_execute`."""
        ...


class _Batches(Protocol):
    def upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResult]: ...

    def download(self, paths: list[str]) -> list[FileDownloadResult]: ...


class ReferenceNames:
    """The deepagents reference's names for the batch operations, on every shipped backend.

    ``upload_files``/``download_files`` call ``upload``/``download`` (through
    ``self``, so a wrapper's guard or a subclass's override still applies).
    Code written against the reference's backends runs unchanged; the
    protocol itself keeps the short names, which policies and audit records
    use as operation names.
    """

    def upload_files(self: _Batches, files: list[tuple[str, bytes]]) -> list[FileUploadResult]:
        """The reference's name for :meth:`BackendProtocol.upload`."""
        return self.upload(files)

    def download_files(self: _Batches, paths: list[str]) -> list[FileDownloadResult]:
        """The reference's name for :meth:`BackendProtocol.download`."""
        return self.download(paths)


PROTOCOL_ALIASES: dict[str, str] = {"upload_files": "upload", "download_files": "download"}
"""Reference method name -> protocol operation (see :class:`ReferenceNames`)."""

PROTOCOL_METHODS: tuple[str, ...] = (
    "ls",
    "read",
    "write",
    "edit",
    "delete",
    "glob",
    "grep",
    "upload",
    "download",
    "execute",
)
"""The protocol's operations, in one place for wrappers and their tests."""
