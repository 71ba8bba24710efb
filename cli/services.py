"""The servers a command needs for its own duration: configured, reused or started.

``filegate run`` and ``filegate demo`` start whatever is missing (embedded
Temporal and S3 servers) and stop what they started.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from filegate.backends.embedded import (
    LOOPBACK,
    ManagedServer,
    TemporalDevServer,
    is_listening,
)
from filegate.backends.embedded_s3 import S3DevServer
from filegate.backends.settings import ENV_PREFIX, Settings
from filegate.backends.startup import inside
from filegate.cli.connection import Target, with_address
from filegate.cli.errors import CliError
from filegate.worker import S3Access, open_store, with_payload_codec
from temporalio.client import Client

if TYPE_CHECKING:
    from filegate.backends.artifacts import ArtifactStore

DEFAULT_TEMPORAL_ADDRESS: str = Settings.model_fields["temporal_address"].default
DEFAULT_STATE_DIR: Path = Settings.model_fields["state_dir"].default
"""Temporal's usual local address; ``run`` starts or reuses a server there."""


@dataclass
class LocalServices:
    """The servers a command uses: configured, found running, or started by it."""

    temporal_address: str
    s3: S3Access
    notes: list[str]
    """One line per service: where it is and whether it was configured, reused or started."""
    started: list[ManagedServer] = field(default_factory=list)


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or LOOPBACK, int(port)


@asynccontextmanager
async def local_services(
    target: Target, state_dir: Path, *, reuse_default: bool
) -> AsyncIterator[LocalServices]:
    """Start what is missing, yield where everything is, stop what was started.

    Temporal: a configured address is used as is. Otherwise ``reuse_default``
    (``run``) reuses a server on 127.0.0.1:7233 or starts one there, so another
    terminal's ``filegate approvals`` finds it; without it (``demo``) a private
    server starts on a free port. S3: a configured endpoint is used as is,
    otherwise the embedded server starts on a free port. Both start in parallel.
    """
    settings = target.settings
    starting: list[ManagedServer] = []
    address = settings.temporal_address
    how = "configured"
    if not target.configured:
        host, port = _split_address(DEFAULT_TEMPORAL_ADDRESS)
        address, how = DEFAULT_TEMPORAL_ADDRESS, "found running, reused"
        if not (reuse_default and is_listening(host, port)):
            server = TemporalDevServer(
                state_dir / "temporal",
                host=host,
                port=port if reuse_default else None,
                namespace=settings.temporal_namespace,
            )
            address, how = server.address, "embedded dev server, started"
            starting.append(server)
    notes = [f"Temporal at {address} ({how})"]
    if settings.s3_endpoint:
        s3 = S3Access.from_settings(settings)
        notes.append(f"S3 at {s3.endpoint} (configured)")
    else:
        weed = S3DevServer(state_dir / "s3", buckets=[settings.s3_bucket])
        s3 = S3Access(weed.endpoint, weed.access_key, weed.secret_key, settings.s3_bucket)
        starting.append(weed)
        notes.append(f"S3 at {s3.endpoint} (embedded SeaweedFS, started)")
    services = LocalServices(address, s3, notes)
    launches = [asyncio.ensure_future(asyncio.to_thread(server.start)) for server in starting]
    try:
        outcomes = await asyncio.shield(asyncio.gather(*launches, return_exceptions=True))
        services.started = [s for s, out in zip(starting, outcomes, strict=True) if s.running]
        failures = [out for out in outcomes if isinstance(out, BaseException)]
        if failures:
            raise CliError(f"could not start a local service: {failures[0]}")
        yield services
    finally:
        # Every server we launched, even when Ctrl-C interrupted startup: let
        # the start threads finish first, then stop (a no-op for one that never
        # came up). main() ends with os._exit, so no atexit hook would catch it.
        await asyncio.gather(*launches, return_exceptions=True)
        await asyncio.gather(*(asyncio.to_thread(server.stop) for server in starting))


async def services_client(
    target: Target, services: LocalServices
) -> tuple[Client, ArtifactStore | None]:
    """A client of the services' Temporal carrying the codec of their S3, and that
    store (the in-process workers get the same one)."""
    client = await with_address(target, services.temporal_address).connect(artifacts=None)
    store = await open_store(services.s3)
    return with_payload_codec(client, store), store


def user_state_dir() -> Path:
    """``$XDG_STATE_HOME/filegate`` (default ``~/.local/state/filegate``)."""
    base = os.environ.get("XDG_STATE_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".local" / "state") / "filegate"


def state_dir_outside(settings: Settings, roots: Iterable[str]) -> Path:
    """The state directory, resolved; the default (``./.filegate``) moves to
    :func:`user_state_dir` when it would land inside one of ``roots`` (a worker
    started inside its workspace must not put its journal where the agent sees
    it). A directory chosen explicitly stays as chosen: the worker refuses it
    at start when it is inside a root (contract §11)."""
    chosen = settings.state_dir.resolve()
    if settings.state_dir == DEFAULT_STATE_DIR and any(inside(chosen, r) for r in roots):
        return user_state_dir()
    return chosen


def state_dir_for(settings: Settings, scratch: Path | None) -> Path:
    """``FILEGATE_STATE_DIR`` when set, else ``scratch`` (a temp dir), else the default."""
    if os.environ.get(ENV_PREFIX + "STATE_DIR", "").strip() or scratch is None:
        return settings.state_dir.resolve()
    return scratch
