"""The Store backend: persistent, cross-thread files in an S3 bucket (contract §1).

Files of one namespace (e.g. ``("users", "u1")``) live under the key prefix
``users/u1/``; the virtual path ``/notes/a.md`` is the object
``users/u1/notes/a.md``. Directories are implied by keys, as in the State
backend. Some S3 servers (SeaweedFS) keep empty "folders" after their last
object is deleted, so a directory only counts when a real object lies below
it: listings never show ghosts.

The S3 plumbing it shares with the artifact store (client, failure messages,
streamed object windows) is in :mod:`filegate.backends.s3`.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from minio import Minio
from minio.error import S3Error

from filegate.backends.s3 import (
    DEFAULT_MAX_FILE_BYTES,
    S3_FAILURES,
    client_from_settings,
    ensure_bucket,
    is_missing,
    normalize_namespace,
    object_window,
    open_object,
    remove_keys,
    s3_message,
)
from filegate.backends.streams import scan_stream
from filegate.kernel.batch import Failure, download_values, upload_values
from filegate.kernel.globbing import glob_paths, grep_paths, grep_root, resolve_glob
from filegate.kernel.limits import DEFAULT_READ_LIMIT
from filegate.kernel.paths import validate_path
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
    Visible,
    WriteResult,
)
from filegate.kernel.textops import apply_edit, decode_text

if TYPE_CHECKING:
    from minio.datatypes import Object

    from filegate.backends.settings import S3Settings


_TEXT_TYPE = "text/plain; charset=utf-8"
_BINARY_TYPE = "application/octet-stream"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


class StoreBackend(ReferenceNames):
    """Persistent files of one namespace in an S3 bucket; safe to share across threads.

    Construction does no I/O (the bucket must exist: see :meth:`ensure_bucket`
    and :meth:`from_settings`). Every expected failure, S3 ones included, is
    an error value; nothing raises out of a protocol method.
    """

    def __init__(
        self,
        client: Minio,
        bucket: str,
        namespace: tuple[str, ...] | list[str] | str,
        *,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.namespace = normalize_namespace(namespace)
        self.max_file_bytes = max_file_bytes
        self._prefix = "/".join(self.namespace) + "/"

    @classmethod
    def from_settings(
        cls, s3: S3Settings, namespace: tuple[str, ...] | list[str] | str
    ) -> StoreBackend:
        """A backend on the configured S3 bucket (created if missing)."""
        backend = cls(client_from_settings(s3), s3.bucket, namespace)
        backend.ensure_bucket()
        return backend

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (raises on S3 failure: setup time)."""
        ensure_bucket(self.client, self.bucket)

    @property
    def can_execute(self) -> bool:
        return False

    @property
    def can_delete(self) -> bool:
        return True

    # -- key mapping ------------------------------------------------------------

    def _key(self, vpath: str) -> str:
        return self._prefix + vpath[1:]

    def _dir_prefix(self, vpath: str) -> str:
        return self._prefix if vpath == "/" else self._key(vpath) + "/"

    def _virtual(self, key: str) -> str | None:
        """The virtual path of an object key, or None for markers / foreign keys."""
        rel = key[len(self._prefix) :]
        if not key.startswith(self._prefix) or not rel or rel.endswith("/"):
            return None
        vpath = "/" + rel
        try:
            return vpath if validate_path(vpath) == vpath else None
        except ValueError:
            return None

    # -- lookups ----------------------------------------------------------------

    def _objects_under(self, vroot: str) -> Iterator[tuple[str, Object]]:
        """(virtual path, object) of every file strictly below ``vroot``."""
        for obj in self.client.list_objects(
            self.bucket, prefix=self._dir_prefix(vroot), recursive=True
        ):
            vpath = self._virtual(obj.object_name or "")
            if vpath is not None:
                yield vpath, obj

    def _files_under(self, vroot: str) -> list[str]:
        return [vpath for vpath, _ in self._objects_under(vroot)]

    def _is_dir(self, vpath: str) -> bool:
        """True for the root and for any prefix holding at least one real file."""
        if vpath == "/":
            return True
        return next(self._objects_under(vpath), None) is not None

    def _is_file(self, vpath: str) -> bool:
        if vpath == "/":
            return False
        try:
            self.client.stat_object(self.bucket, self._key(vpath))
        except S3Error as exc:
            if is_missing(exc):
                return False
            raise
        return True

    def _missing(self, vpath: str) -> Failure:
        if self._is_dir(vpath):
            return Failure(IS_DIRECTORY, "is_directory", vpath)
        return Failure(FILE_NOT_FOUND, "file_not_found", vpath)

    def _unwritable(self, vpath: str) -> Failure | None:
        """Why ``vpath`` cannot hold a file (a directory, or under a file), else None."""
        if self._is_dir(vpath):
            return Failure(IS_DIRECTORY, "is_directory", vpath)
        parts = vpath.strip("/").split("/")
        for depth in range(1, len(parts)):
            ancestor = "/" + "/".join(parts[:depth])
            if self._is_file(ancestor):
                return Failure(FILE_IN_THE_WAY, "not_a_directory", ancestor)
        return None

    def _put(self, vpath: str, data: bytes, content_type: str) -> Failure | None:
        failure = self._unwritable(vpath)
        if failure is not None:
            return failure
        self.client.put_object(
            self.bucket, self._key(vpath), io.BytesIO(data), len(data), content_type=content_type
        )
        return None

    def _get_whole(self, vpath: str) -> bytes | Failure:
        """All bytes of a file, or the failure when missing / too large."""
        if vpath == "/":
            return Failure(IS_DIRECTORY, "is_directory", vpath)
        try:
            with open_object(self.client, self.bucket, self._key(vpath)) as response:
                size = int(response.headers.get("content-length") or 0)
                if size > self.max_file_bytes:
                    return Failure(
                        f"has {size} bytes, over the {self.max_file_bytes}-byte limit",
                        "too_large",
                        vpath,
                    )
                return bytes(response.read())
        except S3Error as exc:
            if is_missing(exc):
                return self._missing(vpath)
            raise

    # -- protocol ---------------------------------------------------------------

    def ls(self, path: str) -> LsResult:
        try:
            vroot = validate_path(path)
        except ValueError as exc:
            return LsResult(error=str(exc), code="invalid_path")
        try:
            if self._is_file(vroot):
                return LsResult(error=NOT_A_DIRECTORY, code="not_a_directory", error_path=vroot)
            base = vroot.rstrip("/")
            entries: list[FileInfo] = []
            for obj in self.client.list_objects(self.bucket, prefix=self._dir_prefix(vroot)):
                name = obj.object_name or ""
                if obj.is_dir:
                    child = base + "/" + name[len(self._dir_prefix(vroot)) :].rstrip("/")
                    if self._virtual(name.rstrip("/")) == child and self._is_dir(child):
                        entries.append(FileInfo(path=child + "/", is_dir=True))
                elif self._virtual(name) is not None:
                    entries.append(
                        FileInfo(
                            path="/" + name[len(self._prefix) :],
                            size=obj.size,
                            modified_at=_iso(obj.last_modified),
                        )
                    )
        except S3_FAILURES as exc:
            return LsResult(error=s3_message(exc), code="io_error")
        if not entries and vroot != "/":
            return LsResult(error=DIR_NOT_FOUND, code="file_not_found", error_path=vroot)
        entries.sort(key=lambda e: e.path)
        return LsResult(entries=entries)

    def read(self, path: str, offset: int = 0, limit: int = DEFAULT_READ_LIMIT) -> ReadResult:
        try:
            vpath = validate_path(path)
        except ValueError as exc:
            return ReadResult(path=str(path), error=str(exc), code="invalid_path")
        if vpath == "/":
            return ReadResult(path=vpath, error=IS_DIRECTORY, code="is_directory", error_path=vpath)
        try:
            return object_window(
                self.client, self.bucket, self._key(vpath), vpath, offset, limit,
                self.max_file_bytes,
            )  # fmt: skip
        except S3_FAILURES as exc:
            try:
                if is_missing(exc):
                    missing = self._missing(vpath)
                    return ReadResult(
                        path=vpath, error=missing.reason, code=missing.code, error_path=vpath
                    )
            except S3_FAILURES as again:
                exc = again
            return ReadResult(path=vpath, error=s3_message(exc), code="io_error")

    def write(self, path: str, content: str) -> WriteResult:
        try:
            vpath = validate_path(path)
        except ValueError as exc:
            return WriteResult(path=str(path), error=str(exc), code="invalid_path")
        try:
            failure = self._put(vpath, content.encode("utf-8"), _TEXT_TYPE)
        except S3_FAILURES as exc:
            return WriteResult(path=vpath, error=s3_message(exc), code="io_error")
        if failure is not None:
            return WriteResult(
                path=vpath, error=failure.reason, code=failure.code, error_path=failure.path
            )
        return WriteResult(path=vpath)

    def edit(self, path: str, old: str, new: str, replace_all: bool = False) -> EditResult:
        try:
            vpath = validate_path(path)
        except ValueError as exc:
            return EditResult(path=str(path), error=str(exc), code="invalid_path")
        try:
            data = self._get_whole(vpath)
            if isinstance(data, Failure):
                return EditResult(
                    path=vpath, error=data.reason, code=data.code, error_path=data.path
                )
            text = decode_text(data)
            if text is None:
                return EditResult(
                    path=vpath, error=BINARY_EDIT, code="binary_file", error_path=vpath
                )
            new_text, result = apply_edit(vpath, text, old, new, replace_all)
            if new_text is not None:
                encoded = new_text.encode("utf-8")
                self.client.put_object(
                    self.bucket, self._key(vpath), io.BytesIO(encoded), len(encoded),
                    content_type=_TEXT_TYPE,
                )  # fmt: skip
            return result
        except S3_FAILURES as exc:
            return EditResult(path=vpath, error=s3_message(exc), code="io_error")

    def delete(self, path: str) -> DeleteResult:
        try:
            vpath = validate_path(path)
        except ValueError as exc:
            return DeleteResult(path=str(path), error=str(exc), code="invalid_path")
        if vpath == "/":
            return DeleteResult(
                path=vpath, error="refusing to delete the root directory", code="invalid_argument"
            )
        try:
            keys = [self._key(p) for p in self._files_under(vpath)]
            if self._is_file(vpath):
                keys.append(self._key(vpath))
            if not keys:
                return DeleteResult(
                    path=vpath, error=FILE_NOT_FOUND, code="file_not_found", error_path=vpath
                )
            remove_keys(self.client, self.bucket, keys)
        except S3_FAILURES as exc:
            return DeleteResult(path=vpath, error=s3_message(exc), code="io_error")
        return DeleteResult(path=vpath)

    def glob(self, pattern: str, path: str = "/", visible: Visible | None = None) -> GlobResult:
        try:
            vroot, _ = resolve_glob(pattern, path)
        except ValueError as exc:
            return GlobResult(error=str(exc), code="invalid_path")
        try:
            files = _only_visible(self._files_under(vroot), visible)
            matches = glob_paths(pattern, path, files)
        except ValueError as exc:
            return GlobResult(error=str(exc), code="invalid_path")
        except S3_FAILURES as exc:
            return GlobResult(error=s3_message(exc), code="io_error")
        if not files and vroot != "/":
            return GlobResult(error=DIR_NOT_FOUND, code="file_not_found", error_path=vroot)
        return GlobResult(matches=matches)

    def grep(
        self,
        literal: str,
        path: str | None = None,
        glob: str | None = None,
        max_count: int | None = None,
        visible: Visible | None = None,
    ) -> GrepResult:
        vroot = grep_root(path, max_count)
        if isinstance(vroot, GrepResult):
            return vroot
        try:
            explicit = self._is_file(vroot)
            files = [vroot] if explicit else _only_visible(self._files_under(vroot), visible)
            if not files and vroot != "/":
                return GrepResult(error=PATH_NOT_FOUND, code="file_not_found", error_path=vroot)
            candidates = grep_paths(vroot, glob, files)
            matches: list[GrepMatch] = []
            for vpath in candidates:
                # One extra match tells whether stopping here cut anything.
                wanted = None if max_count is None else max_count - len(matches) + 1
                hits = self._scan(vpath, literal, wanted)
                if hits is None:
                    if explicit:
                        return GrepResult(error=BINARY_GREP, code="binary_file", error_path=vpath)
                    continue
                matches.extend(hits)
                if max_count is not None and len(matches) > max_count:
                    return GrepResult(matches=matches[:max_count], truncated=True)
        except ValueError as exc:
            return GrepResult(error=str(exc), code="invalid_path")
        except S3_FAILURES as exc:
            return GrepResult(error=s3_message(exc), code="io_error")
        return GrepResult(matches=matches)

    def _scan(self, vpath: str, literal: str, limit: int | None) -> list[GrepMatch] | None:
        """Hits in one object (streamed), or None when it is binary or vanished."""
        try:
            with open_object(self.client, self.bucket, self._key(vpath)) as response:
                return scan_stream(response, literal, vpath, limit)
        except S3Error as exc:
            if is_missing(exc):  # deleted between listing and reading
                return []
            raise

    def upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResult]:
        return upload_values(files, self._upload_one)

    def download(self, paths: list[str]) -> list[FileDownloadResult]:
        return download_values(paths, self._download_one)

    def _upload_one(self, vpath: str, data: bytes) -> Failure | None:
        try:
            return self._put(vpath, data, _BINARY_TYPE)
        except S3_FAILURES as exc:
            return Failure(s3_message(exc), "io_error")

    def _download_one(self, vpath: str) -> bytes | Failure:
        try:
            return self._get_whole(vpath)
        except S3_FAILURES as exc:
            return Failure(s3_message(exc), "io_error")

    def execute(self, command: str, timeout: float | None = None) -> ExecuteResult:
        return ExecuteResult(
            error="execute is not supported: the store backend has no shell", code="unsupported"
        )


def _only_visible(files: list[str], visible: Visible | None) -> list[str]:
    """Hidden objects do not exist for a search: not counted, not even as a directory."""
    return files if visible is None else [f for f in files if visible(f)]
