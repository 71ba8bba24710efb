"""Typed input, output and handler payloads of the agent workflow.

Everything here enters workflow history, so it holds names and references only
(never credentials): a remote backend is a *name* served by workers on a task
queue, and its capabilities are declared because the workflow cannot probe an
object that lives in another process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from filegate.kernel.execute_gate import check_execute_gate
from filegate.kernel.limits import (
    DEFAULT_MAX_EXECUTE_TIMEOUT,
    DEFAULT_MAX_TOOL_ARGS_CHARS,
    DEFAULT_MAX_TOOL_CALLS_PER_TURN,
    DEFAULT_TOOL_WORKER_WAIT,
)
from filegate.kernel.messages import Message, ModelSpec, ToolCallLimits, Usage
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.previews import ChangePreview
from filegate.kernel.tool_types import ToolName
from filegate.kernel.scripts import ScriptRef
from filegate.kernel.transcripts import TranscriptPage, TranscriptRef
from filegate.workflows.context import ContextState
from filegate.workflows.gate import ToolInterrupt
from filegate.workflows.grant_models import Grant, GrantRequest
from pydantic import BaseModel, ConfigDict, Field, model_validator


class BackendRef(BaseModel):
    """One backend as the workflow knows it: where it runs and what it can do.

    ``kind="state"`` keeps files in the workflow itself (no worker needed);
    ``kind="remote"`` sends each call to ``task_queue`` where a tools worker
    serves a backend registered under ``name``; ``kind="local"`` runs each call
    as a *local* activity on the agent worker itself, which must host a backend
    registered under ``name`` (``agent_worker(..., backends=...)``). Local calls
    keep their timeouts, retries and idempotency journal but skip two trips
    through the server's task queues, the cheapest way to serve a workspace
    that lives next to the agent worker.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["state", "remote", "local"] = "state"
    name: str = "state"
    task_queue: str | None = None
    can_execute: bool = False
    can_delete: bool = True
    shell_path: str | None = None
    """Host directory at which the default backend's shell sees this backend's
    root (for the shell-vs-virtual-paths prompt); None = the shell cannot reach it."""
    sandboxed: bool = False
    """Whether this backend's ``execute`` runs in Filegate's bubblewrap sandbox
    (``filegate worker --backend sandbox``), which compiles the permission rules
    into each command's view of the files (contract §4). Declared, like
    ``can_execute``, because the workflow cannot probe a remote worker; the
    worker checks it anyway: a host shell refuses a command that protecting
    rules reach unless a human approved it."""
    can_read_video: bool = False
    """Whether the tools worker serving this backend can sample video frames
    (``backends.media.video_supported()`` there). The workflow cannot probe a
    remote worker, so whoever starts the run declares it; it decides whether the
    read_file description advertises video."""

    @model_validator(mode="after")
    def _remote_needs_queue(self) -> BackendRef:
        if self.kind == "remote" and not self.task_queue:
            raise ValueError(f"remote backend {self.name!r} needs a task_queue")
        if self.kind == "state" and self.can_execute:
            raise ValueError("the State backend cannot execute commands")
        if self.sandboxed and not self.can_execute:
            raise ValueError(f"backend {self.name!r}: sandboxed needs can_execute")
        if self.kind == "state" and self.can_read_video:
            raise ValueError("the State backend does not decode video (it runs in the workflow)")
        return self


class RouteSpec(BaseModel):
    """A composite route: virtual ``prefix`` served by ``backend``."""

    model_config = ConfigDict(extra="forbid")

    prefix: str
    backend: BackendRef


class BackendSpec(BaseModel):
    """The agent's file space: a default backend plus optional composite routes."""

    model_config = ConfigDict(extra="forbid")

    default: BackendRef = Field(default_factory=BackendRef)
    routes: list[RouteSpec] = Field(default_factory=list)

    @property
    def is_composite(self) -> bool:
        return bool(self.routes)

    def backend_for(self, prefix: str | None) -> BackendRef:
        """The backend serving route ``prefix`` (None = the default)."""
        if prefix is None:
            return self.default
        for route in self.routes:
            if _norm_prefix(route.prefix) == _norm_prefix(prefix):
                return route.backend
        return self.default

    def all_backends(self) -> list[BackendRef]:
        return [self.default, *(r.backend for r in self.routes)]


def _norm_prefix(prefix: str) -> str:
    return "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"


ModelCallMode = Literal["local_activity", "activity"]


class Limits(BaseModel):
    """Budgets that end a run (stop reasons) or bound a single call."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int = 50
    """Model calls per run before stopping with ``max_steps``."""
    max_total_tokens: int | None = None
    """Input + output tokens summed over the run before stopping with ``token_limit``."""
    max_output_tokens: int | None = None
    """Passed to the model as its per-call output cap when the spec sets none."""
    max_execute_timeout: float = DEFAULT_MAX_EXECUTE_TIMEOUT
    max_tool_args_chars: Annotated[int, Field(ge=1)] = DEFAULT_MAX_TOOL_ARGS_CHARS
    """Serialized tool-call arguments above this size are refused with an error result,
    in the model activity, so they never reach history."""
    max_tool_calls_per_turn: Annotated[int, Field(ge=1)] = DEFAULT_MAX_TOOL_CALLS_PER_TURN
    """Tool calls of one model turn that run; one error result answers the rest."""
    model_timeout_seconds: float = 600.0
    model_max_attempts: int = 5
    tool_heartbeat_timeout_seconds: Annotated[float, Field(gt=0)] = 2.5
    """A tools worker silent this long is presumed dead and the call retried elsewhere
    (``activities.contract.HEARTBEAT_TIMEOUT``): every call heartbeats each second
    while it runs, so long calls are not cut short. Raise it for tools workers whose
    event loop can stall for seconds (an overloaded host)."""
    tool_worker_wait_seconds: Annotated[float, Field(gt=0)] | None = DEFAULT_TOOL_WORKER_WAIT
    """How long a call on a remote backend waits for a tools worker to take it from the
    backend's task queue (Temporal's schedule-to-start timeout, per attempt). Then it
    ends with an error result naming the queue: no worker polls it, or every one is
    busy (``workflows/unserved.py``). None: wait for a worker indefinitely."""

    def tool_call_limits(self) -> ToolCallLimits:
        """The caps the model activity applies to each turn it returns."""
        return ToolCallLimits(
            max_args_chars=self.max_tool_args_chars, max_calls=self.max_tool_calls_per_turn
        )


class RuleTimeout(BaseModel):
    """Approval timeout override for the permission rule at ``rule_index``."""

    model_config = ConfigDict(extra="forbid")

    rule_index: int
    timeout_seconds: float | None
    on_timeout: Literal["reject", "escalate"] = "reject"


class ApprovalConfig(BaseModel):
    """How long an approval may stay pending and what happens then.

    ``reject`` answers the model as if a reviewer rejected the call;
    ``escalate`` marks the approval as escalated (visible in the query) and
    keeps waiting without a deadline.
    """

    model_config = ConfigDict(extra="forbid")

    timeout_seconds: float | None = None
    on_timeout: Literal["reject", "escalate"] = "reject"
    per_rule: list[RuleTimeout] = Field(default_factory=list)

    def policy_for(self, rule_index: int | None) -> tuple[float | None, str]:
        for override in self.per_rule:
            if override.rule_index == rule_index:
                return override.timeout_seconds, override.on_timeout
        return self.timeout_seconds, self.on_timeout


class CarryOver(BaseModel):
    """Thread state handed to the next run by continue-as-new.

    The thread continues as new only at a step boundary (all of a turn's tool
    calls finished), so no approval is pending then; the approval sequence and
    rejection records travel here. ``messages`` is the full stored transcript:
    with :func:`activities.history.filegate_data_converter` a large carry goes
    to S3 and history keeps a reference.
    """

    messages: list[Message] = Field(default_factory=list)
    state_files: dict[str, dict[str, Any]] = Field(default_factory=dict)
    seen_paths: list[str] = Field(default_factory=list)
    rejected: dict[str, str] = Field(default_factory=dict)
    """Signatures of rejected calls -> the reviewer's reason ('' when none)."""
    call_index: int = 0
    counters: dict[str, int] = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)
    approval_seq: int = 0
    decided: list[DecidedApproval] = Field(default_factory=list)
    """The ``status`` query's record of decided approvals (bounded)."""
    awaiting_model: bool = False
    end_requested: bool = False
    transcript: TranscriptRef | None = None
    """The model-facing transcript in the artifact store (None = sent by value)."""
    context: ContextState = Field(default_factory=ContextState)
    """Summary and eviction bookkeeping of what the model is shown (workflows.context)."""
    script: ScriptRef | None = None
    """The scripted model's script by reference, once a call handed one out (kernel.scripts)."""
    grants: list[Grant] = Field(default_factory=list)  # remembered approvals (workflows.grants)


class FileToolsConfig(BaseModel):
    """What Filegate's tool side needs: backends, rules, approvals, limits.

    The configuration of :class:`~filegate.workflows.file_tools.FileTools` in any
    workflow, and the tool half of :class:`AgentInput` (which extends it with
    the model loop's settings). No secrets, endpoints or environment variable
    names: those live on the workers (contract §11).
    """

    model_config = ConfigDict(extra="forbid")

    backend: BackendSpec = Field(default_factory=BackendSpec)
    permissions: list[FilesystemPermission] = Field(default_factory=list)
    tools: list[ToolName] | None = None
    """Whitelist of tool names (read_file is always kept); None = all."""
    tool_descriptions: dict[str, str] = Field(default_factory=dict)
    """User-supplied descriptions; used verbatim, never rewritten."""
    limits: Limits = Field(default_factory=Limits)
    approvals: ApprovalConfig = Field(default_factory=ApprovalConfig)
    interrupt_on: dict[ToolName, ToolInterrupt] = Field(default_factory=dict)
    """Explicit approval rules per tool (``always`` or argument predicates), merged
    with the approvals generated from ``interrupt`` permission rules; an entry
    for a tool replaces the generated approvals of that tool (workflows.gate)."""
    policies: list[str] | None = None
    """Names of the tools workers' configured policies to apply to this run's calls
    (the workers' ``required`` ones always apply); None = the workers' defaults."""
    approval_search_attributes: bool | None = None
    """Keep the ``FilegatePendingApprovals`` / ``FilegateDecidedApprovals`` search
    attributes current (``workflows.approval_handlers``). None: only when the run
    was started with them set, which proves the server has them registered (an
    upsert of an unregistered attribute would stall the workflow); True: always
    (the server must have them registered); False: never."""

    @model_validator(mode="after")
    def _interrupt_on_fits_its_tools(self) -> FileToolsConfig:
        """An entry's fields must make sense for its tool (``allow_prefixes``: execute only)."""
        for tool, entry in self.interrupt_on.items():
            problem = entry.tool_problem(tool)
            if problem is not None:
                raise ValueError(f"interrupt_on[{tool}]: {problem}")
        return self

    def may_ask(self) -> bool:
        """Whether any call can wait for a human (interrupt rules or interrupt_on)."""
        return bool(self.interrupt_on) or any(r.mode == "interrupt" for r in self.permissions)

    def execute_gated(self) -> bool:
        """Whether every ``execute`` call waits for a human (``always: true``)."""
        return execute_gated(self.interrupt_on)

    def shell_unreachable_prefixes(self) -> list[str]:
        """Composite routes the default backend's shell cannot reach."""
        return [r.prefix for r in self.backend.routes if r.backend.shell_path is None]

    def check_execute_gate(self) -> None:
        """Refuse rules that ``execute`` could bypass on this configuration.

        The one gate every entry point runs (``FileTools``, ``AgentWorkflow``,
        the adapters, the CLI): see :mod:`filegate.kernel.execute_gate`.
        Raises :class:`~filegate.kernel.execute_gate.ExecuteGateError`.
        """
        default = self.backend.default
        offered = self.tools is None or "execute" in self.tools
        check_execute_gate(
            self.permissions,
            backend=default.name,
            can_execute=default.can_execute and offered,
            sandboxed=default.sandboxed,
            unreachable_prefixes=self.shell_unreachable_prefixes(),
            reachable_prefixes=[
                r.prefix for r in self.backend.routes if r.backend.shell_path is not None
            ],
            execute_gated=self.execute_gated(),
        )


def execute_gated(interrupt_on: Mapping[Any, Any]) -> bool:
    """Whether every ``execute`` call waits for a human (``always: true``), which
    lets path rules stand next to any shell (contract §4)."""
    rule = interrupt_on.get("execute")
    return rule is not None and getattr(rule, "always", None) is True


class AgentInput(FileToolsConfig):
    """Everything an agent run needs; no secrets (keys live in the workers' env).

    The tool fields come from :class:`FileToolsConfig`."""

    task: str | None = None
    messages: list[Message] = Field(default_factory=list)
    model: ModelSpec = Field(default_factory=ModelSpec)
    system_prompt: str | None = None
    """None: the default prompt (virtual filesystem, absolute paths, read before
    edit, paging large results, approvals). A text replaces it, or with
    ``system_prompt_mode="extend"`` follows it."""
    system_prompt_mode: Literal["replace", "extend"] = "replace"
    wait_for_messages: bool = False
    """After a final answer, wait for ``add_message`` instead of completing."""
    idle_timeout_seconds: float | None = None
    """With ``wait_for_messages``: complete after this long without a new message."""
    continue_as_new_after_steps: int = 200
    """Steps per run before the thread continues as new (history stays bounded)."""
    model_call: ModelCallMode = "local_activity"
    """How the workflow calls the model: ``local_activity`` (on the agent worker,
    inside the workflow task: no task-queue round trips, the default) or
    ``activity`` (a regular activity on the agent task queue, for model calls
    that must be visible and cancellable in the server's pending-activity view)."""
    carry: CarryOver | None = None

    @model_validator(mode="after")
    def _has_something_to_do(self) -> AgentInput:
        if (
            self.carry is None
            and not self.task
            and not self.messages
            and not self.wait_for_messages
        ):
            raise ValueError("AgentInput needs a task or messages (or wait_for_messages=True)")
        return self


StopReason = Literal["final_answer", "max_steps", "token_limit", "idle_timeout", "ended"]


class AgentResult(BaseModel):
    final_answer: str
    stop_reason: StopReason
    steps: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    approvals: int = 0
    usage: Usage = Field(default_factory=Usage)
    transcript: list[dict[str, Any]] = Field(default_factory=list)
    """The transcript (contract §10); after ``earlier_transcript``'s messages when set."""
    earlier_transcript: TranscriptPage | None = None
    """A very long thread's first messages, stored as transcript pages in the artifact
    store (``workflows.context.PAGE_OUT_CHARS``); ``activities.pages.full_transcript``
    joins them and ``transcript``. None: ``transcript`` is the whole transcript."""


DecisionKind = Literal["approve", "edit", "reject", "respond"]

Via = Literal["ui", "cli", "api", "proxy", "signal", "timeout"]
"""How a decision arrived: the web UI (a session from the token URL), the
command line, an API client of the UI (bearer token) or of the workflow (the
update without a channel), a user named by an authenticating proxy, the bare
``decide`` signal, or the workflow's own approval timeout."""

REVIEWER_MAX = 200
"""Longest reviewer name recorded (an identity, not a message)."""


class Decision(BaseModel):
    """A reviewer's answer to one pending approval (signal or update ``decide``).

    ``reviewer`` and ``via`` say who decided and through what. The UI sets them
    from its authenticated caller, the CLI from ``--reviewer`` (default: the OS
    user); the model never sends decisions. A decision without them is stamped
    by the workflow (``via="signal"`` or ``"api"``, reviewer ``unknown``).
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    decision: DecisionKind
    args: dict[str, Any] | None = None
    """``edit``: the replacement tool arguments."""
    reason: str | None = None
    """``reject``: optional reason passed on to the model."""
    message: str | None = None
    """``respond``: the text that becomes the tool result."""
    reviewer: str | None = Field(default=None, min_length=1, max_length=REVIEWER_MAX)
    """Who decided (a UI user, an OS user, a proxy-authenticated name)."""
    via: Via | None = None
    """The channel the decision came through."""
    preview_fingerprint: str | None = None
    """``approve``/``edit``: the fingerprint of the preview the reviewer decided on
    (``PendingApproval.preview.fingerprint``; ``""`` for a preview without one).
    A stale one is refused ("the preview changed"); the UI and the CLI send it."""
    remember: GrantRequest | None = None
    """``approve``: also approve later calls like this one (a grant, workflows.grants)."""

    def by(self) -> str:
        """``"ana via ui"``: the attribution the model and the logs see."""
        return f"{self.reviewer or 'unknown'} via {self.via or 'signal'}"


class PendingApproval(BaseModel):
    id: str
    """Random (16 hex digits, from ``workflow.uuid4()``): not guessable from others."""
    tool: str
    args: dict[str, Any]
    rule: dict[str, Any] | None
    requested_at: str
    tool_call_id: str
    turn: str | None = None
    """The model turn the call belongs to (its step); ``decide_turn`` decides a
    turn's approvals together (workflows/turn_decisions.py)."""
    escalated: bool = False
    cwd: str | None = None
    """``execute``: the directory the command runs in (the default backend's
    ``shell_path``, or ``/`` when the shell's location is not declared)."""
    description: str | None = None
    """Why the call needs approval, in words: the ``interrupt_on`` entry's
    ``description`` or the matched permission rule described."""
    task: str | None = None
    """The agent's task (the first user message, clipped) for the card."""
    assistant_text: str | None = None
    """What the model said in the turn that made the call (clipped)."""
    timeout_at: str | None = None
    """When the approval times out (ISO 8601, UTC), or None for never."""
    on_timeout: Literal["reject", "escalate"] | None = None
    """What happens then: the call is rejected, or the approval escalates."""
    preview: ChangePreview | None = None
    preview_pending: bool = False
    """The preview is still being computed: an approve or edit is refused until
    it is shown (``Decision.preview_fingerprint``)."""
    """What the call would change, computed on the route's tools worker."""
    changed_since_preview: bool = False
    """An approve/edit decision found the target changed since the preview it was
    made on: that decision was not applied, ``preview`` is the fresh one, and the
    reviewer must decide again (contract §5)."""


class DecidedApproval(BaseModel):
    """One decided approval as the ``status`` query reports it: what, who, through what."""

    id: str
    tool: str
    tool_call_id: str
    decision: DecisionKind
    reviewer: str
    via: Via
    decided_at: str
    reason: str | None = None
    path: str | None = None
    """The virtual path the call named (None for ``execute`` and path-less calls)."""
    summary: str | None = None
    """One line for a "recent decisions" list: tool, path or command, clipped."""
    changed_since_preview: bool = False
    """The file changed between the preview and the decision (contract §5)."""


class DecisionAck(BaseModel):
    """Returned by the ``decide`` update once the decision is recorded."""

    id: str
    decision: DecisionKind
    reviewer: str = "unknown"
    via: Via = "api"
    changed_since_preview: bool = False
    """The target changed since the preview the reviewer saw: the call was not
    run on that decision; the approval stays open with a fresh preview."""
    grant: Grant | None = None  # recorded by an approve with ``remember``


class UserMessage(BaseModel):
    """Payload of ``add_message``: a new user turn (``end`` closes an idle thread)."""

    model_config = ConfigDict(extra="forbid")

    content: str = ""
    end: bool = False


class AgentStatus(BaseModel):
    step: int
    state: Literal["running", "awaiting_approval", "idle", "done"]
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    decided: list[DecidedApproval] = Field(default_factory=list)
    """The latest decided approvals of the thread (oldest first, at most 100)."""
    last_message: dict[str, Any] | None = None
    tool_calls: int = 0
    tool_errors: int = 0


class FileToolsState(BaseModel):
    """What :class:`~filegate.workflows.file_tools.FileTools` carries across
    continue-as-new: State backend files, paths read (read-before-edit),
    rejected call signatures, approval numbering and records, counters."""

    state_files: dict[str, dict[str, Any]] = Field(default_factory=dict)
    seen_paths: list[str] = Field(default_factory=list)
    rejected: dict[str, str] = Field(default_factory=dict)
    approval_seq: int = 0
    decided: list[DecidedApproval] = Field(default_factory=list)
    counters: dict[str, int] = Field(default_factory=dict)
    """``tool_calls``, ``tool_errors``, ``approvals``, ``decided_approvals``, ``turns``."""
    grants: list[Grant] = Field(default_factory=list)  # remembered approvals (workflows.grants)
