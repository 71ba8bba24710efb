"""The command line's traces and metrics: the ``OTEL_*`` environment and ``--metrics-port``.

Every command's client traces when the environment names an OTLP endpoint
(``OTEL_EXPORTER_OTLP_ENDPOINT``) and the ``otel`` extra is installed; the
OpenTelemetry SDK reads the rest of its ``OTEL_*`` variables itself.
``filegate worker --metrics-port`` also serves Prometheus text at ``/metrics``.
Neither: no interceptor, no runtime, nothing to pay (docs/observability.md).
"""

from __future__ import annotations

import os

from filegate.activities.telemetry import (
    Telemetry,
    flush_traces,
    metrics_bind_address,
    otlp_tracer_provider,
    traces_configured,
    traces_endpoint,
    traces_endpoint_problem,
)
from filegate.cli.errors import CliError

SERVICE_NAME = "filegate"
"""The traces' ``service.name`` unless ``OTEL_SERVICE_NAME`` names another (a worker
adds its role: :func:`worker_service_name`)."""

FLUSH_MILLIS = 1_000
"""How long a command's end waits for its last spans: a collector that hangs costs a
command at most this (the exporter's own timeout is 10 s; issue 54)."""


def worker_service_name(role: str) -> str:
    """``filegate-agent-worker`` / ``filegate-tools-worker``: traces tell workers apart."""
    return f"{SERVICE_NAME}-{role}-worker"


def cli_telemetry(
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    service: str = SERVICE_NAME,
) -> Telemetry:
    """What this command exports: traces as the environment says, metrics on the port.

    A malformed OTLP endpoint is one line and exit 2 (it would drop every span
    silently). The first call in a process names its service (one provider each).
    """
    problem = traces_endpoint_problem(os.environ)
    if problem is not None:
        raise CliError(problem, 2)
    provider = otlp_tracer_provider(service) if traces_configured(os.environ) else None
    return Telemetry(provider, metrics_bind_address(metrics_port, metrics_host))


def tracing_line(telemetry: Telemetry) -> str | None:
    """The start line a long-running command prints when it traces (None: it does not)."""
    if telemetry.tracer_provider is None:
        return None
    resource = getattr(telemetry.tracer_provider, "resource", None)  # the SDK's provider
    attributes = getattr(resource, "attributes", {}) or {}
    service = attributes.get("service.name", SERVICE_NAME)
    return f"traces to {traces_endpoint(os.environ)} as service {service}"


def finish() -> None:
    """Send the spans still buffered, briefly: the command ends with ``os._exit``."""
    flush_traces(FLUSH_MILLIS)
