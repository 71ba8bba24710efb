"""Keep the worker's secrets out of reach of the host commands it runs (LocalShell).

A LocalShell command runs as the worker's uid, and the worker holds
credentials in its environment (``OPENAI_API_KEY``, ``FILEGATE_S3_SECRET_KEY``,
...). Without help, ``cat /proc/<worker pid>/environ`` prints them. Two
layers close that, both Linux only (no-ops elsewhere):

- :func:`make_non_dumpable`, called in the worker: ``prctl(PR_SET_DUMPABLE, 0)``.
  The kernel then refuses ptrace-mode access -- ``/proc/<pid>/environ``,
  ``mem``, ``fd/``, ``maps``, ``ptrace(2)`` itself -- to any other process
  that lacks ``CAP_SYS_PTRACE``, even one of the same uid. It has to run in
  the process that holds the secrets: ``execve`` sets the flag back to 1 (and
  a uid/gid change to ``fs.suid_dumpable``), so it cannot be set from outside
  nor survive an exec.
- :func:`drop_all_capabilities`, when the worker is root: uid 0 normally holds
  ``CAP_SYS_PTRACE``, which ignores the dumpable flag, so the command must run
  without any capability. It empties the bounding set (so the ``execve`` of
  the command cannot grant root its capabilities back), sets
  ``no_new_privs`` (no setuid or file-capability gain), clears the ambient,
  inheritable, permitted and effective sets, and checks that nothing is left.
  The command still runs as uid 0 on the same files. (A second lock on the
  same door: the kernel also refuses ptrace access to a process whose
  permitted set is not a subset of the caller's, and a root worker's is full.)

The drop runs in this file used as a script, between the worker and the
command's supervisor: ``python -I -S guard.py FD -- ARGV`` drops, then
execs ARGV (see :func:`guarded`). Why a script and not a ``preexec_fn``:
the worker is multi-threaded (Temporal's activity threads, the event loop),
and Python code in the forked child of a threaded process can deadlock on a
lock another thread held at ``fork`` (imports, ``ctypes``, malloc); the
reaper's rule is that nothing runs between ``fork`` and ``exec`` in the
worker (:mod:`.reaper`). Why before the supervisor rather than inside it: the
supervisor then holds no capability either (it needs none: every process it
signals is its own uid's, and no_new_privs keeps them so), and the drop stays
one small stdlib-only step that needs no change to the supervisor. It costs
one more ``python -I -S`` start with ``ctypes`` (~25 ms) per command, only for
a root worker.

How the worker knows the command did not start: FD is the write end of a
pipe. On failure the guard writes ``code<TAB>reason`` to it and exits without
running anything; on success FD is close-on-exec, so the worker reads EOF and
nothing else. A command cannot forge the report: the pipe is closed before it
exists.

Stdlib only, no Filegate import: this file runs under ``python -I -S``.

Also here, as stdlib as the rest: :func:`pid_alive` (a process still running?),
for the command's cgroup (:mod:`.cgroups`) and the dev stack
(:mod:`filegate.devstack.stack`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_IS_SET = 1
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
"""``_LINUX_CAPABILITY_VERSION_3``: two 32-bit data structs, capabilities 0..63."""

GUARD_SCRIPT = os.path.abspath(__file__)
GUARD_FAILED_EXIT = 126
"""The guard's exit status when it refused to run the command (as a shell's "cannot execute")."""


class _CapHeader(ctypes.Structure):
    """``struct __user_cap_header_struct``."""

    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    """``struct __user_cap_data_struct``; version 3 takes an array of two."""

    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


_libc: ctypes.CDLL | None = None


def _is_linux() -> bool:
    return sys.platform.startswith("linux")


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _prctl(option: int, arg2: int = 0, name: str = "") -> int:
    """``prctl(option, arg2, 0, 0, 0)``; OSError (with errno) on failure.

    The arguments are passed as ``unsigned long`` explicitly: prctl is variadic,
    and ctypes' default ``int`` would leave the upper half of the register unset.
    """
    zero = ctypes.c_ulong(0)
    result: int = _lib().prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), zero, zero, zero)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({name or option}) failed: {os.strerror(err)}")
    return result


def make_non_dumpable() -> bool:
    """Make this process non-dumpable; True when applied, False off Linux.

    Same-uid processes without ``CAP_SYS_PTRACE`` can then no longer read its
    ``/proc/<pid>/environ``, ``mem`` or ``fd/``, nor ptrace it; it also writes
    no core dump (which would hold the same secrets). Raises OSError if the
    kernel refuses: a worker that believes it is protected must be.
    """
    if not _is_linux():
        return False
    _prctl(PR_SET_DUMPABLE, 0, "PR_SET_DUMPABLE")
    return True


def is_dumpable() -> bool | None:
    """This process's dumpable flag (None off Linux)."""
    if not _is_linux():
        return None
    return _prctl(PR_GET_DUMPABLE, name="PR_GET_DUMPABLE") == 1


def needs_capability_drop() -> bool:
    """True when commands must shed capabilities: Linux, and this process is euid 0.

    A normal user's command has no capability to shed: ``execve`` grants a
    non-root process only its ambient set, empty unless an operator set one up
    for the worker. It could not empty the bounding set anyway (that needs
    ``CAP_SETPCAP``).
    """
    return _is_linux() and os.geteuid() == 0


def _last_capability() -> int:
    """The highest capability number this kernel knows."""
    try:
        with open("/proc/sys/kernel/cap_last_cap", "rb") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        pass
    cap = 0  # no /proc: the bounding set answers EINVAL past the last one
    while cap < 63:
        try:
            _prctl(PR_CAPBSET_READ, cap + 1, "PR_CAPBSET_READ")
        except OSError:
            break
        cap += 1
    return cap


def capability_sets() -> dict[str, int]:
    """This process's capability sets as bit masks (``capget``, bounding and ambient reads)."""
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if _lib().capget(ctypes.byref(header), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capget failed: {os.strerror(err)}")
    sets = {
        name: getattr(data[0], name) | (getattr(data[1], name) << 32)
        for name in ("effective", "permitted", "inheritable")
    }
    bounding = ambient = 0
    for cap in range(_last_capability() + 1):
        if _prctl(PR_CAPBSET_READ, cap, "PR_CAPBSET_READ") == 1:
            bounding |= 1 << cap
        try:
            if _ambient_is_set(cap):
                ambient |= 1 << cap
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: a kernel before 4.3, no ambient set
                raise
    sets["bounding"], sets["ambient"] = bounding, ambient
    return sets


def _ambient_is_set(cap: int) -> bool:
    zero = ctypes.c_ulong(0)
    lib = _lib()
    result: int = lib.prctl(
        ctypes.c_int(PR_CAP_AMBIENT),
        ctypes.c_ulong(PR_CAP_AMBIENT_IS_SET),
        ctypes.c_ulong(cap),
        zero,
        zero,
    )
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_CAP_AMBIENT_IS_SET) failed: {os.strerror(err)}")
    return result == 1


def drop_all_capabilities() -> None:
    """Leave this process, and whatever it execs, with no capability at all.

    Order matters: the ambient set first (no privilege needed), the bounding
    set while ``CAP_SETPCAP`` is still effective, ``no_new_privs``, then
    ``capset`` to empty the rest. Raises OSError when any step fails or when a
    capability is still left afterwards; the caller must then not run anything.
    """
    try:
        _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, "PR_CAP_AMBIENT_CLEAR_ALL")
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # EINVAL: no ambient set on this kernel (< 4.3)
            raise
    for cap in range(_last_capability() + 1):
        if _prctl(PR_CAPBSET_READ, cap, "PR_CAPBSET_READ") == 1:
            _prctl(PR_CAPBSET_DROP, cap, f"PR_CAPBSET_DROP, {cap}")
    _prctl(PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()  # zero-initialised: effective, permitted, inheritable all empty
    if _lib().capset(ctypes.byref(header), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset failed: {os.strerror(err)}")
    left = {name: mask for name, mask in capability_sets().items() if mask}
    if left:
        shown = ", ".join(f"{name} {mask:#x}" for name, mask in left.items())
        raise OSError(errno.EPERM, f"capabilities left after dropping: {shown}")
    if _prctl(PR_GET_NO_NEW_PRIVS, name="PR_GET_NO_NEW_PRIVS") != 1:
        raise OSError(errno.EPERM, "no_new_privs is not set")


def guarded(argv: Sequence[str], status_fd: int) -> list[str]:
    """``argv`` run by the guard: every capability dropped first, refusal reported on ``status_fd``.

    The caller passes ``status_fd`` to the child (``pass_fds``), closes its own
    copy after starting it, and reads the other end of the pipe until EOF.
    """
    return [sys.executable, "-I", "-S", GUARD_SCRIPT, str(status_fd), "--", *argv]


def parse_refusal(report: bytes) -> tuple[str, str] | None:
    """``(code, reason)`` from what the guard wrote on its status pipe, or None (it ran ARGV)."""
    if not report:
        return None
    code, _, reason = report.decode("utf-8", "replace").partition("\t")
    return code, reason.strip()


def proc_stat(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (state first), None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = proc_stat(pid)
    return stat is None or stat[0] not in ("Z", "X")


def _refuse(fd: int, code: str, reason: str) -> None:
    try:
        os.write(fd, f"{code}\t{reason}".encode())
    except OSError:
        sys.stderr.write(f"filegate: {reason}\n")


def main(args: Sequence[str]) -> int:
    """``FD -- ARGV``: drop every capability, then ``execv`` ARGV; on failure report on FD."""
    fd = int(args[0])
    argv = list(args[2:] if args[1:2] == ["--"] else args[1:])
    os.set_inheritable(fd, False)  # closed by the exec: EOF tells the worker ARGV started
    try:
        drop_all_capabilities()
    except OSError as exc:
        reason = f"could not drop the command's capabilities ({exc}); a root worker needs "
        reason += "CAP_SETPCAP for that, or run the worker as an unprivileged user"
        _refuse(fd, "unsupported", reason)
        return GUARD_FAILED_EXIT
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        _refuse(fd, "io_error", f"could not start {argv[0]}: {exc}")
    return GUARD_FAILED_EXIT


__all__ = [
    "GUARD_FAILED_EXIT",
    "capability_sets",
    "drop_all_capabilities",
    "guarded",
    "is_dumpable",
    "make_non_dumpable",
    "needs_capability_drop",
    "parse_refusal",
    "pid_alive",
    "proc_stat",
]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
