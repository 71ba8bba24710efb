"""Protocol operations built from a backend's whole-file primitives.

Two flavours, one per way a backend reports failure: primitives that *raise*
(disk, sandbox: :class:`RaisingOps`) and primitives that *return*
``(message, code)`` (state, store: :func:`upload_values`,
:func:`download_values`). A batch never stops at its first bad item: each
path is validated and handled on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeVar

from filegate.kernel.paths import validate_path
from filegate.kernel.protocol import (
    BINARY_EDIT,
    BackendResult,
    EditResult,
    ErrorCode,
    FileDownloadResult,
    FileUploadResult,
    WriteResult,
)
from filegate.kernel.textops import apply_edit, decode_text

R = TypeVar("R", bound=BackendResult)


class Failure(NamedTuple):
    """An expected failure, as returned by value-style primitives.

    ``reason`` does not name ``path`` (the path it is about, when there is
    one): results carry the path as ``error_path`` (see kernel.protocol).
    """

    reason: str
    code: ErrorCode
    path: str | None = None


class FailureValue(Protocol):
    """Turns an expected exception into an error value of the requested result type."""

    def __call__(self, result_type: type[R], path: str, exc: BaseException, /) -> R: ...


@dataclass(frozen=True)
class RaisingOps:
    """``write``/``edit``/``upload``/``download`` over whole-file primitives that raise.

    ``get``/``put`` read and replace one whole file; an exception in ``expected``
    becomes an error value through ``fail``. Shared by the disk and sandbox
    backends, which differ only in those primitives.
    """

    get: Callable[[str], bytes]
    put: Callable[[str, bytes], None]
    fail: FailureValue
    expected: tuple[type[BaseException], ...]

    def write(self, path: str, content: str) -> WriteResult:
        vpath = str(path)
        try:
            vpath = validate_path(path)
            self.put(vpath, content.encode("utf-8"))
        except self.expected as exc:
            return self.fail(WriteResult, vpath, exc)
        return WriteResult(path=vpath)

    def edit(self, path: str, old: str, new: str, replace_all: bool) -> EditResult:
        vpath = str(path)
        try:
            vpath = validate_path(path)
            text = decode_text(self.get(vpath))
            if text is None:
                return EditResult(
                    path=vpath,
                    error=BINARY_EDIT,
                    code="binary_file",
                    error_path=vpath,
                )
            new_text, result = apply_edit(vpath, text, old, new, replace_all)
            if new_text is not None:
                self.put(vpath, new_text.encode("utf-8"))
            return result
        except self.expected as exc:
            return self.fail(EditResult, vpath, exc)

    def upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResult]:
        """Each file on its own: a failure is that file's error value."""
        results: list[FileUploadResult] = []
        for path, content in files:
            vpath = str(path)
            try:
                vpath = validate_path(path)
                self.put(vpath, bytes(content))
            except self.expected as exc:
                results.append(self.fail(FileUploadResult, vpath, exc))
                continue
            results.append(FileUploadResult(path=vpath))
        return results

    def download(self, paths: list[str]) -> list[FileDownloadResult]:
        """Each path on its own: a failure is that path's error value."""
        results: list[FileDownloadResult] = []
        for path in paths:
            vpath = str(path)
            try:
                vpath = validate_path(path)
                data = self.get(vpath)
            except self.expected as exc:
                results.append(self.fail(FileDownloadResult, vpath, exc))
                continue
            results.append(FileDownloadResult(path=vpath, content=data))
        return results


def upload_values(
    files: list[tuple[str, bytes]], put: Callable[[str, bytes], Failure | None]
) -> list[FileUploadResult]:
    """Validate and write each file with ``put``, which returns its failure (or None)."""
    results: list[FileUploadResult] = []
    for path, data in files:
        try:
            vpath = validate_path(path)
        except ValueError as exc:
            results.append(FileUploadResult(path=str(path), error=str(exc), code="invalid_path"))
            continue
        failure = put(vpath, bytes(data))
        if failure is not None:
            results.append(
                FileUploadResult(
                    path=vpath, error=failure.reason, code=failure.code, error_path=failure.path
                )
            )
        else:
            results.append(FileUploadResult(path=vpath))
    return results


def download_values(
    paths: list[str], get: Callable[[str], bytes | Failure]
) -> list[FileDownloadResult]:
    """Validate and read each path with ``get``, which returns the bytes or its failure."""
    results: list[FileDownloadResult] = []
    for path in paths:
        try:
            vpath = validate_path(path)
        except ValueError as exc:
            results.append(FileDownloadResult(path=str(path), error=str(exc), code="invalid_path"))
            continue
        data = get(vpath)
        if isinstance(data, Failure):
            results.append(
                FileDownloadResult(
                    path=vpath, error=data.reason, code=data.code, error_path=data.path
                )
            )
        else:
            results.append(FileDownloadResult(path=vpath, content=data))
    return results


__all__ = ["Failure", "FailureValue", "RaisingOps", "download_values", "upload_values"]
