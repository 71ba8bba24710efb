"""A Pydantic AI agent under Temporal whose workspace is Filegate (docs/pydantic-ai.md).

The agent writes two notes through ``ctx.workspace``. One path is free; an
``interrupt`` rule covers the other, so that write waits, inside the agent's
workflow, for a human decision through Filegate's approval handlers: the one
``filegate approvals`` lists and ``filegate approve`` decides. One worker
hosts everything: the agent's workflow and Pydantic AI's activities
(``PydanticAIPlugin``) next to a Filegate tools worker over a directory
(``FilegatePlugin``), on one client whose data converter both plugins keep
(:func:`~filegate.integrations.pydantic_ai.pydantic_ai_data_converter`).

The model is a Pydantic AI ``FunctionModel`` with a fixed script, so the
example needs no API key and no network. Run it on its own (embedded Temporal
dev server, approves the write itself)::

    python docs/examples/pydantic_ai_agent.py ./some/workspace

``tests/integrations/test_pydantic_ai_agent.py`` runs :func:`main` and approves with the
``filegate approve`` command line instead.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.durable_exec.temporal import (
        PydanticAIPlugin,
        PydanticAIWorkflow,
        TemporalDurability,
    )
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from filegate import FilegatePlugin
    from filegate.backends import FilesystemBackend, FilesystemPermission
    from filegate.integrations.pydantic_ai import (
        FilegateCapability,
        FilegateFileWorkspace,
        pydantic_ai_data_converter,
    )
    from filegate.workflows import Decision, FileTools

TASK_QUEUE = "pydantic-ai-notes"
"""One queue: the agent's workflow, Pydantic AI's activities and Filegate's tools."""

RULES = [FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="interrupt")]
"""Writes under /docs wait for a human; everything else runs unasked."""

WORKSPACE = FilegateFileWorkspace(backend="notes", task_queue=TASK_QUEUE, permissions=RULES)
"""No client: in Pydantic AI's tool activities it uses the activity's own."""


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The scripted model: two writes, then a summary of what the tools answered."""
    answers = [
        str(part.content)
        for message in messages
        for part in getattr(message, "parts", [])
        if isinstance(part, ToolReturnPart)
    ]
    if answers:
        return ModelResponse(parts=[TextPart("Done. " + " | ".join(answers))])
    return ModelResponse(
        parts=[
            ToolCallPart("write_note", {"path": "/notes/today.md", "text": "standup at 10\n"}),
            ToolCallPart("write_note", {"path": "/docs/plan.md", "text": "the plan\n"}),
        ]
    )


agent = Agent(
    FunctionModel(script),
    name="notes",
    capabilities=[TemporalDurability(), FilegateCapability(WORKSPACE)],
)


@agent.tool
async def write_note(ctx: RunContext[None], path: str, text: str) -> str:
    """Write a note to ``path`` (the workspace is Filegate's)."""
    await ctx.workspace.write_text(path, text)
    return f"wrote {path}"


@workflow.defn
class NotesWorkflow(PydanticAIWorkflow):
    """Runs the agent; its ``FileTools`` holds the approval handlers Filegate's clients use."""

    __pydantic_ai_agents__ = (agent,)

    @workflow.init
    def __init__(self, task: str) -> None:
        self.file_tools = FileTools(WORKSPACE.file_tools_config())

    @workflow.run
    async def run(self, task: str) -> str:
        result = await agent.run(task)
        return str(result.output)


Decide = Callable[[str, str], Awaitable[None]]
"""``decide(workflow_id, approval_id)``: how the pending approval gets its decision."""


async def main(
    address: str, namespace: str, workspace: Path, decide: Decide | None = None
) -> tuple[str, str]:
    """Serve ``workspace`` and run the agent once; returns the workflow id and its answer."""
    journal = Path(tempfile.mkdtemp(prefix="filegate-journal-"))
    filegate = FilegatePlugin(backends={"notes": FilesystemBackend(workspace)}, journal_dir=journal)
    client = await Client.connect(
        address,
        namespace=namespace,
        plugins=[filegate, PydanticAIPlugin()],
        data_converter=pydantic_ai_data_converter(),  # both plugins keep it (docs)
    )
    workflow_id = f"notes-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=TASK_QUEUE, workflows=[NotesWorkflow]):
        handle = await client.start_workflow(
            NotesWorkflow.run, "Write today's notes.", id=workflow_id, task_queue=TASK_QUEUE
        )
        while not (waiting := await handle.query("pending_approvals")) or any(
            item["preview_pending"] for item in waiting
        ):
            await asyncio.sleep(0.2)
        if decide is None:
            await handle.execute_update(
                "decide", Decision(id=waiting[0]["id"], decision="approve", reviewer="example")
            )
        else:
            await decide(workflow_id, waiting[0]["id"])
        return workflow_id, await handle.result()


async def _standalone(workspace: Path) -> None:
    from filegate import TemporalDevServer

    with TemporalDevServer(tempfile.mkdtemp(prefix="filegate-temporal-")) as server:
        _, answer = await main(server.address, server.namespace, workspace)
        print(answer)


if __name__ == "__main__":
    asyncio.run(_standalone(Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())))
