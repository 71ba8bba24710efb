"""Filegate's workflows start with the short workflow task timeout on every client path.

Why it matters: a workflow task handed to an agent worker that then dies is
retried only when the task timeout passes (Temporal's default: 10 s). The CLI
always started runs with ``WORKFLOW_TASK_TIMEOUT``; a library user following the
README (``Client.connect(..., plugins=[FilegatePlugin()])`` and a plain
``start_workflow``) did not, and a SIGKILL stalled the run 10.6 s (issue 36).
``bench/agent_recovery.py`` measures the kill itself on the README's path; these
tests pin which starts get the short timeout and that a caller's choice wins.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from filegate import FilegatePlugin
from filegate.backends.settings import Settings, TemporalSettings
from filegate.devstack.servers import TemporalDevServer
from filegate.kernel.messages import ModelSpec
from filegate.plugin import connect
from filegate.wiring.connection import WORKFLOW_TASK_TIMEOUT
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec

pytestmark = pytest.mark.services

INPUT = AgentInput(
    task="nothing",
    model=ModelSpec(provider="scripted", name="idle"),
    backend=BackendSpec(default=BackendRef(kind="remote", name="fs", task_queue="nobody")),
)


async def _task_timeout(handle: WorkflowHandle[Any, Any]) -> timedelta:
    try:
        config = (await handle.describe()).raw_description.execution_config
        return config.default_workflow_task_timeout.ToTimedelta()
    finally:
        await handle.terminate("test")


async def _plugin_client(server: TemporalDevServer) -> Client:
    return await Client.connect(
        server.address, namespace=server.namespace, plugins=[FilegatePlugin(artifacts=None)]
    )


async def _connect_client(server: TemporalDevServer) -> Client:
    temporal = TemporalSettings(address=server.address, namespace=server.namespace)
    settings = Settings(temporal=temporal)
    return await connect(settings, artifacts=None)


@pytest.mark.parametrize("make", [_plugin_client, _connect_client], ids=["plugin", "connect"])
async def test_an_agent_run_gets_the_short_task_timeout(
    temporal_server: TemporalDevServer, make: object
) -> None:
    client = await make(temporal_server)  # type: ignore[operator]
    handle = await client.start_workflow(
        AgentWorkflow.run, INPUT, id=f"short-{uuid.uuid4().hex}", task_queue="nobody-agent"
    )
    assert await _task_timeout(handle) == WORKFLOW_TASK_TIMEOUT


async def test_the_callers_task_timeout_wins(temporal_server: TemporalDevServer) -> None:
    client = await _plugin_client(temporal_server)
    handle = await client.start_workflow(
        AgentWorkflow.run,
        INPUT,
        id=f"own-{uuid.uuid4().hex}",
        task_queue="nobody-agent",
        task_timeout=timedelta(seconds=17),
    )
    assert await _task_timeout(handle) == timedelta(seconds=17)


async def test_other_workflow_types_keep_the_servers_default(
    temporal_server: TemporalDevServer,
) -> None:
    client = await _plugin_client(temporal_server)
    handle: WorkflowHandle[object, object] = await client.start_workflow(
        "SomeoneElsesWorkflow", id=f"other-{uuid.uuid4().hex}", task_queue="nobody-other"
    )
    assert await _task_timeout(handle) == timedelta(seconds=10)
