"""The sandbox's seccomp filter: no disk space without writing it (contract §11).

The write bound counts the bytes a command dirties for storage
(:mod:`filegate.processes.reaper`, "Why writes are counted this way"). ``fallocate(2)`` and the
preallocation ioctls (``FS_IOC_RESVSP``, ``FS_IOC_RESVSP64``,
``FS_IOC_ZERO_RANGE``, which the VFS serves for every filesystem) reserve
blocks without dirtying a page, and with ``FALLOC_FL_KEEP_SIZE`` they even
pass ``RLIMIT_FSIZE``: one ``fallocate -n -l 100G`` would fill the disk
unseen. In the sandbox they fail with ``EOPNOTSUPP``, as on a filesystem
that has no ``fallocate``: glibc's ``posix_fallocate`` then writes the
blocks, and those bytes count. Punching holes (which frees space) stays
allowed.

io_uring is refused whole (``io_uring_setup``, ``_enter``, ``_register`` fail
with ``ENOSYS``, as on a kernel without it, so programs fall back to plain
system calls): ``IORING_OP_FALLOCATE`` reserves blocks like ``fallocate``,
from a kernel worker that neither this filter (it sees system calls, not
ring entries) nor ``RLIMIT_FSIZE`` stops, and one command reserved 300 MiB
past 16 MiB per file and 32 MiB per command (issue 33). Filtering ring
opcodes is not possible from seccomp, and the ring has more ways round the
filter as the kernel grows; the other ways to allocate disk that were
checked are listed in docs/threat-model.md §6a.

The filter is classic BPF, built here for the host's architecture and its
32-bit compat ABI (x86_64 with i386, aarch64 with arm; x32 system calls fail
with ``ENOSYS``), and handed to bwrap's ``--seccomp FD``, which installs it
for the sandboxed command only. On another architecture there is no filter,
and :func:`filter_problem` says so.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
_ERRNO = 0x00050000  # SECCOMP_RET_ERRNO | errno
_NR, _ARCH, _ARG1_LOW = 0, 4, 24
"""Offsets in ``struct seccomp_data`` (little-endian: an argument's low half first)."""
_X32_BIT = 0x40000000
_PUNCH_HOLE = 0x03  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE


def _iow_x(nr: int, size: int) -> int:
    """``_IOW('X', nr, size)``."""
    return (1 << 30) | (size << 16) | (ord("X") << 8) | nr


_PREALLOCATE = tuple(_iow_x(nr, size) for nr in (40, 42, 57) for size in (48, 44))
"""``FS_IOC_RESVSP``, ``_RESVSP64``, ``_ZERO_RANGE``: ``struct space_resv`` is 48
bytes, 44 in the i386 compat ABI."""

_IO_URING = (425, 426, 427)
"""``io_uring_setup``, ``_enter``, ``_register``: one number on every ABI here."""

_ABIS: dict[str, tuple[tuple[int, int, int], ...]] = {
    # machine: (AUDIT_ARCH_*, __NR_fallocate, __NR_ioctl) per ABI a process can use
    "x86_64": ((0xC000003E, 285, 16), (0x40000003, 324, 54)),
    "aarch64": ((0xC00000B7, 47, 29), (0x40000028, 352, 54)),
}


class _Program:
    """Instructions with symbolic forward jumps, resolved by :meth:`code`."""

    def __init__(self) -> None:
        self.ops: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int, jt: str | int = 0, jf: str | int = 0) -> None:
        self.ops.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.ops)

    def code(self) -> bytes:
        out = b""
        for at, (code, jt, jf, k) in enumerate(self.ops):
            hops = [self.labels[j] - at - 1 if isinstance(j, str) else j for j in (jt, jf)]
            out += struct.pack("=HBBI", code, hops[0], hops[1], k)
        return out


def filter_program(machine: str | None = None) -> bytes | None:
    """The compiled filter for ``machine`` (default: this host), or None if unknown."""
    machine = machine or platform.machine()
    abis = _ABIS.get(machine)
    if abis is None:
        return None
    refuse = _ERRNO | errno.EOPNOTSUPP
    prog = _Program()
    prog.op(_LD_W_ABS, _ARCH)
    for index, (arch, _, _) in enumerate(abis):
        prog.op(_JEQ_K, arch, jt=f"abi{index}")
    prog.op(_RET_K, _ALLOW)
    for index, (_, fallocate, ioctl) in enumerate(abis):
        prog.label(f"abi{index}")
        prog.op(_LD_W_ABS, _NR)
        if index == 0 and machine == "x86_64":
            prog.op(_JSET_K, _X32_BIT, jt="nosys")
        prog.op(_JEQ_K, fallocate, jt="fallocate")
        prog.op(_JEQ_K, ioctl, jt="ioctl")
        for number in _IO_URING:
            prog.op(_JEQ_K, number, jt="nosys")
        prog.op(_RET_K, _ALLOW)
    prog.label("fallocate")
    prog.op(_LD_W_ABS, _ARG1_LOW)  # mode
    prog.op(_JEQ_K, _PUNCH_HOLE, jt="allow")
    prog.op(_RET_K, refuse)
    prog.label("ioctl")
    prog.op(_LD_W_ABS, _ARG1_LOW)  # request: the kernel reads it as 32 bits
    for request in _PREALLOCATE:
        prog.op(_JEQ_K, request, jt="refuse")
    prog.label("allow")
    prog.op(_RET_K, _ALLOW)
    prog.label("refuse")
    prog.op(_RET_K, refuse)
    prog.label("nosys")
    prog.op(_RET_K, _ERRNO | errno.ENOSYS)
    return prog.code()


def filter_fd() -> int | None:
    """A pipe's read end holding the filter, for bwrap's ``--seccomp`` (the caller
    closes it once bwrap started); None on an architecture without a filter."""
    program = filter_program()
    if program is None:
        return None
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, program)  # a few hundred bytes: far below a pipe's buffer
    finally:
        os.close(write_end)
    return read_end


def filter_problem() -> str | None:
    """Why the sandbox has no fallocate and io_uring filter here, or None."""
    if filter_program() is None:
        return f"no seccomp filter for {platform.machine()}: fallocate and io_uring are not refused"
    return None


__all__ = ["filter_fd", "filter_problem", "filter_program"]
