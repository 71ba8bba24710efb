"""The artifact store of a reviewer's command (``approvals``, ``approve``, ``status``).

Workers wait out an S3 outage for ``FILEGATE_S3_OUTAGE_SECONDS`` (default 900 s);
a person at a terminal should not. A reviewer's command builds its store with
a budget of :data:`REVIEWER_S3_OUTAGE_SECONDS` and, when S3 does not answer at
all, without the start-up bucket check: approval, status and transcript
answers travel inline (never by reference), so listing and deciding need no
S3, and only an answer that was stored by reference fails -- after a few
seconds, in one line naming S3 -- instead of the command refusing to start.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from filegate.backends.artifacts import ArtifactError, ArtifactStore, ArtifactStoreUnavailable
from filegate.backends.s3 import OutageWaiter, client_from_settings, endpoint_url, is_transient
from filegate.wiring.connection import ConfigError, settings_store

if TYPE_CHECKING:
    from minio import Minio

    from filegate.backends.settings import S3Settings

REVIEWER_S3_OUTAGE_SECONDS = 5.0
"""How long a reviewer's command waits for S3 that does not answer."""

log = logging.getLogger("filegate.cli")


class UncheckedStore(ArtifactStore):
    """The run's store, built while its S3 does not answer (no bucket check)."""

    def __init__(self, client: Minio, bucket: str, outage_seconds: float) -> None:
        self.client = client
        self.endpoint = endpoint_url(client)
        self.outage = OutageWaiter(self.endpoint, outage_seconds)
        self.bucket = bucket
        self.namespace = "default"
        self.retention_days = None


def reviewer_store(s3: S3Settings) -> ArtifactStore | None:
    """The configured store with a short outage budget; one that skips the bucket
    check when S3 does not answer (a note on stderr says so); None without S3."""
    if not s3.endpoint:
        return None
    budget = min(s3.outage_seconds, REVIEWER_S3_OUTAGE_SECONDS)
    s3 = s3.model_copy(update={"outage_seconds": budget})
    if not s3.access_key or s3.secret_key is None:
        return settings_store(s3)  # its one-line refusal of a half configuration
    try:
        return ArtifactStore.from_settings(s3)
    except ArtifactStoreUnavailable as exc:
        if exc.__cause__ is None or not is_transient(exc.__cause__):
            raise ConfigError(f"S3 at {s3.endpoint}: {exc}") from None
    except (ArtifactError, ValueError) as exc:
        raise ConfigError(f"S3 at {s3.endpoint}: {exc}") from None
    client = client_from_settings(s3)
    store = UncheckedStore(client, f"{s3.bucket}-artifacts", budget)
    log.warning(
        "S3 at %s does not answer: going on without it (approvals and status need none)",
        store.endpoint,
    )
    return store
