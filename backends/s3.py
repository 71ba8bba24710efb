"""S3 plumbing shared by the Store backend and the artifact store.

The namespace rule, a client with short timeouts and few retries (a wrong
endpoint fails fast instead of hanging an activity), failure -> short
message, bucket creation, batched deletes and the streamed text window over
an object. Kept apart from :mod:`filegate.backends.store` because
:mod:`filegate.backends.artifacts` needs the same plumbing but not the
file-tree backend.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import urllib3
from minio import Minio
from minio.deleteobjects import DeleteObject
from minio.error import InvalidResponseError, MinioException, S3Error, ServerError

from filegate.backends.streams import stream_text_window
from filegate.kernel.limits import DEFAULT_S3_OUTAGE_SECONDS
from filegate.kernel.media_types import is_media_path
from filegate.kernel.protocol import (
    ReadResult,
)

if TYPE_CHECKING:
    from filegate.backends.settings import S3Settings


NAMESPACE_COMPONENT = re.compile(r"[A-Za-z0-9._@+:~-]+")
DEFAULT_MAX_FILE_BYTES = 16 << 20
"""Largest object read whole (binary reads, edits, downloads); text windows stream."""


S3_FAILURES: tuple[type[BaseException], ...] = (
    MinioException,
    urllib3.exceptions.HTTPError,
    OSError,
)
"""What a call to S3 raises for expected failures (server said no, network down)."""

_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "XMinioServerNotInitialized",
        "XMinioReadQuorum",
        "XMinioWriteQuorum",
    }
)
"""S3 error codes that say "not now" (a restarting or overloaded server), not "never"."""
_MISSING_CODES = frozenset({"NoSuchKey", "NoSuchObject", "NotFound"})
_CREDENTIAL_CODES = frozenset(
    {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken"}
)


def validate_component(value: object, what: str = "namespace component") -> str:
    """Return ``value`` if it is a legal key component; ValueError otherwise.

    ``.`` and ``..`` match the character rule but are refused: some S3
    servers map keys onto a filesystem, where they would climb.
    """
    if (
        not isinstance(value, str)
        or not NAMESPACE_COMPONENT.fullmatch(value)
        or value in (".", "..")
    ):
        raise ValueError(f"invalid {what} {value!r}: use 1+ characters of [A-Za-z0-9._@+:~-]")
    return value


def normalize_namespace(namespace: tuple[str, ...] | list[str] | str) -> tuple[str, ...]:
    """A validated, non-empty namespace tuple (a plain string is one component)."""
    parts = (namespace,) if isinstance(namespace, str) else tuple(namespace)
    if not parts:
        raise ValueError("namespace must have at least one component")
    return tuple(validate_component(part) for part in parts)


def make_client(
    endpoint: str,
    access_key: str,
    secret_key: str,
    *,
    secure: bool = False,
    connect_timeout: float = 3.0,
    read_timeout: float = 30.0,
    retries: int = 2,
) -> Minio:
    """A minio client whose pool gives up quickly on an unreachable endpoint.

    minio's default pool retries 5 times with no connect timeout of its own;
    inside an activity that looks like a hang. Temporal retries the activity
    anyway, so a couple of quick transport retries is all we want here.
    """
    http_client = urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout),
        retries=urllib3.Retry(
            total=retries,
            backoff_factor=0.2,
            status_forcelist=(500, 502, 503, 504),
            raise_on_status=False,  # let minio parse the S3 error body
        ),
        maxsize=10,
    )
    return Minio(endpoint, access_key, secret_key, secure=secure, http_client=http_client)


def client_from_settings(s3: S3Settings) -> Minio:
    """The S3 client configured by ``FILEGATE_S3_*``; ValueError when unconfigured."""
    if not s3.endpoint:
        raise ValueError("no S3 endpoint configured: set FILEGATE_S3_ENDPOINT")
    if not s3.access_key or s3.secret_key is None:
        raise ValueError("S3 credentials missing: set FILEGATE_S3_ACCESS_KEY/_SECRET_KEY")
    secret = s3.secret_key.get_secret_value()
    return make_client(s3.endpoint, s3.access_key, secret, secure=s3.secure)


def endpoint_url(client: Minio) -> str:
    """``http[s]://host:port`` of ``client``'s server, for messages that name S3."""
    base = client._base_url
    return f"{'https' if base.is_https else 'http'}://{base.host}"


def is_missing(exc: BaseException) -> bool:
    """True for the S3 "no such object" answer."""
    return isinstance(exc, S3Error) and exc.code in _MISSING_CODES


def s3_message(exc: BaseException) -> str:
    """A short, credential-free description of an S3 failure."""
    if isinstance(exc, S3Error):
        if exc.code in _CREDENTIAL_CODES:
            return f"S3 refused the request ({exc.code}): check the S3 access key and secret"
        return f"S3 error {exc.code}: {exc.message}"
    if isinstance(exc, ServerError):
        return f"S3 server error (HTTP {exc.status_code})"
    if isinstance(exc, InvalidResponseError):
        return "S3 endpoint answered with something that is not S3"
    if isinstance(exc, urllib3.exceptions.MaxRetryError):
        reason = exc.reason
        if reason is None:
            return "S3 endpoint unreachable"
        detail = str(reason).rpartition(": ")[2][:120]
        return f"S3 endpoint unreachable: {type(reason).__name__}: {detail}"
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"S3 request failed: {text[:200]}"


def is_transient(exc: BaseException) -> bool:
    """True when S3 did not really answer (no connection, reset, timeout, 5xx, SlowDown).

    Such a failure says nothing about the request: the same call succeeds once
    the server is back. Everything else S3 answers (NoSuchBucket, AccessDenied,
    InvalidAccessKeyId, NoSuchKey, ...) will answer the same way again.
    """
    if isinstance(exc, S3Error):
        return exc.code in _TRANSIENT_CODES
    if isinstance(exc, ServerError):
        return exc.status_code >= 500
    if isinstance(exc, InvalidResponseError):
        # A proxy or load balancer in front of a restarting server answers 502/503 in HTML.
        code = getattr(exc, "_code", None)
        return isinstance(code, int) and code >= 500
    return isinstance(exc, (urllib3.exceptions.HTTPError, OSError))


S3_WAIT_UNTIL: ContextVar[float | None] = ContextVar("filegate_s3_wait_until", default=None)
"""A ``time.monotonic()`` instant past which a wait for S3 stops even inside the budget.

An activity sets it from its own start-to-close deadline (minus what it needs
after S3), so the wait ends with a clear "still waiting for S3" error of ours
instead of Temporal timing the activity out with none. ``asyncio.to_thread``
copies it into the worker thread."""

_T = TypeVar("_T")
_log = logging.getLogger("filegate.s3")


class S3OutageExhausted(RuntimeError):
    """S3 gave no answer for the whole outage budget (or until ``S3_WAIT_UNTIL``).

    ``budget_spent`` tells which: True when the configured budget ran out (the
    caller should give up), False when only the caller's own deadline did (a
    retry of the caller may wait on)."""

    def __init__(self, message: str, *, budget_spent: bool) -> None:
        super().__init__(message)
        self.budget_spent = budget_spent


class OutageWaiter:
    """Calls S3 through an outage: transport failures are retried with backoff for up
    to ``budget`` seconds, answers that can never succeed are raised at once.

    Why here, under every caller: an outage is the store's state, not a failure
    of the model call or tool call that happened to need it; counting it against
    their retry attempts turned a 17 s MinIO restart into a failed run. The
    first wait of an outage is announced once per endpoint in this process
    (a warning naming S3 and the endpoint), its end once too.
    """

    _waiting: ClassVar[set[str]] = set()
    """Endpoints this process is waiting for (each announced once)."""
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        endpoint: str,
        budget: float = DEFAULT_S3_OUTAGE_SECONDS,
        *,
        first_delay: float = 0.5,
        max_delay: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if budget < 0:
            raise ValueError(f"S3 outage budget must be 0 or more seconds, got {budget}")
        self.endpoint = endpoint
        self.budget = budget
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.sleep = sleep

    def call(self, what: str, fn: Callable[[], _T]) -> _T:
        """``fn()``, retried while S3 does not answer; :class:`S3OutageExhausted` after
        the budget. ``what`` names the operation in the messages ("storing <key>")."""
        began = time.monotonic()  # the budget counts from the first try
        announced = False
        delay = self.first_delay
        while True:
            try:
                result = fn()
            except S3_FAILURES as exc:
                if not is_transient(exc):
                    raise
                now = time.monotonic()
                if not announced:
                    announced = True
                    self._announce(what, exc)
                budget_end = began + self.budget
                until = S3_WAIT_UNTIL.get()
                end = budget_end if until is None else min(budget_end, until)
                if now >= end:
                    raise self._exhausted(what, exc, now - began, now >= budget_end) from exc
                self.sleep(min(delay, end - now))
                delay = min(delay * 2, self.max_delay)
            else:
                if announced:
                    self._recovered(time.monotonic() - began)
                return result

    def _announce(self, what: str, exc: BaseException) -> None:
        with self._lock:
            first = self.endpoint not in self._waiting
            self._waiting.add(self.endpoint)
        if first:
            _log.warning(
                "waiting for S3 at %s (%s, while %s): retrying for up to %.0f s "
                "(FILEGATE_S3_OUTAGE_SECONDS)",
                self.endpoint, s3_message(exc), what, self.budget,
            )  # fmt: skip

    def _recovered(self, waited: float) -> None:
        with self._lock:
            was = self.endpoint in self._waiting
            self._waiting.discard(self.endpoint)
        if was:
            _log.warning("S3 at %s answers again after %.0f s", self.endpoint, waited)

    def _exhausted(
        self, what: str, exc: BaseException, waited: float, spent: bool
    ) -> S3OutageExhausted:
        if spent:
            tail = f"gave up after the outage budget of {self.budget:.0f} s"
            tail += " (FILEGATE_S3_OUTAGE_SECONDS)"
        else:
            tail = "this attempt's time is up; a retry waits on"
        return S3OutageExhausted(
            f"S3 at {self.endpoint} did not answer for {waited:.0f} s while {what} "
            f"({s3_message(exc)}): {tail}",
            budget_spent=spent,
        )


def ensure_bucket(client: Minio, bucket: str) -> None:
    """Create ``bucket`` unless it exists (a concurrent creator is fine)."""
    if client.bucket_exists(bucket):
        return
    try:
        client.make_bucket(bucket)
    except S3Error as exc:
        if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise


@contextlib.contextmanager
def open_object(client: Minio, bucket: str, key: str) -> Iterator[Any]:
    """GET ``key`` as a readable stream, always handing the connection back."""
    response = client.get_object(bucket, key)
    try:
        yield response
    finally:
        response.close()
        response.release_conn()


def object_window(
    client: Minio,
    bucket: str,
    key: str,
    path: str,
    offset: int,
    limit: int,
    max_binary_bytes: int = DEFAULT_MAX_FILE_BYTES,
    wrap: Any = None,
) -> ReadResult:
    """``read`` of one object: a streamed text window, or base64 bytes when binary.

    Media extensions are always bytes (contract §6). ``wrap`` may wrap the
    response stream (the artifact store hashes what passes). S3 failures
    propagate; the caller turns them into values.
    """
    # No limit check here: bytes come back whatever the limit, and the text
    # window decides for text (kernel.textops.nothing_requested).
    with open_object(client, bucket, key) as response:
        size = int(response.headers.get("content-length") or 0)
        if not is_media_path(path):
            stream = wrap(response) if wrap is not None else response
            result = stream_text_window(stream, path, offset, limit)
            if result is not None:
                if result.ok:
                    result.size = size
                return result
        if size > max_binary_bytes:
            return ReadResult(
                path=path,
                size=size,
                error=f"is a binary file of {size} bytes, over the {max_binary_bytes}-byte limit",
                code="too_large",
                error_path=path,
            )
        if is_media_path(path):
            data = response.read()
            return ReadResult(path=path, data=data, encoding="base64", size=len(data))
    with open_object(client, bucket, key) as response:  # the text pass consumed the stream
        data = response.read()
    return ReadResult(path=path, data=data, encoding="base64", size=len(data))


def remove_keys(client: Minio, bucket: str, keys: list[str]) -> None:
    """Delete ``keys`` in batches; raise the first per-key failure S3 reports."""
    for start in range(0, len(keys), 1000):
        batch = [DeleteObject(key) for key in keys[start : start + 1000]]
        for error in client.remove_objects(bucket, batch):
            raise MinioException(f"could not delete {error.name}: {error.code} {error.message}")
