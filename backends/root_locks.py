"""Locks every worker serving one root shares: shared byte-range locks on the root directory.

Why here: what a running command's view holds (a placeholder directory, a
protected name) must stay held against every process that could take it away,
not only this one. Two tools workers on one tree (two replicas of the compose
file's sandbox worker, a worker under systemd's ``PrivateTmp``, two hosts'
containers on one volume) share nothing but the tree itself, so a lock file in
a temporary directory protected nothing across them (issue 50, item 3). The
root directory is the one object they all reach, under whatever path each
mounts it.

Why a directory and only shared locks: a directory can be opened read-only
only, so the kernel lets nobody place an exclusive lock on it. A command in a
sandbox, which sees the root as its workspace, can therefore neither make a
worker wait (``flock -x`` on a file the worker would lock stalled the next
command) nor unlock anyone; at most it holds a shared lock that makes a
placeholder stay, which is the safe direction. A hold says "in use"; whoever
would take something away asks the kernel whether any hold covers its byte
(``F_OFD_GETLK``) and leaves it while one does.

Open-file-description locks belong to one descriptor: each command's holds
are its own (no counting inside the process), and they go when its descriptor
closes, also when its worker process dies.

Byte ``hash(key)`` stands for ``key``: a key is a name relative to the root,
the same in every worker whatever its mount point. A hash collision only makes
something wait or stay that need not.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import struct

_FLOCK = "hhqqi4x"
"""``struct flock`` on 64-bit Linux: type, whence, start, length, pid, padding."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _offset(key: str) -> int:
    return int.from_bytes(hashlib.sha256(os.fsencode(key)).digest()[:7], "big")


def _lock(fd: int, command: int, kind: int, key: str) -> int:
    """One ``fcntl`` lock call on ``key``'s byte; the lock type the kernel answered."""
    answer = fcntl.fcntl(fd, command, struct.pack(_FLOCK, kind, os.SEEK_SET, _offset(key), 1, 0))
    return int(struct.unpack(_FLOCK, answer)[0])


class RootHolds:
    """One command's shared holds on one root, all released by :meth:`close`."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._fd: int | None = None

    def hold(self, key: str) -> None:
        if self._fd is None:
            self._fd = os.open(self.root, _DIR_FLAGS)
        _lock(self._fd, fcntl.F_OFD_SETLK, fcntl.F_RDLCK, key)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def in_use(root: str, key: str) -> bool:
    """Whether any process, this one included, holds ``key`` on ``root``."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        return _lock(fd, fcntl.F_OFD_GETLK, fcntl.F_WRLCK, key) != fcntl.F_UNLCK
    finally:
        os.close(fd)


__all__ = ["RootHolds", "in_use"]
