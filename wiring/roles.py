"""Worker roles: one worker's share of Filegate (a role's workflows and activities, its
tuning, the sandbox runner and failure types), as worker-level plugins.

:class:`~filegate.plugin.FilegatePlugin` composes these for a client and its
workers; :mod:`filegate.worker`'s factories give them to one ``Worker`` with
explicit values. Nothing here is client-wide, and nothing reads the environment.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union, cast

from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.worker import Plugin as WorkerPlugin
from temporalio.worker import (
    Replayer,
    ReplayerConfig,
    Worker,
    WorkerConfig,
    WorkflowReplayResult,
)

from filegate.backends.settings import ModelSettings
from filegate.kernel.command_rules import CommandPrefixError
from filegate.kernel.execute_gate import ExecuteGateError
from filegate.wiring.connection import ConfigError
from filegate.wiring.tuning import NO_TUNING, WorkerTuning

if TYPE_CHECKING:
    from filegate.activities.providers.profiles import ModelProfiles
    from filegate.activities.tools import FileToolActivities
    from filegate.backends.artifacts import ArtifactStore
    from filegate.backends.policy import PolicyConfig
    from filegate.kernel.protocol import BackendProtocol

_Config = WorkerConfig | ReplayerConfig

# --- Worker-level roles ----------------------------------------------------
#
# A plugin on ``Client.connect`` configures every worker built from that client,
# so a role given there (``FilegatePlugin(agent=True)``) made every worker of the
# process an agent worker. A role below is a worker plugin only: give it to the
# one ``Worker`` that should serve it; the client keeps what every process shares
# (the converter and codec, from ``FilegatePlugin()`` or :func:`connect`).


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


__all__ = [
    "FROM_CLIENT",
    "WORKFLOW_FAILURE_TYPES",
    "ArtifactsSource",
    "WorkerRole",
    "agent_role",
    "file_tools",
    "profiles_from",
    "tools_role",
    "with_filegate_runner",
    "with_preview",
]
