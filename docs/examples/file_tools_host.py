"""A workflow of your own with Filegate's whole tool kit (docs/own-workflow.md).

``ToolListWorkflow`` has no model: it runs the calls it is given through
:class:`filegate.workflows.FileTools`, which validates, routes, applies the
permission rules, waits for a human where a rule says so (the approval
handlers are registered on this workflow, so ``filegate approvals`` and
``filegate approve`` work for it), and runs each tool as an activity on its
backend's task queue. A real host would put its model loop where the list is:
offer ``tools.openai_tools()``, run what the model asks for with
``tools.run_turn(calls)``.

:func:`main` shows the workers: one client with ``FilegatePlugin()``, the file
tools on one worker (``tools_role``, as ``filegate worker --role tools`` would
serve them), your workflow on the other. ``tests/workflows/test_file_tools.py``
runs the workflow on the embedded servers, ``tests/worker/test_plugin.py`` runs
:func:`main`.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from filegate.workflows import FileTools, FileToolsConfig, FileToolsState, ToolCall

if TYPE_CHECKING:
    from pathlib import Path


@workflow.defn
class ToolListWorkflow:
    """Runs ``calls`` one by one; returns the tools offered, each answer and the state."""

    @workflow.init
    def __init__(self, config: FileToolsConfig, calls: list[dict[str, Any]]) -> None:
        # Built in @workflow.init: the approval handlers exist before any decision arrives.
        self.tools = FileTools(config)

    @workflow.run
    async def run(self, config: FileToolsConfig, calls: list[dict[str, Any]]) -> dict[str, Any]:
        answers = {}
        for call in calls:
            result = await self.tools.run(ToolCall.model_validate(call))
            answers[result.tool_call_id] = {"text": result.text, "error": result.is_error}
        return {
            "offered": [spec.name for spec in self.tools.specs()],
            "answers": answers,
            "state": self.tools.state().model_dump(mode="json"),
        }


@workflow.defn
class ContinuingWorkflow:
    """One call per run, continuing as new in between: ``FileTools.state()`` is what
    crosses over (State backend files, the read-before-edit set, approval
    records and counters), handed back as ``FileTools(config, state)``."""

    @workflow.init
    def __init__(
        self, config: FileToolsConfig, calls: list[dict[str, Any]], state: FileToolsState | None
    ) -> None:
        self.tools = FileTools(config, state)

    @workflow.run
    async def run(
        self, config: FileToolsConfig, calls: list[dict[str, Any]], state: FileToolsState | None
    ) -> list[str]:
        result = await self.tools.run(ToolCall.model_validate(calls[0]))
        if len(calls) > 1:
            workflow.continue_as_new(args=[config, calls[1:], self.tools.state()])
        return [result.text, str(self.tools.counts["tool_calls"])]


async def main(
    temporal_address: str,
    workspace: Path,
    calls: list[dict[str, Any]],
    *,
    namespace: str = "default",
    workflow_id: str | None = None,
) -> dict[str, Any]:
    """Serve ``workspace`` on a tools worker, run ``calls`` in :class:`ToolListWorkflow`.

    The client gets ``FilegatePlugin()``: its converter (with the S3 payload
    codec when ``FILEGATE_S3_*`` configure one) and, on every worker built from
    it, the sandbox Filegate's modules need. The tools worker gets the tools
    role, which serves the backends there alone; the host worker only lists
    your workflows.
    """
    import tempfile

    from temporalio.client import Client
    from temporalio.worker import Worker

    from filegate import FilegatePlugin, tools_role
    from filegate.backends import FilesystemBackend
    from filegate.workflows import BackendRef, BackendSpec

    run = uuid.uuid4().hex[:8]
    tools_queue, host_queue = f"tools-{run}", f"host-{run}"
    config = FileToolsConfig(
        backend=BackendSpec(
            default=BackendRef(kind="remote", name="workspace", task_queue=tools_queue)
        )
    )
    with tempfile.TemporaryDirectory(prefix="filegate-journal-") as journal:
        tools = tools_role({"workspace": FilesystemBackend(workspace)}, journal)
        client = await Client.connect(
            temporal_address, namespace=namespace, plugins=[FilegatePlugin()]
        )
        async with (
            Worker(client, task_queue=tools_queue, plugins=[tools]),
            Worker(client, task_queue=host_queue, workflows=[ToolListWorkflow]),
        ):
            result: dict[str, Any] = await client.execute_workflow(
                ToolListWorkflow.run,
                args=[config, calls],
                id=workflow_id or f"tool-list-{run}",
                task_queue=host_queue,
            )
            return result
