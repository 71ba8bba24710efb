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
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import urllib3
from filegate.backends.streams import stream_text_window
from filegate.kernel.media_types import is_media_path
from filegate.kernel.protocol import (
    ReadResult,
)
from minio import Minio
from minio.deleteobjects import DeleteObject
from minio.error import InvalidResponseError, MinioException, S3Error, ServerError

if TYPE_CHECKING:
    from filegate.backends.settings import Settings


NAMESPACE_COMPONENT = re.compile(r"[A-Za-z0-9._@+:~-]+")
DEFAULT_MAX_FILE_BYTES = 16 << 20
"""Largest object read whole (binary reads, edits, downloads); text windows stream."""


S3_FAILURES: tuple[type[BaseException], ...] = (
    MinioException,
    urllib3.exceptions.HTTPError,
    OSError,
)
"""What a call to S3 raises for expected failures (server said no, network down)."""

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


def client_from_settings(settings: Settings) -> Minio:
    """The S3 client configured by ``FILEGATE_S3_*``; ValueError when unconfigured."""
    if not settings.s3_endpoint:
        raise ValueError("no S3 endpoint configured: set FILEGATE_S3_ENDPOINT")
    if not settings.s3_access_key or settings.s3_secret_key is None:
        raise ValueError("S3 credentials missing: set FILEGATE_S3_ACCESS_KEY/_SECRET_KEY")
    return make_client(
        settings.s3_endpoint,
        settings.s3_access_key,
        settings.s3_secret_key.get_secret_value(),
        secure=settings.s3_secure,
    )


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
        return f"S3 endpoint unreachable: {type(exc.reason).__name__ if exc.reason else 'error'}"
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"S3 request failed: {text[:200]}"


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
