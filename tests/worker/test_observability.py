"""Traces and metrics (docs/observability.md), checked where an operator would look.

Traces go to a real OTLP/HTTP receiver this module starts on 127.0.0.1 (it
decodes ``ExportTraceServiceRequest`` protobufs with ``opentelemetry-proto``);
metrics are scraped over HTTP from the worker's ``/metrics``. Two paths:

- a worker built with ``FilegatePlugin(tracer_provider=..., metrics_port=...)``
  runs an agent whose calls are read, denied, approved, granted, killed at a
  bound and offloaded: every span and series with its labels and values, and
  a replay of the run that exports no span again;
- ``filegate worker --metrics-port`` with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set,
  as a subprocess: the ``execute_tool`` span arrives and the series are served.

Off (no provider, no metrics address) installs nothing: no interceptor, no runtime.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import http.server
import logging
import re
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Replayer, Worker

from filegate import FilegatePlugin
from filegate.activities import telemetry
from filegate.activities.telemetry import ToolSpans, traces_configured
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.local_shell import LocalShellBackend
from filegate.backends.settings import Settings
from filegate.devstack.s3 import S3DevServer
from filegate.devstack.servers import TemporalDevServer
from filegate.kernel.permissions import FilesystemPermission
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec, Decision
from filegate.workflows.approvals.grant_models import GrantRequest
from filegate.workflows.inputs import RouteSpec
from tests.cli.test_cli import CLI, env_for, stop_worker
from tests.scripting import calls, scripted, uid
from tests.workflows.test_replay_new_histories import SCENARIOS, recorded

pytestmark = pytest.mark.services

QUIET = Settings()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --------------------------------------------------------------------------- OTLP receiver


@dataclass
class ReceivedSpan:
    name: str
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int
    trace_id: bytes
    parent: bytes
    service: str


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


class OtlpReceiver:
    """An OTLP/HTTP trace receiver: ``POST /v1/traces`` with a protobuf body."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver.record(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def record(self, request: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.requests += 1
            for resource_spans in request.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append(
                            ReceivedSpan(
                                name=span.name,
                                attributes={a.key: _value(a.value) for a in span.attributes},
                                start_ns=span.start_time_unix_nano,
                                end_ns=span.end_time_unix_nano,
                                trace_id=span.trace_id,
                                parent=span.parent_span_id,
                                service=str(resource.get("service.name", "")),
                            )
                        )

    def named(self, name: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.name == name]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    running = OtlpReceiver()
    yield running
    running.close()


# --------------------------------------------------------------------------- Prometheus text


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(port: int) -> list[Sample]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and not line.startswith("#"):
            labels = dict(_LABEL.findall(match.group(2) or ""))
            samples.append(Sample(match.group(1), labels, float(match.group(3))))
    return samples


def value(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of ``name``'s series whose labels include ``labels`` (0 when none)."""
    return sum(
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def eventually_scraped(port: int, name: str, minimum: float, **labels: str) -> list[Sample]:
    """Scrape until ``name{labels}`` reaches ``minimum`` (the SDK exports asynchronously)."""
    samples: list[Sample] = []
    for _ in range(100):
        samples = await asyncio.to_thread(scrape, port)
        if value(samples, name, **labels) >= minimum:
            return samples
        await asyncio.sleep(0.1)
    found = [s for s in samples if s.name == name]
    raise AssertionError(f"{name}{labels} never reached {minimum}: {found}")


# --------------------------------------------------------------------------- helpers


DENY_SECRETS = FilesystemPermission(operations=["write"], paths=["/secrets/**"], mode="deny")
REVIEW_DOCS = FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="interrupt")
BIG_OUTPUT = "head -c 90000 /dev/zero | tr '\\0' x"


async def pending_one(handle: WorkflowHandle[Any, Any]) -> Any:
    for _ in range(300):
        waiting = await handle.query(AgentWorkflow.pending_approvals)
        if len(waiting) == 1 and not waiting[0].preview_pending:
            return waiting[0]
        await asyncio.sleep(0.1)
    desc = await handle.describe()
    history = [e async for e in handle.fetch_history_events()]
    raise AssertionError(f"no approval became pending: {desc.status} {str(history[-1])[-3000:]}")


# --------------------------------------------------------------------------- the plugin


async def test_a_plugin_worker_exports_tool_spans_and_serves_filegate_metrics(
    temporal_server: TemporalDevServer,
    s3_server: S3DevServer,
    receiver: OtlpReceiver,
    tmp_path: Path,
) -> None:
    """One run through a worker built with the plugin: a read, a write a deny rule
    refuses, a write a human approves (remembered as a grant), a write the grant lets
    through, a command killed at its timeout and one whose output is offloaded to S3.
    Every call's ``execute_tool`` span arrives at the OTLP receiver with its GenAI and
    Filegate attributes, and so do the ``chat`` and ``approval_wait`` spans; ``/metrics``
    serves the SDK's series and Filegate's with their labels and values, the pending
    approval included while it waits. A replay of the history exports no span again."""
    root, files = tmp_path / "ws", tmp_path / "files"
    root.mkdir()
    files.mkdir()
    (root / "notes.txt").write_text("hello\n")
    settings = Settings.model_validate({"s3": {
        "endpoint": s3_server.endpoint, "access_key": s3_server.access_key,
        "secret_key": s3_server.secret_key, "bucket": uid("otel"),
    }})  # fmt: skip
    exporter = OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces")
    provider = TracerProvider(resource=Resource({"service.name": "filegate-test"}))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    metrics_port = free_port()
    plugin = FilegatePlugin(
        agent=True,
        backends={"ws": LocalShellBackend(root), "files": FilesystemBackend(files)},
        journal_dir=tmp_path / "journal",
        settings=settings,
        tracer_provider=provider,
        metrics_port=metrics_port,
    )
    client = await Client.connect(
        temporal_server.address, namespace=temporal_server.namespace, plugins=[plugin]
    )
    model = scripted(
        calls(
            ("r", "read_file", {"file_path": "/notes.txt"}),
            ("s", "write_file", {"file_path": "/secrets/key", "content": "x"}),
        ),
        calls(("d", "write_file", {"file_path": "/docs/a.md", "content": "a\n"})),
        calls(("g", "write_file", {"file_path": "/docs/b.md", "content": "b\n"})),
        calls(("k", "execute", {"command": "sleep 30", "timeout": 1})),
        calls(("o", "execute", {"command": BIG_OUTPUT})),
        {"content": "done"},
    )
    queue, workflow_id = uid("otel"), uid("wf-otel")
    input = AgentInput(
        task="observe",
        model=model,
        backend=BackendSpec(
            default=BackendRef(kind="local", name="ws", can_execute=True, shell_path=str(root)),
            # The rules' paths on a backend the shell cannot reach (contract §11).
            routes=[
                RouteSpec(prefix="/docs/", backend=BackendRef(kind="local", name="files")),
                RouteSpec(prefix="/secrets/", backend=BackendRef(kind="local", name="files")),
            ],
        ),
        permissions=[DENY_SECRETS, REVIEW_DOCS],
    )
    async with Worker(client, task_queue=queue):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            input,
            id=workflow_id,
            task_queue=queue,
            execution_timeout=timedelta(minutes=2),
        )
        asked = await pending_one(handle)
        waiting = await eventually_scraped(metrics_port, "filegate_approvals_pending", 1)
        assert value(waiting, "filegate_approvals_pending", workflow_type="AgentWorkflow") == 1
        await asyncio.sleep(0.3)  # the wait has a length
        await handle.execute_update(
            AgentWorkflow.decide_update,
            Decision(
                id=asked.id,
                decision="approve",
                reviewer="ana",
                via="cli",
                remember=GrantRequest(pattern="/docs/**"),
            ),
        )
        result = await handle.result()
    assert result.final_answer == "done"
    assert (files / "b.md").read_text() == "b\n"  # the route strips its prefix

    # ---- metrics, scraped over HTTP
    samples = await eventually_scraped(metrics_port, "filegate_offloaded_bytes_total", 90_000)
    calls_total = "filegate_tool_calls_total"
    assert value(samples, calls_total, tool="read_file", backend="ws", status="success") == 1
    assert value(samples, calls_total, tool="write_file", backend="files", status="success") == 2
    assert value(samples, calls_total, tool="execute", backend="ws", status="error") == 1
    assert value(samples, calls_total, tool="execute", backend="ws", status="success") == 1
    assert value(samples, calls_total, tool="write_file", status="error") == 0  # denied: no call
    duration = "filegate_tool_call_duration_seconds"
    assert value(samples, f"{duration}_count", tool="execute", backend="ws") == 2
    assert value(samples, f"{duration}_sum", tool="execute", backend="ws") >= 1.0
    assert value(samples, f"{duration}_bucket", tool="read_file", le="+Inf") == 1
    assert value(samples, "filegate_denials_total", tool="write_file") == 1
    assert value(samples, "filegate_grant_uses_total", tool="write_file") == 1
    assert value(samples, "filegate_sandbox_kills_total", bound="timeout", backend="ws") == 1
    assert value(samples, "filegate_offloaded_bytes_total", tool="execute", backend="ws") >= 90_000
    wait = "filegate_approval_wait_seconds"
    assert value(samples, f"{wait}_count", tool="write_file", decision="approve") == 1
    assert value(samples, f"{wait}_sum", tool="write_file", decision="approve") >= 0.3
    assert value(samples, "filegate_approvals_pending", workflow_type="AgentWorkflow") == 0
    assert value(samples, "temporal_workflow_completed") >= 1  # the SDK's own, same endpoint
    assert value(samples, "temporal_worker_task_slots_available", worker_type="WorkflowWorker")
    assert any(s.name.startswith("temporal_") for s in samples)

    # ---- traces, at the OTLP receiver
    provider.force_flush()
    tools = {
        s.attributes["gen_ai.tool.call.id"]: s
        for s in receiver.spans
        if s.name.startswith("execute_tool ")
    }
    read = tools["1:0:r"]
    assert read.name == "execute_tool read_file"
    assert read.attributes["gen_ai.operation.name"] == "execute_tool"
    assert read.attributes["gen_ai.tool.name"] == "read_file"
    assert read.attributes["filegate.backend"] == "ws"
    assert read.attributes["filegate.rule.decision"] == "allow"
    assert read.attributes["filegate.tool.status"] == "success"
    assert read.attributes["filegate.offloaded_bytes"] == 0
    assert read.service == "filegate-test"
    assert "1:0:s" not in tools  # the deny rule refused it in the workflow: no backend call
    approved = tools["2:0:d"]
    assert approved.attributes["filegate.rule.decision"] == "approved"
    assert approved.attributes["filegate.approved_by"] == "ana via cli"
    granted = tools["3:0:g"]
    assert granted.attributes["filegate.rule.decision"] == "approved"
    assert "grant" in granted.attributes["filegate.approved_by"]
    killed = tools["4:0:k"]
    assert killed.attributes["filegate.sandbox.killed_by"] == "timeout"
    assert killed.attributes["filegate.tool.status"] == "error"
    assert killed.attributes["error.type"] == "tool_error"
    offloaded = tools["5:0:o"]
    assert offloaded.attributes["filegate.offloaded_bytes"] >= 90_000
    assert offloaded.end_ns > offloaded.start_ns
    # Each tool span hangs under Temporal's activity span, in the run's trace.
    activity_spans = {s.name for s in receiver.spans if s.name.startswith("RunActivity:")}
    assert "RunActivity:filegate.read_file" in activity_spans or (
        "RunActivity:filegate.tool_batch" in activity_spans
    )
    assert all(span.parent for span in tools.values())
    [approval] = receiver.named("approval_wait write_file")
    assert approval.attributes["filegate.approval.decided_by"] == "ana"
    assert approval.attributes["filegate.approval.via"] == "cli"
    assert approval.attributes["filegate.approval.decision"] == "approve"
    assert approval.attributes["gen_ai.tool.call.id"] == "d"
    assert approval.attributes["filegate.approval.wait_seconds"] >= 0.3
    assert approval.end_ns - approval.start_ns >= 300_000_000
    chats = [s for s in receiver.spans if s.name.startswith("chat ")]
    assert len(chats) == 6
    assert {c.attributes["gen_ai.operation.name"] for c in chats} == {"chat"}
    assert {c.attributes["gen_ai.provider.name"] for c in chats} == {"scripted"}

    # ---- a replay records no span again (and adds no command: it replays at all)
    before = len(receiver.spans)
    history = await handle.fetch_history()
    replayer = Replayer(
        workflows=[], plugins=[FilegatePlugin(agent=True, settings=QUIET, tracer_provider=provider)]
    )
    await replayer.replay_workflow(history)
    provider.force_flush()
    assert not [
        s for s in receiver.spans[before:] if s.name.startswith(("approval_wait", "execute_tool"))
    ]
    provider.shutdown()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_histories_recorded_untraced_replay_with_tracing_on(name: str) -> None:
    """Turning traces on for a deployment with runs in flight: the histories recorded on
    f71da99 (approvals, a grant, turn decisions, operations) replay through a plugin with
    a tracer provider, and the replay records no span."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    workflow_class, _ = SCENARIOS[name]
    plugin = FilegatePlugin(artifacts=None, settings=QUIET, tracer_provider=provider)
    await Replayer(workflows=[workflow_class], plugins=[plugin]).replay_workflow(recorded(name))
    assert exporter.get_finished_spans() == ()


def test_off_installs_nothing() -> None:
    """Neither a tracer provider nor a metrics port: no interceptor beyond the task-timeout
    one, no runtime; and the environment asks for traces only with an endpoint."""
    plugin = FilegatePlugin(agent=True, settings=QUIET, tracer_provider=None)
    assert plugin.telemetry.interceptors() == [] and plugin.telemetry.runtime() is None
    assert len(plugin.interceptors or []) == 1
    traced = FilegatePlugin(agent=True, settings=QUIET, tracer_provider=TracerProvider())
    assert any(isinstance(i, ToolSpans) for i in traced.interceptors or [])
    assert not traces_configured({})
    assert traces_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert traces_configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/traces"})
    assert not traces_configured(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}
    )
    assert not traces_configured(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_TRACES_EXPORTER": "none"}
    )


def test_an_endpoint_without_the_extra_warns_and_traces_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``OTEL_EXPORTER_OTLP_ENDPOINT`` set but the OTLP exporter not installed: one
    warning naming the extra, and no tracer provider (the process runs untraced)."""
    monkeypatch.setattr(telemetry, "_OTLP", {})
    missing = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
    monkeypatch.setitem(sys.modules, missing, None)  # import raises ImportError
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    with caplog.at_level(logging.WARNING, logger=telemetry.__name__):
        plugin = FilegatePlugin(agent=True, settings=QUIET)
    assert plugin.telemetry.tracer_provider is None and plugin.telemetry.interceptors() == []
    assert "pip install 'filegate[otel]'" in caplog.text


# --------------------------------------------------------------------------- the command line


async def test_filegate_worker_exports_spans_and_serves_metrics(
    temporal_server: TemporalDevServer,
    s3_server: S3DevServer,
    receiver: OtlpReceiver,
    tmp_path: Path,
) -> None:
    """``filegate worker --metrics-port`` with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set: a
    co-hosted run's read arrives at the receiver as an ``execute_tool read_file`` span
    with its attributes, and ``/metrics`` serves the call, the denial and the SDK's series."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("hello\n")
    env = env_for(temporal_server, s3_server, tmp_path)
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    queue, port = uid("otel-cli"), free_port()
    worker = subprocess.Popen(
        [*CLI, "worker", "--role", "tools", "--backend", "filesystem", "--root", str(root),
         "--name", "fs", "--task-queue", queue, "--serve-agents", "--metrics-port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        client = await Client.connect(
            temporal_server.address,
            namespace=temporal_server.namespace,
            plugins=[FilegatePlugin(settings=QUIET, tracer_provider=None)],
        )
        model = scripted(
            calls(
                ("r", "read_file", {"file_path": "/notes.txt"}),
                ("s", "write_file", {"file_path": "/secrets/key", "content": "x"}),
            ),
            {"content": "done"},
        )
        input = AgentInput(
            task="observe",
            model=model,
            backend=BackendSpec(default=BackendRef(kind="remote", name="fs", task_queue=queue)),
            permissions=[DENY_SECRETS],
        )
        result = await client.execute_workflow(
            AgentWorkflow.run,
            input,
            id=uid("wf-otel-cli"),
            task_queue=queue,
            execution_timeout=timedelta(minutes=1),
        )
        assert result.final_answer == "done"
        samples = await eventually_scraped(port, "filegate_tool_calls_total", 1, tool="read_file")
        assert value(samples, "filegate_tool_calls_total", tool="read_file", backend="fs",
                     status="success") == 1  # fmt: skip
        assert value(samples, "filegate_denials_total", tool="write_file") == 1
        assert any(s.name.startswith("temporal_") for s in samples)
        for _ in range(100):
            if receiver.named("execute_tool read_file"):
                break
            await asyncio.sleep(0.1)
        [read] = receiver.named("execute_tool read_file")
        assert read.attributes["gen_ai.operation.name"] == "execute_tool"
        assert read.attributes["gen_ai.tool.name"] == "read_file"
        assert read.attributes["gen_ai.tool.call.id"] == "1:0:r"
        assert read.attributes["filegate.backend"] == "fs"
        assert read.attributes["filegate.rule.decision"] == "allow"
        assert read.service == "filegate-tools-worker"  # each worker names its role
        # The write a deny rule refused in the workflow's gate is a span too, with the
        # decision (no backend saw it; the old code recorded only the counter).
        for _ in range(100):
            if receiver.named("execute_tool write_file"):
                break
            await asyncio.sleep(0.1)
        [refused] = receiver.named("execute_tool write_file")
        assert refused.attributes["filegate.rule.decision"] == "deny"
        assert refused.attributes["filegate.tool.status"] == "error"
        assert refused.attributes["gen_ai.tool.call.id"] == "1:1:s"
    except BaseException:
        print(stop_worker(worker))  # what the worker said, for the failure's report
        raise
    out = stop_worker(worker)
    assert f"metrics at http://127.0.0.1:{port}/metrics" in out, out
    assert f"traces to {receiver.endpoint} as service filegate-tools-worker" in out, out


async def test_a_followed_run_is_one_trace_of_polls_not_one_per_poll(
    temporal_server: TemporalDevServer,
    s3_server: S3DevServer,
    receiver: OtlpReceiver,
    tmp_path: Path,
) -> None:
    """``filegate submit`` follows a run whose write waits 2 s for a person: its polling
    queries are the children of one ``filegate follow`` span, one trace, where the old
    code made a root span per poll (86 of 89 traces of a 10 s submit; issue 54)."""
    import json

    from filegate.cli.progress import FOLLOW_SPAN
    from filegate.worker import agent_worker, tools_worker

    root = tmp_path / "ws"
    root.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [
        {"tool_calls": [{"id": "w", "name": "write_file",
                         "args": {"file_path": "/a.txt", "content": "a"}}]},
        {"content": "done"},
    ]}))  # fmt: skip
    gate = tmp_path / "interrupt.json"
    gate.write_text(json.dumps({"write_file": True}))
    client = await Client.connect(
        temporal_server.address,
        namespace=temporal_server.namespace,
        plugins=[FilegatePlugin(settings=QUIET, tracer_provider=None)],
    )
    queue, workflow_id = uid("follow"), uid("followed")
    env = {
        **env_for(temporal_server, s3_server, tmp_path),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100",
    }  # fmt: skip
    async with (
        agent_worker(client, f"{queue}.agent"),
        tools_worker(client, f"{queue}.tools", {"fs": FilesystemBackend(root)}, tmp_path / "j"),
    ):
        submit = await asyncio.create_subprocess_exec(
            *CLI, "submit", "write", "--model", f"scripted:{script}", "--interrupt-on", str(gate),
            "--agent-queue", f"{queue}.agent", "--tools-queue", f"{queue}.tools", "--name", "fs",
            "--workflow-id", workflow_id, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        handle = client.get_workflow_handle(workflow_id)
        for _ in range(300):
            with contextlib.suppress(Exception):
                if await handle.query(AgentWorkflow.pending_approvals):
                    break
            await asyncio.sleep(0.1)
        await asyncio.sleep(2)  # the command polls meanwhile
        [card] = await handle.query(AgentWorkflow.pending_approvals)
        await handle.execute_update(
            AgentWorkflow.decide_update,
            Decision(id=card.id, decision="approve", reviewer="ana", via="cli"),
        )
        out, err = await asyncio.wait_for(submit.communicate(), 60)
    assert submit.returncode == 0, (out + err).decode()
    await asyncio.sleep(0.5)
    queries = [s for s in receiver.spans if s.name.startswith("QueryWorkflow")]
    [follow] = receiver.named(FOLLOW_SPAN)
    assert len(queries) >= 10, json.dumps([s.name for s in receiver.spans])
    assert {s.trace_id for s in queries} == {follow.trace_id}
