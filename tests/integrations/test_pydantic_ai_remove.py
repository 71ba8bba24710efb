"""A removal an ``interrupt`` rule covers, and a host without Filegate's approval handlers.

The second interrupted operation the workspace can have approved is
``remove`` (as Filegate's ``delete``): the agent's tool defers, the workflow's
``FileTools`` holds the approval, the ``decide`` update approves it (the same
update ``filegate approve`` sends), and only then is the file gone. A host
workflow that built no ``FileTools`` fails with one clear error instead of
retrying its task forever, and nothing is removed.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.durable_exec.temporal import (
        PydanticAIPlugin,
        PydanticAIWorkflow,
        TemporalDurability,
    )
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from filegate import FilegatePlugin
    from filegate.backends import FilesystemBackend, FilesystemPermission
    from filegate.devstack.servers import TemporalDevServer
    from filegate.integrations.pydantic_ai import (
        FilegateCapability,
        FilegateFileWorkspace,
        pydantic_ai_data_converter,
    )
    from filegate.workflows import Decision, FileTools

pytestmark = [pytest.mark.slow, pytest.mark.services]

QUEUE = "pai-remove"
RULES = [FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="interrupt")]
WORKSPACE = FilegateFileWorkspace(backend="rm", task_queue=QUEUE, permissions=RULES)


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    answered = [
        str(getattr(part, "content", ""))
        for message in messages
        for part in getattr(message, "parts", [])
        if getattr(part, "part_kind", "") == "tool-return"
    ]
    if answered:
        return ModelResponse(parts=[TextPart(" | ".join(answered))])
    return ModelResponse(parts=[ToolCallPart("remove_note", {"path": "/docs/old.md"})])


remover = Agent(
    FunctionModel(script),
    name="remover",
    capabilities=[TemporalDurability(), FilegateCapability(WORKSPACE)],
)


@remover.tool
async def remove_note(ctx: RunContext[None], path: str) -> str:
    await ctx.workspace.remove(path)
    return f"removed {path}"


@workflow.defn
class RemoverWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (remover,)

    @workflow.init
    def __init__(self) -> None:
        self.file_tools = FileTools(WORKSPACE.file_tools_config())

    @workflow.run
    async def run(self) -> str:
        return str((await remover.run("Remove the old note.")).output)


@workflow.defn
class NoHandlersWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (remover,)

    @workflow.run
    async def run(self) -> str:
        return str((await remover.run("Remove the old note.")).output)


async def test_an_interrupted_removal_runs_only_after_the_decision(
    temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "old.md").write_text("old\n")
    plugin = FilegatePlugin(
        backends={"rm": FilesystemBackend(root)}, journal_dir=tmp_path / "journal", artifacts=None
    )
    client = await Client.connect(
        temporal_server.address,
        namespace=temporal_server.namespace,
        plugins=[plugin, PydanticAIPlugin()],
        data_converter=pydantic_ai_data_converter(),
    )
    async with Worker(client, task_queue=QUEUE, workflows=[RemoverWorkflow, NoHandlersWorkflow]):
        handle = await client.start_workflow(
            RemoverWorkflow.run, id=f"pai-rm-{uuid.uuid4().hex[:8]}", task_queue=QUEUE
        )
        waiting: list[dict[str, Any]] = []
        for _ in range(300):
            waiting = await handle.query("pending_approvals")
            if waiting and not any(item["preview_pending"] for item in waiting):
                break
            await asyncio.sleep(0.1)
        assert [item["tool"] for item in waiting] == ["delete"]
        assert (root / "docs" / "old.md").exists()  # nothing removed before the decision
        await handle.execute_update(
            "decide", Decision(id=waiting[0]["id"], decision="approve", reviewer="rm-tester")
        )
        answer = await asyncio.wait_for(handle.result(), 120)
        assert answer == "removed /docs/old.md"
        assert not (root / "docs" / "old.md").exists()

        (root / "docs" / "old.md").write_text("old\n")
        bare = await client.start_workflow(
            NoHandlersWorkflow.run, id=f"pai-bare-{uuid.uuid4().hex[:8]}", task_queue=QUEUE
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(bare.result(), 120)
        assert "has no file_tools" in str(failed.value.cause)
        assert (root / "docs" / "old.md").exists()
