"""The artifact reference: where a large payload lives in S3, small enough for history.

The store itself (:mod:`filegate.backends.artifacts`) does the I/O; the reference
is wire data that workflow-side models (``TranscriptRef``) carry, so it lives in
the pure kernel.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


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
        return self.key.split("/", 2)[1]
