"""Pure-Python directory walks for the filesystem backend: glob and grep without ripgrep.

Both walks go through directory descriptors (``openat``) and never follow a
symlink, so a link swapped in mid-walk cannot lead outside the root. They
are kept apart from :mod:`filegate.backends.filesystem.backend` (path plumbing and
file operations) and :mod:`filegate.backends.filesystem.ripgrep` (the ripgrep
search) so each search strategy reads on its own.

Both watch a :class:`~filegate.backends.filesystem.search_clock.SearchClock`: before
each directory they enter, every :data:`CLOCK_EVERY` entries of one
directory, and before each file grep reads after its first. Once it has
expired the walk unwinds and the caller answers with what was found so far
(contract §1, partial results). The clock is only asked when work remains,
so it never marks a finished walk as cut, and a limit that has already
passed still yields the first directory's files (or the first file's
matches) rather than nothing.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Generator

from filegate.backends.filesystem.host_files import DIR_FLAGS, FILE_FLAGS, utf8_name
from filegate.backends.filesystem.search_clock import SearchClock
from filegate.backends.streams import scan_stream
from filegate.kernel.globbing import GlobMatcher, GrepFileFilter
from filegate.kernel.protocol import GrepMatch, Visible

CLOCK_EVERY = 1024
"""Entries of one directory scanned between two looks at the clock: one huge flat
directory cannot outrun the limit, and the clock costs nothing per entry."""


def _walk_files(
    dfd: int,
    prefix: str,
    may_enter: Callable[[str], bool],
    wants: Callable[[str], bool],
    clock: SearchClock,
) -> Generator[tuple[int, str, str], None, None]:
    """Yield ``(dir_fd, name, rel_path)`` for wanted regular files (no symlinks).

    ``dir_fd`` is only valid until the next item is requested. Stops early
    (without error) once ``clock`` has expired.
    """
    subdirs: list[str] = []
    files: list[tuple[str, str]] = []
    try:
        with os.scandir(dfd) as it:
            for count, entry in enumerate(it, 1):
                if count % CLOCK_EVERY == 0 and clock.expired():
                    break
                name = entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        rel = prefix + name
                        if may_enter(rel) and utf8_name(name):
                            subdirs.append(name)
                    elif entry.is_file(follow_symlinks=False):
                        rel = prefix + name
                        if wants(rel) and utf8_name(name):
                            files.append((name, rel))
                except OSError:
                    continue
    except OSError:
        return
    for name, rel in files:
        yield dfd, name, rel
    for name in subdirs:
        if clock.expired():
            return
        try:
            child = os.open(name, DIR_FLAGS, dir_fd=dfd)
        except OSError:
            continue
        try:
            yield from _walk_files(child, prefix + name + "/", may_enter, wants, clock)
        finally:
            os.close(child)


def grep_tree(
    dfd: int,
    literal: str,
    vroot: str,
    flt: GrepFileFilter,
    per_file: int | None,
    visible: Visible | None = None,
    clock: SearchClock | None = None,
) -> list[GrepMatch]:
    """Search the files ``flt`` wants and ``visible`` allows below ``dfd`` (virtual ``vroot``).

    With ``clock``, the matches of the files read before it expired.
    """
    clock = SearchClock() if clock is None else clock
    base = vroot.rstrip("/") + "/"
    found: list[GrepMatch] = []

    def wants(rel: str) -> bool:
        return flt.wants(base + rel) and (visible is None or visible(base + rel))

    walk = _walk_files(dfd, "", lambda rel: flt.may_enter(base + rel), wants, clock)
    read = 0
    try:
        for parent_fd, name, rel in walk:
            if read and clock.expired():
                break  # files remain unread: the answer is partial
            try:
                fd = os.open(name, FILE_FLAGS, dir_fd=parent_fd)
            except OSError:
                continue
            with os.fdopen(fd, "rb", buffering=0) as fh:
                hits = scan_stream(fh, literal, base + rel, per_file)
            read += 1
            if hits:
                found.extend(hits)
    finally:
        walk.close()  # closes the directories the walk still holds open
    return found


def collect_glob(
    dfd: int,
    prefix: str,
    matcher: GlobMatcher,
    out: list[str],
    keep: Callable[[str], bool] | None = None,
    clock: SearchClock | None = None,
) -> None:
    """Glob walk (the hot path of ``glob``): no symlinks, pruned, no per-file generators.

    ``keep`` (over paths relative to the walk's root) drops files as if absent.
    With ``clock``, ``out`` holds what was found before it expired.
    """
    clock = SearchClock() if clock is None else clock
    subdirs: list[str] = []
    try:
        with os.scandir(dfd) as it:
            for count, entry in enumerate(it, 1):
                if count % CLOCK_EVERY == 0 and clock.expired():
                    break
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if matcher.may_enter(prefix + entry.name) and utf8_name(entry.name):
                            subdirs.append(entry.name)
                    elif entry.is_file(follow_symlinks=False):
                        name = entry.name
                        if (
                            matcher.match_in_walk(prefix, name)
                            and utf8_name(name)
                            and (keep is None or keep(prefix + name))
                        ):
                            out.append(prefix + name)
                except OSError:
                    continue
    except OSError:
        return
    for name in subdirs:
        if clock.expired():
            return
        try:
            child = os.open(name, DIR_FLAGS, dir_fd=dfd)
        except OSError:
            continue
        try:
            collect_glob(child, prefix + name + "/", matcher, out, keep, clock)
        finally:
            os.close(child)


def open_below(dfd: int, rel: str) -> int:
    """Open regular file ``rel`` below directory ``dfd``, every component without following links.

    Raises OSError: ``ELOOP``/``ENOTDIR`` when a component is a symlink (as
    after a swap), ``EINVAL`` for a name that is not a plain relative path or
    a file that is not regular.
    """
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise OSError(errno.EINVAL, "not a plain relative path")
    fd = os.dup(dfd)
    try:
        for part in parts[:-1]:
            child = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        out = os.open(parts[-1], FILE_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(out).st_mode):
        os.close(out)
        raise OSError(errno.EINVAL, "not a regular file")
    return out
