"""The typed activity stubs from a hand-written workflow, on the embedded Temporal server.

A workflow that is not AgentWorkflow calls every tool through
``filegate.activities`` (the stubs with ``workflow.execute_activity`` and the
``file_tool`` helper) against a real tools worker (FileToolActivities over a
LocalShellBackend in a tmp dir). Checked against the files on disk and against
what ``run_tool`` renders for the same call, so no expected text is written
down here; the history replays, so the derived call ids are deterministic.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio import workflow
from temporalio.client import Client
from temporalio.exceptions import ActivityError, TimeoutError
from temporalio.worker import Replayer, Worker

with workflow.unsafe.imports_passed_through():
    import filegate.activities as fa
    from filegate.activities import (
        ExecuteArgs,
        GlobArgs,
        GrepArgs,
        LsArgs,
        ToolName,
        ToolRequest,
        ToolResult,
        WriteFileArgs,
        file_tool,
        tool_activity_options,
    )
    from filegate.activities.tools import FileToolActivities
    from filegate.backends.local_shell import LocalShellBackend
    from filegate.kernel.dispatch import run_tool

BACKEND = "ws"
LISTING_ARGS: dict[str, BaseModel] = {
    "ls": LsArgs(path="/"),
    "glob": GlobArgs.model_validate({"pattern": "*.md"}),
    "grep": GrepArgs.model_validate({"pattern": "a", "output_mode": "content"}),
}
"""The listing calls' arguments, shared by the workflow and the check."""


@workflow.defn(sandboxed=True)
class OwnToolsWorkflow:
    """A user's own workflow: a few tool calls in a fixed order, results returned."""

    @workflow.run
    async def run(self, task_queue: str) -> list[ToolResult]:
        async def call(tool: fa.ToolStub, args: BaseModel | dict[str, Any]) -> ToolResult:
            return await file_tool(tool, args, task_queue=task_queue, backend=BACKEND)

        results: list[ToolResult] = [
            await call(fa.write_file, WriteFileArgs(file_path="/notes.md", content="a\nb\na\n")),
            await call(fa.read_file, {"file_path": "/notes.md"}),
            await call(
                fa.edit_file, {"file_path": "/notes.md", "old_string": "b", "new_string": "c"}
            ),
            await call(fa.ls, LISTING_ARGS["ls"]),
            await call(fa.glob, LISTING_ARGS["glob"]),
            await call(fa.grep, LISTING_ARGS["grep"]),
            await call(fa.execute, ExecuteArgs(command="wc -l notes.md", timeout=30)),
            await call(fa.read_file, {"file_path": "/missing.txt"}),
        ]
        # The plain Temporal call with a stub: types and name come from the stub.
        request = fa.tool_request(fa.delete, {"file_path": "/notes.md"}, backend=BACKEND)
        outcome = await workflow.execute_activity(
            fa.delete, request, task_queue=task_queue, **tool_activity_options("delete")
        )
        results.append(
            ToolResult(name="delete", tool_call_id=request.tool_call_id, outcome=outcome)
        )
        return results


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "keep.txt").write_text("a kept file\n")
    return root


async def test_own_workflow_calls_every_tool_through_the_stubs(
    temporal_client: Client, workspace: Path, tmp_path: Path
) -> None:
    queue = f"stubs-{uuid.uuid4().hex[:8]}"
    tools = FileToolActivities({BACKEND: LocalShellBackend(workspace)}, tmp_path / "journal")
    async with Worker(
        temporal_client,
        task_queue=queue,
        workflows=[OwnToolsWorkflow],
        activities=tools.activities(),
    ):
        handle = await temporal_client.start_workflow(
            OwnToolsWorkflow.run,
            queue,
            id=f"own-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
            execution_timeout=timedelta(seconds=60),
        )
        results = await handle.result()

    by_step = {index: result for index, result in enumerate(results)}
    write, read, edit, listing, globbed, grepped, executed, missing, deleted = (
        by_step[i] for i in range(9)
    )
    assert [r.name for r in results] == [
        "write_file", "read_file", "edit_file", "ls", "glob", "grep", "execute", "read_file",
        "delete",
    ]  # fmt: skip
    assert not any(
        r.is_error for r in (write, read, edit, listing, globbed, grepped, executed, deleted)
    )
    assert missing.is_error and "missing.txt" in missing.text
    # Every call got its own id, and they name the workflow.
    ids = [r.tool_call_id for r in results]
    assert len(set(ids)) == len(ids)
    assert all(i.startswith(handle.id + "/") for i in ids)
    # The mutations happened; the file is gone at the end.
    assert not (workspace / "notes.md").exists()
    assert [row.split()[-1] for row in read.text.splitlines()[:3]] == ["a", "b", "a"]
    assert "occurrence" in edit.text

    # Listings carry structure, and their text is what run_tool shows for the same call.
    assert listing.listing is not None and listing.listing.ls is not None
    assert {e.path for e in listing.listing.ls.entries} >= {"/keep.txt", "/notes.md"}
    assert globbed.listing is not None and globbed.listing.glob is not None
    assert globbed.listing.glob.matches == ["/notes.md"]
    assert grepped.listing is not None and grepped.listing.grep is not None
    assert [(m.path, m.line) for m in grepped.listing.grep.matches] == [
        ("/keep.txt", 1), ("/notes.md", 1), ("/notes.md", 3),
    ]  # fmt: skip
    (workspace / "notes.md").write_text("a\nc\na\n")  # the state of the listings' moment
    listed: tuple[tuple[ToolResult, ToolName], ...] = (
        (listing, "ls"), (globbed, "glob"), (grepped, "grep"),
    )  # fmt: skip
    for shown, tool in listed:
        assert shown.name == tool
        direct = ToolRequest(
            tool=tool,
            backend=BACKEND,
            args=LISTING_ARGS[tool].model_dump(),
            tool_call_id="x",
        )
        assert shown.text == run_tool(LocalShellBackend(workspace), direct).content
    lines_then = len((workspace / "notes.md").read_text().splitlines())
    assert executed.text.splitlines()[0].split() == [str(lines_then), "notes.md"]

    # Deterministic: the history (ids from workflow.uuid4) replays.
    replayer = Replayer(workflows=[OwnToolsWorkflow], data_converter=temporal_client.data_converter)
    await replayer.replay_workflow(await handle.fetch_history())


def test_tool_request_validates_arguments_in_the_caller() -> None:
    request = fa.tool_request("write_file", {"file_path": "/a", "content": "x"}, backend="b",
                              tool_call_id="c1")  # fmt: skip
    assert request.args == {"file_path": "/a", "content": "x"}
    with pytest.raises(ValueError, match="content"):
        fa.tool_request(fa.write_file, {"file_path": "/a"}, backend="b", tool_call_id="c2")
    with pytest.raises(ValueError, match="unknown tool"):
        fa.tool_request("cat", {}, backend="b", tool_call_id="c3")  # type: ignore[arg-type]


def _load_example(name: str) -> Any:
    """A docs example as a module (docs/ is not a package: it is not shipped).

    Imported by name from its folder, since the workflow sandbox re-imports a
    workflow's module by name.
    """
    import importlib
    import sys

    folder = str(Path(__file__).resolve().parents[2] / "docs" / "examples")
    if folder not in sys.path:
        sys.path.append(folder)
    return importlib.import_module(name)


async def test_the_own_workflow_example_runs(temporal_client: Client, tmp_path: Path) -> None:
    """docs/own-workflow.md's example, as written, on the test server."""
    example = _load_example("own_workflow")
    workspace = tmp_path / "ws"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "app.py").write_text("x = 1  # TODO: name it\n")
    (workspace / "notes.md").write_text("done\nTODO write docs\n")
    answer = await example.main(temporal_client, workspace)
    written = (workspace / "TODO.md").read_text().splitlines()
    assert written == [
        "# TODO",
        "- /notes.md:2 TODO write docs",
        "- /src/app.py:1 x = 1  # TODO: name it",
    ]
    for line in written:
        assert line in answer


@workflow.defn(sandboxed=True)
class UnservedStubWorkflow:
    """A user's own workflow calling a queue nobody polls through ``file_tool``."""

    @workflow.run
    async def run(self, task_queue: str) -> str:
        try:
            await file_tool(
                fa.ls,
                LISTING_ARGS["ls"],
                task_queue=task_queue,
                backend=BACKEND,
                worker_wait=timedelta(seconds=1),
            )
        except ActivityError as error:
            cause = error.cause
            if isinstance(cause, TimeoutError):
                return cause.type.name if cause.type is not None else "timeout"
            raise
        return "served"


async def test_file_tool_to_a_queue_nobody_polls_raises_instead_of_waiting(
    temporal_client: Client,
) -> None:
    """Before ``worker_wait`` the call waited in the queue for as long as the run lived."""
    queue = f"stubs-host-{uuid.uuid4().hex[:8]}"
    unserved = f"stubs-nobody-{uuid.uuid4().hex[:8]}"
    async with Worker(temporal_client, task_queue=queue, workflows=[UnservedStubWorkflow]):
        answer = await temporal_client.execute_workflow(
            UnservedStubWorkflow.run,
            unserved,
            id=f"unserved-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
            execution_timeout=timedelta(seconds=30),
        )
    assert answer == "SCHEDULE_TO_START"
