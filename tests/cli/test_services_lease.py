"""What ``filegate run`` / ``dev`` / ``demo`` lease from the embedded stack keeps the
user's S3 settings: only where the server is comes from the lease.

The leased S3 used to be a second description of S3 (endpoint, keys, bucket) that
dropped the rest of the configured group, so a run's in-process workers waited
the default 900 s for an S3 outage whatever ``FILEGATE_S3_OUTAGE_SECONDS`` said.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from filegate.backends.settings import S3Settings, Settings, TemporalSettings
from filegate.cli.connection import Target
from filegate.cli.services import local_services, s3_exports, services_client
from filegate.devstack.servers import TemporalDevServer

pytestmark = pytest.mark.services


async def test_a_leased_s3_keeps_the_configured_outage_wait_and_expiry(
    temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    settings = Settings(
        temporal=TemporalSettings(address=temporal_server.address),
        s3=S3Settings(outage_seconds=7, artifact_expire_days=3, bucket="leased", secure=True),
    )
    target = Target(settings, configured=True)
    async with local_services(target, tmp_path / "state", reuse_default=False) as services:
        s3 = services.s3
        assert s3.endpoint and s3.access_key and s3.secret_key  # from the lease
        assert (s3.outage_seconds, s3.artifact_expire_days, s3.bucket) == (7, 3, "leased")
        assert s3.secure is False  # the embedded server speaks plain HTTP on loopback
        _, store = await services_client(target, services)
        assert store is not None and store.outage.budget == 7
        exports = dict(line.split("=", 1) for line in s3_exports(s3))
        assert exports["FILEGATE_S3_SECRET_KEY"] == s3.secret_key.get_secret_value()
        assert exports["FILEGATE_S3_ENDPOINT"] == s3.endpoint
        assert exports["FILEGATE_S3_BUCKET"] == "leased"  # a reviewer reads the same bucket
