"""The client every Filegate process shares: its data converter and S3 payload codec, the
artifact store behind them, and the short workflow task timeout of Filegate's runs.

Below the plugin (which builds clients and workers from these) and above the
workflows; the environment is never read here: the CLI and the plugin's
defaults pass typed settings.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from temporalio import client as client_interceptor
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import DataConverter, DefaultPayloadConverter

from filegate.activities.history import (
    ArtifactPayloadCodec,
    InlineMarkingPayloadConverter,
    SharedPayloadConverter,
    filegate_data_converter,
)
from filegate.backends.settings import S3Settings
from filegate.kernel.wire import OPERATION_WORKFLOW_TYPE, WORKFLOW_TYPE

if TYPE_CHECKING:
    from filegate.backends.artifacts import ArtifactStore


class ConfigError(Exception):
    """A configuration or connection failure: one clear line, and the exit code a
    command line should end with (the CLI's ``CliError`` is a subclass)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


FROM_SETTINGS: Literal["settings"] = "settings"
"""``connect(artifacts=FROM_SETTINGS)``: the artifact store of the configured S3, if any."""


def with_payload_codec(client: Client, store: ArtifactStore | None) -> Client:
    """``client`` (same connection) with the converter for ``store``; as is without one."""
    if store is None:
        return client
    config = client.config()
    config["data_converter"] = with_filegate_codec(client.data_converter, store)
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


_OURS = (
    DefaultPayloadConverter,
    PydanticPayloadConverter,
    SharedPayloadConverter,
    InlineMarkingPayloadConverter,
)
"""Payload converters the plugin replaces by Filegate's; any other one (another
plugin's, such as ``OpenAIAgentsPlugin``'s) is kept and only gets the codec."""


def with_filegate_codec(
    existing: DataConverter | None, store: ArtifactStore | None
) -> DataConverter:
    """``existing`` with Filegate's payload converter and, with ``store``, its S3 codec.

    The SDK's default and the pydantic converter become Filegate's (the one
    :func:`~filegate.activities.history.filegate_data_converter` builds);
    another payload converter is kept, since another plugin put it there, and
    gets the codec only. A payload codec of someone else's is refused rather
    than silently replaced: the payloads it encoded would no longer decode.
    """
    base = existing or DataConverter.default
    kept = base.payload_codec
    if store is None and isinstance(kept, ArtifactPayloadCodec):
        # A copy of a client this plugin configured, since given a store
        # (``with_payload_codec``): keep that codec, and the converter that goes with
        # it, which keeps inline-only payloads (query answers, local activity inputs).
        ours = filegate_data_converter(kept.store)
    else:
        ours = filegate_data_converter(store)
    payload_class = base.payload_converter_class
    if payload_class in _OURS:
        payload_class = ours.payload_converter_class
    codec = base.payload_codec
    if store is not None:
        if codec is not None and not isinstance(codec, ArtifactPayloadCodec):
            raise ConfigError(
                f"the client already has a payload codec ({type(codec).__name__}); "
                "FilegatePlugin's S3 codec cannot be combined with it"
            )
        codec = ours.payload_codec
    return dataclasses.replace(base, payload_converter_class=payload_class, payload_codec=codec)


__all__ = [
    "FROM_SETTINGS",
    "SHORT_TASK_WORKFLOWS",
    "WORKFLOW_TASK_TIMEOUT",
    "ConfigError",
    "ShortWorkflowTasks",
    "configured_store",
    "settings_store",
    "with_filegate_codec",
    "with_payload_codec",
]
