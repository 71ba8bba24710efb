"""An OpenAI Agents SDK agent working on files through Filegate, durable under Temporal.

The agent and its loop run in :class:`FileAgentWorkflow`; every model call is
an activity (``OpenAIAgentsPlugin``), every file tool call goes through
Filegate's ``FileTools`` (permission rules, approvals, read-before-edit) to a
``filegate.<tool>`` activity on a Filegate tools worker that holds the
workspace. Run it against OpenAI (``OPENAI_API_KEY``, optionally
``OPENAI_BASE_URL`` for a compatible server) with an embedded Temporal dev
server::

    python docs/examples/openai_agents_example.py --root /tmp/ws \\
        "Write /hello.txt saying hi, then read it back."

``tests/integrations/test_openai_agents.py`` runs :func:`run_example` against a local
server speaking the Responses API, and :class:`FileAgentWorkflow` with
approvals, a local backend and a composite one.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel
from temporalio import workflow

# Workflow code: the agent SDK and Filegate's workflow-side modules are pure,
# so share them with the sandbox rather than re-import them for every run.
# ``filegate.workflows``'s lazy exports import through ``__import__``, so inside
# this block FileTools resolves to the worker's own module (docs/own-workflow.md).
with workflow.unsafe.imports_passed_through():
    from agents import Agent, RunConfig, Runner

    from filegate.integrations.openai_agents import (
        FileToolsRunner,
        filegate_instructions,
        filegate_tools,
    )
    from filegate.workflows import FileTools, FileToolsConfig, Message


class FileAgentInput(BaseModel):
    task: str
    files: FileToolsConfig
    """Backends (task queues of the tools workers), permission rules, approvals."""
    model: str = "gpt-4.1-mini"
    tracing: bool = False
    """Export the SDK's traces to OpenAI (needs a real key)."""


@workflow.defn
class FileAgentWorkflow:
    """One task, one agent: Filegate's tools, Filegate's system prompt, the SDK's loop."""

    @workflow.init
    def __init__(self, input: FileAgentInput) -> None:
        # Built before any query or update is delivered: FileTools registers the
        # approval handlers (pending_approvals, decide) that the CLI and UI use.
        # The task is quoted on the reviewers' approval cards.
        self.files = FileTools(input.files, messages=[Message(role="user", content=input.task)])

    @workflow.run
    async def run(self, input: FileAgentInput) -> str:
        runner = FileToolsRunner(self.files)
        agent = Agent(
            name="file-agent",
            instructions=filegate_instructions(runner),
            model=input.model,
            tools=filegate_tools(runner),
        )
        result = await Runner.run(
            agent, input.task, run_config=RunConfig(tracing_disabled=not input.tracing)
        )
        return str(result.final_output)


async def run_example(
    temporal_address: str,
    root: Path,
    task: str,
    *,
    namespace: str = "default",
    model_base_url: str | None = None,
    api_key: str | None = None,
    model: str = "gpt-4.1-mini",
    workflow_id: str | None = None,
) -> str:
    """Start an agent worker and a tools worker on ``root``, run one task, return the answer.

    Two clients on purpose: the agent side carries the OpenAI plugin (its
    payload converter, model activity and sandbox settings) and, after it,
    ``FilegatePlugin`` (Filegate's modules passed through the sandbox, the S3
    payload codec when one is configured); the tools side carries only
    ``FilegatePlugin`` serving the workspace, as it would in its own process
    (``filegate worker --role tools``).
    """
    from agents import OpenAIProvider
    from openai import AsyncOpenAI
    from temporalio.client import Client
    from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
    from temporalio.worker import Worker

    from filegate import FilegatePlugin
    from filegate.backends import BackendProtocol, FilesystemBackend
    from filegate.workflows import BackendRef, BackendSpec

    # Retries belong to the model activity, not to the HTTP client inside it.
    openai_client = AsyncOpenAI(base_url=model_base_url, api_key=api_key, max_retries=0)
    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=120)),
        model_provider=OpenAIProvider(openai_client=openai_client),
    )
    # FilegatePlugin after the OpenAI plugin: it keeps that plugin's converter.
    agent_client = await Client.connect(
        temporal_address, namespace=namespace, plugins=[plugin, FilegatePlugin()]
    )
    run_id = uuid.uuid4().hex[:8]
    agent_queue, tools_queue = f"agent-{run_id}", f"tools-{run_id}"
    backends: dict[str, BackendProtocol] = {
        "workspace": FilesystemBackend(str(root), virtual_mode=True)
    }
    files = FileToolsConfig(
        backend=BackendSpec(
            default=BackendRef(kind="remote", name="workspace", task_queue=tools_queue)
        )
    )
    with tempfile.TemporaryDirectory(prefix="filegate-journal-") as journal:
        tools_client = await Client.connect(
            temporal_address,
            namespace=namespace,
            plugins=[FilegatePlugin(backends=backends, journal_dir=journal)],
        )
        async with (
            Worker(agent_client, task_queue=agent_queue, workflows=[FileAgentWorkflow]),
            Worker(tools_client, task_queue=tools_queue),  # the filegate.<tool> activities
        ):
            return await agent_client.execute_workflow(
                FileAgentWorkflow.run,
                FileAgentInput(task=task, files=files, model=model),
                id=workflow_id or f"file-agent-{run_id}",
                task_queue=agent_queue,
            )


async def _main() -> None:
    from filegate import TemporalDevServer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task")
    parser.add_argument("--root", type=Path, required=True, help="the agent's workspace")
    parser.add_argument("--model", default="gpt-4.1-mini")
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as state, TemporalDevServer(Path(state)) as server:
        print(await run_example(server.address, args.root, args.task, model=args.model))


if __name__ == "__main__":
    asyncio.run(_main())
