"""Wiring: workers per role and backend type, and the client every process shares.

:func:`agent_worker` serves the AgentWorkflow and the model activity (plus,
optionally, local backends); :func:`tools_worker` serves one backend's file
tools on its own task queue (its credentials never leave that process);
:func:`connect` gives the client with the shared data converter. Both factories
build a ``Worker`` through :class:`~filegate.plugin.FilegatePlugin`'s roles with
explicit values, so the plugin is the one place workflows, activities, runner
and tuning are applied. The command line is :mod:`filegate.cli`. Worker code is
imported where a worker is built.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union, cast

from temporalio import client as client_interceptor
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter
from temporalio.service import TLSConfig
from temporalio.worker import Plugin as WorkerPlugin
from temporalio.worker import (
    PollerBehaviorSimpleMaximum,
    Replayer,
    ReplayerConfig,
    Worker,
    WorkerConfig,
    WorkflowReplayResult,
)

from filegate.activities.contract import HEARTBEAT_THROTTLE
from filegate.backends.settings import (
    CommandSettings,
    ModelSettings,
    S3Settings,
    Settings,
)
from filegate.kernel.command_rules import CommandPrefixError
from filegate.kernel.execute_gate import ExecuteGateError
from filegate.kernel.wire import OPERATION_WORKFLOW_TYPE, WORKFLOW_TYPE

if TYPE_CHECKING:
    from filegate.activities.providers.profiles import ModelProfiles
    from filegate.activities.telemetry import Telemetry
    from filegate.activities.tools import FileToolActivities
    from filegate.backends.artifacts import ArtifactStore
    from filegate.backends.policy import PolicyConfig
    from filegate.kernel.protocol import BackendProtocol

log = logging.getLogger("filegate.worker")

_Config = WorkerConfig | ReplayerConfig

BACKEND_KINDS = ("filesystem", "local-shell", "sandbox", "state", "store")


class ConfigError(Exception):
    """A configuration or connection failure: one clear line, and the exit code a
    command line should end with (the CLI's ``CliError`` is a subclass)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


FROM_SETTINGS: Literal["settings"] = "settings"
"""``connect(artifacts=FROM_SETTINGS)``: the artifact store of the configured S3, if any."""


async def connect(
    settings: Settings | None = None,
    tls: TLSConfig | bool | None = None,
    *,
    artifacts: ArtifactStore | Literal["settings"] | None = FROM_SETTINGS,
    api_key: str | None = None,
    rpc_metadata: Mapping[str, str] | None = None,
    telemetry: Telemetry | None = None,
) -> Client:
    """A client with the data converter every Filegate process must share.

    That is the pydantic converter plus, when there is an artifact store, the
    S3 payload codec (:func:`~activities.history.filegate_data_converter`):
    payloads over its threshold travel as references, so every process that
    encodes or decodes them -- workers, ``run``, ``approvals``, ``status``, the
    UI -- needs the same store. By default it is built from the settings' S3
    (none when ``FILEGATE_S3_ENDPOINT`` is unset); pass a store or None to
    choose. Temporal is reached first, so its failure is the one reported.
    ``tls`` (None: plaintext), ``api_key``, ``rpc_metadata``: as resolved by the CLI.
    ``settings`` None: the defaults (127.0.0.1:7233, no S3): its ``temporal`` group
    says where to connect, its ``s3`` group which store to open; the environment is
    read by the caller (``Settings.from_env()``), never here. ``telemetry``: the
    traces and metrics this process exports (docs/observability.md; None: none).
    """
    settings = settings or Settings()
    temporal = settings.temporal
    interceptors: list[Any] = [ShortWorkflowTasks()]
    runtime = None
    if telemetry is not None:
        interceptors += telemetry.interceptors()
        try:
            runtime = telemetry.runtime()
        except ValueError as exc:
            raise ConfigError(str(exc), 2) from None
    try:
        client = await Client.connect(
            temporal.address,
            namespace=temporal.namespace,
            data_converter=pydantic_data_converter,
            tls=False if tls is None else tls,
            api_key=api_key,
            rpc_metadata=rpc_metadata or {},
            interceptors=interceptors,
            runtime=runtime,
        )
    except RuntimeError as exc:  # the core SDK reports connection failures this way
        raise ConfigError(
            f"cannot connect to Temporal at {temporal.address}: {exc}. Start a "
            "server first (`filegate dev` holds a local one until Ctrl-C) or pass "
            "yours in Settings.temporal.address (to the filegate command: --address "
            "or TEMPORAL_ADDRESS)."
        ) from None
    store = await configured_store(settings.s3) if isinstance(artifacts, str) else artifacts
    return with_payload_codec(client, store)


def with_payload_codec(client: Client, store: ArtifactStore | None) -> Client:
    """``client`` (same connection) with the converter for ``store``; as is without one."""
    if store is None:
        return client
    from filegate.activities.history import filegate_data_converter

    config = client.config()
    config["data_converter"] = filegate_data_converter(store)
    return Client(**config)


async def configured_store(s3: S3Settings) -> ArtifactStore | None:
    """The artifact store on the configured S3, or None when no endpoint is set.

    A half configuration (endpoint without credentials) or an unreachable S3
    is a clear error: processes disagreeing about the codec cannot read each
    other's large payloads. :func:`settings_store`, off the event loop.
    """
    return await asyncio.to_thread(settings_store, s3)


def settings_store(s3: S3Settings) -> ArtifactStore | None:
    """:func:`configured_store`, blocking: for callers with no event loop to spare
    (a plugin configuring a client or worker synchronously)."""
    from filegate.backends.artifacts import ArtifactError, ArtifactStore

    if not s3.endpoint:
        return None
    if not s3.access_key or s3.secret_key is None:
        raise ConfigError(
            f"{s3.env_name('endpoint')} is set but {s3.env_name('access_key')} / "
            f"{s3.env_name('secret_key')} are not", 2,
        )  # fmt: skip
    try:
        return ArtifactStore.from_settings(s3)
    except (ArtifactError, ValueError) as exc:
        raise ConfigError(f"S3 at {s3.endpoint}: {exc}") from None


STICKY_SCHEDULE_TO_START = timedelta(seconds=2)
"""How long a workflow task waits on a run's sticky queue (the worker that ran it
last) before the server hands it to any worker of the task queue (SDK default:
10 s). After an agent worker dies, its runs move again once this passes, so it
is most of the time an agent worker's death costs (``bench/agent_recovery.py``).
The trade-off under load: a live worker that cannot take its sticky task within
2 s loses the cached run, and whichever worker takes the task replays the run's
history first (a cost that grows with the history, bounded by continue-as-new)."""

WORKFLOW_TASK_TIMEOUT = timedelta(seconds=3)
"""The workflow task timeout Filegate's CLI starts agent runs with (``task_timeout``;
Temporal's default is 10 s). A workflow task the server handed to an agent worker
that then died (its long poll was already matched) is retried only when this
passes, so with :data:`STICKY_SCHEDULE_TO_START` it bounds what an agent worker's
death costs: about 3.6 s from the SIGKILL to the run moving again
(``bench/agent_recovery.py``). A model call longer than this is no problem: the SDK
keeps the task alive while a local activity runs. Under load, a task that needs
more than 3 s (a long replay on a starved worker) times out and is retried; start
runs with a longer ``task_timeout`` where workers are that slow."""


class ShortWorkflowTasks(client_interceptor.Interceptor):
    """Start Filegate's own workflows with :data:`WORKFLOW_TASK_TIMEOUT` unless the
    caller chose a ``task_timeout``.

    Why here and not at each call site: the bound on an agent worker's death
    must hold on every client path, including a user's
    ``Client.connect(..., plugins=[FilegatePlugin()])`` followed by a plain
    ``start_workflow(AgentWorkflow.run, ...)`` (issue 36: 10.6 s stalls without
    it). :func:`connect` and :class:`~filegate.plugin.FilegatePlugin` both
    install it; other workflow types are left as the caller starts them.
    """

    def intercept_client(
        self, next: client_interceptor.OutboundInterceptor
    ) -> client_interceptor.OutboundInterceptor:
        return _ShortTaskStarts(next)


class _ShortTaskStarts(client_interceptor.OutboundInterceptor):
    async def start_workflow(
        self, input: client_interceptor.StartWorkflowInput
    ) -> WorkflowHandle[Any, Any]:
        if input.task_timeout is None and input.workflow in SHORT_TASK_WORKFLOWS:
            input = dataclasses.replace(input, task_timeout=WORKFLOW_TASK_TIMEOUT)
        return await super().start_workflow(input)


SHORT_TASK_WORKFLOWS = frozenset({WORKFLOW_TYPE, OPERATION_WORKFLOW_TYPE})
"""The workflow types :class:`ShortWorkflowTasks` starts with the short task timeout."""


WORKFLOW_TASK_POLLERS = 20
ACTIVITY_TASK_POLLERS = 50
"""Long polls each worker keeps open (the SDK default is 5). With many agents
in flight, tasks that find no waiting poll are written to the server's backlog
and read back; enough polls keep them matched in memory, which raised
``bench/throughput.py`` by a fifth. Override with ``max_concurrent_*_polls``."""


def agent_worker(
    client: Client,
    task_queue: str,
    *,
    artifacts: ArtifactStore | None = None,
    backends: dict[str, BackendProtocol] | None = None,
    journal_dir: str | Path | None = None,
    policies: PolicyConfig | None = None,
    model_profiles: ModelProfiles | None = None,
    allow_execute_with_policies: bool = False,
    journal_fsync: bool = False,
    **options: Any,
) -> Worker:
    """The worker that runs AgentWorkflow, the model activity and local backends.

    It also runs ``SessionWorkflow`` (``filegate mcp``'s tool sessions), which
    hosts the same ``FileTools`` as an agent's run and makes no model calls.

    With ``artifacts`` the model activity keeps the transcript in S3 and the
    workflow sends it by reference plus the new messages (contract §8); it also
    archives evicted messages under ``/conversation_history/``. Without one,
    conversations travel by value. ``client`` should carry the same store's
    payload codec (:func:`connect` / :func:`with_payload_codec`).

    ``backends`` (with ``journal_dir``) are served to ``kind="local"`` backend
    refs: their file tools run as local activities in this worker.

    ``model_profiles`` are the models this worker serves (endpoints, key
    variables, allowed names; contract §11); None: the built-in defaults
    (:func:`profiles_from` reads them from settings). ``policies``,
    ``allow_execute_with_policies`` and ``journal_fsync``: as for :func:`file_tools`.
    Its tuning is an agent's alone, local backends or not.
    """
    return _plugin_worker(
        client, task_queue, options, tools=False, policies=policies, journal_fsync=journal_fsync,
        agent=True, backends=backends, journal_dir=journal_dir, artifacts=artifacts,
        model_profiles=model_profiles, allow_execute_with_policies=allow_execute_with_policies,
    )  # fmt: skip


def _plugin_worker(
    client: Client, task_queue: str, options: dict[str, Any], *, tools: bool, agent: bool,
    backends: dict[str, BackendProtocol] | None, journal_dir: str | Path | None,
    artifacts: ArtifactStore | None, model_profiles: ModelProfiles | None,
    policies: PolicyConfig | None, allow_execute_with_policies: bool, journal_fsync: bool,
) -> Worker:  # fmt: skip
    """A ``Worker`` configured by the roles it serves (:func:`agent_role`,
    :func:`tools_role`), every value explicit (nothing read from the environment),
    ``options`` as given: a ``workflow_runner`` among them is used as it is, and
    the client's codec is the caller's. ``tools``: tuned as a tools worker.
    """
    from temporalio.plugin import SimplePlugin

    from filegate.backends.policy import PolicyConfig

    if backends and journal_dir is None:
        raise ValueError("backends need a journal_dir for their idempotency journal")
    plugins: list[Any] = []
    if agent:
        plugins.append(agent_role(model_profiles=model_profiles, artifacts=artifacts))
    if backends:
        assert journal_dir is not None
        plugins.append(
            tools_role(
                backends, journal_dir, artifacts=artifacts, policies=policies or PolicyConfig(),
                allow_execute_with_policies=allow_execute_with_policies,
                journal_fsync=journal_fsync, tuning=None if tools else NO_TUNING,
            )
        )  # fmt: skip
    if "workflow_runner" in options:
        runner = options.pop("workflow_runner")
        plugins.append(SimplePlugin("filegate.workflow_runner", workflow_runner=runner))
    plugins += options.pop("plugins", ())
    return Worker(client, task_queue=task_queue, plugins=plugins, **options)


def profiles_from(models: ModelSettings) -> ModelProfiles:
    """The model profiles ``settings`` name (``FILEGATE_MODEL_PROFILES[_FILE]``), else
    the defaults; a bad configuration is a one-line :class:`ConfigError` (exit 2)."""
    from filegate.activities.providers.profiles import ModelProfiles

    try:
        return ModelProfiles.from_settings(models)
    except ValueError as exc:
        raise ConfigError(str(exc), 2) from None


def file_tools(
    backends: dict[str, BackendProtocol],
    journal_dir: str | Path,
    artifacts: ArtifactStore | None,
    policies: PolicyConfig | None,
    *,
    allow_execute_with_policies: bool = False,
    batch_calls: bool = True,
    journal_fsync: bool = False,
) -> FileToolActivities:
    """The file tool activities over ``backends`` under ``policies`` (None: none).

    ``batch_calls`` False: every call an activity of its own (a rate-limited queue).

    Refuses (ConfigError) a journal inside a served root and path policies next to
    an executing backend unless execute is denied or ``allow_execute_with_policies``
    accepts it (contract §11). ``journal_fsync``: the journal syncs each record.
    Every value is the caller's: the CLI and :class:`~filegate.plugin.FilegatePlugin`
    read them from the environment, this never does.
    """
    from filegate.activities.journal_faults import JournalUnavailable
    from filegate.activities.tools import FileToolActivities
    from filegate.backends.policy import PolicyConfig
    from filegate.backends.startup import check_execute_policies, check_journal_outside

    config = policies if policies is not None else PolicyConfig()
    try:
        check_journal_outside(journal_dir, backends)
        check_execute_policies(backends, config, allow=allow_execute_with_policies)
    except ValueError as exc:
        raise ConfigError(str(exc), 2) from None
    try:
        return FileToolActivities(
            backends,
            Path(journal_dir),
            artifacts=artifacts,
            policies=config,
            batch_calls=batch_calls,
            journal_fsync=journal_fsync,
        )
    except JournalUnavailable as exc:
        raise ConfigError(
            f"the tools worker cannot start: {exc.reason} ({os.path.realpath(journal_dir)}); "
            "give the journal a writable directory with free space "
            "(--journal-dir / FILEGATE_STATE_DIR)",
            2,
        ) from None


def make_backend(
    kind: str,
    root: str | Path | None,
    *,
    namespace: str | None = None,
    s3: S3Settings | None = None,
    commands: CommandSettings | None = None,
) -> BackendProtocol:
    """Build one backend from CLI-level settings (credentials stay in this process).

    ``store`` keeps files in the ``s3`` bucket under ``namespace``
    (``users/alice`` -> components ``("users", "alice")``), so they outlive a
    thread and are shared by every worker on the same bucket. A shell
    (local-shell, sandbox) runs each command within the ``commands`` bounds.
    None: the defaults (no S3; the default bounds).
    """
    if kind == "state":
        from filegate.kernel.state import StateBackend

        return StateBackend()
    if kind == "store":
        from filegate.backends.store import StoreBackend

        if not namespace:
            raise ValueError(
                "--store-namespace is required for the store backend, e.g. users/alice"
            )
        parts = tuple(part for part in namespace.split("/") if part)
        return StoreBackend.from_settings(s3 or S3Settings(), parts)
    if root is None:
        raise ValueError(f"--root is required for the {kind} backend")
    if not Path(root).is_dir():
        # Never created here: a typo would serve an empty directory of that name.
        what = "is not a directory" if Path(root).exists() else "does not exist"
        raise ValueError(f"--root {root} {what}: create the workspace first, or fix the path")
    if kind == "filesystem":
        from filegate.backends.filesystem import FilesystemBackend

        return FilesystemBackend(str(root), virtual_mode=True)
    if kind == "local-shell":
        from filegate.backends.local_shell import LocalShellBackend

        return LocalShellBackend(str(root), bounds=(commands or CommandSettings()).bounds())
    if kind == "sandbox":
        from filegate.backends.bwrap import BwrapSandboxBackend

        return BwrapSandboxBackend(str(root), bounds=(commands or CommandSettings()).bounds())
    raise ValueError(f"unknown backend kind {kind!r}; choose one of {', '.join(BACKEND_KINDS)}")


def tools_worker(
    client: Client,
    task_queue: str,
    backends: dict[str, BackendProtocol],
    journal_dir: str | Path,
    *,
    artifacts: ArtifactStore | None = None,
    policies: PolicyConfig | None = None,
    allow_execute_with_policies: bool = False,
    journal_fsync: bool = False,
    serve_agents: bool = False,
    model_profiles: ModelProfiles | None = None,
    workflows: list[type] | tuple[type, ...] = (),
    **options: Any,
) -> Worker:
    """A worker serving the ``filegate.<tool>`` activities for ``backends``.

    Also what a caller outside any workflow needs (``filegate call``, the Deep
    Agents adapter's client mode): the ``filegate.transfer.*`` activities over
    the same backends (:func:`with_preview`) and ``OperationWorkflow``, the
    one-operation workflow they fall back to where the server runs no standalone
    activities (:mod:`filegate.operations`). ``workflows`` adds your own.

    ``serve_agents`` makes it also run the agent workflows started on
    ``task_queue`` (co-hosting, contract §8): their calls on a backend of this
    queue then run as local activities in this process, with no trip through
    the server (``execute`` stays a regular activity on the same queue), while
    their other routes stay remote. It then makes model calls too, so it needs
    the model configuration (``model_profiles``, as :func:`agent_worker`).

    ``artifacts`` turns on large-result offload (contract §7). ``policies`` (None:
    none), ``allow_execute_with_policies`` and ``journal_fsync`` are as for
    :func:`file_tools`; workflows only name policies.
    A per-queue rate limit is ``max_task_queue_activities_per_second=...`` in
    ``options`` (enforced by the server across all workers of the queue). It
    counts activities, so such a worker runs no batches (contract §8): each of
    its calls is an activity the limit counts.
    """
    return _plugin_worker(
        client, task_queue, {"workflows": list(workflows), **options}, tools=True,
        policies=policies, journal_fsync=journal_fsync, agent=serve_agents, backends=backends,
        journal_dir=journal_dir, artifacts=artifacts, model_profiles=model_profiles,
        allow_execute_with_policies=allow_execute_with_policies,
    )  # fmt: skip


def with_preview(tools: FileToolActivities) -> list[Callable[..., Any]]:
    """The eight tool activities, ``filegate.preview`` and the three ``filegate.transfer.*``
    activities over the same backends.

    Served wherever the tools are, so a pending call's preview reads on the
    call's own route (same queue, same backend name, same policies), and a
    caller outside any workflow reads a window or moves files' bytes through
    any tools worker (:mod:`filegate.activities.transfer`).
    """
    from filegate.activities.preview import PreviewActivities
    from filegate.activities.transfer import TransferActivities

    return [
        *tools.activities(),
        PreviewActivities(tools).preview,
        *TransferActivities(tools).activities(),
    ]


# --- Worker-level roles ----------------------------------------------------
#
# A plugin on ``Client.connect`` configures every worker built from that client,
# so a role given there (``FilegatePlugin(agent=True)``) made every worker of the
# process an agent worker. A role below is a worker plugin only: give it to the
# one ``Worker`` that should serve it; the client keeps what every process shares
# (the converter and codec, from ``FilegatePlugin()`` or :func:`connect`).

_SDK_DEFAULTS = {
    name: p.default for name, p in inspect.signature(Worker.__init__).parameters.items()
}
"""``Worker``'s defaults: only options left at them are tuned (a user's own setting wins)."""

_POLL_COUNTS = {
    "workflow_task_poller_behavior": "max_concurrent_workflow_task_polls",
    "activity_task_poller_behavior": "max_concurrent_activity_task_polls",
}
"""The older count option that, when set, replaces the poller behavior (the SDK reads it first)."""


@dataclass(frozen=True)
class WorkerTuning:
    """Worker options Filegate sets besides workflows and activities (None: the SDK's);
    the defaults' reasons are at the constants they come from. An option the
    worker sets itself (any value but the SDK's default) wins."""

    workflow_task_polls: int | None = WORKFLOW_TASK_POLLERS
    activity_task_polls: int | None = ACTIVITY_TASK_POLLERS
    sticky_schedule_to_start: timedelta | None = STICKY_SCHEDULE_TO_START
    heartbeat_throttle: timedelta | None = HEARTBEAT_THROTTLE

    @classmethod
    def for_roles(cls, *, agent: bool, tools: bool) -> WorkerTuning:
        """An agent's workflow polls and sticky timeout, a tools worker's activity polls
        and heartbeat throttle (a dead tools worker is noticed fast)."""
        full = cls()
        return cls(
            workflow_task_polls=full.workflow_task_polls if agent else None,
            sticky_schedule_to_start=full.sticky_schedule_to_start if agent else None,
            activity_task_polls=full.activity_task_polls if tools else None,
            heartbeat_throttle=full.heartbeat_throttle if tools else None,
        )

    def apply(self, config: WorkerConfig) -> None:
        """Set these values on ``config`` where it holds the SDK's default."""
        options = cast(dict[str, Any], config)
        polls = (self.workflow_task_polls, self.activity_task_polls)
        tuned: dict[str, Any] = {
            key: PollerBehaviorSimpleMaximum(maximum=n) if n else None
            for key, n in zip(_POLL_COUNTS, polls, strict=True)
        }
        tuned["sticky_queue_schedule_to_start_timeout"] = self.sticky_schedule_to_start
        tuned["max_heartbeat_throttle_interval"] = self.heartbeat_throttle
        for key, value in tuned.items():
            keys = (key, _POLL_COUNTS.get(key, key))
            if value is not None and all(options.get(k) == _SDK_DEFAULTS[k] for k in keys):
                options[key] = value


NO_TUNING = WorkerTuning(None, None, None, None)
"""Leave every option to the SDK (or to the plugin that tunes the worker as a whole)."""


WORKFLOW_FAILURE_TYPES: tuple[type[Exception], ...] = (ExecuteGateError, CommandPrefixError)
"""Filegate's typed configuration errors. Raised in workflow code (a host of
``FileTools`` checking its rules, an adapter's gate inside a workflow), they
fail the workflow: a configuration that can never run. Unregistered, each
would fail only the workflow task, which Temporal retries until the code
changes, so the run would hang with no answer."""


def _failure_types(config: WorkerConfig | ReplayerConfig) -> list[type[BaseException]]:
    """The worker's own workflow failure types, and :data:`WORKFLOW_FAILURE_TYPES`."""
    own = list(config.get("workflow_failure_exception_types") or [])
    return own + [kind for kind in WORKFLOW_FAILURE_TYPES if kind not in own]


def _with_result_storing(config: WorkerConfig) -> None:
    """With the client's S3 codec, store large activity results inside the activity
    (:class:`~filegate.activities.s3_outage.ResultsThroughS3`; idempotent)."""
    from filegate.activities.history import ArtifactPayloadCodec
    from filegate.activities.s3_outage import ResultsThroughS3

    codec = config["client"].data_converter.payload_codec
    present = list(config.get("interceptors") or [])
    if isinstance(codec, ArtifactPayloadCodec) and not any(
        isinstance(i, ResultsThroughS3) for i in present
    ):
        config["interceptors"] = [*present, ResultsThroughS3(codec)]


def with_filegate_runner(config: _Config) -> None:
    """Filegate's workflow sandbox and failure types on ``config`` (idempotent)."""
    from filegate.workflows.runner import filegate_runner

    converter: DataConverter = DataConverter.default
    if "client" in config:
        converter = cast("WorkerConfig", config)["client"].data_converter
    elif config.get("data_converter") is not None:
        converter = cast("ReplayerConfig", config)["data_converter"]
    config["workflow_runner"] = filegate_runner(config.get("workflow_runner"), converter)
    config["workflow_failure_exception_types"] = _failure_types(config)


FROM_CLIENT: Literal["client"] = "client"
"""``tools_role(artifacts=FROM_CLIENT)``: the store behind the worker client's payload codec."""

ArtifactsSource = Union[
    "ArtifactStore", None, Literal["client"], Callable[[], "ArtifactStore | None"]
]
"""A store, None (everything inline), :data:`FROM_CLIENT`, or a callable asked
on first need (a plugin whose store opens with its client)."""

RoleActivities = Callable[["ArtifactStore | None", bool], list[Callable[..., Any]]]
"""``(store, batch_calls) -> activities``: what a role serves on one worker."""


class WorkerRole(WorkerPlugin):
    """One worker's share of Filegate: a role's workflows and activities, its tuning,
    and the sandbox runner and failure types its workflows need. Nothing client-wide.

    Build one with :func:`agent_role` or :func:`tools_role` and pass it to
    ``Worker(client, task_queue=..., plugins=[role])``. The activities are built
    once per role and shared by the workers it configures (one idempotency
    journal per backend set, not one per worker).
    """

    def __init__(
        self,
        role: str,
        *,
        workflows: Callable[[], Sequence[type]],
        activities: RoleActivities,
        artifacts: ArtifactsSource = FROM_CLIENT,
        tuning: WorkerTuning = NO_TUNING,
    ) -> None:
        self.role = role
        self.workflows = workflows
        self.activities = activities
        self.artifacts = artifacts
        self.tuning = tuning
        self._built: dict[bool, list[Callable[..., Any]]] = {}

    def name(self) -> str:
        return f"filegate.{self.role}"

    def store(self, config: WorkerConfig) -> ArtifactStore | None:
        """The store this role's activities offload to and read from."""
        if self.artifacts == FROM_CLIENT:
            from filegate.activities.history import ArtifactPayloadCodec

            codec = config["client"].data_converter.payload_codec
            return codec.store if isinstance(codec, ArtifactPayloadCodec) else None
        if callable(self.artifacts):
            return self.artifacts()
        return cast("ArtifactStore | None", self.artifacts)

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Add the role's workflows and activities, the runner, failure types and tuning."""
        _add_workflows(config, self.workflows())
        # A rate-limited queue counts activities: such a worker runs no batches.
        batch = config.get("max_task_queue_activities_per_second") is None
        if batch not in self._built:
            self._built[batch] = self.activities(self.store(config), batch)
        config["activities"] = [*config.get("activities", []), *self._built[batch]]
        _with_result_storing(config)
        with_filegate_runner(config)
        self.tuning.apply(config)
        return config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        await next(worker)

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        """The role's workflows, on the runner and failure types its workers use."""
        _add_workflows(config, self.workflows())
        with_filegate_runner(config)
        return config

    def run_replayer(
        self,
        replayer: Replayer,
        histories: AsyncIterator[WorkflowHistory],
        next: Callable[
            [Replayer, AsyncIterator[WorkflowHistory]],
            AbstractAsyncContextManager[AsyncIterator[WorkflowReplayResult]],
        ],
    ) -> AbstractAsyncContextManager[AsyncIterator[WorkflowReplayResult]]:
        return next(replayer, histories)


def _add_workflows(config: _Config, workflows: Sequence[type]) -> None:
    present = list(config.get("workflows") or [])
    config["workflows"] = present + [w for w in workflows if w not in present]


def _agent_workflows() -> Sequence[type]:
    from filegate.workflows import AgentWorkflow
    from filegate.workflows.session import SessionWorkflow

    # A session (filegate mcp) runs the same FileTools as an agent's run.
    return (AgentWorkflow, SessionWorkflow)


def _operation_workflows() -> Sequence[type]:
    # What a caller outside any workflow falls back to (filegate.operations).
    from filegate.workflows.operation import OperationWorkflow

    return (OperationWorkflow,)


def agent_role(
    *,
    model_profiles: ModelProfiles | Callable[[], ModelProfiles] | None = None,
    artifacts: ArtifactsSource = FROM_CLIENT,
    tuning: WorkerTuning | None = None,
) -> WorkerRole:
    """Serve ``AgentWorkflow``, ``SessionWorkflow`` (``filegate mcp``'s sessions) and
    the ``filegate.model`` activity.

    ``model_profiles``: the models this worker serves, or a callable giving them
    when the model activity is built (None: the built-in defaults; the
    environment is read by the caller, :func:`profiles_from`).
    ``artifacts``: where transcripts are kept by reference (contract §8).
    ``tuning`` (None: an agent's, :meth:`WorkerTuning.for_roles`).
    """

    def model(store: ArtifactStore | None, batch_calls: bool) -> list[Callable[..., Any]]:
        from filegate.activities.model import ModelActivities

        profiles = model_profiles() if callable(model_profiles) else model_profiles
        profiles = profiles or profiles_from(ModelSettings())
        return [ModelActivities(store, profiles=profiles).call_model]

    return WorkerRole(
        "agent",
        workflows=_agent_workflows,
        activities=model,
        artifacts=artifacts,
        tuning=tuning or WorkerTuning.for_roles(agent=True, tools=False),
    )


def tools_role(
    backends: Mapping[str, BackendProtocol],
    journal_dir: str | Path,
    *,
    artifacts: ArtifactsSource = FROM_CLIENT,
    policies: PolicyConfig | None = None,
    allow_execute_with_policies: bool = False,
    journal_fsync: bool = False,
    tuning: WorkerTuning | None = None,
) -> WorkerRole:
    """Serve ``backends``' file tools, ``filegate.preview``, the ``filegate.transfer.*``
    activities and ``OperationWorkflow``: everything a run's calls and a caller
    outside any workflow (``filegate call``, the Deep Agents adapter) need.

    The arguments are :func:`file_tools`' (checked when a worker is configured);
    ``tuning`` (None: a tools worker's, :meth:`WorkerTuning.for_roles`).
    """
    served = dict(backends)

    def tools(store: ArtifactStore | None, batch_calls: bool) -> list[Callable[..., Any]]:
        built = file_tools(
            served, journal_dir, store, policies,
            allow_execute_with_policies=allow_execute_with_policies,
            batch_calls=batch_calls, journal_fsync=journal_fsync,
        )  # fmt: skip
        return with_preview(built)

    return WorkerRole(
        "tools",
        workflows=_operation_workflows,
        activities=tools,
        artifacts=artifacts,
        tuning=tuning or WorkerTuning.for_roles(agent=False, tools=True),
    )


async def run_until_stopped(worker: Worker, stop: asyncio.Event | None = None) -> None:
    """Run ``worker`` until SIGTERM/SIGINT (or ``stop``), then shut down gracefully."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # not the main thread / platform
            pass
    try:
        async with worker:
            log.info("worker polling task queue %s", worker.task_queue)
            await stop.wait()
            log.info("stopping worker on %s", worker.task_queue)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


@asynccontextmanager
async def in_process_workers(
    client: Client,
    agent_queue: str,
    tools_queue: str,
    backends: dict[str, BackendProtocol],
    journal_dir: Path,
    artifacts: ArtifactStore | None = None,
    *,
    settings: Settings | None = None,
    policies: PolicyConfig | None = None,
) -> AsyncIterator[None]:
    """An agent worker and one tools worker, polling for the duration of the block.

    The tools worker co-hosts (``serve_agents``): a run started on ``tools_queue``
    calls its backends without a trip through the server, while ``agent_queue``
    still serves runs started there (an earlier version's, resumed).
    ``artifacts`` goes to both: transcripts by reference on the agent side,
    large-result offload and ``/large_tool_results/`` / ``/conversation_history/``
    reads on the tools side. ``settings`` (None: the defaults) give the model
    profiles, the journal's fsync and the execute-with-policies consent;
    ``policies`` the tools worker's policies (None: none).
    """
    settings = settings or Settings()
    profiles = profiles_from(settings.models)
    tuned: dict[str, Any] = {
        "artifacts": artifacts,
        "policies": policies,
        "allow_execute_with_policies": settings.commands.allow_execute_with_policies,
        "journal_fsync": settings.journal.fsync,
    }
    async with (
        agent_worker(client, agent_queue, model_profiles=profiles, **tuned),
        tools_worker(
            client,
            tools_queue,
            backends,
            journal_dir,
            serve_agents=True,
            model_profiles=profiles,
            **tuned,
        ),  # fmt: skip
    ):
        yield
