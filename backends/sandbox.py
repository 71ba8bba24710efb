"""A backend whose file operations all run *inside* an isolated sandbox.

Subclasses provide one primitive, :meth:`BaseSandbox.run_in_sandbox` (run a
shell command in the sandbox, cwd = the workspace, capped output); the ten
protocol operations are built on it. ``execute`` is that primitive with the
user-facing output cap; file operations use the same primitive with a cap big
enough for whole files, because a 100 000-byte cap would make downloads of
larger files impossible.

Nothing the caller supplies is ever interpolated into shell text: each file
operation runs a fixed Python helper (:mod:`filegate.backends.sandbox_helper`,
``python3 -I -S -c <constant script>``)
whose parameters travel as one base64-encoded ``marshal`` argument (upload
bytes as a second base64 argument), and whose reply is a single ASCII line of
JSON after a marker, every string and byte string in it base64-encoded. The
helper imports only built-in modules: interpreter start-up is most of the cost
of an operation.
The helper resolves every path below the workspace and refuses anything that
lands outside it (a symlink pointing out) even though the host filesystem is
not mounted in the sandbox: the semantics match :class:`FilesystemBackend`.

Line splitting, read windows, exact edits and binary detection are the shared
host-side helpers of :mod:`backends.textops`; only the per-line grep scan runs
in the helper (so a search ships matches, not whole files).
"""

from __future__ import annotations

import base64
import errno
import json
import marshal
import os
import shlex
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any, TypeVar

from filegate.backends.filesystem.host_files import (
    DEFAULT_MAX_FILE_BYTES,
    MAX_GLOB_RESULTS,
    NotRegularFileError,
    PathEscapeError,
    call_token,
    error_value,
    resolve_in_root,
)
from filegate.backends.sandbox_helper import HELPER_SCRIPT, REPLY_MARK, reply_bytes, reply_text
from filegate.kernel.batch import RaisingOps
from filegate.kernel.globbing import (
    GlobMatcher,
    GrepFileFilter,
    grep_scope,
    resolve_glob,
    spells_dot,
)
from filegate.kernel.limits import (
    DEFAULT_EXECUTE_TIMEOUT,
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_READ_LIMIT,
)
from filegate.kernel.media_types import is_media_path
from filegate.kernel.paths import join_path, validate_path
from filegate.kernel.protocol import (
    BINARY_GREP,
    BackendResult,
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
    refuse_empty_command,
)
from filegate.kernel.textops import (
    decode_text,
    merge_grep_budget,
    read_window,
)

WORKSPACE = "/workspace"
"""Where the backend's root directory appears inside the sandbox."""
DEFAULT_OP_TIMEOUT = 60.0
UPLOAD_CHUNK_BYTES = 72 * 1024
"""Raw bytes per upload call: base64 + helper must stay under Linux's 128 KiB per-argument limit."""
GREP_LIST_CHUNK_CHARS = 48 * 1024
"""Bytes of file names per permission-filtered grep call (same argument limit)."""

R = TypeVar("R", bound=BackendResult)


def _plain(value: Any) -> Any:
    """``value`` with every ``str`` subclass (a validated path) as a plain ``str``:
    marshal, the helper's wire format, takes exact builtin types only."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    return value


class SandboxOpError(Exception):
    """The sandbox could not run a file operation (start failure, timeout, helper crash)."""

    def __init__(self, message: str, code: str = "io_error") -> None:
        super().__init__(message)
        self.code = code


def _fail(result_type: type[R], vpath: str, exc: BaseException) -> R:
    """Error value for ``exc``: sandbox failures keep their message, the rest as on disk."""
    if isinstance(exc, SandboxOpError):
        result = result_type(error=str(exc), code=exc.code, error_path=vpath)  # type: ignore[arg-type]
        if "path" in result_type.model_fields:
            result.path = vpath  # type: ignore[attr-defined]
        return result
    return error_value(result_type, vpath, exc)


_EXPECTED = (OSError, ValueError, PathEscapeError, NotRegularFileError, SandboxOpError)


class BaseSandbox(ReferenceNames, ABC):
    """File operations through a sandboxed command runner (contract §1 "Sandbox").

    Virtual ``/x`` is ``/workspace/x`` inside the sandbox.
    """

    workspace: str = WORKSPACE

    def __init__(
        self,
        *,
        default_timeout: float = DEFAULT_EXECUTE_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        op_timeout: float = DEFAULT_OP_TIMEOUT,
    ) -> None:
        self.default_timeout = default_timeout
        self.max_output_bytes = max_output_bytes
        self.max_file_bytes = max_file_bytes
        self.op_timeout = op_timeout
        # Whole files travel base64-encoded: 4/3 of the file plus JSON/stderr slack.
        self._reply_cap = max_file_bytes * 4 // 3 + (1 << 20)
        self._ops = RaisingOps(self._get, self._put, _fail, _EXPECTED)

    # -- the primitive -------------------------------------------------------

    @abstractmethod
    def run_in_sandbox(self, command: str, timeout: float, max_output_bytes: int) -> ExecuteResult:
        """Run shell ``command`` inside the sandbox (cwd = workspace, clean env).

        A ``timeout`` that :func:`~filegate.kernel.limits.execute_timeout_problem`
        refuses (with the worker's maximum) comes back as an ``invalid_argument`` error.
        """

    @property
    def can_execute(self) -> bool:
        return True

    @property
    def can_delete(self) -> bool:
        return True

    def execute(self, command: str, timeout: float | None = None) -> ExecuteResult:
        empty = refuse_empty_command(command)  # exit code 1, not the shell's 0
        if empty is not None:
            return empty
        # run_in_sandbox refuses a bad timeout (the kernel's execute_timeout_problem).
        limit = self.default_timeout if timeout is None else timeout
        return self.run_in_sandbox(command, limit, self.max_output_bytes)

    # -- helper plumbing -----------------------------------------------------

    def _call(self, op: str, data: bytes | None = None, **params: Any) -> dict[str, Any]:
        """Run helper operation ``op``; return its reply or raise the matching error.

        ``data`` (upload bytes) travels as its own base64 argument, not inside the
        JSON, so it is encoded once and a chunk stays under the argument limit.
        """
        args = [HELPER_SCRIPT, self.workspace, op]
        args.append(base64.b64encode(marshal.dumps(_plain(params))).decode("ascii"))
        if data is not None:
            args.append(base64.b64encode(data).decode("ascii"))
        command = "exec python3 -I -S -c " + " ".join(shlex.quote(arg) for arg in args)
        result = self.run_in_sandbox(command, self.op_timeout, self._reply_cap)
        if result.code == "timeout":
            raise SandboxOpError(
                f"sandbox operation timed out after {self.op_timeout:g} s", "timeout"
            )
        if result.truncated:
            raise SandboxOpError(
                f"the answer is over {self._reply_cap} bytes: narrow the request", "too_large"
            )
        reply: dict[str, Any] | None = None
        for line in result.output.splitlines():
            if line.startswith(REPLY_MARK):
                try:
                    reply = json.loads(line[len(REPLY_MARK) :])
                except json.JSONDecodeError as exc:
                    raise SandboxOpError(f"unreadable sandbox reply: {exc}") from exc
                break
        if reply is None:
            detail = (result.error or result.output or f"exit code {result.exit_code}").strip()
            raise SandboxOpError(f"sandbox operation failed: {detail[-500:]}")
        kind = reply_text(reply["err"]) if "err" in reply else None
        if kind == "escape":
            raise PathEscapeError(params.get("path", "?"))
        if kind == "notreg":
            raise NotRegularFileError(params.get("path", "?"))
        if kind == "os":
            raise OSError(int(reply["errno"]), reply_text(reply["msg"]))
        return reply

    def _get(self, vpath: str) -> bytes:
        return reply_bytes(self._call("get", path=vpath, max=self.max_file_bytes)["data"])

    def _put(self, vpath: str, data: bytes) -> None:
        """Write ``data`` atomically, in argument-sized chunks (staging file + rename).

        The staging file is named after the journaled call, as on the Filesystem
        backend (:func:`backends.filesystem.host_files.named_for_call`)."""
        tmp: str | None = None
        pos = 0
        try:
            while True:
                chunk = data[pos : pos + UPLOAD_CHUNK_BYTES]
                pos += len(chunk)
                final = pos >= len(data)
                reply = self._call(
                    "put", chunk, path=vpath, tmp=tmp, final=final, token=call_token()
                )
                if final:
                    return
                tmp = reply_text(reply["tmp"])
        except BaseException:
            if tmp is not None:
                with suppress(*_EXPECTED):
                    self._call("abort", path=vpath, tmp=tmp)
            raise

    # -- protocol ------------------------------------------------------------

    def ls(self, path: str) -> LsResult:
        vpath = str(path)
        try:
            vpath = validate_path(path)
            rows = self._call("ls", path=vpath)["entries"]
        except _EXPECTED as exc:
            return _fail(LsResult, vpath, exc)
        entries = [
            FileInfo(
                path=join_path(vpath, reply_text(name)) + ("/" if is_dir else ""),
                is_dir=is_dir,
                size=None if is_dir else size,
                modified_at=datetime.fromtimestamp(mtime, UTC).isoformat(),
            )
            for name, is_dir, size, mtime in rows
        ]
        entries.sort(key=lambda e: e.path)
        return LsResult(entries=entries)

    def read(self, path: str, offset: int = 0, limit: int = DEFAULT_READ_LIMIT) -> ReadResult:
        vpath = str(path)
        try:
            vpath = validate_path(path)
            # No limit check here: binary bytes come back whatever the limit,
            # and read_window decides for text (kernel.textops.nothing_requested).
            data = self._get(vpath)
        except _EXPECTED as exc:
            result = _fail(ReadResult, vpath, exc)
            if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
                result.error = f"is over the {self.max_file_bytes}-byte limit"
                result.error_path = vpath
            return result
        if not is_media_path(vpath):
            text = decode_text(data)
            if text is not None:
                return read_window(vpath, text, offset, limit)
        return ReadResult(path=vpath, data=data, encoding="base64", size=len(data))

    def write(self, path: str, content: str) -> WriteResult:
        return self._ops.write(path, content)

    def edit(self, path: str, old: str, new: str, replace_all: bool = False) -> EditResult:
        return self._ops.edit(path, old, new, replace_all)

    def delete(self, path: str) -> DeleteResult:
        vpath = str(path)
        try:
            vpath = validate_path(path)
            if vpath == "/":
                return DeleteResult(
                    path=vpath, error="refusing to delete the root", code="invalid_argument"
                )
            self._call("rm", path=vpath)
        except _EXPECTED as exc:
            return _fail(DeleteResult, vpath, exc)
        return DeleteResult(path=vpath)

    def glob(self, pattern: str, path: str = "/", visible: Visible | None = None) -> GlobResult:
        vroot = str(path)
        try:
            vroot, rel_pattern = resolve_glob(pattern, path)
            matcher = GlobMatcher(rel_pattern)
            hidden = spells_dot(pattern) or matcher.any_depth  # `*.yml` looks in .github too
            files = self._call("walk", path=vroot, hidden=hidden)["files"]
        except _EXPECTED as exc:
            return _fail(GlobResult, vroot, exc)
        base = vroot.rstrip("/") + "/"
        rels = [reply_text(rel) for rel in files]
        matches = sorted(
            base + rel
            for rel in rels
            if matcher.match(rel) and (visible is None or visible(base + rel))
        )
        truncated = len(matches) > MAX_GLOB_RESULTS
        return GlobResult(matches=matches[:MAX_GLOB_RESULTS], truncated=truncated)

    def grep(
        self,
        literal: str,
        path: str | None = None,
        glob: str | None = None,
        max_count: int | None = None,
        visible: Visible | None = None,
    ) -> GrepResult:
        vroot = str(path)
        try:
            scope = grep_scope(literal, path, glob, max_count)
            if isinstance(scope, GrepResult):
                return scope
            vroot, flt = scope
            if visible is not None:
                listed = self._grep_listed(literal, vroot, flt, glob, max_count, visible)
                if listed is not None:
                    return listed
            reply = self._call(
                "grep",
                path=vroot,
                needle=literal,
                hidden=bool(glob) and spells_dot(glob or ""),
                limit=None if max_count is None else max_count + 1,
                max=self.max_file_bytes,
            )
        except _EXPECTED as exc:
            return _fail(GrepResult, vroot, exc)
        if reply.get("binary"):
            return GrepResult(error=BINARY_GREP, code="binary_file", error_path=vroot)
        base = vroot.rstrip("/") + "/"
        found: list[GrepMatch] = []
        for encoded_rel, hits in reply["files"]:
            rel = reply_text(encoded_rel)
            vpath = vroot if rel == "" else base + rel
            if rel and not flt.wants(vpath):
                continue
            found.extend(
                GrepMatch.model_construct(path=vpath, line=line, text=reply_text(text))
                for line, text in hits
            )
        kept, truncated = merge_grep_budget(found, max_count)
        return GrepResult(matches=kept, truncated=truncated)

    def _grep_listed(
        self,
        literal: str,
        vroot: str,
        flt: GrepFileFilter,
        glob: str | None,
        max_count: int | None,
        visible: Visible,
    ) -> GrepResult | None:
        """grep over an explicit list of permitted files (None: the root is a file).

        The helper first lists the candidates; only the files ``flt`` wants and
        ``visible`` allows are then searched, in sorted argument-sized chunks,
        stopping once the budget is certainly spent: nothing about a hidden file
        (its matches, its size, its search time) can shape the answer.
        """
        hidden = bool(glob) and spells_dot(glob or "")
        try:
            listed = self._call("walk", path=vroot, hidden=hidden)["files"]
        except NotADirectoryError:
            return None
        base = vroot.rstrip("/") + "/"
        rels = sorted(
            rel
            for rel in (reply_text(encoded) for encoded in listed)
            if flt.wants(base + rel) and visible(base + rel)
        )
        found: list[GrepMatch] = []
        for chunk in _chunks(rels, GREP_LIST_CHUNK_CHARS):
            reply = self._call(
                "grepfiles",
                path=vroot,
                files=chunk,
                needle=literal,
                limit=None if max_count is None else max_count + 1,
                max=self.max_file_bytes,
            )
            for encoded_rel, hits in reply["files"]:
                vpath = base + reply_text(encoded_rel)
                found.extend(
                    GrepMatch.model_construct(path=vpath, line=line, text=reply_text(text))
                    for line, text in hits
                )
            if max_count is not None and len(found) > max_count:
                break  # later chunks sort after every match kept
        kept, truncated = merge_grep_budget(found, max_count)
        return GrepResult(matches=kept, truncated=truncated)

    # -- symlink resolution (kernel.visibility) ------------------------------

    def resolve_path(self, path: str) -> str | None:
        """The in-workspace path ``path`` resolves to (symlinks followed), or None."""
        return self.resolve_paths([path])[0]

    def resolve_paths(self, paths: list[str]) -> list[str | None]:
        """Resolved in-workspace paths, on the host when the workspace lives there.

        A sandbox whose workspace is a host directory (bubblewrap binds its
        ``root``) resolves with the host's kernel, without starting a sandbox;
        any other asks the helper inside the sandbox, once for the whole batch.
        """
        valid: list[str | None] = []
        for path in paths:
            try:
                valid.append(validate_path(path))
            except ValueError:
                valid.append(None)
        host_root = getattr(self, "root", None)
        if isinstance(host_root, str) and os.path.isabs(host_root):
            return [None if v is None else resolve_in_root(host_root, v) for v in valid]
        wanted = [v for v in valid if v is not None]
        if not wanted:
            return [None] * len(valid)
        try:
            answers = iter(self._call("resolve", paths=wanted)["paths"])
        except _EXPECTED:
            return [None] * len(valid)
        return [None if v is None or (a := next(answers)) is None else reply_text(a) for v in valid]

    def upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResult]:
        return self._ops.upload(files)

    def download(self, paths: list[str]) -> list[FileDownloadResult]:
        return self._ops.download(paths)


def _chunks(items: list[str], max_chars: int) -> Iterator[list[str]]:
    """Consecutive slices of ``items`` whose UTF-8 size stays under ``max_chars`` bytes."""
    chunk: list[str] = []
    size = 0
    for item in items:
        length = len(item.encode("utf-8", "surrogatepass")) + 8
        if chunk and size + length > max_chars:
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += length
    if chunk:
        yield chunk


__all__ = ["WORKSPACE", "BaseSandbox", "SandboxOpError"]
