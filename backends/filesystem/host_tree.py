"""Everything a recursive delete would remove, listed from the host without following links.

A reviewer approving a delete must see what goes: dotfiles and dot-directories,
empty directories and symlinks (the link itself, never its target), not only
the regular files a glob returns. The walk runs on directory descriptors
(``O_NOFOLLOW`` at every step, ``scandir`` on the descriptor), so a symlink or
a rename during the walk cannot lead it out of the subtree.
"""

from __future__ import annotations

import os
import stat

from filegate.backends.filesystem.host_files import DIR_FLAGS
from filegate.kernel.paths import join_path
from filegate.kernel.protocol import TreeEntry, TreeKind

MAX_TREE_ENTRIES = 100_000
"""Entries listed before a walk stops (the listing then says it is cut)."""


def _kind(mode: int) -> TreeKind:
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


def tree_below(dir_fd: int, name: str, vpath: str) -> tuple[list[TreeEntry], bool] | None:
    """``name`` inside ``dir_fd`` (at backend path ``vpath``) and all below it.

    ``(entries, cut)``: the target first, then its descendants depth-first in
    name order; ``cut`` when :data:`MAX_TREE_ENTRIES` stopped the walk. None
    when nothing is there.
    """
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    entries = [_entry(vpath, info)]
    if not stat.S_ISDIR(info.st_mode):
        return entries, False
    fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    try:
        cut = _walk(fd, vpath, entries)
    finally:
        os.close(fd)
    return entries, cut


def _entry(vpath: str, info: os.stat_result) -> TreeEntry:
    kind = _kind(info.st_mode)
    return TreeEntry(
        path=vpath,
        kind=kind,
        size=info.st_size if kind == "file" else None,
        modified=info.st_mtime_ns,
    )


def _walk(fd: int, vpath: str, entries: list[TreeEntry]) -> bool:
    with os.scandir(fd) as listing:
        children = sorted(listing, key=lambda e: e.name)
    for child in children:
        if len(entries) >= MAX_TREE_ENTRIES:
            return True
        try:
            info = child.stat(follow_symlinks=False)
        except OSError:
            continue  # gone meanwhile: it will not be deleted either
        path = join_path(vpath, child.name)
        entries.append(_entry(path, info))
        if stat.S_ISDIR(info.st_mode):
            try:
                sub = os.open(child.name, DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue
            try:
                if _walk(sub, path, entries):
                    return True
            finally:
                os.close(sub)
    return False


__all__ = ["MAX_TREE_ENTRIES", "tree_below"]
