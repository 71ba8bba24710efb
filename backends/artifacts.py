"""The artifact store: large tool results and transcripts kept out of workflow history.

An activity that produces something too big for history (contract §7, §8) puts
the bytes here and hands the workflow an :class:`ArtifactRef` -- bucket, key,
size, sha256, content type -- which is all history ever holds. Keys are
``<namespace>/<workflow_id>/<tool_call_id>[/<name>]`` so one thread's
artifacts can be removed with one prefix delete, and a store only serves refs
from its own namespace.

Retention: with ``retention_days`` the store installs a bucket lifecycle rule
(id ``filegate-artifacts-<namespace>``, expiring objects under the namespace
prefix), merged with the rules already on the bucket. Servers may accept a
rule without enforcing it promptly (SeaweedFS applies it as a TTL to newly
written objects only), so :meth:`ArtifactStore.purge_older_than` does the same
job by listing and deleting; run it from a periodic job where that matters.

Give the artifact store its own bucket (``from_settings`` uses
``<s3_bucket>-artifacts``): Store backend namespaces live in the main bucket
and could otherwise share a first key component with an artifact namespace.
"""

from __future__ import annotations

import hashlib
import io
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from filegate.backends.s3 import (
    NAMESPACE_COMPONENT,
    S3_FAILURES,
    client_from_settings,
    ensure_bucket,
    is_missing,
    object_window,
    open_object,
    remove_keys,
    s3_message,
    validate_component,
)
from filegate.kernel.artifacts import ArtifactRef
from filegate.kernel.limits import DEFAULT_READ_LIMIT
from filegate.kernel.protocol import ReadResult
from minio import Minio
from minio.commonconfig import ENABLED, Filter
from minio.error import S3Error
from minio.lifecycleconfig import Expiration, LifecycleConfig, Rule

if TYPE_CHECKING:
    from filegate.backends.settings import Settings

SHA256_METADATA = "sha256"
"""User-metadata name (``x-amz-meta-sha256``) holding the digest of the bytes."""
MAX_NAME_COMPONENTS = 2  # <tool_call_id>[/<name>]


_ARTIFACT_MISMATCH = "stored artifact does not match its reference (sha256)"


class ArtifactError(RuntimeError):
    """An artifact could not be stored, found or trusted."""


class ArtifactStoreUnavailable(ArtifactError):
    """S3 could not be reached or refused our credentials."""


class ArtifactNotFound(ArtifactError):
    """The referenced artifact does not exist (deleted, expired or never written)."""


class ArtifactIntegrityError(ArtifactError):
    """The stored bytes do not match the reference's size or sha256."""


class ArtifactAccessError(ArtifactError):
    """The reference belongs to another bucket or namespace than this store."""


class _HashingReader:
    """Passes reads through while hashing them, so a streamed read can be verified."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        chunk: bytes = self._inner.read(size)
        self.digest.update(chunk)
        self.size += len(chunk)
        return chunk


class ArtifactStore:
    """Content-addressed-by-reference blobs of one namespace in one bucket.

    The constructor checks the connection (creating the bucket if missing)
    and raises :class:`ArtifactStoreUnavailable` with a plain reason: a
    misconfigured worker should fail at start-up, not on the first big result.
    """

    def __init__(
        self,
        client: Minio,
        bucket: str,
        namespace: str = "default",
        retention_days: int | None = None,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.namespace = validate_component(namespace, "artifact namespace")
        if retention_days is not None and retention_days < 1:
            raise ValueError(f"retention_days must be at least 1, got {retention_days}")
        self.retention_days = retention_days
        try:
            ensure_bucket(client, bucket)
            if retention_days is not None:
                self._install_lifecycle(retention_days)
        except S3_FAILURES as exc:
            raise ArtifactStoreUnavailable(
                f"artifact store unavailable (bucket {bucket!r}): {s3_message(exc)}"
            ) from exc

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        namespace: str = "default",
        retention_days: int | None = None,
        bucket: str | None = None,
    ) -> ArtifactStore:
        """A store on the configured S3 server, in bucket ``<s3_bucket>-artifacts``."""
        return cls(
            client_from_settings(settings),
            bucket or f"{settings.s3_bucket}-artifacts",
            namespace=namespace,
            retention_days=retention_days,
        )

    # -- keys and refs --------------------------------------------------------

    @property
    def rule_id(self) -> str:
        return f"filegate-artifacts-{self.namespace}"

    def thread_prefix(self, workflow_id: str) -> str:
        return f"{self.namespace}/{validate_component(workflow_id, 'workflow id')}/"

    def key_for(self, workflow_id: str, key: str) -> str:
        """``<namespace>/<workflow_id>/<tool_call_id>[/<name>]``; ValueError when malformed."""
        parts = key.split("/") if isinstance(key, str) else [key]
        if not 1 <= len(parts) <= MAX_NAME_COMPONENTS:
            raise ValueError(f"artifact key {key!r} must be '<tool_call_id>[/<name>]'")
        for part in parts:
            validate_component(part, "artifact key component")
        return self.thread_prefix(workflow_id) + "/".join(parts)

    def _check_ref(self, ref: ArtifactRef) -> None:
        """Refuse refs of another bucket/namespace, and forged keys (``..`` etc.)."""
        parts = ref.key.split("/")
        well_formed = 3 <= len(parts) <= 2 + MAX_NAME_COMPONENTS and all(
            NAMESPACE_COMPONENT.fullmatch(p) and p not in (".", "..") for p in parts
        )
        if ref.bucket != self.bucket or parts[0] != self.namespace or not well_formed:
            raise ArtifactAccessError(
                f"artifact {ref.bucket}/{ref.key} is outside this store "
                f"(bucket {self.bucket!r}, namespace {self.namespace!r})"
            )

    # -- operations ---------------------------------------------------------

    def put(
        self,
        workflow_id: str,
        key: str,
        data: bytes,
        content_type: str = "application/octet-stream",
    ) -> ArtifactRef:
        """Store ``data``; the returned ref is what goes into workflow history.

        Idempotent: a retried activity writing the same key overwrites with
        the same bytes and gets an equal ref.
        """
        object_key = self.key_for(workflow_id, key)
        digest = hashlib.sha256(data).hexdigest()
        try:
            self.client.put_object(
                self.bucket,
                object_key,
                io.BytesIO(data),
                len(data),
                content_type=content_type,
                metadata={SHA256_METADATA: digest},
            )
        except S3_FAILURES as exc:
            raise ArtifactError(
                f"could not store artifact {object_key}: {s3_message(exc)}"
            ) from exc
        return ArtifactRef(
            bucket=self.bucket,
            key=object_key,
            size=len(data),
            sha256=digest,
            content_type=content_type,
        )

    def get(self, ref: ArtifactRef) -> bytes:
        """The artifact's bytes, verified against ``ref.sha256``."""
        self._check_ref(ref)
        try:
            with open_object(self.client, self.bucket, ref.key) as response:
                data = bytes(response.read())
        except S3_FAILURES as exc:
            if is_missing(exc):
                raise ArtifactNotFound(f"artifact not found: {ref.key}") from exc
            raise ArtifactError(f"could not read artifact {ref.key}: {s3_message(exc)}") from exc
        if len(data) != ref.size or hashlib.sha256(data).hexdigest() != ref.sha256:
            raise ArtifactIntegrityError(
                f"artifact {ref.key} does not match its reference (size or sha256 differ)"
            )
        return data

    def read_text_window(
        self,
        ref: ArtifactRef,
        offset: int = 0,
        limit: int = DEFAULT_READ_LIMIT,
        path: str | None = None,
    ) -> ReadResult:
        """A ``read_file`` window over an artifact, as an error *value* on failure.

        The object is streamed (memory: one chunk plus the window) and hashed
        on the way; a mismatch with the ref is reported instead of the window.
        ``path`` is the virtual path shown to the model, e.g.
        ``/large_tool_results/<tool_call_id>``.
        """
        shown = path or "/" + ref.key
        try:
            self._check_ref(ref)
        except ArtifactAccessError as exc:
            return ReadResult(path=shown, error=str(exc), code="permission_denied")
        readers: list[_HashingReader] = []

        def wrap(response: Any) -> _HashingReader:
            readers.append(_HashingReader(response))
            return readers[-1]

        try:
            result = object_window(
                self.client, self.bucket, ref.key, shown, offset, limit, wrap=wrap
            )
        except S3_FAILURES as exc:
            if is_missing(exc):
                return ReadResult(
                    path=shown, error="file not found (artifact expired or deleted)",
                    code="file_not_found", error_path=shown,
                )  # fmt: skip
            return ReadResult(path=shown, error=s3_message(exc), code="io_error")
        whole_text_pass = result.ok and not result.is_binary and readers
        if whole_text_pass and (
            readers[0].size != ref.size or readers[0].digest.hexdigest() != ref.sha256
        ):
            return ReadResult(
                path=shown,
                error=_ARTIFACT_MISMATCH,
                code="io_error",
                error_path=shown,
            )
        if (
            result.is_binary
            and result.data is not None
            and (hashlib.sha256(result.data).hexdigest() != ref.sha256)
        ):
            return ReadResult(
                path=shown,
                error=_ARTIFACT_MISMATCH,
                code="io_error",
                error_path=shown,
            )
        return result

    def presigned_url(self, ref: ArtifactRef, expires: timedelta | float = 3600.0) -> str:
        """A time-limited GET URL (``expires`` as timedelta or seconds, max 7 days)."""
        self._check_ref(ref)
        lifetime = expires if isinstance(expires, timedelta) else timedelta(seconds=expires)
        if not timedelta(seconds=1) <= lifetime <= timedelta(days=7):
            raise ValueError(f"expires must be between 1 second and 7 days, got {lifetime}")
        return self.client.presigned_get_object(self.bucket, ref.key, expires=lifetime)

    def list_thread(self, workflow_id: str) -> list[str]:
        """Keys of every artifact of one thread (workflow id), sorted."""
        prefix = self.thread_prefix(workflow_id)
        try:
            objects = self.client.list_objects(self.bucket, prefix=prefix, recursive=True)
            return sorted(o.object_name for o in objects if o.object_name and not o.is_dir)
        except S3_FAILURES as exc:
            raise ArtifactError(
                f"could not list artifacts of {workflow_id}: {s3_message(exc)}"
            ) from exc

    def delete_thread(self, workflow_id: str) -> int:
        """Remove every artifact of one thread; returns how many were removed."""
        keys = self.list_thread(workflow_id)
        try:
            remove_keys(self.client, self.bucket, keys)
        except S3_FAILURES as exc:
            raise ArtifactError(
                f"could not delete artifacts of {workflow_id}: {s3_message(exc)}"
            ) from exc
        return len(keys)

    def purge_older_than(self, days: float, now: datetime | None = None) -> int:
        """Delete this namespace's artifacts last modified more than ``days`` ago.

        The portable twin of the lifecycle rule, for servers that do not
        enforce one. ``now`` is injectable for tests. Returns the count removed.
        """
        cutoff = (now or datetime.now(UTC)) - timedelta(days=days)
        try:
            objects = self.client.list_objects(
                self.bucket, prefix=self.namespace + "/", recursive=True
            )
            doomed = [
                o.object_name
                for o in objects
                if o.object_name and not o.is_dir and o.last_modified and o.last_modified < cutoff
            ]
            remove_keys(self.client, self.bucket, doomed)
        except S3_FAILURES as exc:
            raise ArtifactError(f"could not purge artifacts: {s3_message(exc)}") from exc
        return len(doomed)

    # -- retention ----------------------------------------------------------

    def _install_lifecycle(self, days: int) -> None:
        """Add (or replace) this namespace's expiry rule, keeping other rules."""
        try:
            current = self.client.get_bucket_lifecycle(self.bucket)
        except S3Error as exc:
            if exc.code != "NoSuchLifecycleConfiguration":
                raise
            current = None
        rules = [r for r in (current.rules if current else []) if r.rule_id != self.rule_id]
        rules.append(
            Rule(
                ENABLED,
                rule_filter=Filter(prefix=self.namespace + "/"),
                rule_id=self.rule_id,
                expiration=Expiration(days=days),
            )
        )
        self.client.set_bucket_lifecycle(self.bucket, LifecycleConfig(rules))

    def lifecycle_days(self) -> int | None:
        """Expiry days of this namespace's lifecycle rule as the server reports it."""
        try:
            config = self.client.get_bucket_lifecycle(self.bucket)
        except S3Error as exc:
            if exc.code == "NoSuchLifecycleConfiguration":
                return None
            raise
        for rule in config.rules if config else []:
            if rule.rule_id == self.rule_id and rule.expiration is not None:
                return rule.expiration.days
        return None
