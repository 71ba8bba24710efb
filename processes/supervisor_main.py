"""The per-command supervisor: ``python -I -S supervisor_main.py SPEC [OPTIONS] -- ARGV``.

``SPEC`` is ``MEM,FSIZE,PROCS,POLL[,WRITE,REPORT_FD,GO_FD]``; the option
``--watch REASON KEY FILE`` (repeatable) names a cgroup counter such as
``memory.oom_control``'s ``oom_kill``: when it is above 0, the bound REASON was
hit. With GO_FD the supervisor waits before it forks until the worker wrote
``go`` there: the worker moves it into the command's cgroups meanwhile, so
every descendant is counted (the move's cost, one RCU grace period in the
kernel, overlaps this interpreter's start).

Run as a separate interpreter (stdlib only, no Filegate import, no site), it
sits between the worker and one command (contract §11, :mod:`.reaper`):

1. it waits for ``go`` on GO_FD (the worker moved it into the command's
   cgroups; without ``go`` nothing runs);
2. it makes itself a *child subreaper* (``PR_SET_CHILD_SUBREAPER``), so every
   process the command starts -- also one that called ``setsid`` or forked
   twice to become a daemon -- stays its descendant instead of moving to init;
3. it forks the command with the resource limits applied in the child before
   ``exec`` (``RLIMIT_DATA``, ``RLIMIT_FSIZE``, no core dumps), SIGPIPE back to
   default and SIGXFSZ ignored (an over-size write fails with EFBIG, "File too
   large", instead of killing the writer silently);
4. every POLL seconds it counts its live descendants (killing them all when
   there are more than PROCS), reads the ``--watch`` counters, and sums what the
   command wrote to disk (``write_bytes`` of ``/proc/<pid>/io``; see
   :func:`_written`), killing everything above WRITE bytes;
5. when the command exits, when it gets SIGTERM/SIGINT/SIGHUP (the worker's
   timeout or cancel) or when its parent dies, it SIGKILLs every remaining
   descendant, reaps them, and exits with the command's status (128 + N for
   signal N); a command that hit a bound exits 137, and the bound's name
   (``processes``, ``memory``, ``write``, ``join``) is written to REPORT_FD,
   which the command never inherits, so it cannot forge the report.

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
    """The supervisor's live descendants, from ``/proc`` parent links, with their depth."""

    def __init__(self, me: int) -> None:
        self.me = me
        self.ours: set[int] = set()
        self.others: set[int] = set()
        self.depth: dict[int, int] = {me: 0}

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
                    self.depth[pid] = self.depth.get(parent, 0) + 1
                elif parent == 0 or parent in self.others:
                    self.others.add(pid)
                else:
                    continue  # parent unknown yet: read again next scan
                del fresh[pid]
                changed = True
        self.ours &= live  # pruned only now: a just-dead parent still classifies
        self.others &= live
        for gone in [pid for pid in self.depth if pid not in self.ours and pid != self.me]:
            del self.depth[gone]
        return set(self.ours)


def _write_bytes(pid: int | str) -> int:
    """``write_bytes`` of ``/proc/PID/io``: what the process and its reaped children
    dirtied for storage (0 when it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/io", "rb") as fh:
            for line in fh.read().splitlines():
                if line.startswith(b"write_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _written(tree: Tree) -> int:
    """Bytes the whole command wrote to disk so far.

    The kernel adds a reaped child's counters to its parent's, so the sum is the
    supervisor's own (all it reaped) plus every live descendant's. Read parents
    before children: a child reaped between two reads then moves its bytes into
    a parent already read, so a race only ever under-counts one poll, never
    counts twice (which could kill a command below its bound).
    """
    total = _write_bytes("self")
    for pid in sorted(tree.ours, key=lambda p: tree.depth.get(p, 1)):
        total += _write_bytes(pid)
    return total


class Watch:
    """A cgroup counter (``KEY N`` lines): above 0 means the bound REASON was hit."""

    def __init__(self, reason: str, key: str, path: str) -> None:
        self.reason = reason
        self.key = key.encode()
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def tripped(self) -> bool:
        try:
            text = os.pread(self.fd, 4096, 0)
        except OSError:
            return False
        for line in text.splitlines():
            name, _, value = line.partition(b" ")
            if name == self.key:
                return value.strip().isdigit() and int(value) > 0
        return False


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


class Options:
    """The command line: the SPEC numbers, ``--watch`` counters, ARGV."""

    def __init__(self, args: list[str]) -> None:
        raw = args[0].split(",")
        self.memory, self.fsize, self.procs = int(raw[0]), int(raw[1]), int(raw[2])
        self.poll = float(raw[3])
        self.write = int(raw[4]) if len(raw) > 4 else 0
        self.report_fd = int(raw[5]) if len(raw) > 5 else -1
        self.go_fd = int(raw[6]) if len(raw) > 6 else -1
        self.watches: list[tuple[str, str, str]] = []
        rest = args[1:]
        while rest[:1] == ["--watch"]:
            self.watches.append((rest[1], rest[2], rest[3]))
            rest = rest[4:]
        self.argv = rest[1:] if rest[:1] == ["--"] else rest


def _report(fd: int, reason: str) -> None:
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.write(fd, reason.encode() + b"\n")


def _join(opts: Options) -> tuple[list[Watch], str | None]:
    """Wait until the worker moved us into the cgroups, open their counters; the
    reason when that failed."""
    if opts.go_fd >= 0:
        said = b""
        with contextlib.suppress(OSError):
            while chunk := os.read(opts.go_fd, 16):
                said += chunk
        os.close(opts.go_fd)
        if said != b"go":
            return [], "the worker could not move it into the command's cgroup"
    try:
        return [Watch(*spec) for spec in opts.watches], None
    except OSError as exc:
        return [], f"could not read the command's cgroup ({exc})"


def _hit(opts: Options, tree: Tree, watches: list[Watch], live: set[int] | None) -> str | None:
    """The bound the command is over, if any (``live``: the tree just scanned)."""
    for watch in watches:
        if watch.tripped():
            return watch.reason
    if opts.procs and live is not None and len(live) > opts.procs:
        return "processes"
    if opts.write and _written(tree) > opts.write:
        return "write"
    return None


def main() -> int:
    opts = Options(sys.argv[1:])
    if opts.report_fd >= 0:
        os.set_inheritable(opts.report_fd, False)  # the command never gets the report pipe
    watches, failed = _join(opts)
    if failed is not None:
        _report(opts.report_fd, "join")
        sys.stderr.write(f"filegate: the command was not run: {failed}\n")
        return 126
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
            _child(opts.memory, opts.fsize, opts.argv)
        except BaseException as exc:  # report, then leave the forked child for good
            try:
                sys.stderr.write(f"filegate: could not run {opts.argv[0]}: {exc}\n")
            finally:
                os._exit(127)
    watching = bool(opts.procs or opts.write)
    status = None
    hit: str | None = None
    while status is None:
        woke = signal.sigtimedwait(WAKE_SIGNALS, opts.poll)
        status = _reap(pid, status)
        if status is not None:
            break
        if (woke is not None and woke.si_signo != signal.SIGCHLD) or os.getppid() != parent:
            break  # the worker stops us (timeout, cancel) or is gone
        hit = _hit(opts, tree, watches, tree.scan() if watching else None)
        if hit is not None:
            break
    status = _kill_all(tree, pid, status)
    # Once more with everything reaped: a bound hit in the last poll (an OOM kill, a
    # refused fork that made the shell give up, bytes written just before exiting).
    hit = hit or _hit(opts, tree, watches, None)
    if hit is None:
        return _exit_code(status)
    if hit == "processes":
        sys.stderr.write(
            f"filegate: the command started more than {opts.procs} processes "
            "(the limit) and was killed\n"
        )
    _report(opts.report_fd, hit)
    return 137


if __name__ == "__main__":
    sys.exit(main())
