"""A workflow of your own with Filegate's whole tool kit (docs/own-workflow.md).

``ToolListWorkflow`` has no model: it runs the calls it is given through
:class:`filegate.workflows.FileTools`, which validates, routes, applies the
permission rules, waits for a human where a rule says so (the approval
handlers are registered on this workflow, so ``filegate approvals`` and
``filegate approve`` work for it), and runs each tool as an activity on its
backend's task queue. A real host would put its model loop where the list is:
offer ``tools.openai_tools()``, run what the model asks for with
``tools.run_turn(calls)``.

``tests/test_file_tools.py`` runs it on the embedded servers.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from filegate.kernel.messages import ToolCall
    from filegate.workflows import FileTools, FileToolsConfig, FileToolsState


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
