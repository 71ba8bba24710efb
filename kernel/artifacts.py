"""The artifact reference: where a large payload lives in S3, small enough for history.

The store itself (:mod:`filegate.backends.artifacts`) does the I/O; the reference
is wire data that workflow-side models (``TranscriptRef``) carry, so it lives in
the pure kernel.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

RUN_ID = re.compile(r"[A-Za-z0-9-]{1,64}")
"""A Temporal run id (a UUID) as it may appear in a key: no ``@``, ``.`` or ``/``."""


def chain_scope(workflow_id: str, first_run_id: str) -> str:
    """The key component of one run chain: ``<workflow id>@<first run id>``.

    Artifacts, transcripts and idempotency-journal entries live under it, so a
    later run under a reused workflow id (a new chain) sees none of them, while
    continue-as-new (same first run id) keeps them (contract §11). The run id
    has no ``@``, so the last ``@`` splits the scope unambiguously. ValueError
    for a malformed run id.
    """
    if not RUN_ID.fullmatch(first_run_id):
        raise ValueError(f"invalid run id {first_run_id!r}")
    return f"{workflow_id}@{first_run_id}"


class ArtifactRef(BaseModel):
    """Where an artifact lives and what it must hash to; small enough for history."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bucket: str
    key: str
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    content_type: str = "application/octet-stream"

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def workflow_id(self) -> str:
        """The key's thread component: the run chain's scope (:func:`chain_scope`)."""
        return self.key.split("/", 2)[1]
