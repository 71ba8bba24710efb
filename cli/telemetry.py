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
)

SERVICE_NAME = "filegate"
"""The traces' ``service.name`` unless ``OTEL_SERVICE_NAME`` names another."""


def cli_telemetry(metrics_port: int | None = None, metrics_host: str = "127.0.0.1") -> Telemetry:
    """What this command exports: traces as the environment says, metrics on the port."""
    provider = otlp_tracer_provider(SERVICE_NAME) if traces_configured(os.environ) else None
    return Telemetry(provider, metrics_bind_address(metrics_port, metrics_host))


def finish() -> None:
    """Send the spans still buffered: the command ends with ``os._exit``."""
    flush_traces()
