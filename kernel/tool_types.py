"""The tool activity contract, and the tools' argument models re-exported.

The argument models live in :mod:`filegate.kernel.tool_args` and each tool's
facts in :mod:`filegate.kernel.registry`; the per-tool names here derive from
that registry. The wire side of the contract lives here: activity type
names, the error types the activities raise, their time budgets and the
request/outcome models. Pure (no Temporal, no
clock): the Temporal-typed half (timeouts as ``timedelta``, retry policies,
error mapping) is :mod:`filegate.activities.contract`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from filegate.kernel import wire
from filegate.kernel.compact import DefaultsOmitted
from filegate.kernel.limits import DEFAULT_MAX_EXECUTE_TIMEOUT
from filegate.kernel.messages import ContentBlock, content_text
from filegate.kernel.network_rules import NetworkPermission
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.protocol import GlobResult, GrepResult, LsResult, NetworkUse, OutcomeCode
from filegate.kernel.registry import TOOLS
from filegate.kernel.tool_args import (
    DeleteArgs,
    EditFileArgs,
    ExecuteArgs,
    GlobArgs,
    GrepArgs,
    LsArgs,
    ReadFileArgs,
    ToolArgs,
    ToolName,
    WriteFileArgs,
)

TOOL_ORDER: tuple[ToolName, ...] = TOOLS.order
"""Fixed order in which tools are offered to the model (prompt-cache friendly)."""
TOOL_ACTIVITY_NAMES: dict[ToolName, str] = TOOLS.activity_names
"""Activity type name per tool, e.g. ``filegate.read_file``."""

NON_RETRYABLE_ERROR_TYPES = [
    wire.INVALID_REQUEST_ERROR, wire.UNKNOWN_BACKEND_ERROR, wire.UNKNOWN_POLICY_ERROR
]  # fmt: skip
"""``ApplicationError.type`` values the tool activities raise; never retried."""

SEARCH_MARGIN = 10.0
"""start_to_close of a search = its budget + this margin, so the activity's own
deadline (which answers the model cleanly) fires before the server's."""
EXECUTE_MARGIN = 30.0
"""start_to_close of execute = command timeout + this margin (kill and report)."""
HEARTBEAT_INTERVAL = 1.0
"""Seconds between heartbeats while a tool runs (heartbeats deliver cancellation)."""

LARGE_RESULTS_DIR = "/large_tool_results/"
"""Virtual directory under which offloaded tool results are read back (contract §7)."""


TOOL_ARGS: dict[ToolName, type[ToolArgs]] = TOOLS.args


def activity_call_id(step: int, index: int, model_call_id: str) -> str:
    """The id a tool call is known by to the activities (and their idempotency journal).

    Models number their calls per response and some reuse ids across turns
    (``call_0`` every turn) or even within one, so the model's id alone would
    let two different calls of one thread share a journal entry. The model
    step (1-based, counted across continue-as-new) and the call's position
    in that step make it unique per workflow; the model's own id is kept at
    the end for readability. Deterministic, so replay sees the same value.
    """
    return f"{step}:{index}:{model_call_id}"


class ToolRequest(DefaultsOmitted):
    """One tool call routed to a backend worker.

    ``args`` are the validated tool arguments with paths already made
    backend-local by the route; ``route_prefix`` maps result paths back to
    virtual paths so the activity can filter them against ``permissions``
    (virtual-path rules) before anything enters workflow history.

    ``tool_call_id`` must be unique per run chain (the workflow builds it with
    :func:`activity_call_id`): together with the run chain, backend, tool and
    args it keys the idempotency journal of mutating tools. The workflow id is
    never taken from the request: the tools worker reads it from the
    activity's own info (contract §11).
    """

    tool: ToolName
    backend: str
    args: dict[str, Any]
    tool_call_id: str
    first_run_id: str = ""
    """The run chain's first run id (``workflow.info().first_execution_run_id``,
    kept across continue-as-new), which the activity's info does not carry.
    Empty: the activity's own run id (a chain of one run)."""
    route_prefix: str = "/"
    virtual_path: str | None = None
    """The call's path as the model sees it (normalised by the workflow's gate):
    ``route_prefix`` plus the backend-local path in ``args``. Results and
    permission messages name it. When set, the activity checks this one path
    and requires the local path to be exactly its part below the route; None
    (execute, a fan-out target, a request recorded before this field) makes it
    check the local path and the prefix instead."""
    permissions: list[FilesystemPermission] = Field(default_factory=list)
    network: list[NetworkPermission] = Field(default_factory=list)
    """``execute`` only: the run's network rules (kernel.network_rules). Empty: the
    command has no network (and the request's payload is what it always was)."""
    policies: list[str] | None = None
    """Names of the worker's configured policies to apply (``AgentInput.policies``);
    None = the worker's defaults. Names only: policy settings live on the worker."""
    max_execute_timeout: float = DEFAULT_MAX_EXECUTE_TIMEOUT
    """Largest ``execute`` timeout accepted (the workflow passes its Limits)."""
    want_raw: bool = False
    """ls/glob/grep: also return the structured result (:attr:`ToolOutcome.raw`).
    Only the composite fan-out needs it; single-backend calls keep history small."""
    approved: bool = False
    """A human approved this call (set by the workflow only after an approve or
    edit decision). Without it the activity refuses a call that reaches an
    ``interrupt`` rule: an interrupt with no approval on record is a deny."""
    approved_by: str | None = None
    """Who approved it and through what (``"ana via ui"``), for the tools
    worker's audit log: the decision itself lives in the workflow's history."""
    expected_fingerprint: str | None = None
    """``write_file`` only: the fingerprint (``sha256:<hex>``,
    :func:`filegate.kernel.textops.fingerprint`) of the file as the model last
    read it, or ``missing`` for a file it expects not to exist. The tools worker
    refuses the write when the file on disk differs, so changes made outside the
    run since that read are never silently overwritten. None: no check."""


class RawListing(BaseModel):
    """Structured ls/glob/grep answer of one backend, for the composite fan-out merge.

    Exactly the field named after the tool is set. Paths are **backend-local**
    (as the Router's ``merge_*`` expect them, which map them back under the
    route prefix), entries denied for read are already removed, and an error
    keeps the backend's own (local) message so the Router maps it once.
    Denied files were skipped during the backend's walk, so nothing here
    (matches, ``truncated``) depends on them.

    A wrapper rather than a bare ``LsResult | GlobResult | GrepResult`` union:
    an empty glob and an empty grep result serialise identically, so the
    union could not be told apart when read back from history.
    """

    ls: LsResult | None = None
    glob: GlobResult | None = None
    grep: GrepResult | None = None


class ToolOutcome(DefaultsOmitted):
    """What the model sees for one tool call, plus facts the workflow tracks."""

    content: str | list[ContentBlock]
    status: Literal["success", "error"] = "success"
    media: list[ContentBlock] = Field(default_factory=list)
    """Video frames (a ``Frame at`` text block before each JPEG) for read_file of a
    video. Not part of the tool result: the workflow sends them as one user message
    after all of the turn's tool results (providers need tool results contiguous)."""
    raw: RawListing | None = None
    """Set for ls/glob/grep when the request had ``want_raw``. ``content`` is then
    only a short summary (the workflow renders the merged answer itself), except
    for errors without a structured result (e.g. the entry gate), whose text is
    the whole answer."""
    network: list[NetworkUse] = Field(default_factory=list)
    """execute with network rules: the hosts its command reached or was refused
    (also in ``content``), for the tools worker's spans and the run's record."""
    code: OutcomeCode | None = None
    """What went wrong (:data:`~filegate.kernel.protocol.OutcomeCode`), set on every
    error this library makes; None on success and on an error recorded before
    the field existed. Callers act on it, never on the wording of ``content``."""
    occurrences: int | None = None
    """edit_file: how many occurrences were replaced; with ``multiple_matches``, how
    many matched; with ``no_match``, how often old_string without its trailing
    newline ends the file (the trailing-newline hint), when it does."""
    exit_code: int | None = None
    """execute: the command's exit code (None: it ended without one, or never ran)."""
    truncated: bool = False
    """execute: the output was cut (``content`` ends with the notice saying so)."""
    fingerprint: str | None = None
    """read_file, write_file, edit_file: the whole file's fingerprint
    (:func:`filegate.kernel.textops.fingerprint`) as this call read or left it.
    Not shown to the model: the workflow keeps it and sends it back as the
    :attr:`ToolRequest.expected_fingerprint` of the next ``write_file`` of that
    path, so a write over changes made outside the run is refused."""

    @property
    def text(self) -> str:
        """The result as plain text: the content, or the text parts of block content."""
        return content_text(self.content)


class ToolResult(DefaultsOmitted):
    """One tool call's answer, as every caller gets it: :meth:`FileTools.run
    <filegate.workflows.FileTools.run>`, the activity stubs' ``file_tool``, the
    session workflow's ``call`` update and the adapters built on them.

    Why one type: a caller that moves from the stubs to ``FileTools`` (or reads
    an MCP session's answer) keeps the same fields and the same error flag.
    ``listing`` is omitted from JSON while unset, so a ``FileTools`` answer
    serialises exactly as it did before the types were merged.
    """

    tool_call_id: str
    """The caller's id of the call (the model's, or the one derived for it)."""
    name: str
    """The tool called (as the caller named it: a model may name one that is not a tool)."""
    outcome: ToolOutcome
    """Exactly what the model reads (text or content blocks, error status)."""
    listing: RawListing | None = None
    """ls, glob and grep through the stubs: the structured answer (paths as the
    caller named them, denied entries removed); ``outcome`` holds the text
    rendered from it, the same text :class:`AgentWorkflow` would show."""

    @property
    def is_error(self) -> bool:
        return self.outcome.status == "error"

    @property
    def text(self) -> str:
        """The result as plain text (the text blocks of a block result, joined)."""
        return self.outcome.text


MAX_BATCH_CALLS = 8
"""Calls in one batch at most: its start-to-close timeout is the sum of theirs (one
after another) or the largest (side by side)."""
BATCH_RESULT_CHARS = 256 * 1024
"""A batch starts no further call once its results hold about this many characters,
so its one history marker stays far below the server's payload limit."""


class ToolBatch(BaseModel):
    """Calls of one turn for one place (this worker, or one task queue), in the order asked.

    Every request is the one its own ``filegate.<tool>`` activity would get;
    all are in ``TOOLS.batched``, at most :data:`MAX_BATCH_CALLS`.
    """

    requests: list[ToolRequest]
    concurrent: bool = False
    """Run the calls side by side, as separate activities on a task queue would
    (they never share a path with a mutation: the workflow orders those). False:
    one after another, as the local activities of one run are."""


class ToolBatchResult(BaseModel):
    """One entry per :attr:`ToolBatch.requests`, in order.

    None: the call did not finish in the batch (it raised, the batch stopped
    before it, or its result did not fit) and the workflow runs it on its own
    activity, with that tool's own retries and error mapping. In a batch run
    one after another, the finished calls are a prefix.
    """

    outcomes: list[ToolOutcome | None]
