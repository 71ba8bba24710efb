"""The embedded dev stack shared by every command using one state directory.

``filegate run`` (any number of them, in any terminal), ``filegate demo`` and
``filegate dev`` lease the embedded Temporal and S3 servers through
``<state dir>/stack-<service>.json`` (pid, ports, S3 credentials; mode 0600),
read and written only under an ``flock`` on ``<state dir>/stack-<service>.lock``
(one per service, so both start in parallel):

- a command that finds a live server of the stack reuses it and registers
  its own pid as a client; otherwise it starts one (holding the lock, so two
  commands starting at once get one server);
- releasing drops the caller from the clients; the last live client stops the
  server, whoever started it (servers run in their own process group and
  outlive the command that launched them while others use them);
- a client that died without releasing (SIGKILL) no longer counts; a recorded
  server that is gone (killed with -9) is cleaned up, its process group and
  SeaweedFS sockets too, with a one-line note; a server of this state dir
  running without a record (left by an older version) is stopped likewise.

Plain Python (no temporalio): Linux ``/proc`` identifies processes (a pid is
ours only while its command line names our data files; a client is a pid plus
its start time, so a reused pid is not mistaken for it).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filegate.devstack.s3 import S3DevServer, remove_weed_sockets
from filegate.devstack.servers import ManagedServer, TemporalDevServer, is_listening
from filegate.processes.guard import pid_alive, proc_stat

STOP_GRACE = 15.0
"""Seconds a server gets between SIGTERM and SIGKILL."""

Entry = dict[str, Any]


# --------------------------------------------------------------------------- processes


def _client_id(pid: int | None = None) -> str:
    """``pid:start-time`` of a process (this one by default)."""
    pid = os.getpid() if pid is None else pid
    stat = proc_stat(pid)
    return f"{pid}:{stat[19] if stat else '?'}"


def _client_alive(client: str) -> bool:
    pid, _, _ = client.partition(":")
    return pid.isdigit() and pid_alive(int(pid)) and _client_id(int(pid)) == client


def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def _is_ours(pid: int, marker: str) -> bool:
    """``pid`` is alive and its command line names ``marker`` (our data file)."""
    return pid_alive(pid) and marker in cmdline(pid)


def processes_using(marker: str) -> list[int]:
    """Every live process whose command line names ``marker``."""
    pids = (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
    return [p for p in pids if p != os.getpid() and marker in cmdline(p) and pid_alive(p)]


def _stop_group(pid: int, grace: float = STOP_GRACE) -> None:
    """SIGTERM the process group ``pid`` leads (or the process, when it leads
    none), SIGKILL after ``grace`` seconds."""
    with contextlib.suppress(OSError):
        if os.getpgid(pid) != pid:
            os.kill(pid, signal.SIGKILL)
            return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pid_alive(pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    # The leader is gone (or stuck): nothing of its group may outlive it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- the state file


class StackFile:
    """``stack-<service>.json`` of one state directory, changed only under its lock."""

    def __init__(self, state_dir: Path, service: str) -> None:
        self.dir = Path(state_dir).resolve()
        self.service = service
        self.path = self.dir / f"stack-{service}.json"

    @contextlib.contextmanager
    def locked(self) -> Iterator[Entry]:
        """The entry (empty: none), exclusively; written back when the block ends
        without error (an emptied entry removes the file)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / f"stack-{self.service}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = self.read()
            yield data
            self._write(data)
        finally:
            os.close(fd)  # closing releases the lock (a dead holder's too)

    def read(self) -> Entry:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, data: Entry) -> None:
        if not data:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1)
        os.replace(tmp, self.path)


# --------------------------------------------------------------------------- leases


@dataclass
class Lease:
    """One command's use of one server of a stack."""

    stack: StackFile
    entry: Entry
    """What clients need: ``address`` (Temporal) or ``endpoint`` and keys (S3)."""
    how: str
    """"embedded, started" or "embedded, reused (N other users)"."""
    server: ManagedServer | None = None
    """The server object when this process started it."""
    client: str = field(default_factory=_client_id)


def _cleanup(entry: Entry, service: str) -> str:
    """Stop what is left of a dead server's group and its sockets; the one-line note."""
    pid = int(entry.get("pid", 0))
    if pid > 0 and not pid_alive(pid):  # a live pid is someone else's by now: untouched
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # what is left of its process group
    remove_weed_sockets(entry.get("ports", []))
    return f"cleaned up a stale embedded {service} (pid {pid} is gone)"


def acquire(
    state_dir: Path,
    service: str,
    server: ManagedServer,
    describe: Callable[[ManagedServer], Entry],
    notes: list[str],
    *,
    port: int | None = None,
    taken: Callable[[], bool] | None = None,
) -> Lease | None:
    """Reuse the stack's live ``service`` (registering this process) or start ``server``.

    A recorded process is the server only while its command line names
    ``server.marker`` (its state directory); ``port`` is the client-facing port
    a reused server must have. None when
    ``taken()`` says something else already serves that port (use it unmanaged).
    A line per stale leftover cleaned up on the way is added to ``notes``.
    """
    stack = StackFile(state_dir, service)
    marker = server.marker
    with stack.locked() as entry:
        if entry:
            clients = [c for c in entry.get("clients", []) if _client_alive(c)]
            pid = int(entry.get("pid", 0))
            live = _is_ours(pid, marker) and is_listening(entry["host"], int(entry["port"]))
            if live and (port is None or int(entry["port"]) == port):
                entry["clients"] = [*clients, _client_id()]
                users = f"{len(clients)} other user{'s' * (len(clients) != 1)}"
                return Lease(stack, dict(entry), f"embedded, reused ({users})")
            if live:  # the stack's server on another port than asked for: stop it
                _stop_group(pid)
            notes.append(_cleanup(entry, service))
            entry.clear()
        for pid in processes_using(marker):  # running without a record: not ours to keep
            _stop_group(pid)
            notes.append(f"stopped a leftover embedded {service} (pid {pid})")
        if taken is not None and taken():
            return None
        server.start()
        server.detach()
        entry.update(describe(server), pid=server.pid, clients=[_client_id()])
        return Lease(stack, dict(entry), "embedded, started", server)


def reap_orphans(state_dir: Path, services: tuple[str, ...] = ("temporal", "s3")) -> list[str]:
    """Stop the stack's servers that no live command uses any more; a note per server.

    A command killed with SIGKILL leaves its servers running with only dead
    clients (nobody will release them): they hold their ports, so the same
    command could not start again. Servers some live command still uses stay.
    """
    notes: list[str] = []
    for service in services:
        stack = StackFile(state_dir, service)
        if not stack.path.exists():
            continue
        with stack.locked() as entry:
            if not entry or any(_client_alive(c) for c in entry.get("clients", [])):
                continue
            pid = int(entry.get("pid", 0))
            if pid > 0 and pid_alive(pid):
                _stop_group(pid)
                remove_weed_sockets(entry.get("ports", []))
                notes.append(f"stopped an embedded {service} left by a killed command (pid {pid})")
            else:
                notes.append(_cleanup(entry, service))
            entry.clear()
    return notes


def release(lease: Lease) -> bool:
    """Drop this process from the server's clients; stop it when none is left.

    Returns True when the server was stopped."""
    with lease.stack.locked() as entry:
        if entry.get("pid") != lease.entry.get("pid"):
            return False  # replaced meanwhile (someone found ours dead): not ours to stop
        clients = [c for c in entry.get("clients", []) if c != lease.client and _client_alive(c)]
        if clients:
            entry["clients"] = clients
            return False
        if lease.server is not None:
            lease.server.stop(grace=STOP_GRACE)
        else:
            _stop_group(int(entry["pid"]))
            remove_weed_sockets(entry.get("ports", []))
        entry.clear()
        return True


def status(state_dir: Path, service: str) -> Entry:
    """The stack's ``service`` as recorded (empty: none), with ``alive`` and live ``clients``."""
    entry = StackFile(state_dir, service).read()
    if entry:
        entry["alive"] = pid_alive(int(entry.get("pid", 0)))
        entry["clients"] = [c for c in entry.get("clients", []) if _client_alive(c)]
    return entry


# --------------------------------------------------------------------------- the two servers


def s3_entry(server: ManagedServer) -> Entry:
    assert isinstance(server, S3DevServer)
    return {
        "host": server.host,
        "port": server.port,
        "endpoint": server.endpoint,
        "access_key": server.access_key,
        "secret_key": server.secret_key,
        "ports": [*server.ports.values(), *server.grpc_ports.values()],
    }


def temporal_entry(server: ManagedServer) -> Entry:
    assert isinstance(server, TemporalDevServer)
    return {
        "host": server.host,
        "port": server.port,
        "address": server.address,
        "namespace": server.namespace,
    }
