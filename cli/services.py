"""The servers a command needs for its own duration: configured, reused or started.

``filegate run``, ``filegate demo`` and ``filegate dev`` lease whatever is not
configured (embedded Temporal and S3 servers) from the state dir's embedded
stack (:mod:`filegate.devstack.stack`): a live one is reused, a
missing one started, and the last user stops it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.client import Client

from filegate.backends.settings import ENV_PREFIX, JournalSettings, S3Settings, TemporalSettings
from filegate.backends.startup import inside
from filegate.cli.connection import Target, with_address
from filegate.cli.errors import CliError, service_failure
from filegate.cli.shared_host import other_people, shared_host_refusal
from filegate.devstack.s3 import S3DevServer
from filegate.devstack.servers import LOOPBACK, TemporalDevServer, is_listening, listener_uid
from filegate.devstack.stack import Lease, acquire, release, s3_entry, temporal_entry
from filegate.wiring.connection import configured_store, with_payload_codec

if TYPE_CHECKING:
    from filegate.backends.artifacts import ArtifactStore

DEFAULT_TEMPORAL_ADDRESS: str = TemporalSettings.model_fields["address"].default
"""Temporal's usual local address; ``run`` starts or reuses a server there."""
DEFAULT_STATE_DIR: Path = JournalSettings.model_fields["state_dir"].default
DEV_PORT_ENV = ENV_PREFIX + "DEV_TEMPORAL_PORT"
"""Port of the embedded Temporal of ``run`` / ``dev`` instead of 7233 (a stack per
project side by side; other commands then need ``TEMPORAL_ADDRESS``)."""


def _dev_temporal_address() -> str:
    """Where ``run`` / ``dev`` reuse or start Temporal when none is configured."""
    port = os.environ.get(DEV_PORT_ENV, "").strip()
    if not port:
        return DEFAULT_TEMPORAL_ADDRESS
    if not port.isdigit():
        raise CliError(f"{DEV_PORT_ENV} must be a port number, not {port!r}", 2)
    return f"{LOOPBACK}:{int(port)}"


@dataclass
class LocalServices:
    """The servers a command uses: configured, found running, or leased from the
    state dir's embedded stack (:mod:`filegate.devstack.stack`)."""

    temporal_address: str
    s3: S3Settings
    notes: list[str]
    """One line per service: where it is and whether it was configured, reused or
    started, after a line per stale leftover cleaned up."""
    leases: list[Lease] = field(default_factory=list)


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or LOOPBACK, int(port)


STOPPED_BY: list[int] = []
"""The signal that stopped this command, if one did (``cli.commands`` names it)."""


@contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal) end the command like Ctrl-C: the
    run is interrupted and the stack released (stopped unless others use it).

    The command's main task is cancelled directly. Re-sending SIGINT to
    ourselves is not enough: a background job of a non-interactive shell
    (``filegate dev &`` in a script) starts with SIGINT ignored, and the
    signal would be lost, leaving only SIGKILL, which orphans the servers.
    """
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    installed = []

    def stop(sig: int) -> None:
        STOPPED_BY.append(sig)
        if main is not None:
            main.cancel()

    for sig in (signal.SIGTERM, signal.SIGHUP):
        with suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop, sig)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def _lease_all(
    target: Target,
    state_dir: Path,
    reuse_default: bool,
    notes: list[str],
    web_ui_port: int | None = None,
) -> tuple[str, S3Settings, list[Lease]]:
    """Temporal then S3, leased from the stack (in parallel threads: one lock each)."""
    settings = target.settings
    leases: list[Lease] = []
    if (not target.configured or not settings.s3.endpoint) and not (
        settings.journal.embedded_shared_host
    ):
        people = other_people()
        if people:
            raise CliError(shared_host_refusal(people), 2)

    def temporal() -> tuple[str, str]:
        if target.configured:
            return settings.temporal.address, "configured"
        default = _dev_temporal_address()
        host, port = _split_address(default)
        server = TemporalDevServer(
            state_dir / "temporal",
            host=host,
            port=port if reuse_default else None,
            namespace=settings.temporal.namespace,
            ui_port=web_ui_port,
        )
        taken = (lambda: is_listening(host, port)) if reuse_default else None
        lease = acquire(
            state_dir, "temporal", server, temporal_entry, notes,
            port=port if reuse_default else None, taken=taken,
        )  # fmt: skip
        if lease is None:
            return default, _unmanaged(port, state_dir)
        leases.append(lease)
        how = lease.how.replace("embedded", "embedded dev server")
        if "reused" in how:  # say which stack: this user's, in its state directory
            how += f", this user's stack at {state_dir}"
        return str(lease.entry["address"]), how

    def s3() -> tuple[S3Settings, str]:
        if settings.s3.endpoint:
            return settings.s3, "configured"
        server = S3DevServer(state_dir / "s3", buckets=[settings.s3.bucket])
        lease = acquire(state_dir, "s3", server, s3_entry, notes)
        assert lease is not None
        leases.append(lease)
        e = lease.entry
        # The configured group (bucket, outage wait, expiry) on the leased server,
        # which speaks plain HTTP on loopback.
        leased = {key: e[key] for key in ("endpoint", "access_key", "secret_key")}
        leased["secure"] = False
        s3 = S3Settings.model_validate({**settings.s3.model_dump(), **leased})
        return s3, lease.how.replace("embedded", "embedded SeaweedFS")

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        t_future, s_future = pool.submit(temporal), pool.submit(s3)
        # Both finish before any release (the pool's exit waits for them).
        failures = [f.exception() for f in (t_future, s_future)]
    failure = next((f for f in failures if f is not None), None)
    if failure is not None:
        _release_all(leases)
        if isinstance(failure, CliError):  # already one line with its own exit code
            raise failure
        raise service_failure(failure) from failure
    (address, t_how), (access, s_how) = t_future.result(), s_future.result()
    notes += [f"Temporal at {address} ({t_how})", f"S3 at {access.endpoint} ({s_how})"]
    if "embedded" in t_how or "embedded" in s_how:
        notes.append(EMBEDDED_TRUST)
    return address, access, leases


EMBEDDED_TRUST = (
    "the embedded servers listen on loopback without a login: every local user of this "
    "machine can reach them (docs/threat-model.md); use a deployment on a shared host"
)
"""Said at start whenever an embedded server is used (issue 50: they authenticate no
caller, so another local user could read what the agent read and decide approvals)."""


def _unmanaged(port: int, state_dir: Path) -> str:
    """How ``run`` may use a server it found on the dev port that its stack did not
    start: only one of this user's, and it says so. Another uid's is refused
    (its UI would show this user's runs and approval cards, and its abandoned
    runs would show up here); TEMPORAL_ADDRESS uses it on purpose."""
    owner = listener_uid(port)
    if owner is not None and owner != os.getuid():
        raise CliError(
            f"127.0.0.1:{port} is served by uid {owner}'s Temporal, not by this user's "
            f"stack ({state_dir}): set TEMPORAL_ADDRESS=127.0.0.1:{port} to use it anyway, "
            f"or {ENV_PREFIX}DEV_TEMPORAL_PORT to start your own on another port",
            2,
        )
    return f"found running, reused: this user's, not started by the stack at {state_dir}"


def _release_all(leases: list[Lease]) -> None:
    for lease in leases:
        release(lease)


@asynccontextmanager
async def local_services(
    target: Target, state_dir: Path, *, reuse_default: bool, web_ui_port: int | None = None
) -> AsyncIterator[LocalServices]:
    """Lease what is not configured from the state dir's embedded stack, yield where
    everything is, release on the way out (the last user stops a server).

    Temporal: a configured address is used as is. Otherwise ``reuse_default``
    (``run``) uses 127.0.0.1:7233: the stack's server there, or a server found
    listening there (used as is), or one started there, so another terminal's
    ``filegate approvals`` finds it; without it (``demo``) the stack's server
    on any port (a new one on a free port). S3: a configured endpoint is used
    as is, otherwise the stack's embedded server. SIGTERM and SIGHUP are
    handled like Ctrl-C for the command's duration. ``web_ui_port``: a Temporal
    started here serves its Web UI there (on the same loopback address).
    """
    notes: list[str] = []
    with signals_as_interrupt():
        leasing = asyncio.ensure_future(
            asyncio.to_thread(_lease_all, target, state_dir, reuse_default, notes, web_ui_port)
        )
        try:
            # An interrupt during start-up waits for the leases, then releases them.
            address, s3, leases = await asyncio.shield(leasing)
        except asyncio.CancelledError:
            with suppress(BaseException):
                _, _, leases = await leasing
                await asyncio.to_thread(_release_all, leases)
            raise
        try:
            yield LocalServices(address, s3, notes, leases)
        finally:
            # main() ends with os._exit, so no atexit hook would do this.
            await asyncio.shield(asyncio.to_thread(_release_all, leases))


def s3_exports(s3: S3Settings) -> list[str]:
    """``NAME=value`` for the S3 a leased stack serves, for other processes' shells
    (the bucket too when it is not the default: a reviewer reads its artifacts)."""
    secret = s3.secret_key.get_secret_value() if s3.secret_key else ""
    env = s3.env_name
    lines = [
        f"{env('endpoint')}={s3.endpoint}",
        f"{env('access_key')}={s3.access_key or ''}",
        f"{env('secret_key')}={secret}",
    ]
    if s3.bucket != S3Settings.model_fields["bucket"].default:
        lines.append(f"{env('bucket')}={s3.bucket}")
    return lines


async def services_client(
    target: Target, services: LocalServices
) -> tuple[Client, ArtifactStore | None]:
    """A client of the services' Temporal carrying the codec of their S3, and that
    store (the in-process workers get the same one)."""
    client = await with_address(target, services.temporal_address).connect(artifacts=None)
    store = await configured_store(services.s3)
    return with_payload_codec(client, store), store


def _user_state_dir() -> Path:
    """``$XDG_STATE_HOME/filegate`` (default ``~/.local/state/filegate``)."""
    base = os.environ.get("XDG_STATE_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".local" / "state") / "filegate"


def state_dir_outside(journal: JournalSettings, roots: Iterable[str]) -> Path:
    """The state directory, resolved; the default (``./.filegate``) moves to
    :func:`_user_state_dir` when it would land inside one of ``roots`` (a worker
    started inside its workspace must not put its journal where the agent sees
    it). A directory chosen explicitly stays as chosen: the worker refuses it
    at start when it is inside a root (contract §11)."""
    chosen = journal.state_dir.resolve()
    if journal.state_dir == DEFAULT_STATE_DIR and any(inside(chosen, r) for r in roots):
        return _user_state_dir()
    return chosen


def state_dir_for(journal: JournalSettings, scratch: Path | None) -> Path:
    """``FILEGATE_STATE_DIR`` when set, else ``scratch`` (a temp dir), else the default."""
    if os.environ.get(journal.env_name("state_dir"), "").strip() or scratch is None:
        return journal.state_dir.resolve()
    return scratch
