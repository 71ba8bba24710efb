"""The Store backend on a real S3 server (SeaweedFS ``weed mini``).

The whole backend contract (tests/backends/test_backend_contract.py) runs again here
with a Store subject, then Store-only behaviour: namespaces, persistence
across instances, composite routing, S3 failures as values.
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Callable
from datetime import datetime

import pytest
from minio import Minio

import tests.backends.test_backend_contract as contract
from filegate.backends.composite import CompositeBackend
from filegate.backends.s3 import make_client, normalize_namespace
from filegate.backends.settings import S3Settings
from filegate.backends.store import StoreBackend
from filegate.devstack.s3 import S3DevServer
from filegate.devstack.servers import free_port
from filegate.kernel.state import StateBackend

BUCKET = "h10-store-tests"

# Every contract test, collected again in this module so it uses the Store
# `subject` fixture below (pytest resolves fixtures where a test is collected).
globals().update({name: fn for name, fn in vars(contract).items() if name.startswith("test_")})
grep_subject = contract.grep_subject


@pytest.fixture(scope="module")
def bucket(minio_client: Minio) -> str:
    if not minio_client.bucket_exists(BUCKET):
        minio_client.make_bucket(BUCKET)
    return BUCKET


@pytest.fixture
def make_store(minio_client: Minio, bucket: str) -> Callable[..., StoreBackend]:
    """Stores in fresh namespaces: tests never see each other's files."""
    run = uuid.uuid4().hex[:12]

    def factory(*namespace: str) -> StoreBackend:
        return StoreBackend(
            minio_client, bucket, ("t", run, *namespace) if namespace else ("t", run)
        )

    return factory


@pytest.fixture
def subject(make_store: Callable[..., StoreBackend]) -> contract.Subject:
    return contract.Subject(make_store("contract"), "")


@pytest.fixture
def store(make_store: Callable[..., StoreBackend]) -> StoreBackend:
    return make_store("main")


# -- namespaces ------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad", ["", "a/b", "..", ".", "sp ace", "a\x00", ("users", ""), (), ("ok", "no/slash"), "é"]
)
def test_namespace_components_are_validated(minio_client: Minio, bad: object) -> None:
    with pytest.raises(ValueError, match="namespace"):
        StoreBackend(minio_client, BUCKET, bad)  # type: ignore[arg-type]


def test_namespace_forms() -> None:
    assert normalize_namespace("team") == ("team",)
    assert normalize_namespace(["users", "a.b@c+d:e~f-g_h"]) == ("users", "a.b@c+d:e~f-g_h")


def test_namespaces_are_isolated(minio_client: Minio, bucket: str) -> None:
    run = uuid.uuid4().hex[:8]
    u1 = StoreBackend(minio_client, bucket, ("users", run, "u1"))
    u10 = StoreBackend(minio_client, bucket, ("users", run, "u10"))  # prefix sibling of u1
    assert u1.write("/notes/a.md", "one secret").ok
    assert u10.write("/notes/a.md", "ten").ok
    assert u10.write("/only10.md", "ten").ok
    assert u1.read("/notes/a.md").lines == ["one secret"]
    assert u10.read("/notes/a.md").lines == ["ten"]
    assert [e.path for e in u1.ls("/").entries] == ["/notes/"]
    assert u1.read("/only10.md").code == "file_not_found"
    assert u1.glob("**/*.md").matches == ["/notes/a.md"]
    assert u10.grep("secret").matches == []
    assert u10.delete("/notes").ok
    assert u1.read("/notes/a.md").lines == ["one secret"]
    keys = sorted(o.object_name for o in minio_client.list_objects(
        bucket, prefix=f"users/{run}/", recursive=True))  # fmt: skip
    assert keys == [f"users/{run}/u1/notes/a.md", f"users/{run}/u10/only10.md"]


def test_files_persist_across_instances_and_clients(
    s3_server: S3DevServer, store: StoreBackend
) -> None:
    before = time.time()
    assert store.write("/memories/profile.md", "likes: tea\n").ok
    assert store.upload([("/blobs/x.bin", b"\x00\x01\x02")])[0].ok
    other_client = Minio(
        s3_server.endpoint, s3_server.access_key, s3_server.secret_key, secure=False
    )
    again = StoreBackend(other_client, store.bucket, store.namespace)
    assert again.read("/memories/profile.md").lines == ["likes: tea"]
    assert again.download(["/blobs/x.bin"])[0].content == b"\x00\x01\x02"
    listing = again.ls("/memories")
    assert [(e.path, e.size) for e in listing.entries] == [("/memories/profile.md", 11)]
    modified = listing.entries[0].modified_at
    assert modified is not None
    assert datetime.fromisoformat(modified).timestamp() >= before - 5
    assert again.edit("/memories/profile.md", "tea", "coffee").ok
    assert store.read("/memories/profile.md").lines == ["likes: coffee"]


def test_deleted_directories_leave_no_ghosts(store: StoreBackend) -> None:
    """SeaweedFS keeps empty folders after deletes; they must not be listed."""
    assert store.write("/d/e/f.txt", "f").ok
    assert store.write("/d/g.txt", "g").ok
    assert store.delete("/d/e").ok
    assert [e.path for e in store.ls("/d").entries] == ["/d/g.txt"]
    assert store.ls("/d/e").code == "file_not_found"
    assert store.write("/d/e", "now a file").ok  # the emptied dir no longer blocks a file
    assert store.delete("/d").ok
    assert store.ls("/").entries == []
    assert store.glob("*", "/d").code == "file_not_found"


def test_directory_markers_are_not_files(minio_client: Minio, store: StoreBackend) -> None:
    """Folder markers made by other S3 tools (``key/``) are neither files nor directories."""
    prefix = "/".join(store.namespace) + "/"
    for key in ("marker/", "deep/marker/"):
        minio_client.put_object(store.bucket, prefix + key, io.BytesIO(b""), 0)
    assert store.write("/ok.txt", "z").ok
    assert [e.path for e in store.ls("/").entries] == ["/ok.txt"]
    assert store.glob("**").matches == ["/ok.txt"]
    assert [m.path for m in store.grep("z").matches] == ["/ok.txt"]
    assert store.ls("/deep").code == "file_not_found"


def test_media_and_large_text_reads(store: StoreBackend) -> None:
    assert store.write("/pic.png", "not really an image").ok  # media: bytes by extension
    pic = store.read("/pic.png")
    assert pic.is_binary and pic.data == b"not really an image"
    big = "".join(f"row {i}\n" for i in range(300_000))  # ~3 MB, several stream chunks
    assert store.write("/big.txt", big).ok
    window = store.read("/big.txt", offset=299_998, limit=5)
    assert window.lines == ["row 299998", "row 299999"]
    assert window.total_lines == 300_000 and window.next_offset is None
    assert window.size == len(big)
    small = StoreBackend(store.client, store.bucket, store.namespace, max_file_bytes=1000)
    assert small.read("/big.txt", limit=1).lines == ["row 0"]  # text windows stream
    assert small.edit("/big.txt", "row 0\n", "x").code == "too_large"
    assert small.grep("row 299999", path="/big.txt").matches[0].line == 300_000


def test_execute_unsupported_and_capabilities(store: StoreBackend) -> None:
    assert store.execute("echo hi").code == "unsupported"
    assert store.can_delete and not store.can_execute


# -- composite route ---------------------------------------------------------------


def test_store_as_composite_memories_route(minio_client: Minio, store: StoreBackend) -> None:
    composite = CompositeBackend(StateBackend(), {"/memories": store})
    assert composite.write("/memories/prefs.md", "theme: dark\n").ok
    assert composite.write("/scratch.md", "theme: light\n").ok
    key = "/".join(store.namespace) + "/prefs.md"
    assert minio_client.stat_object(store.bucket, key).size == len("theme: dark\n")
    assert store.read("/prefs.md").lines == ["theme: dark"]
    assert [e.path for e in composite.ls("/").entries] == ["/memories/", "/scratch.md"]
    assert [e.path for e in composite.ls("/memories").entries] == ["/memories/prefs.md"]
    grep = composite.grep("theme", path="/")
    assert [(m.path, m.text) for m in grep.matches] == [
        ("/memories/prefs.md", "theme: dark"),
        ("/scratch.md", "theme: light"),
    ]
    assert composite.glob("*.md").matches == ["/memories/prefs.md", "/scratch.md"]
    assert composite.edit("/memories/prefs.md", "dark", "solarized").occurrences == 1
    # A new thread (fresh State default) still sees the memories.
    next_thread = CompositeBackend(StateBackend(), {"/memories/": store})
    assert next_thread.read("/memories/prefs.md").lines == ["theme: solarized"]
    assert next_thread.read("/scratch.md").code == "file_not_found"
    assert next_thread.delete("/memories/prefs.md").ok
    assert store.read("/prefs.md").code == "file_not_found"


# -- S3 failures are values ------------------------------------------------------


def _assert_all_io_errors(backend: StoreBackend, needle: str) -> None:
    results = [
        backend.ls("/"), backend.read("/a.txt"), backend.write("/a.txt", "x"),
        backend.edit("/a.txt", "x", "y"), backend.delete("/a"), backend.glob("*"),
        backend.grep("x"), backend.upload([("/a", b"x")])[0], backend.download(["/a"])[0],
    ]  # fmt: skip
    for result in results:
        assert result.code == "io_error", result
        assert needle in (result.error or ""), result.error


def test_wrong_credentials_are_error_values(s3_server: S3DevServer, bucket: str) -> None:
    client = make_client(s3_server.endpoint, "WRONGKEY", "wrong-secret")
    began = time.monotonic()
    _assert_all_io_errors(StoreBackend(client, bucket, "x"), "access key")
    assert time.monotonic() - began < 5


@pytest.mark.slow
def test_unreachable_endpoint_is_an_error_value_quickly() -> None:
    client = make_client(f"127.0.0.1:{free_port()}", "k", "s", connect_timeout=1.0)
    began = time.monotonic()
    _assert_all_io_errors(StoreBackend(client, BUCKET, "x"), "unreachable")
    assert time.monotonic() - began < 20  # 9 calls, each a refused connect + 2 quick retries


def test_missing_bucket_is_an_error_value(minio_client: Minio) -> None:
    backend = StoreBackend(minio_client, f"h10-missing-{uuid.uuid4().hex[:8]}", "x")
    result = backend.write("/a.txt", "x")
    assert result.code == "io_error" and "NoSuchBucket" in (result.error or "")


def test_from_settings_creates_the_bucket(s3_server: S3DevServer) -> None:
    name = f"h10-settings-{uuid.uuid4().hex[:8]}"
    s3 = S3Settings.model_validate(
        {
            "endpoint": s3_server.endpoint,
            "access_key": s3_server.access_key,
            "secret_key": s3_server.secret_key,
            "bucket": name,
        }
    )
    backend = StoreBackend.from_settings(s3, ("users", "u1"))
    assert backend.write("/x.txt", "x").ok
    assert backend.read("/x.txt").lines == ["x"]
    with pytest.raises(ValueError, match="FILEGATE_S3_ENDPOINT"):
        StoreBackend.from_settings(S3Settings(), "x")
