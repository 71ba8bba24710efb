"""Typed input, output and handler payloads of the agent workflow.

Everything here enters workflow history, so it holds names and references only
(never credentials): a remote backend is a *name* served by workers on a task
queue, and its capabilities are declared because the workflow cannot probe an
object that lives in another process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from temporalio.common import Priority

from filegate.kernel.execute_gate import ExecuteGateError, check_execute_gate
from filegate.kernel.limits import (
    DEFAULT_MAX_EXECUTE_TIMEOUT,
    DEFAULT_MAX_TOOL_ARGS_CHARS,
    DEFAULT_MAX_TOOL_CALLS_PER_TURN,
    DEFAULT_TOOL_WORKER_WAIT,
)
from filegate.kernel.messages import Message, ModelSpec, ToolCallLimits, Usage
from filegate.kernel.network_rules import NetworkPermission, enforcement_problem
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.review_scope import ReviewerConfig
from filegate.kernel.scripts import ScriptRef
from filegate.kernel.tool_types import ToolName
from filegate.kernel.transcripts import TranscriptPage, TranscriptRef
from filegate.workflows.approvals.grant_models import Grant
from filegate.workflows.approvals.models import (  # re-exported: the public names
    REVIEWER_MAX as REVIEWER_MAX,
)
from filegate.workflows.approvals.models import DecidedApproval, PendingApproval
from filegate.workflows.approvals.models import Decision as Decision
from filegate.workflows.approvals.models import DecisionAck as DecisionAck
from filegate.workflows.approvals.models import DecisionKind as DecisionKind
from filegate.workflows.approvals.models import Via as Via
from filegate.workflows.context import ContextState
from filegate.workflows.gate import ToolInterrupt


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
    read_fingerprints: dict[str, str] = Field(default_factory=dict)
    """Path -> the file's content as the run last read or wrote it (stale-write check)."""
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
    grants: list[Grant] = Field(default_factory=list)  # remembered (workflows.approvals.grants)


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
    network: list[NetworkPermission] = Field(default_factory=list)
    """Which hosts sandboxed commands may connect to (kernel.network_rules); empty:
    commands have no network."""
    reviewer: ReviewerConfig | None = None
    """A first-pass reviewer that may approve interrupted calls inside its scope
    before a human is asked (kernel.review_scope); None: every one waits for a human."""
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
    attributes current (``workflows.approvals.handlers``). None: only when the run
    was started with them set, which proves the server has them registered (an
    upsert of an unregistered attribute would stall the workflow); True: always
    (the server must have them registered); False: never."""
    fairness_key: str | None = Field(default=None, min_length=1, max_length=64)
    """Who this run's tool calls are for (a tenant, a user): their activities carry
    it as Temporal's fairness key, so on a busy tools queue one key's backlog does
    not starve another's (the server shares dispatch across keys by weight)."""
    fairness_weight: float | None = Field(default=None, gt=0, le=1000)
    """The key's share of dispatch relative to other keys (server default 1)."""

    @model_validator(mode="after")
    def _interrupt_on_fits_its_tools(self) -> FileToolsConfig:
        """An entry's fields must make sense for its tool (``allow_prefixes``: execute only)."""
        for tool, entry in self.interrupt_on.items():
            problem = entry.tool_problem(tool)
            if problem is not None:
                raise ValueError(f"interrupt_on[{tool}]: {problem}")
        return self

    def priority_options(self) -> dict[str, Priority]:
        """``priority=`` for this run's remote tool and preview activities, when it has
        a fairness key (local activities run in the agent worker: no queue to share)."""
        if self.fairness_key is None:
            return {}
        return {
            "priority": Priority(
                fairness_key=self.fairness_key, fairness_weight=self.fairness_weight
            )
        }

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
        problem = enforcement_problem(
            self.network,
            sandboxed=default.sandboxed,
            runs_commands=default.can_execute and offered,
            can_ask=True,
        )
        if problem is not None:
            raise ExecuteGateError(problem, rule_number=0, pattern="", backend=default.name)


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
    earlier_transcript: TranscriptPage | None = None
    """Set when a very long thread's first messages are transcript pages in S3 (contract
    §8): ``transcript`` follows them; ``activities.pages.full_transcript`` joins both."""


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
    read_fingerprints: dict[str, str] = Field(default_factory=dict)
    """Path -> the file's content as the run last read or wrote it (stale-write check)."""
    rejected: dict[str, str] = Field(default_factory=dict)
    approval_seq: int = 0
    decided: list[DecidedApproval] = Field(default_factory=list)
    counters: dict[str, int] = Field(default_factory=dict)
    """``tool_calls``, ``tool_errors``, ``approvals``, ``decided_approvals``, ``turns``."""
    grants: list[Grant] = Field(default_factory=list)  # remembered (workflows.approvals.grants)
