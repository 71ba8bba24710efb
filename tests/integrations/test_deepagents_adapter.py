"""The Deep Agents adapter on the embedded Temporal server and real tools workers.

Inside a workflow (its async methods schedule the activities from that
workflow, visible in its history), outside one (each call a one-operation
workflow), a real ``create_deep_agent`` run on the bwrap sandbox (the
docs/deepagents.md example), the error mapping, permission rules carried to
the transfer activities, and the decoders pinned against the kernel's own
formatters.
"""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Replayer

pytest.importorskip("deepagents")

with workflow.unsafe.imports_passed_through():
    from filegate.backends.local_shell import LocalShellBackend
    from filegate.integrations.deepagents import FilegateBackend, convert, tools_worker
    from filegate.integrations.deepagents.worker import sandbox_runner
    from filegate.kernel import protocol as fg
    from filegate.kernel.formatting import permission_denied
    from filegate.kernel.permissions import FilesystemPermission
    from tests.outcomes import ran_as_activity

BACKEND = "ws"


@workflow.defn(sandboxed=True)
class AdapterInWorkflow:
    """A workflow using the adapter the way a Deep Agents graph in a workflow would."""

    @workflow.run
    async def run(self, task_queue: str) -> dict[str, Any]:
        backend = FilegateBackend(backend=BACKEND, task_queue=task_queue)
        steps: dict[str, Any] = {}
        steps["write"] = await backend.awrite("/notes.md", "one\ntwo\none\n")
        steps["read"] = await backend.aread("/notes.md", offset=1, limit=1)
        steps["edit"] = await backend.aedit("/notes.md", "one", "three", replace_all=True)
        steps["ls"] = await backend.als("/")
        steps["glob"] = await backend.aglob("*.md")
        steps["grep"] = await backend.agrep("three")
        steps["upload"] = await backend.aupload_files([("/bin.dat", bytes(range(256)))])
        steps["download"] = await backend.adownload_files(["/bin.dat", "/nope"])
        steps["execute"] = await backend.aexecute("cat notes.md; exit 3")
        steps["delete"] = await backend.adelete("/bin.dat")
        try:
            backend.read("/notes.md")
        except RuntimeError as exc:
            steps["sync"] = str(exc)
        return {name: _plain(value) for name, value in steps.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.asdict(value)
        if isinstance(fields.get("content"), bytes):
            fields["content"] = list(fields["content"])
        return fields
    return value


@pytest_asyncio.fixture
async def tools_queue(
    temporal_client: Client, workspace: Path, tmp_path: Path
) -> AsyncIterator[str]:
    """An adapter-ready tools worker (tools, transfers, OperationWorkflow) on a LocalShell."""
    queue = f"da-{uuid.uuid4().hex[:8]}"
    backends = {BACKEND: LocalShellBackend(workspace)}
    worker = tools_worker(
        temporal_client, queue, backends, tmp_path / "journal", workflows=[AdapterInWorkflow]
    )
    async with worker:
        yield queue


async def test_inside_a_workflow_the_calls_are_that_workflows_activities(
    temporal_client: Client, tools_queue: str, workspace: Path
) -> None:
    handle = await temporal_client.start_workflow(
        AdapterInWorkflow.run,
        tools_queue,
        id=f"adapter-{uuid.uuid4().hex[:8]}",
        task_queue=tools_queue,
        execution_timeout=timedelta(seconds=60),
    )
    steps = await handle.result()

    assert steps["write"] == {"error": None, "path": "/notes.md"}
    read = steps["read"]
    assert read["error"] is None and read["file_data"]["content"] == "two"
    assert (read["start_line"], read["end_line"], read["total_lines"]) == (2, 2, 3)
    assert steps["edit"] == {"error": None, "path": "/notes.md", "occurrences": 2}
    assert (workspace / "notes.md").read_text() == "three\ntwo\nthree\n"
    entries = [(entry["path"], entry["is_dir"]) for entry in steps["ls"]["entries"]]
    assert ("/notes.md", False) in entries
    assert [m["path"] for m in steps["glob"]["matches"]] == ["/notes.md"]
    assert steps["grep"]["matches"] == [
        {"path": "/notes.md", "line": 1, "text": "three"},
        {"path": "/notes.md", "line": 3, "text": "three"},
    ]
    assert steps["upload"] == [{"path": "/bin.dat", "error": None}]
    assert steps["download"][0] == {"path": "/bin.dat", "content": list(range(256)), "error": None}
    assert steps["download"][1] == {"path": "/nope", "content": None, "error": "file_not_found"}
    assert steps["execute"]["exit_code"] == 3
    assert steps["execute"]["output"] == (workspace / "notes.md").read_text().rstrip("\n")
    assert steps["delete"] == {"error": None, "path": "/bin.dat"}
    assert not (workspace / "bin.dat").exists()
    assert "async methods" in steps["sync"]

    # Every operation is an activity of *this* workflow (no child or per-call workflow).
    history = await handle.fetch_history()
    scheduled = [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled == [
        "filegate.write_file", "filegate.transfer.read", "filegate.edit_file", "filegate.ls",
        "filegate.glob", "filegate.grep", "filegate.transfer.upload", "filegate.transfer.download",
        "filegate.execute", "filegate.delete",
    ]  # fmt: skip
    replayer = Replayer(
        workflows=[AdapterInWorkflow],
        workflow_runner=sandbox_runner(),
        data_converter=temporal_client.data_converter,
    )
    await replayer.replay_workflow(history)


async def test_outside_a_workflow_errors_read_as_deepagents_writes_them(
    temporal_client: Client, tools_queue: str, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("apple\napple\n")
    (workspace / "secret").mkdir()
    (workspace / "secret" / "key").write_text("k")
    backend = FilegateBackend(
        backend=BACKEND,
        task_queue=tools_queue,
        client=temporal_client,
        can_execute=False,  # a deny rule next to a host shell is refused (kernel.execute_gate)
        permissions=[FilesystemPermission(operations=["read"], paths=["/secret/**"], mode="deny")],
    )
    try:
        missing = await backend.aread("/none.txt")
        assert missing.error == "File '/none.txt' not found"
        multiple = await backend.aedit("/a.txt", "apple", "pear")
        assert multiple.error is not None and "multiple" in multiple.error.lower()
        absent = await backend.aedit("/a.txt", "kiwi", "pear")
        assert absent.error == "Error: String not found in file: 'kiwi'"
        gone = await backend.aedit("/b.txt", "x", "y")
        assert gone.error == "Error: File '/b.txt' not found"
        assert (await backend.adelete("/b.txt")).error == "Error: '/b.txt' not found"
        denied = await backend.adownload_files(["/secret/key", "relative.txt"])
        assert [d.error for d in denied] == ["permission_denied", "invalid_path"]
        refused = await backend.aread("/secret/key")  # no "Error: ": read_file adds it
        assert refused.error == permission_denied("read", "/secret/key").text.removeprefix(
            "Error: "
        )
        listing = await backend.als("/missing-dir")
        assert listing.error == "Path '/missing-dir': path_not_found"
        # The sync methods run on the adapter's own loop, so they work from any thread
        # (here not this loop's own: it also runs the worker the call waits for).
        whole = await asyncio.to_thread(backend.read, "/a.txt")
        assert whole.file_data == {"content": "apple\napple\n", "encoding": "utf-8"}
    finally:
        backend.close()


async def test_the_deepagents_example_runs_an_agent_in_the_sandbox(
    temporal_client: Client, tmp_path: Path, workspace: Path
) -> None:
    """docs/deepagents.md's example: create_deep_agent on FilegateBackend over bwrap."""
    from filegate.backends.bwrap import BwrapSandboxBackend

    BwrapSandboxBackend(tmp_path, check=True)  # fails with the reason when bwrap cannot run
    folder = str(Path(__file__).resolve().parents[2] / "docs" / "examples")
    if folder not in sys.path:
        sys.path.append(folder)
    import deepagents_agent  # type: ignore[import-not-found]

    messages = await deepagents_agent.main(temporal_client, workspace)
    tool_texts = [m.content for m in messages if type(m).__name__ == "ToolMessage"]
    out = (workspace / "out.txt").read_text().strip()
    assert out == "hello from Linux"
    assert (workspace / "hello.sh").exists()
    assert any(out in text for text in tool_texts[1:2])  # execute's output
    assert any(out in text for text in tool_texts[2:3])  # read_file of out.txt
    assert messages[-1].content == "The script ran in the sandbox."


def test_every_name_the_facade_exports_resolves() -> None:
    import filegate.integrations.deepagents as facade

    for name in facade.__all__:
        assert getattr(facade, name) is not None, name


def test_the_workflow_side_names_load_no_framework() -> None:
    code = (
        "import sys; from filegate.integrations.deepagents import "
        "Operation, OperationResult, OperationWorkflow, run_operation; "
        "bad = [m for m in ('deepagents', 'langchain_core', 'langgraph', 'minio', "
        "'filegate.backends') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mount_maps_paths_both_ways_and_refuses_the_rest() -> None:
    mount = convert.Mount("/workspace")
    assert mount.inward("/workspace/a/b.txt") == "/a/b.txt"
    assert mount.inward("/workspace/") == "/"
    assert mount.outward("/a/b.txt") == "/workspace/a/b.txt"
    assert mount.outward("/") == "/workspace"
    for bad in ("/tmp/x", "relative", "/workspacex/y", "/workspace/../etc/passwd"):
        with pytest.raises(ValueError):
            mount.inward(bad)


@pytest.mark.parametrize("count", [1, 2, 17])
def test_edit_counts_come_from_the_outcome_not_its_text(count: int) -> None:
    ran = ran_as_activity(fg.EditResult(path="/x y.md", occurrences=count))
    result = convert.edit_result("/x y.md", "/x y.md", "a", ran)
    assert result.occurrences == count and result.error is None
    # The wording is the kernel's business: another sentence changes nothing here.
    reworded = ran.model_copy(update={"content": "Done."})
    assert convert.edit_result("/x y.md", "/x y.md", "a", reworded).occurrences == count


@pytest.mark.parametrize(
    ("output", "exit_code", "truncated"),
    [("hi\nthere", 0, False), ("", 0, False), ("boom", 7, True), ("no code", None, False)],
)
def test_execute_results_come_from_the_outcome(
    output: str, exit_code: int | None, truncated: bool
) -> None:
    ran = ran_as_activity(fg.ExecuteResult(output=output, exit_code=exit_code, truncated=truncated))
    response = convert.execute_response(ran)
    assert (response.output, response.exit_code, response.truncated) == (
        output,
        exit_code,
        truncated,
    )
