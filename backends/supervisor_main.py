"""The per-command supervisor: ``python -I -S supervisor_main.py MEM,FSIZE,PROCS,POLL -- ARGV``.

Run as a separate interpreter (stdlib only, no Filegate import, no site), it
sits between the worker and one command (contract §11, :mod:`.reaper`):

1. it makes itself a *child subreaper* (``PR_SET_CHILD_SUBREAPER``), so every
   process the command starts -- also one that called ``setsid`` or forked
   twice to become a daemon -- stays its descendant instead of moving to init;
2. it forks the command with the resource limits applied in the child before
   ``exec`` (``RLIMIT_DATA``, ``RLIMIT_FSIZE``, no core dumps), SIGPIPE back to
   default and SIGXFSZ ignored (an over-size write fails with EFBIG, "File too
   large", instead of killing the writer silently);
3. every POLL seconds it counts its live descendants and kills them all when
   there are more than PROCS;
4. when the command exits, when it gets SIGTERM/SIGINT/SIGHUP (the worker's
   timeout or cancel) or when its parent dies, it SIGKILLs every remaining
   descendant, reaps them, and exits with the command's status (128 + N for
   signal N).

A limit of 0 means "no limit". Descendants are found from ``/proc`` (parent
links); a pid seen once stays classified (a process cannot move into or out of
our subtree while we are its subreaper), so a poll only reads new pids.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
KILL_ROUNDS_SECONDS = 3.0
WAKE_SIGNALS = (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _set_subreaper() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


class Tree:
    """The supervisor's live descendants, from ``/proc`` parent links."""

    def __init__(self, me: int) -> None:
        self.me = me
        self.ours: set[int] = set()
        self.others: set[int] = set()

    def _ppid(self, pid: int) -> int | None:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            return None
        return int(stat.rsplit(b")", 1)[1].split()[1])

    def scan(self) -> set[int]:
        live = {int(name) for name in os.listdir("/proc") if name.isdigit()}
        fresh: dict[int, int] = {}
        for pid in live - self.ours - self.others - {self.me}:
            parent = self._ppid(pid)
            if parent is not None:
                fresh[pid] = parent
        changed = True
        while changed:  # parents first, whatever order the pids came in
            changed = False
            for pid, parent in list(fresh.items()):
                if parent == self.me or parent in self.ours:
                    self.ours.add(pid)
                elif parent == 0 or parent in self.others:
                    self.others.add(pid)
                else:
                    continue  # parent unknown yet: read again next scan
                del fresh[pid]
                changed = True
        self.ours &= live  # pruned only now: a just-dead parent still classifies
        self.others &= live
        return set(self.ours)


def _reap(main: int, status: int | None) -> int | None:
    """Collect every exited child; returns the command's wait status once it is known."""
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == main:
            status = code


def _kill_all(tree: Tree, main: int, status: int | None) -> int | None:
    deadline = time.monotonic() + KILL_ROUNDS_SECONDS
    while True:
        status = _reap(main, status)
        left = tree.scan()
        if not left or time.monotonic() > deadline:
            return status
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


def _child(memory: int, fsize: int, argv: list[str]) -> None:
    import resource

    if memory:
        resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    if fsize:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    os.execvp(argv[0], argv)


def _exit_code(status: int | None) -> int:
    if status is None:
        return 137
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def main() -> int:
    raw = sys.argv[1].split(",")
    memory, fsize, procs = int(raw[0]), int(raw[1]), int(raw[2])
    poll = float(raw[3])
    argv = sys.argv[3:] if sys.argv[2:3] == ["--"] else sys.argv[2:]
    _set_subreaper()
    parent = os.getppid()
    signal.pthread_sigmask(signal.SIG_BLOCK, WAKE_SIGNALS)
    tree = Tree(os.getpid())
    tree.scan()
    try:
        pid = os.fork()
    except OSError as exc:
        sys.stderr.write(f"filegate: could not start the command: {exc}\n")
        return 126
    if pid == 0:
        try:
            _child(memory, fsize, argv)
        except BaseException as exc:  # report, then leave the forked child for good
            try:
                sys.stderr.write(f"filegate: could not run {argv[0]}: {exc}\n")
            finally:
                os._exit(127)
    status = None
    while status is None:
        woke = signal.sigtimedwait(WAKE_SIGNALS, poll)
        status = _reap(pid, status)
        if status is not None:
            break
        if (woke is not None and woke.si_signo != signal.SIGCHLD) or os.getppid() != parent:
            break  # the worker stops us (timeout, cancel) or is gone
        if procs and len(tree.scan()) > procs:
            sys.stderr.write(
                f"filegate: the command started more than {procs} processes "
                "(the limit) and was killed\n"
            )
            sys.stderr.flush()
            break
    status = _kill_all(tree, pid, status)
    return _exit_code(status)


if __name__ == "__main__":
    sys.exit(main())
