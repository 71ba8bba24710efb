"""Smoke tests for the embedded services, the session fixtures and settings.

Everything runs against real processes: a Temporal dev server, SeaweedFS
``weed mini`` and a Temporal worker in this process. The restart tests use
their own server instances so they never disturb the shared session ones.
"""

from __future__ import annotations

import asyncio
import io
import os
import socket
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel, SecretStr
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

# The workflow sandbox re-imports this module; its test-only I/O imports are
# passed through instead of being re-run (and refused) inside the sandbox.
with workflow.unsafe.imports_passed_through():
    import pytest
    from minio import Minio
    from minio.error import S3Error

    from filegate.backends.settings import Settings
    from filegate.devstack.s3 import S3DevServer
    from filegate.devstack.servers import (
        PortClash,
        ServiceError,
        TemporalDevServer,
        find_binary,
        is_listening,
    )

# -- a trivial workflow + activity, pydantic in and out ---------------------


class Greeting(BaseModel):
    name: str
    times: int = 1


class GreetingResult(BaseModel):
    text: str
    activity_task_queue: str


@activity.defn
async def compose_greeting(req: Greeting) -> GreetingResult:
    return GreetingResult(
        text=" ".join([f"hello {req.name}"] * req.times),
        activity_task_queue=activity.info().task_queue,
    )


@workflow.defn
class GreetingWorkflow:
    def __init__(self) -> None:
        self._go = False

    @workflow.run
    async def run(self, req: Greeting, wait_for_signal: bool = False) -> GreetingResult:
        if wait_for_signal:
            await workflow.wait_condition(lambda: self._go)
        return await workflow.execute_activity(
            compose_greeting, req, start_to_close_timeout=timedelta(seconds=30)
        )

    @workflow.signal
    def go(self) -> None:
        self._go = True


def _worker(client: Client, task_queue: str) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[GreetingWorkflow],
        activities=[compose_greeting],
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- settings ----------------------------------------------------------------


def test_settings_defaults() -> None:
    s = Settings.from_env({})
    assert s == Settings()
    assert s.temporal.address == "127.0.0.1:7233"
    assert s.temporal.namespace == "default"
    assert s.s3.bucket == "filegate"
    assert s.s3.endpoint is None
    assert s.s3.secure is False
    assert s.journal.state_dir == Path(".filegate")
    assert s.temporal.task_queue == "filegate-agent"


def test_settings_from_env_prefix_wins_and_secrets_hidden() -> None:
    s = Settings.from_env(
        {
            "TEMPORAL_ADDRESS": "cli-host:7233",
            "FILEGATE_TEMPORAL_NAMESPACE": "agents",
            "FILEGATE_S3_ENDPOINT": "minio:9000",
            "FILEGATE_S3_ACCESS_KEY": "AK",
            "FILEGATE_S3_SECRET_KEY": "very-secret-value",
            "FILEGATE_S3_SECURE": "true",
            "FILEGATE_STATE_DIR": "/var/lib/filegate",
            "FILEGATE_TASK_QUEUE": "",  # empty counts as unset
        }
    )
    assert s.temporal.address == "cli-host:7233"  # plain TEMPORAL_ADDRESS honoured
    assert s.temporal.namespace == "agents"
    assert s.s3.secure is True
    assert s.journal.state_dir == Path("/var/lib/filegate")
    assert s.temporal.task_queue == "filegate-agent"
    assert isinstance(s.s3.secret_key, SecretStr)
    assert s.s3.secret_key.get_secret_value() == "very-secret-value"
    for shown in (s, s.s3):
        assert "very-secret-value" not in repr(shown) and "very-secret-value" not in str(shown)

    both = Settings.from_env(
        {"TEMPORAL_ADDRESS": "cli-host:7233", "FILEGATE_TEMPORAL_ADDRESS": "fg-host:1"}
    )
    assert both.temporal.address == "fg-host:1"


def test_settings_reject_bad_values() -> None:
    with pytest.raises(ValueError):
        Settings.from_env({"FILEGATE_S3_SECURE": "maybe"})


# -- helpers -------------------------------------------------------------------


def test_is_listening_and_missing_binary() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert not is_listening("127.0.0.1", port)
        sock.listen()
        assert is_listening("127.0.0.1", port)
    with pytest.raises(ServiceError, match="not found"):
        find_binary("filegate-no-such-binary")


def test_start_failure_reports_log_tail(tmp_path: Path) -> None:
    """A port already taken makes the server exit; the error carries its log."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening: the probe fails fast
        server = TemporalDevServer(tmp_path, port=sock.getsockname()[1])
        with pytest.raises(ServiceError) as err:
            server.start(timeout=30)
    assert "temporal" in str(err.value) and str(server.log_path) in str(err.value)
    assert "address already in use" in str(err.value).lower()
    assert isinstance(err.value, PortClash)  # retried, but the client-facing port stays
    assert not server.running


@pytest.mark.slow
def test_start_retries_when_an_internal_port_was_taken(tmp_path: Path) -> None:
    """Free ports can be taken before the server binds them: it starts on new ones."""
    server = TemporalDevServer(tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", server.http_port))
        sock.listen()
        taken = server.http_port
        try:
            server.start(timeout=60)
            assert server.running and server.http_port != taken
            assert is_listening("127.0.0.1", server.port)
            log = server.log_path.read_text()
            assert log.count("=== temporal start") == 2 and "address already in use" in log
        finally:
            server.stop()


def test_s3_start_retries_when_its_filer_port_was_taken(tmp_path: Path) -> None:
    """``weed mini`` checks its ports before it binds them and says so in words of
    its own ("... is not available on 127.0.0.1"): a start that met one taken is
    retried on new ports, as a bind that failed is. A CI run's ``filegate run``
    failed on exactly this, with the port taken between picking and starting."""
    server = S3DevServer(tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", server.ports["filer"]))
        sock.listen()
        taken = server.ports["filer"]
        try:
            server.start(timeout=60)
            assert server.running and server.ports["filer"] != taken
            log = server.log_path.read_text()
            assert log.count("=== ") == 2 and "is not available on" in log, log[-2000:]
        finally:
            server.stop()


# -- Temporal -----------------------------------------------------------------


async def test_workflow_activity_round_trip(
    temporal_server: TemporalDevServer, temporal_client: Client
) -> None:
    assert temporal_server.address.startswith("127.0.0.1:")
    assert temporal_server.startup_seconds is not None
    task_queue = f"smoke-{uuid.uuid4()}"
    async with _worker(temporal_client, task_queue):
        result = await temporal_client.execute_workflow(
            GreetingWorkflow.run,
            args=[Greeting(name="filegate", times=2), False],
            id=f"smoke-{uuid.uuid4()}",
            task_queue=task_queue,
            execution_timeout=timedelta(seconds=60),
        )
    assert isinstance(result, GreetingResult)
    assert result == GreetingResult(
        text="hello filegate hello filegate", activity_task_queue=task_queue
    )


@pytest.mark.slow
async def test_temporal_restart_keeps_workflows_and_stop_kills(tmp_path: Path) -> None:
    server = TemporalDevServer(tmp_path / "temporal").start()
    try:
        address, first_pid = server.address, server.pid
        assert first_pid is not None
        client = await Client.connect(address, data_converter=pydantic_data_converter)
        task_queue = f"restart-{uuid.uuid4()}"
        # No worker yet: the workflow sits in the server's database only.
        handle = await client.start_workflow(
            GreetingWorkflow.run,
            args=[Greeting(name="durable"), True],
            id=f"restart-{uuid.uuid4()}",
            task_queue=task_queue,
        )

        server.restart()
        assert server.address == address
        assert not _pid_alive(first_pid)

        # The client connected before the restart reconnects by itself.
        handle = client.get_workflow_handle_for(
            GreetingWorkflow.run, handle.id, run_id=handle.result_run_id
        )
        desc = await handle.describe()
        assert desc.status == WorkflowExecutionStatus.RUNNING
        async with _worker(client, task_queue):
            await handle.signal(GreetingWorkflow.go)
            result = await asyncio.wait_for(handle.result(), timeout=60)
        assert result.text == "hello durable"
    finally:
        pid = server.pid
        server.stop()
    assert pid is not None and not _pid_alive(pid)
    assert not server.running
    assert not is_listening("127.0.0.1", server.port)


# -- S3 -----------------------------------------------------------------------


def test_s3_object_round_trip(s3_server: S3DevServer, minio_client: Minio) -> None:
    bucket = f"smoke-{uuid.uuid4().hex[:12]}"
    minio_client.make_bucket(bucket)
    payload = b"hello from filegate\n" * 100
    minio_client.put_object(
        bucket, "dir/one.txt", io.BytesIO(payload), len(payload), content_type="text/plain"
    )
    minio_client.put_object(bucket, "dir/two.bin", io.BytesIO(b"\x00\x01"), 2)

    response = minio_client.get_object(bucket, "dir/one.txt")
    try:
        assert response.read() == payload
    finally:
        response.close()
        response.release_conn()
    assert minio_client.stat_object(bucket, "dir/one.txt").size == len(payload)
    names = sorted(o.object_name or "" for o in minio_client.list_objects(bucket, recursive=True))
    assert names == ["dir/one.txt", "dir/two.bin"]

    minio_client.remove_object(bucket, "dir/one.txt")
    with pytest.raises(S3Error) as err:
        minio_client.stat_object(bucket, "dir/one.txt")
    assert err.value.code in {"NoSuchKey", "ResponseNotFound"}
    names = [o.object_name for o in minio_client.list_objects(bucket, recursive=True)]
    assert names == ["dir/two.bin"]


def test_s3_checks_signatures(s3_server: S3DevServer) -> None:
    wrong_secret = Minio(s3_server.endpoint, s3_server.access_key, "not-the-secret", secure=False)
    with pytest.raises(S3Error) as err:
        wrong_secret.list_buckets()
    assert err.value.code == "SignatureDoesNotMatch"

    unknown_key = Minio(s3_server.endpoint, "NOSUCHKEY", s3_server.secret_key, secure=False)
    with pytest.raises(S3Error) as err:
        unknown_key.list_buckets()
    assert err.value.code == "InvalidAccessKeyId"

    anonymous = Minio(s3_server.endpoint, secure=False)
    with pytest.raises(S3Error) as err:
        anonymous.list_buckets()
    assert err.value.code == "AccessDenied"


@pytest.mark.slow
def test_s3_restart_keeps_data_and_stop_kills(tmp_path: Path, s3_server: S3DevServer) -> None:
    """A second instance runs beside the session one; restart keeps ports, keys and data."""
    with S3DevServer(tmp_path / "s3", buckets=["keep"]) as server:
        assert server.endpoint != s3_server.endpoint
        endpoint, first_pid = server.endpoint, server.pid
        assert first_pid is not None
        client = server.client()
        client.put_object("keep", "a/b.txt", io.BytesIO(b"survives"), 8)

        server.restart()
        assert server.endpoint == endpoint
        assert not _pid_alive(first_pid)
        response = client.get_object("keep", "a/b.txt")  # same client: same keys
        try:
            assert response.read() == b"survives"
        finally:
            response.close()
            response.release_conn()
        pid = server.pid
    assert pid is not None and not _pid_alive(pid)
    assert not is_listening("127.0.0.1", server.port)
    assert not list(Path("/tmp").glob(f"seaweedfs-*-{server.port}.sock"))
    assert s3_server.running  # the session server was not disturbed
