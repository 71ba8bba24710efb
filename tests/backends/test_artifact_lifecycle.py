"""Artifact expiry on the embedded servers: the lifecycle rule a worker installs at start,
and ``filegate artifacts gc`` / ``ls`` for S3 servers that do not enforce one.

SeaweedFS accepts and reports lifecycle rules, so the refusal path runs on a client
whose lifecycle calls fail the way a server without lifecycle support answers.
"""

from __future__ import annotations

import io
import json
import logging
import subprocess
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
import urllib3
from minio import Minio
from minio.commonconfig import ENABLED, Filter
from minio.error import S3Error
from minio.lifecycleconfig import Expiration, LifecycleConfig, Rule
from temporalio.client import Client

from filegate.backends.artifacts import ArtifactStore, days_covering, default_expiry_days
from filegate.backends.settings import S3Settings
from filegate.cli import artifacts as artifacts_cli
from filegate.cli.artifacts import install_artifact_expiry, namespace_retention, parse_duration
from filegate.cli.commands import run_cli
from filegate.devstack.s3 import S3DevServer
from tests.cli.test_cli import cli, cli_env, start_worker, stop_worker  # noqa: F401  (cli_env: a fixture)

pytestmark = pytest.mark.services


@pytest.fixture
def env(request: pytest.FixtureRequest) -> dict[str, str]:
    """test_cli's CLI environment with a bucket of this test's own (gc empties its prefix)."""
    shared: dict[str, str] = request.getfixturevalue("cli_env")
    return {**shared, "FILEGATE_S3_BUCKET": f"lc-{uuid.uuid4().hex[:10]}"}


def store_of(minio_client: Minio, env: dict[str, str]) -> ArtifactStore:
    """The store every Filegate process of ``env`` uses (bucket ``<bucket>-artifacts``)."""
    return ArtifactStore(minio_client, env["FILEGATE_S3_BUCKET"] + "-artifacts")


def use_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """Point an in-process ``run_cli`` at ``env``'s servers and bucket."""
    for name in ("FILEGATE_S3_ENDPOINT", "FILEGATE_S3_ACCESS_KEY", "FILEGATE_S3_SECRET_KEY"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("FILEGATE_S3_BUCKET", env["FILEGATE_S3_BUCKET"])


def test_parse_duration() -> None:
    assert parse_duration("30m") == timedelta(minutes=30)
    assert parse_duration("12h") == timedelta(hours=12)
    assert parse_duration("7d") == timedelta(days=7)
    assert parse_duration("2w") == timedelta(weeks=2)
    assert parse_duration("1.5h") == timedelta(minutes=90)
    assert parse_duration("0s") == timedelta(0)
    for bad in ("7", "d", "7x", "-1d", "7 days", "1h30m", ""):
        with pytest.raises(ValueError, match="bad duration"):
            parse_duration(bad)
    assert days_covering(timedelta(hours=1)) == 1
    assert days_covering(timedelta(days=1)) == 1
    assert days_covering(timedelta(days=1, seconds=1)) == 2
    assert days_covering(timedelta(0)) == 1


def test_gc_deletes_old_keeps_new_and_stays_in_its_prefix(
    env: dict[str, str],
    minio_client: Minio,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Through the CLI in-process with its clock moved: only objects older than the
    cutoff, and only under the store's prefix in its bucket, are deleted."""
    store = store_of(minio_client, env)
    old = [store.put("wf-old", f"c{i}", b"x" * 100) for i in range(3)]
    outside = "elsewhere/wf/c1"  # same bucket, not the store's prefix
    minio_client.put_object(store.bucket, outside, io.BytesIO(b"keep"), 4)
    neighbour = ArtifactStore(minio_client, store.bucket, namespace="default-2")
    theirs = neighbour.put("wf", "c1", b"a namespace sharing the first characters")
    time.sleep(1.1)  # S3 reports whole seconds: "new" must be a second younger
    new = store.put("wf-new", "c1", b"y" * 10)
    new_modified = minio_client.stat_object(store.bucket, new.key).last_modified
    assert new_modified is not None
    use_env(monkeypatch, env)
    # An hour from now, a cutoff of one hour is exactly the new object's time: kept.
    monkeypatch.setattr(artifacts_cli, "now", lambda: new_modified + timedelta(hours=1))

    assert run_cli(["artifacts", "ls", "--older-than", "1h", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [row["key"] for row in listed] == [ref.key for ref in old]
    assert run_cli(["artifacts", "gc", "--older-than", "60m"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("deleted 3 objects (300 bytes) last modified before"), out
    assert f"under default/ in bucket {store.bucket}" in out
    assert store.list_thread("wf-old") == []
    assert store.get(new) == b"y" * 10
    assert neighbour.get(theirs).startswith(b"a namespace")
    assert minio_client.stat_object(store.bucket, outside).size == 4
    # Bad input: one line and exit 2, before S3 is touched.
    assert run_cli(["artifacts", "gc", "--older-than", "7x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("filegate: --older-than: bad duration '7x'") and "\n" not in err


def test_gc_as_a_process_dry_run_then_delete(env: dict[str, str], minio_client: Minio) -> None:
    """`filegate artifacts gc` as users run it: --dry-run counts and deletes nothing,
    then the same call deletes; --json reports objects and bytes."""
    store = store_of(minio_client, env)
    refs = [store.put(f"wf-{i}", "c1", b"z" * 50) for i in range(2)]
    dry = cli(env, "artifacts", "gc", "--older-than", "0s", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert (report["objects"], report["bytes"], report["dry_run"]) == (2, 100, True)
    assert (report["bucket"], report["prefix"]) == (store.bucket, "default/")
    assert [store.get(ref) for ref in refs] == [b"z" * 50] * 2
    done = cli(env, "artifacts", "gc", "--older-than", "0s", "--json")
    assert done.returncode == 0, done.stderr
    assert (json.loads(done.stdout)["objects"], json.loads(done.stdout)["dry_run"]) == (2, False)
    assert store.objects() == []


def lifecycle_rules(minio_client: Minio, bucket: str) -> dict[str, tuple[str | None, int | None]]:
    """Rule id -> (prefix, expiry days), as the server reports them."""
    config = minio_client.get_bucket_lifecycle(bucket)
    return {
        str(rule.rule_id): (
            rule.rule_filter.prefix if rule.rule_filter else None,
            rule.expiration.days if rule.expiration else None,
        )
        for rule in (config.rules if config else [])
    }


async def test_worker_start_installs_the_namespace_retention(
    env: dict[str, str], minio_client: Minio, temporal_client: Client
) -> None:
    """A `filegate worker` with S3 configured installs the expiry rule at start:
    the namespace's retention in whole days plus the open-run margin, logged in one line."""
    retention = await namespace_retention(temporal_client)
    assert retention is not None
    expected = default_expiry_days(retention)
    bucket = store_of(minio_client, env).bucket  # made before the worker: polled below
    worker = start_worker(env, "--role", "agent", "--task-queue", f"lc-{uuid.uuid4().hex[:8]}")
    try:
        # The line, not the rule: the worker logs it just after the rule is in, and a
        # SIGTERM sent in between (seen under four test workers) cuts it off.
        shown = lines_until(worker, "artifact expiry", timeout=30)
    finally:
        output = "".join(shown) + stop_worker(worker)
    assert lifecycle_rules(minio_client, bucket) == {
        "filegate-artifacts-default": ("default/", expected)
    }, output
    assert f"expire after {expected} day" in output and "namespace" in output, output


def lines_until(proc: subprocess.Popen[str], needle: str, timeout: float) -> list[str]:
    """The lines ``proc`` writes up to the first holding ``needle`` (or all it wrote
    in ``timeout`` seconds)."""
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if needle in line:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    return list(lines)


def settings_for(s3_server: S3DevServer, bucket: str, **values: Any) -> S3Settings:
    return S3Settings.model_validate({
        "endpoint": s3_server.endpoint, "access_key": s3_server.access_key,
        "secret_key": s3_server.secret_key, "bucket": bucket, **values,
    })  # fmt: skip


async def test_expiry_setting_is_idempotent_and_zero_removes_the_rule(
    s3_server: S3DevServer, minio_client: Minio, temporal_client: Client
) -> None:
    """FILEGATE_ARTIFACT_EXPIRE_DAYS wins over the retention; installing again writes
    nothing; 0 removes Filegate's rule and keeps the bucket's other rules."""
    bucket = f"lc-{uuid.uuid4().hex[:10]}"
    store = ArtifactStore(minio_client, bucket)
    other = Rule(ENABLED, rule_filter=Filter(prefix="logs/"), rule_id="theirs",
                 expiration=Expiration(days=30))  # fmt: skip
    minio_client.set_bucket_lifecycle(bucket, LifecycleConfig([other]))
    five = settings_for(s3_server, bucket, artifact_expire_days=5)
    line = await install_artifact_expiry(temporal_client, store, five)
    assert line == (
        f"artifact expiry: objects under default/ in bucket {bucket} expire after 5 days "
        "(FILEGATE_ARTIFACT_EXPIRE_DAYS)"
    )
    assert lifecycle_rules(minio_client, bucket) == {
        "theirs": ("logs/", 30), "filegate-artifacts-default": ("default/", 5),
    }  # fmt: skip
    again = await install_artifact_expiry(temporal_client, store, five)
    assert again is not None and again.endswith(", already set")
    assert store.set_expiry(5) is False
    off = settings_for(s3_server, bucket, artifact_expire_days=0)
    line = await install_artifact_expiry(temporal_client, store, off)
    assert line is not None and line.startswith("artifact expiry: none for default/")
    assert lifecycle_rules(minio_client, bucket) == {"theirs": ("logs/", 30)}
    minio_client.delete_bucket_lifecycle(bucket)
    assert store.set_expiry(0) is False  # nothing to remove
    assert await install_artifact_expiry(temporal_client, None, five) is None


class NoLifecycleMinio(Minio):
    """A client of a server without lifecycle support (501 NotImplemented)."""

    def _refuse(self, bucket: str) -> Any:
        response = urllib3.HTTPResponse(status=501)
        raise S3Error(response, "NotImplemented", "lifecycle is not implemented", bucket,
                      "req", "host", bucket_name=bucket)  # fmt: skip

    def get_bucket_lifecycle(self, bucket_name: str) -> Any:  # type: ignore[override]
        return self._refuse(bucket_name)

    def set_bucket_lifecycle(self, bucket_name: str, config: Any) -> None:  # type: ignore[override]
        self._refuse(bucket_name)


async def test_a_server_refusing_lifecycle_costs_one_log_line(
    s3_server: S3DevServer, temporal_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    bucket = f"lc-{uuid.uuid4().hex[:10]}"
    client = NoLifecycleMinio(
        s3_server.endpoint, s3_server.access_key, s3_server.secret_key, secure=False
    )
    store = ArtifactStore(client, bucket)  # the store itself works
    with caplog.at_level(logging.INFO, logger="filegate.artifacts"):
        line = await install_artifact_expiry(
            temporal_client, store, settings_for(s3_server, bucket, artifact_expire_days=3)
        )
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert line == caplog.records[0].getMessage()
    assert "NotImplemented" in line and "filegate artifacts gc --older-than 3d" in line
    ref = store.put("wf", "c1", b"still stored")
    assert store.get(ref) == b"still stored"


def test_gc_without_s3_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FILEGATE_S3_ENDPOINT", raising=False)
    assert run_cli(["artifacts", "gc", "--older-than", "7d"]) == 2
    assert "FILEGATE_S3_ENDPOINT" in capsys.readouterr().err
