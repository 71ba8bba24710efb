"""A cgroup per command: the kernel caps what all of a command's processes use together.

Rlimits are per process (:mod:`.reaper`): three 700 MiB processes each pass a
1 GiB ``RLIMIT_DATA``. A cgroup counts the whole command, however it forks, so
each command gets its own, a child of the worker's own cgroup:

- cgroup v1 (a ``memory`` and a ``pids`` hierarchy): ``memory.limit_in_bytes``
  (and ``memory.memsw.limit_in_bytes``, so swap is no way round it) and
  ``pids.max``; OOM kills show in ``memory.oom_control``, refused forks in
  ``pids.events``;
- cgroup v2: ``memory.max``, ``memory.swap.max`` 0, ``memory.oom.group`` and
  ``pids.max``; the counters are in ``memory.events`` and ``pids.events``. The
  worker's cgroup must let its children have both controllers
  (``cgroup.subtree_control``); a cgroup that still holds processes cannot,
  so a worker alone in its (delegated) cgroup first moves itself into a
  ``filegate-worker`` leaf, as systemd asks of delegated services.

The worker makes the cgroup, sets its limits (:class:`CommandCgroup`) and
moves the supervisor in while the supervisor waits to fork the command, so
every descendant is counted and nothing runs in the threaded worker between
fork and exec. The supervisor watches the counters and kills the whole command
when one moves, since the kernel's OOM killer stops one process and a refused
fork only fails a call. After the command the worker kills anything still in
the cgroup and removes it.
Why children of the worker's own cgroup: the command stays inside whatever
bounds the worker itself has (a container's, a systemd unit's), and nothing
outside the worker's own subtree changes.

Where none can be made (not root and not delegated, a read-only
``/sys/fs/cgroup``, a controller that is not there) commands keep the
per-process bounds, and :func:`aggregate_bounds_status` says, for the
worker's startup line, which sum is missing and why. Inside the bwrap sandbox
a command cannot reach the cgroup (no ``/sys``, a cgroup namespace, no
capabilities); on the local shell a command running as root could raise its
own limit or leave: the local shell is for trusted code.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from filegate.processes.guard import pid_alive

if TYPE_CHECKING:
    from filegate.processes.reaper import CommandBounds

log = logging.getLogger(__name__)

CONTROLLERS = ("memory", "pids")
PREFIX = "filegate-"
WORKER_LEAF = "filegate-worker"
"""cgroup v2: the leaf a worker alone in its cgroup moves into (no internal processes)."""
PIDS_SLACK = 2
"""``pids.max`` is the process bound plus the supervisor plus one: the bound kills a
command with *more than* ``max_processes`` processes (the supervisor's count sees
the one over it), and the kernel makes sure there is never a second."""
_COMMAND_NAME = re.compile(rf"^{PREFIX}(?:probe-)?(\d+)(?:-\d+-[0-9a-f]+)?$")
"""``filegate-<worker pid>-<n>-<random>`` (random: workers in other pid namespaces may
share the parent cgroup and a pid), or a probe's ``filegate-probe-<worker pid>``."""
_KILL_SECONDS = 3.0
_LEFT: dict[Path, int] = {}
"""Command cgroups this worker's commands left (still busy after ``_KILL_SECONDS``),
with their hierarchy's version: tried again before each new command."""
_LEFT_LOCK = threading.Lock()
_SEQUENCE = itertools.count(1)
_PROBED: list[CgroupSupport] = []
_PROBING = threading.Lock()
_WHAT = {"memory": "memory", "pids": "processes"}


@dataclass(frozen=True)
class Hierarchy:
    """Where command cgroups are made for some controllers: the worker's own cgroup."""

    version: int
    parent: Path
    controllers: tuple[str, ...]


@dataclass(frozen=True)
class CgroupSupport:
    """What this worker can bound per command: a hierarchy per controller, or why not."""

    hierarchies: dict[str, Hierarchy] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    tried: dict[str, Path] = field(default_factory=dict)
    """The cgroup directory a missing controller was tried in (named in ``missing``)."""


def _unescape(text: str) -> str:
    """mountinfo's octal escapes (``\\040`` for a space)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def locate(cgroup_text: str, mountinfo_text: str) -> dict[str, tuple[int, Path] | str]:
    """Per controller, ``(version, the worker's cgroup directory)`` or why there is none.

    ``cgroup_text`` is ``/proc/self/cgroup``, ``mountinfo_text``
    ``/proc/self/mountinfo`` (parameters, so the layouts can be tested).
    A controller bound to a v1 hierarchy is found there; otherwise in the v2
    hierarchy, where the worker's cgroup must list it in ``cgroup.controllers``.
    """
    v1_paths: dict[str, str] = {}
    v2_path: str | None = None
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2_path = parts[2]
        for name in parts[1].split(","):
            v1_paths[name] = parts[2]
    v1_mounts: dict[str, tuple[str, Path]] = {}
    v2_mount: tuple[str, Path] | None = None
    for line in mountinfo_text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if len(fields) < dash + 4 or len(fields) < 5:
            continue
        fstype, options = fields[dash + 1], fields[dash + 3].split(",")
        mounted = (_unescape(fields[3]), Path(_unescape(fields[4])))
        if fstype == "cgroup":
            for name in options:
                v1_mounts.setdefault(name, mounted)
        elif fstype == "cgroup2" and v2_mount is None:
            v2_mount = mounted
    found: dict[str, tuple[int, Path] | str] = {}
    for name in CONTROLLERS:
        if name in v1_paths:
            if name not in v1_mounts:
                found[name] = f"the cgroup v1 {name} hierarchy is not mounted"
                continue
            found[name] = _below(1, v1_mounts[name], v1_paths[name])
        elif v2_path is not None and v2_mount is not None:
            where = _below(2, v2_mount, v2_path)
            if isinstance(where, tuple):
                listed = _read(where[1] / "cgroup.controllers").split()
                if name not in listed:
                    where = f"cgroup v2 offers no {name} controller to {where[1]}"
            found[name] = where
        else:
            found[name] = f"no cgroup {name} controller on this host"
    return found


def _below(version: int, mounted: tuple[str, Path], own: str) -> tuple[int, Path] | str:
    root, point = mounted
    rel = os.path.relpath(own, root) if root != "/" else own.lstrip("/")
    if rel.startswith(".."):
        return f"the worker's cgroup {own} is outside the mounted {point}"
    directory = point if rel in ("", ".") else point / rel
    if version == 2 and directory.name == WORKER_LEAF:
        directory = directory.parent  # a worker that moved into its leaf earlier
    return version, directory


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _why(exc: OSError, where: Path) -> str:
    reason = exc.strerror or str(exc)
    hint = ""
    if exc.errno in (errno.EACCES, errno.EPERM) and os.geteuid() != 0:
        hint = ": the worker is not root and this cgroup is not delegated to it"
    elif exc.errno == errno.EROFS:
        hint = ": /sys/fs/cgroup is mounted read-only (a container without cgroup access?)"
    return f"cannot create cgroups in {where} ({reason}){hint}"


def _enable_v2(parent: Path, name: str) -> str | None:
    """Let ``parent``'s children have controller ``name``; why not, or None."""
    if name in _read(parent / "cgroup.subtree_control").split():
        return None
    try:
        _write(parent / "cgroup.subtree_control", f"+{name}")
        return None
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            return _why(exc, parent)
    # EBUSY: the cgroup holds processes. Alone in it, the worker moves into a leaf.
    members = _read(parent / "cgroup.procs").split()
    if members != [str(os.getpid())]:
        return (
            f"cgroup v2: {parent} holds other processes too, so its children cannot "
            f"have the {name} controller (run the worker alone in a delegated cgroup)"
        )
    try:
        (parent / WORKER_LEAF).mkdir(exist_ok=True)
        _write(parent / WORKER_LEAF / "cgroup.procs", str(os.getpid()))
        _write(parent / "cgroup.subtree_control", f"+{name}")
    except OSError as exc:
        return _why(exc, parent)
    return None


def _probe(version: int, parent: Path, name: str) -> str | None:
    """Make, limit and remove one cgroup under ``parent``; why it failed, or None."""
    if version == 2:
        refused = _enable_v2(parent, name)
        if refused:
            return refused
    probe = parent / f"{PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir(exist_ok=True)
        try:
            unlimited = "-1" if (version, name) == (1, "memory") else "max"
            _write(probe / _limit_file(version, name), unlimited)
        finally:
            probe.rmdir()
    except OSError as exc:
        return _why(exc, parent)
    return None


def _limit_file(version: int, name: str) -> str:
    if name == "pids":
        return "pids.max"
    return "memory.max" if version == 2 else "memory.limit_in_bytes"


def cgroup_support(*, refresh: bool = False) -> CgroupSupport:
    """What this worker can bound per command: probed once per process (``refresh``:
    again), under a lock, as activity threads may ask at once. The probe also
    removes command cgroups that dead workers left."""
    with _PROBING:
        if refresh or not _PROBED:
            _PROBED[:] = [_probe_all()]
        return _PROBED[0]


def _probe_all() -> CgroupSupport:
    try:
        cgroup_text = Path("/proc/self/cgroup").read_text()
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError as exc:
        return CgroupSupport(missing={n: f"cannot read /proc/self ({exc})" for n in CONTROLLERS})
    usable: dict[str, tuple[int, Path]] = {}
    missing: dict[str, str] = {}
    tried: dict[str, Path] = {}
    for name, where in locate(cgroup_text, mountinfo).items():
        if isinstance(where, str):
            missing[name] = where
            continue
        refused = _probe(*where, name)
        if refused:
            missing[name], tried[name] = refused, where[1]
        else:
            usable[name] = where
    hierarchies: dict[str, Hierarchy] = {}
    for version, parent in set(usable.values()):
        names = tuple(n for n in CONTROLLERS if usable.get(n) == (version, parent))
        hierarchy = Hierarchy(version, parent, names)
        hierarchies.update(dict.fromkeys(names, hierarchy))
        _sweep(hierarchy)
    return CgroupSupport(hierarchies, missing, tried)


def _sweep(hierarchy: Hierarchy) -> None:
    """Remove command cgroups a dead worker left (it was killed before it could)."""
    with contextlib.suppress(OSError):
        for child in hierarchy.parent.iterdir():
            match = _COMMAND_NAME.match(child.name)
            if match and int(match.group(1)) != os.getpid() and not pid_alive(int(match.group(1))):
                _remove(child, version=hierarchy.version)


def _members(path: Path) -> list[int]:
    return [int(p) for p in _read(path / "cgroup.procs").split() if p.isdigit()]


def _kill_members(path: Path) -> None:
    """SIGKILL every process in the cgroup, each through a pidfd checked to be in it
    (so a pid reused since the listing is never hit)."""
    for pid in _members(path):
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            if pid in _members(path):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(pidfd)


def _remove(path: Path, *, version: int, seconds: float | None = None, quiet: bool = False) -> bool:
    """Kill what is left in the cgroup, then remove it, trying for ``seconds`` (None:
    ``_KILL_SECONDS``); False when it stays (logged unless ``quiet``)."""
    if version == 2:
        with contextlib.suppress(OSError):
            _write(path / "cgroup.kill", "1")
    deadline = time.monotonic() + (_KILL_SECONDS if seconds is None else seconds)
    while True:
        _kill_members(path)
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                if not quiet:
                    log.warning("could not remove the command cgroup %s: %s", path, exc)
                return False
        time.sleep(0.01)


def _remove_or_keep(path: Path, *, version: int) -> None:
    """Remove one of our commands' cgroups, or keep it for :func:`_remove_left`."""
    if not _remove(path, version=version):
        with _LEFT_LOCK:
            _LEFT[path] = version


def _remove_left() -> None:
    """Try once more, without waiting, to remove the command cgroups this worker's
    commands left (:meth:`CommandCgroup.close` could not remove them).

    Why: under load a command's cgroup can stay busy past ``_KILL_SECONDS`` (the
    kernel still releasing its memory); left alone it would stay until a later
    worker's :func:`_sweep`, which only removes a dead worker's. Each new command
    gives it another chance. Only our own commands' cgroups are kept here, never
    a swept one (another pid namespace's worker may look dead from here), and each
    is taken out while it is tried, so two threads never try the same one."""
    with _LEFT_LOCK:
        left = dict(_LEFT)
        _LEFT.clear()
    for path, version in left.items():
        if _remove(path, version=version, seconds=0, quiet=True):
            log.info("removed the command cgroup %s its command left", path)
        else:
            with _LEFT_LOCK:
                _LEFT[path] = version


def _limits(version: int, name: str, bounds: CommandBounds) -> list[tuple[str, str, bool]]:
    """``(file, value, required)`` for controller ``name``; optional ones may be absent."""
    if name == "pids":
        return [("pids.max", str(bounds.max_processes + PIDS_SLACK), True)]
    size = str(bounds.command_memory_bytes)
    if version == 1:
        return [("memory.limit_in_bytes", size, True), ("memory.memsw.limit_in_bytes", size, False)]
    return [
        ("memory.max", size, True),
        ("memory.swap.max", "0", False),
        ("memory.oom.group", "1", False),
    ]


def _watches(version: int, name: str, path: Path) -> list[tuple[str, str, str]]:
    """``(bound, key, file)``: counters that mean the command hit the bound."""
    if name == "pids":
        return [("processes", "max", str(path / "pids.events"))]
    if version == 1:
        oom = str(path / "memory.oom_control")
        return [("memory", "oom_kill", oom), ("memory", "under_oom", oom)]
    return [("memory", "oom_kill", str(path / "memory.events"))]


class CommandCgroup:
    """The cgroups of one command: made by :meth:`create`, removed by :meth:`close`."""

    def __init__(self, made: list[tuple[Hierarchy, Path]], bounds: CommandBounds) -> None:
        self.made = made
        self.bounds = bounds
        self.watches = [
            watch
            for hierarchy, path in made
            for name in hierarchy.controllers
            if _wanted(name, bounds)
            for watch in _watches(hierarchy.version, name, path)
        ]

    @classmethod
    def create(cls, bounds: CommandBounds) -> CommandCgroup | None:
        """New cgroups with ``bounds``' sums, or None (none available, or no sum asked)."""
        _remove_left()
        support = cgroup_support()
        chosen = {support.hierarchies[n] for n in CONTROLLERS if n in support.hierarchies}
        chosen = {h for h in chosen if any(_wanted(n, bounds) for n in h.controllers)}
        if not chosen:
            return None
        name = f"{PREFIX}{os.getpid()}-{next(_SEQUENCE)}-{os.urandom(3).hex()}"
        made: list[tuple[Hierarchy, Path]] = []
        try:
            for hierarchy in sorted(chosen, key=lambda h: str(h.parent)):
                path = hierarchy.parent / name
                path.mkdir()
                made.append((hierarchy, path))
                for controller in hierarchy.controllers:
                    if _wanted(controller, bounds):
                        _apply(path, _limits(hierarchy.version, controller, bounds))
        except OSError as exc:
            log.warning("no cgroup for this command, per-process bounds only: %s", exc)
            for hierarchy, path in made:
                _remove_or_keep(path, version=hierarchy.version)
            return None
        return cls(made, bounds)

    def enter(self, pid: int) -> bool:
        """Move process ``pid`` (the supervisor, before it forks) into every cgroup."""
        try:
            for _, path in self.made:
                _write(path / "cgroup.procs", str(pid))
        except OSError as exc:
            log.warning("could not move the command into its cgroup %s: %s", path, exc)
            return False
        return True

    def hit(self) -> str | None:
        """The bound a counter shows was hit (``memory``, ``processes``), or None."""
        for reason, key, path in self.watches:
            for line in _read(Path(path)).splitlines():
                name, _, value = line.partition(" ")
                if name == key and value.strip().isdigit() and int(value) > 0:
                    return reason
        return None

    def close(self) -> str | None:
        """Kill what is left in the cgroups and remove them; the bound that was hit."""
        hit = self.hit()
        for hierarchy, path in self.made:
            _remove_or_keep(path, version=hierarchy.version)
        return hit


def _wanted(controller: str, bounds: CommandBounds) -> bool:
    if controller == "pids":
        return bounds.max_processes > 0
    return bounds.command_memory_bytes > 0


def _apply(path: Path, limits: list[tuple[str, str, bool]]) -> None:
    for filename, value, required in limits:
        try:
            _write(path / filename, value)
        except OSError:
            if required:
                raise


def aggregate_bounds_status() -> list[str]:
    """Which per-command sums this worker cannot enforce, and why: one entry per cause.

    Empty when memory, processes and writes are all bounded per command. For
    the worker's startup line (``filegate worker``).
    """
    support = cgroup_support()
    by_cause: dict[str, list[str]] = {}  # the same cause in several hierarchies: one entry
    for name in CONTROLLERS:
        if name in support.missing:
            where = str(support.tried.get(name, "")) or "\0"
            by_cause.setdefault(support.missing[name].replace(where, "{}"), []).append(name)
    lines = []
    for cause, names in by_cause.items():
        wheres = " and ".join(dict.fromkeys(str(support.tried.get(n, "")) for n in names))
        what = " and ".join(_WHAT[n] for n in names)
        lines.append(f"{what} per command: {cause.replace('{}', wheres)}")
    if not Path("/proc/self/io").is_file():
        lines.append("writes per command: this kernel has no per-process I/O accounting")
    return lines


def aggregate_bounds_in_place() -> dict[str, str]:
    """The per-command sums this worker enforces, each with how (``"cgroup v1"``)."""
    support = cgroup_support()
    held = {
        _WHAT[name]: f"cgroup v{support.hierarchies[name].version}"
        for name in CONTROLLERS
        if name in support.hierarchies
    }
    if Path("/proc/self/io").is_file():
        held["writes"] = "I/O accounting"
    return held


__all__ = [
    "CgroupSupport",
    "CommandCgroup",
    "Hierarchy",
    "aggregate_bounds_in_place",
    "aggregate_bounds_status",
    "cgroup_support",
    "locate",
]
