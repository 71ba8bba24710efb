"""The server's limit on one workflow task completion, measured (issue 49, item 1).

The payload codec's inline budget per task (``CODEC_INLINE_BUDGET_BYTES``) is
only safe if it sits well below what the server accepts in one completion. This
measures it on the real dev server instead of assuming it: a workflow whose
first task schedules ``n`` activities with 1 MiB inline inputs each. Three
(3 MiB) are accepted; five (5 MiB) make the server terminate the run with
``GrpcMessageTooLarge``, the failure that lost read-heavy runs during an S3
outage. A bare worker on purpose: its subject is the server, not Filegate's wiring.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Worker

from filegate.activities.history import CODEC_INLINE_BUDGET_BYTES, CODEC_INLINE_FALLBACK_BYTES
from tests.scripting import uid

pytestmark = pytest.mark.services

MIB = 1024 * 1024


@activity.defn(name="limit-probe.size")
async def size_of(data: str) -> int:
    return len(data)


@workflow.defn(name="limit-probe")
class ManyInlineInputs:
    @workflow.run
    async def run(self, n: int) -> int:
        data = "x" * (MIB - 64)
        sizes = await asyncio.gather(
            *(
                workflow.execute_activity(
                    size_of, data, start_to_close_timeout=timedelta(seconds=30)
                )
                for _ in range(n)
            )
        )
        return sum(sizes)


async def outcome(client: Client, queue: str, n: int) -> WorkflowExecutionStatus | None:
    handle = await client.start_workflow(
        ManyInlineInputs.run, n, id=uid("limit-probe"), task_queue=queue
    )
    for _ in range(150):
        status = (await handle.describe()).status
        if status != WorkflowExecutionStatus.RUNNING:
            return status
        await asyncio.sleep(0.1)
    return None


async def test_the_server_refuses_a_completion_over_its_limit_and_the_budget_is_below_it(
    temporal_client: Client,
) -> None:
    queue = uid("limit-probe")
    async with Worker(
        temporal_client, task_queue=queue, workflows=[ManyInlineInputs], activities=[size_of]
    ):
        accepted = await outcome(temporal_client, queue, 3)
        refused = await outcome(temporal_client, queue, 5)
    assert accepted == WorkflowExecutionStatus.COMPLETED
    assert refused == WorkflowExecutionStatus.TERMINATED
    # What the codec may keep inline in one task (one payload of at most the
    # fallback size, all of them within the budget) leaves 2 MiB of the accepted
    # 3 for the rest of the completion.
    assert CODEC_INLINE_FALLBACK_BYTES <= CODEC_INLINE_BUDGET_BYTES <= MIB
