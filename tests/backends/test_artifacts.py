"""The artifact store on a real S3 server (SeaweedFS ``weed mini``)."""

from __future__ import annotations

import hashlib
import io
import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from minio import Minio

from filegate.backends.artifacts import (
    ArtifactAccessError,
    ArtifactIntegrityError,
    ArtifactNotFound,
    ArtifactRef,
    ArtifactStore,
    ArtifactStoreUnavailable,
)
from filegate.backends.s3 import make_client
from filegate.backends.settings import S3Settings
from filegate.devstack.s3 import S3DevServer
from filegate.devstack.servers import free_port

BUCKET = "h10-artifact-tests"


@pytest.fixture
def store(minio_client: Minio) -> ArtifactStore:
    return ArtifactStore(minio_client, BUCKET, namespace=f"ns-{uuid.uuid4().hex[:8]}")


def _wf() -> str:
    return f"agent-{uuid.uuid4().hex[:8]}"


def test_round_trip_and_reference(store: ArtifactStore, minio_client: Minio) -> None:
    wf = _wf()
    blob = bytes(range(256)) * 100
    ref = store.put(wf, "call_1", blob, "application/octet-stream")
    assert ref.bucket == BUCKET
    assert ref.key == f"{store.namespace}/{wf}/call_1"
    assert (ref.size, ref.sha256) == (len(blob), hashlib.sha256(blob).hexdigest())
    assert (ref.namespace, ref.workflow_id) == (store.namespace, wf)
    assert store.get(ref) == blob
    # The ref is small and survives a JSON round trip (it travels in workflow history).
    assert len(ref.model_dump_json()) < 300
    assert store.get(ArtifactRef.model_validate_json(ref.model_dump_json())) == blob
    stat = minio_client.stat_object(BUCKET, ref.key)
    assert stat.content_type == "application/octet-stream"
    assert stat.metadata is not None
    assert stat.metadata.get("x-amz-meta-sha256") == ref.sha256
    named = store.put(wf, "call_1/transcript.md", b"# hi\n", "text/markdown")
    assert named.key.endswith("/call_1/transcript.md")
    assert store.get(named) == b"# hi\n"
    assert store.put(wf, "call_1", blob) == ref  # idempotent for retried activities


def test_sha256_is_verified(store: ArtifactStore, minio_client: Minio) -> None:
    ref = store.put(_wf(), "c1", b"original line\n" * 3, "text/plain")
    tampered = b"tampered line\n" * 3  # same size, different bytes
    minio_client.put_object(BUCKET, ref.key, io.BytesIO(tampered), len(tampered))
    with pytest.raises(ArtifactIntegrityError, match="sha256"):
        store.get(ref)
    window = store.read_text_window(ref, path="/large_tool_results/c1")
    assert window.code == "io_error" and "sha256" in (window.error or "")


def test_read_text_window_streams_with_pagination(store: ArtifactStore) -> None:
    text = "".join(f"result line {i}\n" for i in range(1, 250_001))  # ~4.7 MB
    ref = store.put(_wf(), "call_big", text.encode(), "text/plain; charset=utf-8")
    path = "/large_tool_results/call_big"
    first = store.read_text_window(ref, 0, 3, path=path)
    assert first.ok, first.error
    assert first.path == path
    assert first.lines == ["result line 1", "result line 2", "result line 3"]
    assert (first.total_lines, first.next_offset, first.size) == (250_000, 3, len(text))
    last = store.read_text_window(ref, 249_999, 10, path=path)
    assert last.lines == ["result line 250000"] and last.next_offset is None
    past = store.read_text_window(ref, 250_000, 10, path=path)
    assert past.code == "invalid_argument" and "250000" in (past.error or "")
    binary = store.put(ref.workflow_id, "call_bin", b"\x00\xff" * 10)
    got = store.read_text_window(binary)
    assert got.is_binary and got.data == b"\x00\xff" * 10


def test_presigned_url_fetch(store: ArtifactStore) -> None:
    ref = store.put(_wf(), "c1", b"shared with a UI", "text/plain")
    url = store.presigned_url(ref, expires=timedelta(minutes=5))
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.read() == b"shared with a UI"
    tampered = url.replace("X-Amz-Signature=", "X-Amz-Signature=0")
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(tampered, timeout=5)
    assert denied.value.code == 403
    with pytest.raises(ValueError, match="7 days"):
        store.presigned_url(ref, expires=timedelta(days=8))


def test_delete_thread_removes_only_that_thread(store: ArtifactStore) -> None:
    wf, other = _wf(), _wf()
    refs = [store.put(wf, f"c{i}", b"x" * i) for i in range(1, 4)]
    refs.append(store.put(wf, "c9/extra.txt", b"e"))
    keep = store.put(other, "c1", b"keep")
    assert store.list_thread(wf) == sorted(r.key for r in refs)
    assert store.delete_thread(wf) == 4
    assert store.list_thread(wf) == []
    for ref in refs:
        with pytest.raises(ArtifactNotFound):
            store.get(ref)
    missing = store.read_text_window(refs[0], path="/large_tool_results/c1")
    assert missing.code == "file_not_found"
    assert store.get(keep) == b"keep"
    assert store.delete_thread(wf) == 0


def test_namespaces_are_isolated(minio_client: Minio, store: ArtifactStore) -> None:
    other = ArtifactStore(minio_client, BUCKET, namespace=store.namespace + "x")
    ref = store.put(_wf(), "c1", b"tenant A data")
    with pytest.raises(ArtifactAccessError, match="namespace"):
        other.get(ref)
    with pytest.raises(ArtifactAccessError):
        other.presigned_url(ref)
    window = other.read_text_window(ref)
    assert window.code == "permission_denied" and window.data is None and window.lines == []
    foreign_bucket = ref.model_copy(update={"bucket": "someone-else"})
    with pytest.raises(ArtifactAccessError, match="bucket"):
        store.get(foreign_bucket)
    # A forged key that climbs out of the namespace is refused before any request.
    theirs = other.put(_wf(), "c1", b"tenant B data")
    for key in (f"{store.namespace}/../{theirs.key}", f"{store.namespace}/./{theirs.key}"):
        forged = theirs.model_copy(update={"key": key})
        with pytest.raises(ArtifactAccessError):
            store.get(forged)
        assert store.read_text_window(forged).code == "permission_denied"


@pytest.mark.parametrize(
    ("workflow_id", "key"),
    [("wf", ""), ("wf", "a/b/c"), ("wf", "../x"), ("w f", "c1"), ("..", "c1"), ("wf", "c1/")],
)
def test_key_components_are_validated(store: ArtifactStore, workflow_id: str, key: str) -> None:
    with pytest.raises(ValueError):
        store.put(workflow_id, key, b"x")


def test_retention_rule_and_purge(minio_client: Minio) -> None:
    namespace = f"ret-{uuid.uuid4().hex[:8]}"
    neighbour = ArtifactStore(minio_client, BUCKET, namespace=namespace + "-n", retention_days=30)
    store = ArtifactStore(minio_client, BUCKET, namespace=namespace, retention_days=7)
    assert store.lifecycle_days() == 7
    assert neighbour.lifecycle_days() == 30  # installing one rule kept the other
    again = ArtifactStore(minio_client, BUCKET, namespace=namespace, retention_days=3)
    assert again.lifecycle_days() == 3
    old = store.put(_wf(), "c1", b"old")
    kept = neighbour.put(_wf(), "c1", b"other namespace")
    assert store.purge_older_than(1) == 0  # just written: nothing is a day old
    assert store.purge_older_than(1, now=datetime.now(UTC) + timedelta(days=2)) == 1
    with pytest.raises(ArtifactNotFound):
        store.get(old)
    assert neighbour.get(kept) == b"other namespace"
    with pytest.raises(ValueError):
        ArtifactStore(minio_client, BUCKET, retention_days=0)


def test_wrong_credentials_fail_fast_and_clearly(s3_server: S3DevServer) -> None:
    began = time.monotonic()
    client = make_client(s3_server.endpoint, "WRONGKEY", "wrong-secret")
    with pytest.raises(ArtifactStoreUnavailable, match="access key"):
        ArtifactStore(client, BUCKET)
    assert time.monotonic() - began < 5


def test_unreachable_endpoint_fails_fast() -> None:
    began = time.monotonic()
    client = make_client(f"127.0.0.1:{free_port()}", "k", "s", connect_timeout=1.0)
    with pytest.raises(ArtifactStoreUnavailable, match="unreachable"):
        ArtifactStore(client, BUCKET)
    assert time.monotonic() - began < 5


def test_from_settings(s3_server: S3DevServer) -> None:
    s3 = S3Settings.model_validate(
        {
            "endpoint": s3_server.endpoint,
            "access_key": s3_server.access_key,
            "secret_key": s3_server.secret_key,
            "bucket": "h10-fs",
        }
    )
    store = ArtifactStore.from_settings(s3, namespace="prod")
    assert store.bucket == "h10-fs-artifacts"
    ref = store.put("wf-1", "call_1", b"payload")
    assert store.get(ref) == b"payload"
    bad = s3.model_copy(update={"secret_key": None})
    with pytest.raises(ValueError, match="credentials"):
        ArtifactStore.from_settings(bad)
