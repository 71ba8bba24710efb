"""The State backend: files held in a plain dict owned by the agent workflow.

Pure and deterministic so it can run *inside* a Temporal workflow: no clock,
no I/O, no randomness. Timestamps are whatever the caller last gave
:meth:`StateBackend.set_now` (the workflow passes ``workflow.now()``), so a
replay produces identical state. :meth:`StateBackend.to_dict` /
:meth:`StateBackend.from_dict` carry the files across continue-as-new as plain
JSON-compatible data.

Directories are implied by file paths (there are no empty directories), like
the reference implementation's state backend.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from filegate.kernel.batch import Failure, download_values, upload_values
from filegate.kernel.globbing import glob_paths, grep_paths, grep_root, resolve_glob
from filegate.kernel.limits import DEFAULT_READ_LIMIT
from filegate.kernel.paths import is_within, validate_path
from filegate.kernel.protocol import (
    BINARY_EDIT,
    BINARY_GREP,
    DIR_NOT_FOUND,
    FILE_IN_THE_WAY,
    FILE_NOT_FOUND,
    IS_DIRECTORY,
    NOT_A_DIRECTORY,
    PATH_NOT_FOUND,
    DeleteResult,
    DeleteTree,
    EditResult,
    ExecuteResult,
    FileDownloadResult,
    FileInfo,
    FileUploadResult,
    GlobResult,
    GrepMatch,
    GrepResult,
    LsResult,
    ReadResult,
    ReferenceNames,
    TreeEntry,
    Visible,
    WriteResult,
)
from filegate.kernel.textops import apply_edit, decode_text, grep_text, read_window

STATE_FORMAT_VERSION = 1


@dataclass
class _File:
    """One stored file. Text is kept as ``str`` (edits and greps need it); bytes
    that are not UTF-8 text stay ``bytes``. Valid UTF-8 round-trips exactly, so
    storing it decoded never changes what ``download`` returns."""

    content: str | bytes
    created_at: str | None
    modified_at: str | None

    def data(self) -> bytes:
        return self.content.encode("utf-8") if isinstance(self.content, str) else self.content


class StateBackend(ReferenceNames):
    """In-memory, thread-scoped files; the default backend of an agent."""

    def __init__(self, now: str | None = None) -> None:
        self._files: dict[str, _File] = {}
        self.now: str | None = now
        """ISO timestamp stamped on files written next (None: leave unset)."""

    # -- workflow plumbing ---------------------------------------------------

    def set_now(self, now: str | None) -> None:
        """Set the timestamp for the following operations (the workflow's clock)."""
        self.now = now

    @property
    def can_execute(self) -> bool:
        return False

    @property
    def can_delete(self) -> bool:
        return True

    def paths(self) -> list[str]:
        """All file paths, sorted."""
        return sorted(self._files)

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON-compatible snapshot (sorted paths; binary as base64)."""
        files: dict[str, dict[str, Any]] = {}
        for path in sorted(self._files):
            record = self._files[path]
            if isinstance(record.content, str):
                content, encoding = record.content, "utf-8"
            else:
                content, encoding = base64.b64encode(record.content).decode("ascii"), "base64"
            files[path] = {
                "content": content,
                "encoding": encoding,
                "created_at": record.created_at,
                "modified_at": record.modified_at,
            }
        return {"version": STATE_FORMAT_VERSION, "files": files}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], now: str | None = None) -> StateBackend:
        """Rebuild a backend from :meth:`to_dict` output; ValueError on malformed data."""
        if data.get("version") != STATE_FORMAT_VERSION:
            raise ValueError(f"unsupported state format version {data.get('version')!r}")
        files = data.get("files")
        if not isinstance(files, Mapping):
            raise ValueError("state 'files' must be a mapping")
        backend = cls(now=now)
        for raw_path, record in files.items():
            path = validate_path(raw_path)
            if path != raw_path or path == "/":
                raise ValueError(f"state holds a non-canonical path {raw_path!r}")
            if not isinstance(record, Mapping):
                raise ValueError(f"state record for {path} must be a mapping")
            content = record.get("content")
            if not isinstance(content, str):
                raise ValueError(f"state content for {path} must be a string")
            stored: str | bytes
            if record.get("encoding") == "base64":
                try:
                    stored = base64.b64decode(content, validate=True)
                except binascii.Error as exc:
                    raise ValueError(f"state content for {path} is not base64") from exc
            elif record.get("encoding") == "utf-8":
                stored = content
            else:
                raise ValueError(f"unknown encoding {record.get('encoding')!r} for {path}")
            backend._files[path] = _File(
                stored, _optional_str(record, "created_at"), _optional_str(record, "modified_at")
            )
        return backend

    # -- lookups -------------------------------------------------------------

    def _is_dir(self, path: str, files: Iterable[str] | None = None) -> bool:
        """True when some file (of ``files``, default all) lives below ``path`` (implied dirs)."""
        if path == "/":
            return True
        return any(p.startswith(path + "/") for p in (self._files if files is None else files))

    def _under(self, root: str) -> Iterator[str]:
        return (p for p in self._files if is_within(p, root))

    def _file_ancestor(self, path: str) -> str | None:
        """An existing *file* that would have to be a directory for ``path`` to exist."""
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts)):
            ancestor = "/" + "/".join(parts[:depth])
            if ancestor in self._files:
                return ancestor
        return None

    def _store(self, path: str, content: str | bytes) -> Failure | None:
        """Create or overwrite a file; the failure when the path cannot hold one."""
        if path == "/" or self._is_dir(path):
            return Failure(IS_DIRECTORY, "is_directory", path)
        ancestor = self._file_ancestor(path)
        if ancestor is not None:
            return Failure(FILE_IN_THE_WAY, "not_a_directory", ancestor)
        previous = self._files.get(path)
        created = previous.created_at if previous is not None else self.now
        if isinstance(content, bytes):
            text = decode_text(content)
            content = text if text is not None else content
        self._files[path] = _File(content, created, self.now)
        return None

    def _missing(self, path: str) -> Failure:
        if self._is_dir(path):
            return Failure(IS_DIRECTORY, "is_directory", path)
        return Failure(FILE_NOT_FOUND, "file_not_found", path)

    # -- protocol ------------------------------------------------------------

    def ls(self, path: str) -> LsResult:
        try:
            root = validate_path(path)
        except ValueError as exc:
            return LsResult(error=str(exc), code="invalid_path")
        if root in self._files:
            return LsResult(error=NOT_A_DIRECTORY, code="not_a_directory", error_path=root)
        if not self._is_dir(root):
            return LsResult(error=DIR_NOT_FOUND, code="file_not_found", error_path=root)
        base = root.rstrip("/")
        entries: dict[str, FileInfo] = {}
        for file_path in self._under(root):
            name, _, rest = file_path[len(base) + 1 :].partition("/")
            if rest:
                directory = f"{base}/{name}/"
                entries.setdefault(directory, FileInfo(path=directory, is_dir=True))
            else:
                record = self._files[file_path]
                entries[file_path] = FileInfo(
                    path=file_path, size=len(record.data()), modified_at=record.modified_at
                )
        return LsResult(entries=[entries[p] for p in sorted(entries)])

    def read(self, path: str, offset: int = 0, limit: int = DEFAULT_READ_LIMIT) -> ReadResult:
        try:
            virtual = validate_path(path)
        except ValueError as exc:
            return ReadResult(path=str(path), error=str(exc), code="invalid_path")
        record = self._files.get(virtual)
        if record is None:
            missing = self._missing(virtual)
            return ReadResult(
                path=virtual, error=missing.reason, code=missing.code, error_path=missing.path
            )
        if isinstance(record.content, bytes):
            return ReadResult(
                path=virtual, data=record.content, encoding="base64", size=len(record.content)
            )
        result = read_window(virtual, record.content, offset, limit)
        if result.ok:
            result.size = len(record.data())
        return result

    def write(self, path: str, content: str) -> WriteResult:
        try:
            virtual = validate_path(path)
        except ValueError as exc:
            return WriteResult(path=str(path), error=str(exc), code="invalid_path")
        failure = self._store(virtual, content)
        if failure is not None:
            return WriteResult(
                path=virtual, error=failure.reason, code=failure.code, error_path=failure.path
            )
        return WriteResult(path=virtual)

    def edit(self, path: str, old: str, new: str, replace_all: bool = False) -> EditResult:
        try:
            virtual = validate_path(path)
        except ValueError as exc:
            return EditResult(path=str(path), error=str(exc), code="invalid_path")
        record = self._files.get(virtual)
        if record is None:
            missing = self._missing(virtual)
            return EditResult(
                path=virtual, error=missing.reason, code=missing.code, error_path=missing.path
            )
        if isinstance(record.content, bytes):
            return EditResult(
                path=virtual, error=BINARY_EDIT, code="binary_file", error_path=virtual
            )
        new_content, result = apply_edit(virtual, record.content, old, new, replace_all)
        if new_content is not None:
            record.content = new_content
            record.modified_at = self.now
        return result

    def delete(self, path: str) -> DeleteResult:
        try:
            virtual = validate_path(path)
        except ValueError as exc:
            return DeleteResult(path=str(path), error=str(exc), code="invalid_path")
        if virtual == "/":
            return DeleteResult(
                path=virtual, error="refusing to delete the root directory", code="invalid_argument"
            )
        doomed = list(self._under(virtual))
        if not doomed:
            return DeleteResult(
                path=virtual, error=FILE_NOT_FOUND, code="file_not_found", error_path=virtual
            )
        for file_path in doomed:
            del self._files[file_path]
        return DeleteResult(path=virtual)

    def delete_tree(self, path: str) -> DeleteTree | None:
        """What ``delete(path)`` would remove: the files at or below it (no directories
        or links exist here, only paths). None when nothing is there."""
        virtual = validate_path(path)
        entries = [
            TreeEntry(
                path=p,
                kind="file",
                size=len(self._files[p].data()),
                modified=zlib.crc32((self._files[p].modified_at or "").encode()),
            )
            for p in sorted(self._under(virtual))
        ]
        return DeleteTree(entries=entries) if entries else None

    def glob(self, pattern: str, path: str = "/", visible: Visible | None = None) -> GlobResult:
        files = self._visible_files(visible)
        try:
            root, _ = resolve_glob(pattern, path)
            matches = glob_paths(pattern, path, files)
        except ValueError as exc:
            return GlobResult(error=str(exc), code="invalid_path")
        if not self._is_dir(root, files):
            return GlobResult(error=DIR_NOT_FOUND, code="file_not_found", error_path=root)
        return GlobResult(matches=matches)

    def _visible_files(self, visible: Visible | None) -> Collection[str]:
        """The files a search may see: hidden ones do not exist for it, not even as parents."""
        if visible is None:
            return self._files.keys()
        return [p for p in self._files if visible(p)]

    def grep(
        self,
        literal: str,
        path: str | None = None,
        glob: str | None = None,
        max_count: int | None = None,
        visible: Visible | None = None,
    ) -> GrepResult:
        root = grep_root(path, max_count)
        if isinstance(root, GrepResult):
            return root
        files = self._visible_files(visible)
        if not (root in self._files or self._is_dir(root, files)):
            return GrepResult(error=PATH_NOT_FOUND, code="file_not_found", error_path=root)
        record = self._files.get(root)
        if record is not None and isinstance(record.content, bytes):
            return GrepResult(error=BINARY_GREP, code="binary_file", error_path=root)
        try:
            under = [p for p in files if is_within(p, root)]
            candidates = [root] if root in self._files else grep_paths(root, glob, under)
        except ValueError as exc:
            return GrepResult(error=str(exc), code="invalid_path")
        return _grep_files(literal, self._texts(candidates), max_count)

    def _texts(self, paths: Iterable[str]) -> Iterator[tuple[str, str]]:
        """(path, text) of the text files among ``paths``; binary files are skipped."""
        for file_path in paths:
            content = self._files[file_path].content
            if isinstance(content, str):
                yield file_path, content

    def upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResult]:
        return upload_values(files, self._store)

    def download(self, paths: list[str]) -> list[FileDownloadResult]:
        return download_values(paths, self._data)

    def _data(self, path: str) -> bytes | Failure:
        record = self._files.get(path)
        return self._missing(path) if record is None else record.data()

    def execute(self, command: str, timeout: float | None = None) -> ExecuteResult:
        return ExecuteResult(
            error="execute is not supported: the state backend has no shell",
            code="unsupported",
        )


def _grep_files(
    literal: str, texts: Iterable[tuple[str, str]], max_count: int | None
) -> GrepResult:
    """Literal search over sorted (path, text) pairs under one ``max_count`` budget."""
    matches: list[GrepMatch] = []
    for file_path, text in texts:
        # One extra match tells us whether stopping here cut anything.
        wanted = None if max_count is None else max_count - len(matches) + 1
        hits = grep_text(literal, file_path, text, wanted)
        if max_count is not None and len(matches) + len(hits) > max_count:
            matches.extend(hits[: max_count - len(matches)])
            return GrepResult(matches=matches, truncated=True)
        matches.extend(hits)
    return GrepResult(matches=matches)


def _optional_str(record: Mapping[str, Any], key: str) -> str | None:
    value = record.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"state field {key!r} must be a string or null")
    return value
