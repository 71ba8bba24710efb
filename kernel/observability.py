"""The names operators see: Filegate's metric series, span names and span attributes.

Written once here and used by the activities (tool calls, the model call),
the workflow side (denials, approvals, grants) and the docs
(``docs/observability.md``). Pure strings: no OpenTelemetry, no Temporal.
Span names and the ``gen_ai.*`` attributes follow the OpenTelemetry GenAI
semantic conventions (``execute_tool {gen_ai.tool.name}``, ``chat {gen_ai.request.model}``);
Filegate's own attributes start with ``filegate.``.
"""

from __future__ import annotations

# --------------------------------------------------------------------------- metrics

TOOL_CALLS = "filegate_tool_calls_total"
"""Counter: tool calls run by a tools worker, by ``tool``, ``backend`` and ``status``
(``success``, ``error``: the model reads an error; ``failure``: the activity raised)."""
TOOL_CALL_DURATION = "filegate_tool_call_duration_seconds"
"""Histogram: seconds one tool call took on its tools worker, by ``tool`` and ``backend``."""
DENIALS = "filegate_denials_total"
"""Counter: calls a ``deny`` rule refused, by ``tool`` (the workflow's gate, or the
tools worker's entry gate for a path it reached instead)."""
APPROVALS_PENDING = "filegate_approvals_pending"
"""Gauge: approvals waiting for a decision in the runs this worker holds."""
APPROVAL_WAIT = "filegate_approval_wait_seconds"
"""Histogram: seconds from a pending approval to its decision, by ``tool`` and ``decision``."""
GRANT_USES = "filegate_grant_uses_total"
"""Counter: calls a remembered approval (a grant) let through unasked, by ``tool``."""
SANDBOX_KILLS = "filegate_sandbox_kills_total"
"""Counter: commands killed at a bound, by ``bound`` (``timeout``, ``memory``,
``processes``, ``write``) and ``backend``."""
OFFLOADED_BYTES = "filegate_offloaded_bytes_total"
"""Counter: bytes of large results stored in S3 instead of history, by ``tool`` and ``backend``."""

DURATION_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
)
"""Bucket bounds (seconds) of :data:`TOOL_CALL_DURATION`."""
APPROVAL_WAIT_BUCKETS: tuple[float, ...] = (
    1,
    5,
    15,
    30,
    60,
    120,
    300,
    900,
    1800,
    3600,
    14400,
    86400,
)
"""Bucket bounds (seconds) of :data:`APPROVAL_WAIT`: humans answer in minutes to hours."""
HISTOGRAM_BUCKETS: dict[str, tuple[float, ...]] = {
    TOOL_CALL_DURATION: DURATION_BUCKETS,
    APPROVAL_WAIT: APPROVAL_WAIT_BUCKETS,
}
"""``PrometheusConfig(histogram_bucket_overrides=...)`` for Filegate's histograms."""

# --------------------------------------------------------------------------- spans

TRACER_NAME = "filegate"
"""The instrumentation scope of Filegate's spans."""
EXECUTE_TOOL = "execute_tool"
"""``gen_ai.operation.name`` of a tool call; its span is ``execute_tool {tool}``."""
CHAT = "chat"
"""``gen_ai.operation.name`` of a model call; its span is ``chat {model}``."""
APPROVAL_WAIT_SPAN = "approval_wait"
"""A pending approval's wait; its span is ``approval_wait {tool}``."""

OPERATION_NAME = "gen_ai.operation.name"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
REQUEST_MODEL = "gen_ai.request.model"
PROVIDER_NAME = "gen_ai.provider.name"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
ERROR_TYPE = "error.type"
"""The OpenTelemetry GenAI conventions' attributes Filegate sets."""

BACKEND = "filegate.backend"
"""The backend name the call was routed to (``ToolRequest.backend``)."""
STATUS = "filegate.tool.status"
"""``success``, ``error`` (the model reads an error) or ``failure`` (the activity raised)."""
RULE_DECISION = "filegate.rule.decision"
"""What the rules made of the call where it ran: ``allow``, ``approved`` (an
``interrupt`` rule, approved by a human or a grant) or ``deny``."""
APPROVED_BY = "filegate.approved_by"
"""Who approved the call and how (``ana via ui``, ``grant g-...``)."""
OFFLOADED = "filegate.offloaded_bytes"
"""Bytes of the result stored in S3 instead of history (0: none)."""
KILLED_BY = "filegate.sandbox.killed_by"
"""The bound that killed the call's command, when one did."""
APPROVAL_ID = "filegate.approval.id"
APPROVAL_DECISION = "filegate.approval.decision"
APPROVAL_DECIDED_BY = "filegate.approval.decided_by"
APPROVAL_VIA = "filegate.approval.via"
APPROVAL_WAIT_SECONDS = "filegate.approval.wait_seconds"
"""Attributes of an ``approval_wait`` span."""

CONNECT_SPAN = "connect"
"""A sandboxed command's connections to one host and port through the egress
proxy; its span is ``connect {host}``, a child of the ``execute_tool`` span."""
PEER_NAME = "network.peer.name"
PEER_PORT = "network.peer.port"
NETWORK_DECISION = "filegate.network.decision"
"""``allow`` or ``deny`` (with the reason in ``filegate.network.reason``)."""
NETWORK_REASON = "filegate.network.reason"
NETWORK_CONNECTIONS = "filegate.network.connections"
NETWORK_BYTES_OUT = "filegate.network.bytes_out"
NETWORK_BYTES_IN = "filegate.network.bytes_in"

APPROVAL_SPAN_EXTERN = "__filegate_approval_span"
"""The workflow extern function (``workflow.extern_functions()``) a worker with
tracing registers: workflow code hands it a finished span (an approval's wait, a
call its gate refused) by name, outside replay."""
