"""Traces and metrics of Filegate's activities, and what turns them on (docs/observability.md).

**Metrics** are Temporal's: a worker whose client was connected with a
:func:`_prometheus_runtime` serves the SDK's own series and Filegate's on one
``/metrics`` endpoint. The activities record through ``activity.metric_meter()``
(:func:`tool_call_telemetry`), the workflow side through
``workflow.metric_meter()`` (:mod:`filegate.workflows.telemetry`, replay-safe).

**Traces** are OpenTelemetry's, built on ``temporalio.contrib.opentelemetry``:
its :class:`TracingInterceptor` carries the trace from the client through the
workflow to every activity (``RunActivity:filegate.read_file``), and
:class:`ToolSpans` adds Filegate's own spans under it: one
``execute_tool {tool}`` per tool call, ``chat {model}`` per model call, and
``approval_wait {tool}`` per approval (recorded by the workflow outside replay,
through an extern function). OpenTelemetry is the optional ``otel`` extra; it
is imported only when a tracer provider is given.

**Off costs nothing measurable.** Without a tracer provider no interceptor is
installed and no span is started; without a metrics runtime the SDK's meter is
its no-op meter, and :func:`tool_call_telemetry` returns before reading a clock.

Nothing here reads the environment: :func:`traces_configured` is handed it by
the edges (the CLI, ``FilegatePlugin``'s defaults), and the OTLP exporter reads
its own ``OTEL_*`` variables.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio import client as client_interceptors
from temporalio.common import MetricMeter
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from filegate.kernel import observability as names
from filegate.kernel.formatting import is_rule_refusal

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider
    from temporalio.runtime import Runtime

    from filegate.kernel.messages import ModelResponse
    from filegate.kernel.protocol import NetworkUse
    from filegate.kernel.tool_types import ToolOutcome, ToolRequest

log = logging.getLogger(__name__)

_TRACER: contextvars.ContextVar[Tracer | None] = contextvars.ContextVar(
    "filegate_tracer", default=None
)
"""The tracer of the activity running now: set by :class:`ToolSpans` around each
activity, None (no spans) on a worker without tracing."""


# --------------------------------------------------------------------------- tool calls


@dataclass
class CallReport:
    """What one tool call tells its telemetry; filled in by the call (also from its thread)."""

    outcome: ToolOutcome | None = None
    offloaded_bytes: int = 0
    killed_by: list[str] = field(default_factory=list)

    def offloaded(self, size: int) -> None:
        self.offloaded_bytes += size

    def killed(self, bound: str) -> None:
        self.killed_by.append(bound)


def measuring() -> bool:
    """Whether the running activity records anything: a tracer, or a metrics runtime.
    False costs the caller two lookups, and it skips :func:`tool_call_telemetry`."""
    return _TRACER.get() is not None or activity.metric_meter() is not MetricMeter.noop


@contextlib.contextmanager
def tool_call_telemetry(request: ToolRequest, report: CallReport) -> Iterator[None]:
    """The span and the metrics of one tool call on this worker (when :func:`measuring`).

    The one place every call of a tools worker passes (the eight activities and
    each call of a ``filegate.tool_batch``, :meth:`FileToolActivities._run`).
    The call fills ``report``, :attr:`CallReport.outcome` before the block
    ends; a block that raises is a ``failure``.
    """
    meter = activity.metric_meter()
    tracer = _TRACER.get()
    started = time.monotonic()
    span: Span | None = None
    with contextlib.ExitStack() as stack:
        if tracer is not None:
            span = stack.enter_context(
                tracer.start_as_current_span(
                    f"{names.EXECUTE_TOOL} {request.tool}",
                    attributes={
                        names.OPERATION_NAME: names.EXECUTE_TOOL,
                        names.TOOL_NAME: request.tool,
                        names.TOOL_CALL_ID: request.tool_call_id,
                        names.TOOL_TYPE: "function",
                        names.BACKEND: request.backend,
                    },
                )
            )
        failed = True
        try:
            yield
            failed = False
        finally:
            _finish_call(request, report, meter, span, time.monotonic() - started, failed=failed)


def _finish_call(
    request: ToolRequest,
    report: CallReport,
    meter: MetricMeter,
    span: Span | None,
    seconds: float,
    *,
    failed: bool,
) -> None:
    outcome = report.outcome
    status = "failure" if failed or outcome is None else outcome.status
    denied = outcome is not None and outcome.status == "error" and is_rule_refusal(outcome.text)
    labels = {"tool": request.tool, "backend": request.backend}
    meter.create_counter(names.TOOL_CALLS, "Tool calls run by this tools worker").add(
        1, {**labels, "status": status}
    )
    meter.create_histogram_float(
        names.TOOL_CALL_DURATION, "Seconds one tool call took on its tools worker", "s"
    ).record(seconds, labels)
    if denied:
        meter.create_counter(names.DENIALS, "Calls a permission rule refused").add(
            1, {"tool": request.tool}
        )
    if report.offloaded_bytes:
        meter.create_counter(
            names.OFFLOADED_BYTES, "Bytes of large results stored in S3 instead of history", "By"
        ).add(report.offloaded_bytes, labels)
    for bound in report.killed_by:
        meter.create_counter(names.SANDBOX_KILLS, "Commands killed at a bound").add(
            1, {"bound": bound, "backend": request.backend}
        )
    if span is None:
        return
    decision = "deny" if denied else "approved" if request.approved else "allow"
    attributes: dict[str, Any] = {
        names.STATUS: status,
        names.RULE_DECISION: decision,
        names.OFFLOADED: report.offloaded_bytes,
    }
    if request.approved_by:
        attributes[names.APPROVED_BY] = request.approved_by
    if report.killed_by:
        attributes[names.KILLED_BY] = report.killed_by[-1]
    if status != "success":
        attributes[names.ERROR_TYPE] = "permission_denied" if denied else f"tool_{status}"
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR))
    span.set_attributes(attributes)
    if outcome is not None and outcome.network:
        _connect_spans(span, outcome.network)


def _connect_spans(parent: Span, uses: list[NetworkUse]) -> None:
    """One ``connect {host}`` span per host, port and decision of the call's command."""
    tracer = _TRACER.get()
    if tracer is None:
        return
    from opentelemetry import trace

    context = trace.set_span_in_context(parent)
    for use in uses:
        attributes: dict[str, Any] = {
            names.PEER_NAME: use.host,
            names.PEER_PORT: use.port,
            names.NETWORK_DECISION: "allow" if use.allowed else "deny",
            names.NETWORK_CONNECTIONS: use.connections,
            names.NETWORK_BYTES_OUT: use.bytes_out,
            names.NETWORK_BYTES_IN: use.bytes_in,
        }
        if use.reason:
            attributes[names.NETWORK_REASON] = use.reason
        tracer.start_span(
            f"{names.CONNECT_SPAN} {use.host}", context=context, attributes=attributes
        ).end()


# --------------------------------------------------------------------------- model calls


@contextlib.contextmanager
def model_call_span(model: str, provider: str) -> Iterator[Callable[[ModelResponse], None]]:
    """A ``chat {model}`` span around one model call (nothing without tracing).

    Yields a function the caller hands the model's answer (token usage, stop reason).
    """
    tracer = _TRACER.get()
    if tracer is None:
        yield _ignore
        return
    attributes = {
        names.OPERATION_NAME: names.CHAT,
        names.REQUEST_MODEL: model,
        names.PROVIDER_NAME: provider,
    }
    with tracer.start_as_current_span(f"{names.CHAT} {model}", attributes=attributes) as span:

        def answered(response: ModelResponse) -> None:
            span.set_attributes(
                {
                    names.INPUT_TOKENS: response.usage.input_tokens,
                    names.OUTPUT_TOKENS: response.usage.output_tokens,
                }
            )
            if response.stop_reason:
                span.set_attribute(names.FINISH_REASONS, [response.stop_reason])

        yield answered


def _ignore(response: ModelResponse) -> None:
    del response


# --------------------------------------------------------------------------- interceptor


class ToolSpans(client_interceptors.Interceptor, Interceptor):
    """Filegate's spans on a worker: the tracer for the activities' own spans, and
    the ``approval_wait`` spans the workflow side records (outside replay) through
    the :data:`~filegate.kernel.observability.APPROVAL_SPAN_EXTERN` extern function.

    A client interceptor too (one that changes nothing there), so that
    ``Client.connect(interceptors=...)`` takes it and hands it to the client's workers."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _WithTracer(next, self.tracer)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        input.unsafe_extern_functions[names.APPROVAL_SPAN_EXTERN] = self.workflow_span
        return None

    def workflow_span(
        self, name: str, attributes: Mapping[str, Any], start_ns: int, end_ns: int
    ) -> None:
        """A finished span of workflow code (an approval's wait, a refused call); its
        parent is the workflow's current trace context."""
        span = self.tracer.start_span(name, attributes=dict(attributes), start_time=start_ns)
        span.end(end_time=end_ns)


class _WithTracer(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, tracer: Tracer) -> None:
        super().__init__(next)
        self.tracer = tracer

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        token = _TRACER.set(self.tracer)
        try:
            return await super().execute_activity(input)
        finally:
            _TRACER.reset(token)


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class Telemetry:
    """What a Filegate process exports: traces to ``tracer_provider`` (None: none) and
    metrics on ``metrics_address`` (``host:port``; None: none)."""

    tracer_provider: TracerProvider | None = None
    metrics_address: str | None = None

    def interceptors(self) -> list[client_interceptors.Interceptor]:
        """Temporal's ``TracingInterceptor`` and :class:`ToolSpans` (none without tracing):
        for ``Client.connect(interceptors=...)``, which hands them to its workers too."""
        if self.tracer_provider is None:
            return []
        from temporalio.contrib.opentelemetry import TracingInterceptor

        tracer = self.tracer_provider.get_tracer(names.TRACER_NAME)
        return [TracingInterceptor(tracer, always_create_workflow_spans=True), ToolSpans(tracer)]

    def runtime(self) -> Runtime | None:
        """The Temporal runtime that serves the metrics (None without an address)."""
        return _prometheus_runtime(self.metrics_address) if self.metrics_address else None


_RUNTIMES: dict[str, Runtime] = {}
_RUNTIMES_LOCK = threading.Lock()


def _prometheus_runtime(address: str) -> Runtime:
    """A Temporal runtime serving Prometheus text at ``http://{address}/metrics``: the
    SDK's metrics and Filegate's, with Filegate's histogram buckets. One per address
    and process (a second bind of the port would fail). Raises ValueError when the
    address cannot be served."""
    from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

    with _RUNTIMES_LOCK:
        runtime = _RUNTIMES.get(address)
        if runtime is None:
            config = PrometheusConfig(
                bind_address=address,
                histogram_bucket_overrides={k: list(v) for k, v in names.HISTOGRAM_BUCKETS.items()},
            )
            try:
                runtime = Runtime(telemetry=TelemetryConfig(metrics=config))
            except Exception as exc:  # the core SDK reports a busy port as a plain error
                raise ValueError(f"cannot serve metrics on {address}: {exc}") from None
            _RUNTIMES[address] = runtime
        return runtime


def metrics_bind_address(port: int | None, host: str = "127.0.0.1") -> str | None:
    """``host:port`` for a metrics port (None: no metrics); IPv6 hosts bracketed."""
    if port is None:
        return None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


TRACES_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def traces_configured(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` asks for traces: an OTLP endpoint is set, and neither
    ``OTEL_SDK_DISABLED=true`` nor ``OTEL_TRACES_EXPORTER=none`` turns them off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in TRACES_ENDPOINT_VARIABLES)


def traces_endpoint_problem(environ: Mapping[str, str]) -> str | None:
    """One line naming a malformed OTLP endpoint variable, or None: an endpoint the
    exporter cannot use would drop every span without a word (issue 54)."""
    from urllib.parse import urlsplit

    for name in TRACES_ENDPOINT_VARIABLES:
        value = environ.get(name, "").strip()
        if not value:
            continue
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError for a port that is no number
        except ValueError as exc:
            return f"{name}={value!r}: not a URL ({exc})"
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return f"{name}={value!r}: expected http(s)://host:port (the OTLP/HTTP endpoint)"
    return None


def traces_endpoint(environ: Mapping[str, str]) -> str:
    """Where spans go: the traces variable, else the general one (for a start line)."""
    return next((environ[n].strip() for n in TRACES_ENDPOINT_VARIABLES if environ.get(n)), "")


_OTLP: dict[str, Any] = {}
"""The process's OTLP tracer provider, once built (None: the extra is missing)."""


def otlp_tracer_provider(service_name: str) -> TracerProvider | None:
    """A tracer provider exporting over OTLP/HTTP as the ``OTEL_*`` variables say
    (endpoint, headers, timeout, batch delays, ``OTEL_SERVICE_NAME``, resource
    attributes): the OpenTelemetry SDK reads them itself. ``service_name`` names
    the service unless ``OTEL_SERVICE_NAME`` does. One per process; None, with a
    warning, when the ``otel`` extra is not installed."""
    with _RUNTIMES_LOCK:
        if "provider" in _OTLP:
            return _OTLP["provider"]
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            log.warning(
                "an OTLP endpoint is set but traces are off: pip install 'filegate[otel]' (%s)",
                exc,
            )
            _OTLP["provider"] = None
            return None
        resource = Resource.create()
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": service_name}))
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        _OTLP["provider"] = provider
        return provider


@contextlib.contextmanager
def process_span(name: str, attributes: Mapping[str, Any]) -> Iterator[None]:
    """A span of this process's own provider (:func:`otlp_tracer_provider`), current for
    the block, so the client calls in it (a follow's polling queries) are its children:
    one trace, not a root span per poll (issue 54). Nothing without a provider."""
    provider = _OTLP.get("provider")
    if provider is None:
        yield
        return
    tracer = provider.get_tracer(names.TRACER_NAME)
    with tracer.start_as_current_span(name, attributes=dict(attributes)):
        yield


def flush_traces(timeout_millis: int = 1_000) -> None:
    """Send the spans :func:`otlp_tracer_provider`'s provider still holds, waiting at most
    ``timeout_millis`` (a command line that ends with ``os._exit`` skips the SDK's own
    exit hook). The SDK's flush ignores its timeout and waits out the exporter's (10 s
    a try): a collector that hangs would add that to every command, so the flush runs
    on a thread of its own and is given up on (issue 54)."""
    provider = _OTLP.get("provider")
    if provider is None:
        return
    flushing = threading.Thread(target=provider.force_flush, name="filegate-flush", daemon=True)
    flushing.start()
    flushing.join(timeout_millis / 1000)
