"""Filegate's typed configuration errors fail a workflow on a worker built by the plugin.

``FilegatePlugin`` registers :data:`filegate.plugin.WORKFLOW_FAILURE_TYPES` as
the worker's workflow failure types. Why it matters: a user's workflow that
checks its rules with the kernel's execute gate raises ``ExecuteGateError``, a
``ValueError``; unregistered, that fails only the workflow task, which
Temporal retries until the code changes, so the run hangs with no answer.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.worker import Worker

from filegate.backends.settings import Settings
from filegate.plugin import WORKFLOW_FAILURE_TYPES, FilegatePlugin

with workflow.unsafe.imports_passed_through():
    from filegate.kernel.execute_gate import ExecuteGateError, check_execute_gate
    from filegate.kernel.permissions import FilesystemPermission

pytestmark = pytest.mark.services


@workflow.defn(name="GateCheckingHost")
class GateCheckingHost:
    """A user's workflow that checks its rules before it runs any tool."""

    @workflow.run
    async def run(self) -> str:
        deny = FilesystemPermission(operations=["read"], paths=["/secret/**"], mode="deny")
        check_execute_gate([deny], backend="host-shell", can_execute=True)
        return "ran"


def test_the_gate_error_is_registered() -> None:
    assert ExecuteGateError in WORKFLOW_FAILURE_TYPES


async def test_a_rule_the_shell_could_bypass_fails_the_workflow(temporal_client: Client) -> None:
    queue = f"failure-types-{uuid.uuid4().hex[:8]}"
    plugin = FilegatePlugin(artifacts=None, settings=Settings(), tracer_provider=None)
    async with Worker(
        temporal_client, task_queue=queue, workflows=[GateCheckingHost], plugins=[plugin]
    ):
        handle = await temporal_client.start_workflow(
            GateCheckingHost.run, id=queue, task_queue=queue
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), timeout=20)
    assert "/secret/**" in str(failed.value.cause)


async def test_without_the_plugin_the_run_hangs(temporal_client: Client) -> None:
    """What the registration prevents: a bare worker retries the task, the run stays open."""
    queue = f"failure-types-bare-{uuid.uuid4().hex[:8]}"
    async with Worker(temporal_client, task_queue=queue, workflows=[GateCheckingHost]):
        handle = await temporal_client.start_workflow(
            GateCheckingHost.run, id=queue, task_queue=queue
        )
        await asyncio.sleep(3)
        described = await handle.describe()
        assert described.status == WorkflowExecutionStatus.RUNNING
        await handle.terminate("test over")
