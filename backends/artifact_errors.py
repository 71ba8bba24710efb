"""The artifact store's failures, typed by what a caller can do about them.

Apart from :mod:`filegate.backends.artifacts` (which re-exports them) so the
store module stays small; import them from either.

- :class:`ArtifactStoreDown`: S3 gave no answer for the outage budget: wait
  and try again later; nothing about the request is wrong.
- :class:`ArtifactStoreRefused`: S3 answered "never" (NoSuchBucket,
  AccessDenied, InvalidAccessKeyId): a configuration error; retrying is useless.
- :class:`ArtifactNotFound`: the object does not exist (expired, deleted).
"""

from __future__ import annotations


class ArtifactError(RuntimeError):
    """An artifact could not be stored, found or trusted."""


class ArtifactStoreUnavailable(ArtifactError):
    """S3 could not be reached or refused our credentials."""


class ArtifactStoreDown(ArtifactStoreUnavailable):
    """S3 gave no answer for the outage budget (``budget_spent``) or for the time the
    calling activity had left (not ``budget_spent``: a retry may wait on)."""

    def __init__(self, message: str, *, budget_spent: bool = True) -> None:
        super().__init__(message)
        self.budget_spent = budget_spent


class ArtifactStoreRefused(ArtifactError):
    """S3 answered with a refusal no retry can change (NoSuchBucket, AccessDenied,
    InvalidAccessKeyId, ...): a configuration error, reported at once."""


class ArtifactNotFound(ArtifactError):
    """The referenced artifact does not exist (deleted, expired or never written)."""


class ArtifactIntegrityError(ArtifactError):
    """The stored bytes do not match the reference's size or sha256."""


class ArtifactAccessError(ArtifactError):
    """The reference belongs to another bucket or namespace than this store."""


class LifecycleError(ArtifactError):
    """The S3 server refused to read or change the bucket's lifecycle configuration."""
