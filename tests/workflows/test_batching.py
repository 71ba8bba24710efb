"""A turn's tool calls share one ``filegate.tool_batch`` activity.

On a real server with a real Filesystem backend, hosted by the agent worker
(``kind="local"``, local activities) or by a tools worker (``kind="remote"``,
activities on its queue): the calls of a turn on different paths run as one
batch, with the same results and files as one activity per call; a call that
fails in a batch runs alone with its tool's retries; a run recorded before
batching (one activity per call) still replays, and would not without the
version marker. ActivityEnvironment checks the batch activity's own limits.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from filegate.activities.tools import FileToolActivities
from filegate.backends.filesystem import FilesystemBackend
from filegate.kernel.limits import DEFAULT_READ_LIMIT
from filegate.kernel.protocol import ReadResult
from filegate.kernel.tool_types import (
    BATCH_RESULT_CHARS,
    MAX_BATCH_CALLS,
    ToolBatch,
    ToolBatchResult,
    ToolRequest,
)
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import (
    AgentInput,
    AgentResult,
    AgentWorkflow,
    BackendRef,
    BackendSpec,
    batching,
)
from filegate.workflows.runner import sandboxed_runner
from tests.scripting import calls, local_activities, local_tool_calls, uid

pytestmark = pytest.mark.services

SCRIPT = {
    "turns": [
        calls(*[(f"w{i}", "write_file", {"file_path": f"/f{i}.txt", "content": f"v{i}\n"})
                for i in range(4)]),
        calls(("r0", "read_file", {"file_path": "/f0.txt"}),
              ("l", "ls", {"path": "/"}),
              ("g", "grep", {"pattern": "v2"}),
              ("r3", "read_file", {"file_path": "/f3.txt"})),
        calls(("e1", "edit_file", {"file_path": "/f1.txt", "old_string": "v1", "new_string": "v9"}),
              ("d2", "delete", {"file_path": "/f2.txt"})),
        {"content": "done"},
    ]
}  # fmt: skip


def _input(script: dict[str, Any], ref: BackendRef) -> AgentInput:
    return AgentInput.model_validate(
        {
            "task": "batch",
            "model": {"provider": "scripted", "options": {"script": script}},
            "backend": BackendSpec(default=ref),
        }
    )


def _tool_messages(result: AgentResult) -> list[tuple[str, str, str]]:
    return [
        (m["tool_call_id"], m["status"], m["content"])
        for m in result.transcript
        if m["role"] == "tool"
    ]


async def _run(
    client: Client,
    root: Path,
    journal: Path,
    script: dict[str, Any],
    *,
    kind: str,
    backend: Any = None,
    **tools_options: Any,
) -> tuple[AgentResult, WorkflowHistory]:
    """One run on backend ``ws`` (``root``): hosted by the agent worker (``kind="local"``)
    or by a tools worker of its own (``kind="remote"``)."""
    agent_q, tools_q, workflow_id = uid("agent"), uid("tools"), uid("batch")
    fs = backend or FilesystemBackend(str(root), virtual_mode=True)
    if kind == "local":
        ref = BackendRef(kind="local", name="ws")
        workers: Any = agent_worker(client, agent_q, backends={"ws": fs}, journal_dir=journal)
    else:
        ref = BackendRef(kind="remote", name="ws", task_queue=tools_q)
        workers = _both(
            agent_worker(client, agent_q),
            tools_worker(client, tools_q, {"ws": fs}, journal, **tools_options),
        )
    async with workers:
        result = await client.execute_workflow(
            AgentWorkflow.run, _input(script, ref), id=workflow_id, task_queue=agent_q
        )
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return result, history


@contextlib.asynccontextmanager
async def _both(first: Any, second: Any) -> AsyncIterator[None]:
    async with first, second:
        yield


def _scheduled(history: WorkflowHistory) -> list[str]:
    """Activity types scheduled on a queue, in order."""
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


def _batches(history: WorkflowHistory, kind: str) -> list[str]:
    """The tool activities of the run, local (markers) or scheduled, model calls left out."""
    found = [k for k, _ in local_activities(history)] if kind == "local" else _scheduled(history)
    return [k for k in found if k != "filegate.model"]


async def _replay(client: Client, history: WorkflowHistory) -> None:
    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=client.data_converter,
        workflow_runner=sandboxed_runner(),
    )
    await replayer.replay_workflow(history)


def _only_batch_patch_off(patch_id: str, original: Any = workflow.patched) -> bool:
    """``workflow.patched`` as the code before batching behaved: no batch markers."""
    if patch_id in (
        batching.BATCH_PATCH,
        batching.REMOTE_BATCH_PATCH,
        batching.BATCH_AT_START_PATCH,
    ):
        return False
    result: bool = original(patch_id)
    return result


@pytest.mark.parametrize("kind", ["local", "remote"])
async def test_a_turns_calls_share_one_activity_with_the_same_results(
    temporal_client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    batched, history = await _run(
        temporal_client, tmp_path / "a", tmp_path / "ja", SCRIPT, kind=kind
    )
    assert batched.stop_reason == "final_answer" and batched.tool_errors == 0, batched

    # Three turns, each one batch.
    assert _batches(history, kind) == ["filegate.tool_batch"] * 3
    if kind == "local":
        assert len(local_tool_calls(history)) == 4 + 4 + 2
    # One marker, asked as the run starts; not the per-call ones of earlier runs.
    assert batching.BATCH_AT_START_PATCH in str(history.events)
    assert batching.BATCH_PATCH not in str(history.events)
    assert batching.REMOTE_BATCH_PATCH not in str(history.events)
    await _replay(temporal_client, history)

    with monkeypatch.context() as patch:
        patch.setattr(batching.LocalCalls, "max_batch", 1)
        patch.setattr(batching.RemoteCalls, "max_batch", 1)
        alone, history = await _run(
            temporal_client, tmp_path / "b", tmp_path / "jb", SCRIPT, kind=kind
        )
    assert len(_batches(history, kind)) == 10 and "filegate.tool_batch" not in _batches(
        history, kind
    )
    assert _tool_messages(alone) == _tool_messages(batched)
    for name in ("f0.txt", "f1.txt", "f3.txt"):
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text()
    assert (tmp_path / "a" / "f1.txt").read_text() == "v9\n"
    assert not (tmp_path / "a" / "f2.txt").exists()


@pytest.mark.parametrize("kind", ["local", "remote"])
async def test_a_run_recorded_before_batching_replays(
    temporal_client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The old shape (one activity per call, no marker) replays on the batching code;
    without the version marker's check it would not."""
    with monkeypatch.context() as patch:
        patch.setattr(workflow, "patched", _only_batch_patch_off)
        result, history = await _run(
            temporal_client, tmp_path, tmp_path.parent / f"j{kind}", SCRIPT, kind=kind
        )
    assert result.stop_reason == "final_answer", result
    assert "filegate.tool_batch" not in _batches(history, kind)
    await _replay(temporal_client, history)

    with monkeypatch.context() as patch:  # the same code without the marker's check
        patch.setattr(workflow, "patched", lambda patch_id: True)
        with pytest.raises((NondeterminismError, RuntimeError)):
            await _replay(temporal_client, history)


async def test_a_rate_limited_queue_runs_every_call_as_an_activity(
    temporal_client: Client, tmp_path: Path
) -> None:
    """A task-queue rate limit counts activities: its worker hands each batch back
    unfinished, so every call is an activity the limit counts."""
    result, history = await _run(
        temporal_client,
        tmp_path,
        tmp_path.parent / "jr",
        SCRIPT,
        kind="remote",
        max_task_queue_activities_per_second=1000,
    )
    assert result.stop_reason == "final_answer" and result.tool_errors == 0, result
    ran = _batches(history, "remote")
    alone = ["write_file"] * 4 + ["read_file", "ls", "grep", "read_file", "edit_file", "delete"]
    assert sorted(k for k in ran if k != "filegate.tool_batch") == sorted(
        f"filegate.{tool}" for tool in alone
    )
    assert ran.count("filegate.tool_batch") == 3
    assert (tmp_path / "f1.txt").read_text() == "v9\n"


class FlakyRead(FilesystemBackend):
    """Fails the first read of ``/flaky.txt`` (a transient error: the activity retries)."""

    failed = False

    def read(self, path: str, offset: int = 0, limit: int = DEFAULT_READ_LIMIT) -> ReadResult:
        if path.endswith("flaky.txt") and not FlakyRead.failed:
            FlakyRead.failed = True
            raise OSError("disk hiccup")
        return super().read(path, offset, limit)


@pytest.mark.parametrize("kind", ["local", "remote"])
async def test_a_call_that_fails_in_a_batch_runs_alone(
    temporal_client: Client, tmp_path: Path, kind: str
) -> None:
    """Local: the batch stops at the failing call, which and the call after it run alone,
    in order. Remote: only the failing call runs alone. Each retried as its tool is."""
    FlakyRead.failed = False
    for name in ("a", "flaky", "c"):
        (tmp_path / f"{name}.txt").write_text(f"{name} text\n")
    script = {
        "turns": [
            calls(*[(n, "read_file", {"file_path": f"/{n}.txt"}) for n in ("a", "flaky", "c")]),
            {"content": "done"},
        ]
    }
    backend = FlakyRead(str(tmp_path), virtual_mode=True)
    journal = tmp_path.parent / f"jf-{kind}"
    result, history = await _run(
        temporal_client, tmp_path, journal, script, kind=kind, backend=backend
    )
    assert FlakyRead.failed
    messages = {call_id: (status, content) for call_id, status, content in _tool_messages(result)}
    for name in ("a", "flaky", "c"):
        assert messages[name][0] == "success" and f"{name} text" in messages[name][1], messages
    alone = ["filegate.read_file"] * (2 if kind == "local" else 1)
    assert _batches(history, kind) == ["filegate.tool_batch", *alone]
    if kind == "local":
        ran = [res for k, res in local_activities(history) if k == "filegate.tool_batch"]
        assert [o is not None for o in ran[0]["outcomes"]] == [True, False, False]
    await _replay(temporal_client, history)


# --------------------------------------------------------------------------- the activity alone


def _request(tool: str, call_id: str, **args: Any) -> ToolRequest:
    return ToolRequest(tool=tool, backend="fs", args=args, tool_call_id=call_id)  # type: ignore[arg-type]


@pytest.fixture
def tools(tmp_path: Path) -> FileToolActivities:
    (tmp_path / "ws").mkdir()
    return FileToolActivities(
        {"fs": FilesystemBackend(str(tmp_path / "ws"), virtual_mode=True)},
        tmp_path / "journal",
        search_timeout=10.0,
    )


async def _batch(
    tools: FileToolActivities, *requests: ToolRequest, concurrent: bool = False
) -> ToolBatchResult:
    result: ToolBatchResult = await ActivityEnvironment().run(
        tools.tool_batch, ToolBatch(requests=list(requests), concurrent=concurrent)
    )
    return result


async def test_each_call_keeps_its_own_permissions(tools: FileToolActivities) -> None:
    """A batched request is checked as its own activity would check it: a deny rule
    on one call holds even when the call next to it may read."""
    root = Path(tools.backends["fs"].root)  # type: ignore[attr-defined]
    (root / "open.txt").write_text("fine\n")
    (root / "secret.txt").write_text("hunter2\n")
    deny = [{"operations": ["read"], "paths": ["/secret.txt"], "mode": "deny"}]
    allowed = _request("read_file", "a", file_path="/open.txt")
    denied = ToolRequest.model_validate(
        {**_request("read_file", "b", file_path="/secret.txt").model_dump(), "permissions": deny}
    )
    result = await _batch(tools, allowed, denied)
    first, second = result.outcomes
    assert first is not None and "fine" in first.text
    assert second is not None and second.status == "error" and "hunter2" not in second.text


async def test_execute_and_what_follows_it_are_left_to_run_alone(
    tools: FileToolActivities,
) -> None:
    read = _request("ls", "l", path="/")
    execute = _request("execute", "x", command="echo hi")
    result = await _batch(tools, read, execute, read)
    assert [o is not None for o in result.outcomes] == [True, False, False]


async def test_a_batch_stops_starting_calls_past_its_result_budget(
    tools: FileToolActivities,
) -> None:
    root = Path(tools.backends["fs"].root)  # type: ignore[attr-defined]
    line = "x" * 1000 + "\n"
    (root / "big.txt").write_text(line * 2000)
    reads = [
        _request("read_file", f"r{i}", file_path="/big.txt", limit=2000)
        for i in range(MAX_BATCH_CALLS)
    ]
    result = await _batch(tools, *reads)
    finished = [o for o in result.outcomes if o is not None]
    sizes = [len(o.text) for o in finished]
    assert 1 < len(finished) < len(reads), sizes
    # Each finished read started while the batch held less than the budget.
    assert sum(sizes[:-1]) < BATCH_RESULT_CHARS <= sum(sizes)


async def test_side_by_side_keeps_mutations_and_drops_overflowing_reads(
    tools: FileToolActivities,
) -> None:
    """A concurrent batch (a task queue's) runs every call; the reads whose results
    overflow the budget come back unfinished, a mutation's result never does, and
    ``execute`` is left to run alone without ending the batch."""
    root = Path(tools.backends["fs"].root)  # type: ignore[attr-defined]
    (root / "big.txt").write_text(("y" * 1000 + "\n") * 2000)
    reads = [
        _request("read_file", f"r{i}", file_path="/big.txt", limit=2000)
        for i in range(MAX_BATCH_CALLS - 2)
    ]
    write = _request("write_file", "w", file_path="/new.txt", content="new\n")
    execute = _request("execute", "x", command="echo hi")
    result = await _batch(tools, *reads, execute, write, concurrent=True)
    *read_outcomes, execute_outcome, write_outcome = result.outcomes
    assert execute_outcome is None
    assert write_outcome is not None and write_outcome.status == "success"
    assert (root / "new.txt").read_text() == "new\n"
    kept = [o for o in read_outcomes if o is not None]
    assert read_outcomes[0] is not None and 1 <= len(kept) < len(reads)
    assert sum(len(o.text) for o in kept) <= BATCH_RESULT_CHARS or len(kept) == 1


class SlowGrep(FilesystemBackend):
    """A grep that would take 30 s (interruptible between its short sleeps)."""

    def grep(self, literal: str, *args: Any, **kwargs: Any) -> Any:
        for _ in range(3000):
            time.sleep(0.01)
        return super().grep(literal, *args, **kwargs)


@pytest.mark.parametrize("concurrent", [False, True])
async def test_a_batched_search_keeps_its_own_budget(tmp_path: Path, concurrent: bool) -> None:
    """A search in a batch is stopped at its own budget, not the batch's timeout, and
    the other calls still finish."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("alpha\n")
    tools = FileToolActivities(
        {"fs": SlowGrep(str(tmp_path / "ws"), virtual_mode=True)},
        tmp_path / "journal",
        search_timeout=0.3,
    )
    started = time.monotonic()
    result = await _batch(
        tools,
        _request("grep", "g", pattern="alpha"),
        _request("read_file", "r", file_path="/a.txt"),
        concurrent=concurrent,
    )
    assert time.monotonic() - started < 5
    grep, read = result.outcomes
    assert grep is not None and grep.status == "error" and "narrow" in grep.text, grep
    assert read is not None and "alpha" in read.text
