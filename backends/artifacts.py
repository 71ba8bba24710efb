"""The artifact store: large tool results and transcripts kept out of workflow history.

An activity that produces something too big for history (contract §7, §8) puts
the bytes here and hands the workflow an :class:`ArtifactRef` -- bucket, key,
size, sha256, content type -- which is all history ever holds. Keys are
``<namespace>/<workflow_id>/<tool_call_id>[/<name>]`` so one thread's
artifacts can be removed with one prefix delete, and a store only serves refs
from its own namespace.

Retention: :meth:`ArtifactStore.set_expiry` (and ``retention_days`` at
construction) installs a bucket lifecycle rule (id
``filegate-artifacts-<namespace>``, expiring objects under the namespace
prefix), merged with the rules already on the bucket; workers install it at
start (``filegate.cli.artifacts.install_artifact_expiry``). Servers may refuse
lifecycle configuration, or accept a rule without enforcing it promptly
(SeaweedFS applies it as a TTL to newly written objects only), so
:meth:`ArtifactStore.purge` does the same job by listing and deleting
(``filegate artifacts gc``); run it from a periodic job where that matters.

Give the artifact store its own bucket (``from_settings`` uses
``<s3_bucket>-artifacts``): Store backend namespaces live in the main bucket
and could otherwise share a first key component with an artifact namespace.
"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from minio import Minio
from minio.commonconfig import ENABLED, Filter
from minio.error import S3Error
from minio.lifecycleconfig import Expiration, LifecycleConfig, Rule

from filegate.backends.artifact_errors import (
    ArtifactAccessError,
    ArtifactError,
    ArtifactIntegrityError,
    ArtifactNotFound,
    ArtifactStoreDown,
    ArtifactStoreRefused,
    ArtifactStoreUnavailable,
    LifecycleError,
)
from filegate.backends.s3 import (
    NAMESPACE_COMPONENT,
    S3_FAILURES,
    OutageWaiter,
    S3OutageExhausted,
    client_from_settings,
    endpoint_url,
    ensure_bucket,
    is_missing,
    object_window,
    open_object,
    remove_keys,
    s3_message,
    validate_component,
)
from filegate.kernel.artifacts import ArtifactRef
from filegate.kernel.limits import DEFAULT_READ_LIMIT, DEFAULT_S3_OUTAGE_SECONDS
from filegate.kernel.protocol import ReadResult

if TYPE_CHECKING:
    from filegate.backends.settings import S3Settings

SHA256_METADATA = "sha256"
"""User-metadata name (``x-amz-meta-sha256``) holding the digest of the bytes."""
MAX_NAME_COMPONENTS = 2  # <tool_call_id>[/<name>]
_T = TypeVar("_T")


_ARTIFACT_MISMATCH = "stored artifact does not match its reference (sha256)"
NO_EXPIRY = 0
"""``set_expiry(NO_EXPIRY)`` / ``FILEGATE_ARTIFACT_EXPIRE_DAYS=0``: no lifecycle rule."""
_NO_LIFECYCLE = "NoSuchLifecycleConfiguration"


def days_covering(period: timedelta) -> int:
    """Whole days, rounded up, at least 1: a lifecycle rule counts in days, and
    expiring sooner than ``period`` (a namespace's retention) would be wrong."""
    return max(1, math.ceil(period.total_seconds() / 86400))


OPEN_RUN_MARGIN_DAYS = 30
"""Days added to the namespace's retention for the default expiry. A rule counts
from an object's write, retention from a run's close: a run still open (waiting
for a reviewer, or long) needs its artifacts for replay past the retention."""


def default_expiry_days(retention: timedelta) -> int:
    """The default lifecycle length: the retention in whole days plus
    :data:`OPEN_RUN_MARGIN_DAYS`, so a run open up to that margin keeps replaying."""
    return days_covering(retention) + OPEN_RUN_MARGIN_DAYS


@dataclass(frozen=True)
class StoredArtifact:
    """One object of the store as a listing reports it."""

    key: str
    size: int
    last_modified: datetime


@dataclass(frozen=True)
class Purge:
    """What :meth:`ArtifactStore.purge` removed (or, dry, would remove)."""

    objects: int
    bytes: int
    cutoff: datetime
    dry_run: bool = False


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
        outage_seconds: float = DEFAULT_S3_OUTAGE_SECONDS,
    ) -> None:
        self.client = client
        self.endpoint = endpoint_url(client)
        self.outage = OutageWaiter(self.endpoint, outage_seconds)
        """Waits out S3 outages in the calls a run makes (put, get, stat, read)."""
        self.bucket = bucket
        self.namespace = validate_component(namespace, "artifact namespace")
        if retention_days is not None and retention_days < 1:
            raise ValueError(f"retention_days must be at least 1, got {retention_days}")
        self.retention_days = retention_days
        try:
            ensure_bucket(client, bucket)
            if retention_days is not None:
                self._apply_lifecycle(retention_days)
        except S3_FAILURES as exc:
            raise ArtifactStoreUnavailable(
                f"artifact store unavailable (bucket {bucket!r}): {s3_message(exc)}"
            ) from exc

    @classmethod
    def from_settings(
        cls,
        s3: S3Settings,
        namespace: str = "default",
        retention_days: int | None = None,
        bucket: str | None = None,
    ) -> ArtifactStore:
        """A store on the configured S3 server, in bucket ``<bucket>-artifacts``,
        waiting out outages for ``FILEGATE_S3_OUTAGE_SECONDS``."""
        return cls(
            client_from_settings(s3),
            bucket or f"{s3.bucket}-artifacts",
            namespace=namespace,
            retention_days=retention_days,
            outage_seconds=s3.outage_seconds,
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
        meta: dict[str, str | list[str] | tuple[str]] = {SHA256_METADATA: digest}
        self._through_outage(
            f"storing {object_key}",
            lambda: self.client.put_object(
                self.bucket, object_key, io.BytesIO(data), len(data), content_type, meta
            ),
        )
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

        def read() -> bytes:
            with open_object(self.client, self.bucket, ref.key) as response:
                return bytes(response.read())

        data = self._through_outage(f"reading {ref.key}", read)
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

        def window() -> ReadResult:
            readers.clear()  # a retry after a broken stream hashes from the start
            return object_window(self.client, self.bucket, ref.key, shown, offset, limit, wrap=wrap)

        try:
            result = self._through_outage(f"reading {ref.key}", window)
        except ArtifactNotFound:
            return ReadResult(
                path=shown, error="file not found (artifact expired or deleted)",
                code="file_not_found", error_path=shown,
            )  # fmt: skip
        except ArtifactError as exc:
            return ReadResult(path=shown, error=str(exc), code="io_error")
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

    def stat(self, workflow_id: str, key: str) -> ArtifactRef:
        """The ref of an object stored under :meth:`key_for` (sha256 from its metadata),
        through an outage; :class:`ArtifactNotFound` when there is none."""
        object_key = self.key_for(workflow_id, key)
        stat = self._through_outage(
            f"looking up {object_key}", lambda: self.client.stat_object(self.bucket, object_key)
        )
        digest = (stat.metadata or {}).get(f"x-amz-meta-{SHA256_METADATA}", "")
        return ArtifactRef(bucket=self.bucket, key=object_key, size=stat.size or 0, sha256=digest)

    def _through_outage(self, what: str, fn: Callable[[], _T]) -> _T:
        """``fn()`` with an S3 outage waited out (:class:`OutageWaiter`), failures typed:
        not found, refused for good, or down past the budget."""
        try:
            return self.outage.call(what, fn)
        except S3OutageExhausted as exc:
            raise ArtifactStoreDown(str(exc), budget_spent=exc.budget_spent) from exc
        except S3_FAILURES as exc:
            if is_missing(exc):
                raise ArtifactNotFound(f"artifact not found ({what})") from exc
            raise ArtifactStoreRefused(
                f"S3 at {self.endpoint} refused {what}: {s3_message(exc)}"
            ) from exc

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

    def objects(
        self, older_than: timedelta | None = None, now: datetime | None = None
    ) -> list[StoredArtifact]:
        """This namespace's objects (all threads), sorted by key; with ``older_than``
        only those last modified before ``now - older_than``. Only keys under the
        namespace prefix are ever returned, so nothing else can be deleted."""
        prefix = self.namespace + "/"
        cutoff = None if older_than is None else (now or datetime.now(UTC)) - older_than
        try:
            listing = self.client.list_objects(self.bucket, prefix=prefix, recursive=True)
            found = [
                StoredArtifact(o.object_name, o.size or 0, o.last_modified)
                for o in listing
                if o.object_name and o.object_name.startswith(prefix) and not o.is_dir
                and o.last_modified is not None
                and (cutoff is None or o.last_modified < cutoff)
            ]  # fmt: skip
        except S3_FAILURES as exc:
            raise ArtifactError(f"could not list artifacts: {s3_message(exc)}") from exc
        return sorted(found, key=lambda o: o.key)

    def purge(
        self, older_than: timedelta, now: datetime | None = None, dry_run: bool = False
    ) -> Purge:
        """Delete this namespace's objects last modified more than ``older_than`` ago.

        The portable twin of the lifecycle rule, for servers that do not
        enforce one. ``now`` is injectable for tests; ``dry_run`` only counts.
        """
        now = now or datetime.now(UTC)
        doomed = self.objects(older_than, now)
        if not dry_run:
            try:
                remove_keys(self.client, self.bucket, [o.key for o in doomed])
            except S3_FAILURES as exc:
                raise ArtifactError(f"could not purge artifacts: {s3_message(exc)}") from exc
        return Purge(len(doomed), sum(o.size for o in doomed), now - older_than, dry_run)

    def purge_older_than(self, days: float, now: datetime | None = None) -> int:
        """:meth:`purge` of what is older than ``days``; returns the count removed."""
        return self.purge(timedelta(days=days), now).objects

    # -- retention ----------------------------------------------------------

    def set_expiry(self, days: int) -> bool:
        """Expire this namespace's objects ``days`` after they are written; ``NO_EXPIRY``
        removes the rule. Other rules on the bucket are kept. Idempotent: returns
        False (and writes nothing) when the server already has exactly that.
        Raises :class:`LifecycleError` when the server refuses."""
        if days < 0:
            raise ValueError(f"expiry days must be 0 (none) or more, got {days}")
        try:
            return self._apply_lifecycle(days)
        except S3_FAILURES as exc:
            raise LifecycleError(
                f"lifecycle rule on bucket {self.bucket!r}: {s3_message(exc)}"
            ) from exc

    def _current_rules(self) -> list[Rule]:
        try:
            current = self.client.get_bucket_lifecycle(self.bucket)
        except S3Error as exc:
            if exc.code != _NO_LIFECYCLE:
                raise
            current = None
        return list(current.rules) if current else []

    def _apply_lifecycle(self, days: int) -> bool:
        """:meth:`set_expiry` with S3's own exceptions (the constructor maps them)."""
        rules = self._current_rules()
        others = [r for r in rules if r.rule_id != self.rule_id]
        if days == NO_EXPIRY:
            if len(others) == len(rules):
                return False
            if others:
                self.client.set_bucket_lifecycle(self.bucket, LifecycleConfig(others))
            else:
                self.client.delete_bucket_lifecycle(self.bucket)
            return True
        ours = Rule(
            ENABLED,
            rule_filter=Filter(prefix=self.namespace + "/"),
            rule_id=self.rule_id,
            expiration=Expiration(days=days),
        )
        mine = [r for r in rules if r.rule_id == self.rule_id]
        if len(mine) == 1 and _same_rule(mine[0], ours):
            return False
        self.client.set_bucket_lifecycle(self.bucket, LifecycleConfig([*others, ours]))
        return True

    def lifecycle_days(self) -> int | None:
        """Expiry days of this namespace's lifecycle rule as the server reports it."""
        try:
            rules = self._current_rules()
        except S3_FAILURES as exc:
            raise LifecycleError(
                f"lifecycle rule on bucket {self.bucket!r}: {s3_message(exc)}"
            ) from exc
        for rule in rules:
            if rule.rule_id == self.rule_id and rule.expiration is not None:
                return rule.expiration.days
        return None


def _same_rule(rule: Rule, wanted: Rule) -> bool:
    """Whether the server's ``rule`` is ``wanted`` (id, status, prefix, days)."""

    def days(r: Rule) -> int | None:
        return r.expiration.days if r.expiration is not None else None

    def prefix(r: Rule) -> str | None:
        return r.rule_filter.prefix if r.rule_filter is not None else None

    return (
        rule.rule_id == wanted.rule_id
        and rule.status == wanted.status
        and prefix(rule) == prefix(wanted)
        and days(rule) == days(wanted)
    )
