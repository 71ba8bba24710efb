"""One Temporal plugin for Filegate: ``Client.connect(..., plugins=[FilegatePlugin(...)])``.

A program that builds its own ``Client`` and ``Worker`` (instead of
:func:`filegate.plugin.connect`, :func:`~filegate.worker.agent_worker` and
:func:`~filegate.worker.tools_worker`) gets everything Filegate needs from one
object, the way Temporal's own integrations (``OpenAIAgentsPlugin``) do:

- on the client: the data converter every Filegate process must share (the
  pydantic converter, plus the S3 payload codec when there is an artifact
  store, :func:`~filegate.activities.history.filegate_data_converter`);
- on every worker built from that client (or given the plugin): the workflow
  runner (the sandbox with Filegate's pure modules passed through, context-free
  when the converter is), and the workflows and activities of the roles asked
  for, *added* to the worker's own: ``agent=True`` serves ``AgentWorkflow`` and
  the model activity; ``backends`` serve the ``filegate.<tool>`` activities,
  ``filegate.preview``, batching over them, and one operation outside a
  workflow (``OperationWorkflow`` and ``filegate.transfer.*``, for ``filegate
  call`` and the Deep Agents adapter). Neither: a worker for workflows
  of your own that host ``FileTools`` over remote backends. The roles are the
  worker-level plugins of :mod:`filegate.worker` (``agent_role``,
  ``tools_role``); give one to a single ``Worker`` to serve it there alone.

On the client it also starts Filegate's workflow types with the short workflow
task timeout when the caller names none (:class:`~filegate.wiring.connection.ShortWorkflowTasks`).

Observability (docs/observability.md): ``tracer_provider`` traces the client,
its workers and Filegate's own spans (default: OTLP over HTTP when
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set and the ``otel`` extra is installed,
else none); ``metrics_port`` / ``metrics_address`` serve Prometheus text at
``/metrics`` from the client's Temporal runtime: the SDK's metrics and
Filegate's, on one endpoint.

The store comes from typed settings (``FILEGATE_S3_*``) or the ``artifacts``
argument; it never travels in a workflow input. :mod:`filegate.worker`'s
factories (``filegate worker``, ``filegate run``) build their workers from the
same roles, with explicit values: there is one wiring path.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.service import ConnectConfig, ServiceClient, TLSConfig
from temporalio.worker import (
    ReplayerConfig,
    WorkerConfig,
)

from filegate.activities.history import ArtifactPayloadCodec
from filegate.activities.telemetry import (
    Telemetry,
    metrics_bind_address,
    otlp_tracer_provider,
    traces_configured,
)
from filegate.backends.policy import PolicyConfig
from filegate.backends.settings import Settings
from filegate.wiring.connection import (
    FROM_SETTINGS,
    ConfigError,
    ShortWorkflowTasks,
    configured_store,
    settings_store,
    with_filegate_codec,
)
from filegate.wiring.roles import WORKFLOW_FAILURE_TYPES as WORKFLOW_FAILURE_TYPES
from filegate.wiring.roles import (
    WorkerRole,
    agent_role,
    profiles_from,
    tools_role,
    with_filegate_runner,
)
from filegate.wiring.tuning import NO_TUNING
from filegate.wiring.tuning import WorkerTuning as WorkerTuning

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from filegate.activities.providers.profiles import ModelProfiles
    from filegate.backends.artifacts import ArtifactStore
    from filegate.kernel.protocol import BackendProtocol

_UNRESOLVED: Any = object()
"""The store has not been opened yet (it is opened once, on first need)."""

FROM_ENV: Literal["env"] = "env"
"""``FilegatePlugin(tracer_provider=FROM_ENV)`` (the default): OTLP over HTTP when the
``OTEL_*`` environment names an endpoint, else no traces."""

log = logging.getLogger("filegate.plugin")


class FilegatePlugin(SimplePlugin):
    """Filegate's converter, runner, workflows and activities for a client and its workers.

    ``agent``: serve ``AgentWorkflow``, ``SessionWorkflow`` (``filegate mcp``'s
    sessions) and the ``filegate.model`` activity (models from
    ``model_profiles``, default the settings' profiles).
    ``backends`` (with ``journal_dir``, their idempotency journal): serve their
    file tools; to ``kind="remote"`` refs on this worker's task queue and, with
    ``agent`` or a workflow of your own, to ``kind="local"`` refs as local
    activities. ``policies`` (None: ``FILEGATE_POLICY_FILE`` / ``FILEGATE_POLICY_JSON``)
    and ``allow_execute_with_policies`` (None: the settings') are as for
    :func:`~filegate.wiring.roles.file_tools`.

    ``artifacts``: the S3 artifact store (payload codec, transcripts by
    reference, large-result offload); ``"settings"`` (default) opens the one
    ``settings`` configure (``FILEGATE_S3_*``; none without an endpoint), None
    keeps everything inline. ``settings`` (default: the environment's): its ``s3``
    group opens that store, ``models`` the default profiles, ``journal`` the
    journal's fsync and ``commands`` the execute-with-policies consent.

    ``agent`` and ``backends`` are a shorthand for the worker roles
    (:func:`~filegate.wiring.roles.agent_role`, :func:`~filegate.wiring.roles.tools_role`)
    that every worker built from this plugin's client then serves. For workers
    of different roles in one process, leave them out here
    (``FilegatePlugin()`` on the client: the converter, codec, runner and
    failure types) and give each ``Worker`` its role: ``Worker(client,
    task_queue=..., plugins=[tools_role(...)])``.
    Next to ``OpenAIAgentsPlugin``, list this plugin after it: that plugin
    refuses any converter but its own, and this one keeps it and adds the codec.

    ``tracer_provider``: where the client's, its workers' and Filegate's spans go
    (``execute_tool {tool}``, ``chat {model}``, ``approval_wait {tool}``); ``"env"``
    (default): an OTLP/HTTP exporter when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
    ``..._TRACES_ENDPOINT``) is set, else none; None: none. ``metrics_port``
    (on 127.0.0.1) or ``metrics_address`` (``host:port``): serve Prometheus text at
    ``/metrics`` through the client's Temporal runtime (give the plugin to
    ``Client.connect``: a runtime cannot be added to a connected client).

    ``tuning``: its workers' poll counts, sticky timeout and heartbeat throttle
    (None: :meth:`WorkerTuning.for_roles`). ``check_codec`` False: a worker with a
    store accepts a client without Filegate's codec (large payloads stay inline).
    """

    def __init__(
        self,
        *,
        agent: bool = False,
        backends: dict[str, BackendProtocol] | None = None,
        journal_dir: str | Path | None = None,
        artifacts: ArtifactStore | Literal["settings"] | None = FROM_SETTINGS,
        settings: Settings | None = None,
        model_profiles: ModelProfiles | None = None,
        policies: PolicyConfig | None = None,
        allow_execute_with_policies: bool | None = None,
        tracer_provider: TracerProvider | Literal["env"] | None = FROM_ENV,
        metrics_port: int | None = None,
        metrics_address: str | None = None,
        tuning: WorkerTuning | None = None,
        check_codec: bool = True,
    ) -> None:
        if backends and journal_dir is None:
            raise ValueError("backends need a journal_dir for their idempotency journal")
        self.agent = agent
        self.backends = dict(backends or {})
        self.journal_dir = journal_dir
        self.settings = settings or Settings.from_env()
        self.model_profiles = model_profiles
        # The plugin's defaults are one of the two places that read the environment
        # (the CLI is the other): the library below takes typed values only.
        if policies is None and self.backends:
            policies = PolicyConfig.from_env()
        self.policies = policies
        self.allow_execute_with_policies = allow_execute_with_policies
        self.tuning = tuning or WorkerTuning.for_roles(agent=agent, tools=bool(self.backends))
        self.check_codec = check_codec
        if isinstance(tracer_provider, str):  # the default: the OTEL_* environment decides
            configured = traces_configured(os.environ)
            tracer_provider = otlp_tracer_provider("filegate") if configured else None
        self.telemetry = Telemetry(
            tracer_provider, metrics_address or metrics_bind_address(metrics_port)
        )
        self._store: ArtifactStore | None = _UNRESOLVED if isinstance(artifacts, str) else artifacts
        self._roles: list[WorkerRole] | None = None
        super().__init__(
            "filegate.FilegatePlugin",
            data_converter=self._converter,
            interceptors=[ShortWorkflowTasks(), *self.telemetry.interceptors()],
        )

    def roles(self) -> list[WorkerRole]:
        """The worker roles asked for, sharing this plugin's store and tuned by it as a whole.

        Built on first need; the default model profiles are read (and a bad
        profile file reported) when the model activity is built for a worker,
        not with the plugin.
        """
        if self._roles is not None:
            return self._roles
        roles: list[WorkerRole] = []
        if self.agent:
            roles.append(
                agent_role(model_profiles=self._profiles, artifacts=self.store, tuning=NO_TUNING)
            )
        if self.backends:
            allow = self.allow_execute_with_policies
            if allow is None:
                allow = self.settings.commands.allow_execute_with_policies
            assert self.journal_dir is not None  # checked in __init__
            roles.append(
                tools_role(
                    self.backends, self.journal_dir, artifacts=self.store, policies=self.policies,
                    allow_execute_with_policies=allow, journal_fsync=self.settings.journal.fsync,
                    tuning=NO_TUNING,
                )
            )  # fmt: skip
        self._roles = roles
        return roles

    def _profiles(self) -> ModelProfiles:
        return self.model_profiles or profiles_from(self.settings.models)

    def store(self) -> ArtifactStore | None:
        """The artifact store, opened on first need (blocking when no connect did it)."""
        if self._store is _UNRESOLVED:
            self._store = settings_store(self.settings.s3)
        return self._store

    async def connect_service_client(
        self, config: ConnectConfig, next: Callable[[ConnectConfig], Awaitable[ServiceClient]]
    ) -> ServiceClient:
        """Connect, then open the settings' store off the event loop.

        ``Client.connect`` configures the client (and so asks for the store)
        right after this; opening it here keeps S3's round trips out of the
        loop. Temporal is reached first, so its failure is the one reported. With a
        metrics address the connection gets the runtime that serves it.
        """
        if self.telemetry.metrics_address is not None:
            config = self._with_metrics(config)
        service = await next(config)
        if self._store is _UNRESOLVED:
            self._store = await configured_store(self.settings.s3)
        return service

    def _with_metrics(self, config: ConnectConfig) -> ConnectConfig:
        if config.runtime is not None:
            log.warning(
                "FilegatePlugin: the client has its own Temporal runtime; metrics are not "
                "served on %s (configure Prometheus on that runtime)",
                self.telemetry.metrics_address,
            )
            return config
        try:
            runtime = self.telemetry.runtime()
        except ValueError as exc:
            raise ConfigError(str(exc), 2) from None
        return dataclasses.replace(config, runtime=runtime)

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Add the roles' workflows and activities, the runner and the tuning."""
        config = super().configure_worker(config)
        converter = config["client"].data_converter
        codec = converter.payload_codec
        lacks_codec = self.store() is not None and not isinstance(codec, ArtifactPayloadCodec)
        if self.check_codec and lacks_codec:
            # This worker would write large payloads inline and fail to read the
            # references every other process writes.
            raise ConfigError(
                "FilegatePlugin has an artifact store but the worker's client has no Filegate "
                "payload codec: give the plugin to Client.connect, or build the client with "
                "filegate.plugin.connect"
            )
        self.tuning.apply(config)
        for role in self.roles():
            role.configure_worker(config)
        with_filegate_runner(config)
        return config

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        """The converter (``SimplePlugin``), the roles' workflows and the runner the workers use."""
        config = super().configure_replayer(config)
        for role in self.roles():
            role.configure_replayer(config)
        with_filegate_runner(config)
        return config

    def _converter(self, existing: DataConverter | None) -> DataConverter:
        return with_filegate_codec(existing, self.store())


async def connect(
    settings: Settings | None = None,
    tls: TLSConfig | bool | None = None,
    *,
    artifacts: ArtifactStore | Literal["settings"] | None = FROM_SETTINGS,
    api_key: str | None = None,
    rpc_metadata: Mapping[str, str] | None = None,
    telemetry: Telemetry | None = None,
) -> Client:
    """A client built through :class:`FilegatePlugin`, every value explicit: the one
    client path of the command line, the examples and the tests.

    The plugin gives it the data converter every Filegate process must share
    (with an artifact store, the S3 payload codec: payloads over its threshold
    travel as references, so every process that encodes or decodes them --
    workers, ``run``, ``approvals``, ``status``, the UI -- needs the same store),
    the short workflow task timeout of Filegate's runs, and the traces and
    metrics of ``telemetry`` (None: none). ``artifacts``: by default the store
    the settings' S3 configures (none when no endpoint is set); pass a store or
    None to choose. Temporal is reached first, so its failure is the one
    reported. ``tls`` (None: plaintext), ``api_key``, ``rpc_metadata``: as
    resolved by the CLI. ``settings`` None: the defaults (127.0.0.1:7233, no
    S3); the environment is read by the caller (``Settings.from_env()``).
    """
    settings = settings or Settings()
    telemetry = telemetry or Telemetry()
    plugin = FilegatePlugin(
        artifacts=artifacts,
        settings=settings,
        tracer_provider=telemetry.tracer_provider,
        metrics_address=telemetry.metrics_address,
    )
    temporal = settings.temporal
    try:
        return await Client.connect(
            temporal.address,
            namespace=temporal.namespace,
            tls=False if tls is None else tls,
            api_key=api_key,
            rpc_metadata=rpc_metadata or {},
            plugins=[plugin],
        )
    except RuntimeError as exc:  # the core SDK reports connection failures this way
        raise ConfigError(
            f"cannot connect to Temporal at {temporal.address}: {exc}. Start a "
            "server first (`filegate dev` holds a local one until Ctrl-C) or pass "
            "yours in Settings.temporal.address (to the filegate command: --address "
            "or TEMPORAL_ADDRESS)."
        ) from None
