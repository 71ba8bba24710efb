"""Where a finished workflow's artifacts live: its run chain's scope (contract §11)."""

from __future__ import annotations

from temporalio.client import Client

from filegate.kernel.artifacts import chain_scope


async def scope_of(client: Client, workflow_id: str) -> str:
    """``<workflow id>@<first run id>`` of the latest run chain under ``workflow_id``."""
    description = await client.get_workflow_handle(workflow_id).describe()
    first = description.raw_description.workflow_execution_info.first_run_id
    return chain_scope(workflow_id, first or description.run_id)
