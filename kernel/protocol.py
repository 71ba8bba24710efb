"""The backend protocol and its typed results.

Every backend answers the same sync methods with pydantic result objects.
Expected failures (missing file, bad path, OS permission denied, ...) are
*values* carried in ``error``/``code``, never exceptions: a backend call made
by an agent must always produce something the model can read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol, runtime_checkable

from filegate.kernel.limits import DEFAULT_READ_LIMIT
from pydantic import BaseModel, ConfigDict, Field

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


class _Result(BaseModel):
    """Common shape: ``error`` is a short human message, ``code`` its category."""

    model_config = ConfigDict(frozen=False, extra="forbid")

    error: str | None = None
    code: ErrorCode | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class FileInfo(BaseModel):
    """One ``ls`` entry. Directory paths end with ``/``."""

    path: str
    is_dir: bool = False
    size: int | None = None
    modified_at: str | None = None


class LsResult(_Result):
    entries: list[FileInfo] = Field(default_factory=list)


class ReadResult(_Result):
    """A window of text lines, or the whole file as bytes when it is binary.

    ``lines`` hold the window without line terminators. ``start_line`` and
    ``end_line`` are 1-based and inclusive (0 when the window is empty);
    ``next_offset`` is the offset to pass for the following window, or None
    when the window reached the end of the file.
    """

    path: str = ""
    lines: list[str] = Field(default_factory=list)
    total_lines: int = 0
    start_line: int = 0
    end_line: int = 0
    next_offset: int | None = None
    data: bytes | None = None
    encoding: Literal["utf-8", "base64"] = "utf-8"
    size: int | None = None

    @property
    def is_binary(self) -> bool:
        return self.data is not None


class WriteResult(_Result):
    path: str = ""


class EditResult(_Result):
    path: str = ""
    occurrences: int = 0


class DeleteResult(_Result):
    path: str = ""


class GlobResult(_Result):
    matches: list[str] = Field(default_factory=list)
    truncated: bool = False


class GrepMatch(BaseModel):
    path: str
    line: int
    text: str


class GrepResult(_Result):
    matches: list[GrepMatch] = Field(default_factory=list)
    truncated: bool = False


class FileUploadResult(_Result):
    path: str = ""


class FileDownloadResult(_Result):
    path: str = ""
    content: bytes | None = None


class ExecuteResult(_Result):
    output: str = ""
    exit_code: int | None = None
    truncated: bool = False


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
    model request to decide which tools the model may see. ``visible`` (glob,
    grep): see :data:`Visible`; walks never follow symlinks below the search
    root. Backends with symlinks also provide ``resolve_path`` (see
    :mod:`filegate.kernel.visibility`), which is optional.
    """

    @property
    def can_execute(self) -> bool: ...

    @property
    def can_delete(self) -> bool: ...

    def ls(self, path: str) -> LsResult: ...

    def read(self, path: str, offset: int = 0, limit: int = DEFAULT_READ_LIMIT) -> ReadResult: ...

    def write(self, path: str, content: str) -> WriteResult: ...

    def edit(self, path: str, old: str, new: str, replace_all: bool = False) -> EditResult: ...

    def delete(self, path: str) -> DeleteResult: ...

    def glob(self, pattern: str, path: str = "/", visible: Visible | None = None) -> GlobResult: ...

    def grep(
        self,
        literal: str,
        path: str | None = None,
        glob: str | None = None,
        max_count: int | None = None,
        visible: Visible | None = None,
    ) -> GrepResult: ...

    def upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResult]: ...

    def download(self, paths: list[str]) -> list[FileDownloadResult]: ...

    def execute(self, command: str, timeout: float | None = None) -> ExecuteResult: ...


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
