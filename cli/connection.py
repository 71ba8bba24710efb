"""Which Temporal frontend a command talks to, resolved like the ``temporal`` CLI.

The base is :mod:`temporalio.envconfig`: the profile file (``TEMPORAL_CONFIG_FILE``,
default ``~/.config/temporalio/temporal.toml``; profile ``--profile`` or
``TEMPORAL_PROFILE``) overridden by ``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``,
``TEMPORAL_API_KEY``, ``TEMPORAL_TLS_*`` and ``TEMPORAL_GRPC_META_*``. Filegate's
own ``FILEGATE_TEMPORAL_*`` / ``FILEGATE_TLS_*`` variables win over those, and
the ``--address``, ``--namespace`` and ``--tls-*`` flags win over everything.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.envconfig import ClientConfigProfile, ClientConfigTLS, DataSource
from temporalio.service import TLSConfig

from filegate.backends.settings import Settings, TemporalSettings
from filegate.cli.errors import CliError
from filegate.cli.telemetry import cli_telemetry
from filegate.plugin import connect
from filegate.wiring.connection import FROM_SETTINGS


@dataclass(frozen=True)
class Target:
    """Which Temporal frontend a command talks to, and whether the user chose it."""

    settings: Settings
    tls: TLSConfig | bool | None = None
    """None: plaintext; True: TLS with the system roots (an API key alone)."""
    configured: bool = False
    """True when the address came from a flag, the environment or a profile: never auto-start."""
    api_key: str | None = None
    rpc_metadata: Mapping[str, str] = field(default_factory=dict)

    def connect_options(self) -> dict[str, Any]:
        """The keyword arguments :func:`filegate.plugin.connect` takes besides settings."""
        return {"tls": self.tls, "api_key": self.api_key, "rpc_metadata": self.rpc_metadata}

    async def connect(self, **overrides: Any) -> Client:
        """:func:`filegate.plugin.connect` to this target (``artifacts`` etc. as overrides),
        traced as the ``OTEL_*`` environment says (:mod:`filegate.cli.telemetry`)."""
        options: dict[str, Any] = {
            "artifacts": FROM_SETTINGS,
            "telemetry": cli_telemetry(),
            **self.connect_options(),
        }
        return await connect(self.settings, **{**options, **overrides})

    async def connect_reviewer(self) -> Client:
        """:meth:`connect` for a reviewer's command: the artifact store waits a few
        seconds for S3, not a worker's budget, and S3 down does not stop the command
        (``cli.reviewer_store``)."""
        from filegate.cli.reviewer_store import reviewer_store

        store = await asyncio.to_thread(reviewer_store, self.settings.s3)
        return await self.connect(artifacts=store)


_TLS_FILES = {
    "client_cert": ("tls_cert", "FILEGATE_TLS_CERT", "client certificate"),
    "client_private_key": ("tls_key", "FILEGATE_TLS_KEY", "client key"),
    "server_root_ca_cert": ("tls_ca", "FILEGATE_TLS_CA", "CA certificate"),
}
"""ClientConfigTLS field -> (flag attribute, Filegate variable, what it is). Each
beats the profile's ``TEMPORAL_TLS_*_PATH`` / ``_DATA`` or file entry."""


def _env(name: str) -> str | None:
    return os.environ.get(name, "").strip() or None


def read_file(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {what} {path}: {exc.strerror or exc}", 2) from None


def _source_bytes(source: DataSource | None, what: str) -> bytes | None:
    if source is None:
        return None
    if isinstance(source, Path):
        return read_file(source, what)
    return source.encode() if isinstance(source, str) else source


def _client_profile(args: argparse.Namespace) -> ClientConfigProfile:
    """The ``temporal`` CLI's client configuration: profile file plus ``TEMPORAL_*``."""
    try:
        return ClientConfigProfile.load(profile=getattr(args, "profile", None))
    except Exception as exc:  # the core SDK's ConfigError: bad file or unknown profile
        raise CliError(f"Temporal client configuration: {exc}", 2) from None


def _tls_config(
    args: argparse.Namespace, profile: ClientConfigProfile | None = None
) -> TLSConfig | bool | None:
    """A TLS config when any certificate option is set (mTLS when cert and key are).

    True (TLS, system roots) for an API key alone, as ``temporal`` does; None
    for plaintext, also when the profile disables TLS.
    """
    profile = profile if profile is not None else _client_profile(args)
    base = profile.tls or ClientConfigTLS()
    sources: dict[str, DataSource | None] = {key: getattr(base, key) for key in _TLS_FILES}
    explicit = False
    for key, (flag, env_name, _) in _TLS_FILES.items():
        path = getattr(args, flag, None) or _env(env_name)
        if path:
            sources[key], explicit = Path(path), True
    if base.disabled and not explicit:
        return None
    if not any(sources.values()):
        if profile.tls is not None:  # TEMPORAL_TLS=true, a server name, ...
            return TLSConfig(domain=base.server_name)
        return True if profile.api_key else None
    if bool(sources["client_cert"]) != bool(sources["client_private_key"]):
        raise CliError("--tls-cert and --tls-key go together", 2)
    cert, private_key, ca = (
        _source_bytes(sources[k], what) for k, (_, _, what) in _TLS_FILES.items()
    )
    return TLSConfig(
        server_root_ca_cert=ca,
        domain=base.server_name,
        client_cert=cert,
        client_private_key=private_key,
    )


def target_from(args: argparse.Namespace) -> Target:
    """Settings from the environment and the client profile, overridden by the flags."""
    profile = _client_profile(args)
    settings = Settings.from_env()
    address_env = TemporalSettings.env_name("address")
    namespace_env = TemporalSettings.env_name("namespace")
    updates: dict[str, Any] = {}
    address = (profile.address or "").strip()
    if getattr(args, "address", None):
        updates["address"] = args.address
    elif address and not _env(address_env):
        updates["address"] = address
    namespace = (profile.namespace or "").strip()
    if getattr(args, "namespace", None):
        updates["namespace"] = args.namespace
    elif namespace and not _env(namespace_env):
        updates["namespace"] = namespace
    configured = bool(updates.get("address") or _env(address_env))
    temporal = settings.temporal.model_copy(update=updates)
    return Target(
        settings.model_copy(update={"temporal": temporal}),
        _tls_config(args, profile),
        configured,
        api_key=profile.api_key or None,
        rpc_metadata=dict(profile.grpc_meta),
    )


def with_address(target: Target, address: str) -> Target:
    """``target`` pointed at ``address`` (e.g. a dev server the command started)."""
    temporal = target.settings.temporal.model_copy(update={"address": address})
    return replace(target, settings=target.settings.model_copy(update={"temporal": temporal}))


def connection_options() -> argparse.ArgumentParser:
    """Options every command that talks to Temporal shares."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("Temporal connection")
    group.add_argument(
        "--address", help="frontend host:port (default: TEMPORAL_ADDRESS or 127.0.0.1:7233)"
    )
    group.add_argument("--namespace", help="namespace (default: TEMPORAL_NAMESPACE or default)")
    group.add_argument("--tls-cert", help="client certificate (PEM) for mTLS")
    group.add_argument("--tls-key", help="client private key (PEM) for mTLS")
    group.add_argument("--tls-ca", help="server CA certificate (PEM)")
    group.add_argument(
        "--profile", help="temporal client profile (default: TEMPORAL_PROFILE or default)"
    )
    return parent
