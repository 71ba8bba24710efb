"""contract §8 "history stays small": transcripts by reference, continue-as-new, payload codec.

Real Temporal dev server, real S3 (weed), real Filesystem tools worker. The
agent worker holds an artifact store, so model-call inputs carry a transcript
reference and only the new messages; without one they carry everything (the
by-value fallback) -- both must give the same transcript.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from minio import Minio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.history import (
    MAX_BYTES_PER_STEP,
    MAX_GROWTH,
    MAX_PAYLOAD,
    history_stats,
    script,
    write_data,
)
from filegate.activities.history import (
    CODEC_ENCODING,
    CODEC_THREAD,
    TranscriptStore,
    filegate_data_converter,
)
from filegate.backends.artifacts import ArtifactStore
from filegate.backends.filesystem import FilesystemBackend
from filegate.devstack.servers import TemporalDevServer
from filegate.kernel.artifacts import ArtifactRef
from filegate.kernel.messages import ModelSpec
from filegate.kernel.transcripts import ModelTurn, TranscriptRef, conversation_key
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import (
    AgentInput,
    AgentResult,
    AgentWorkflow,
    BackendRef,
    BackendSpec,
    RouteSpec,
)
from filegate.workflows.context import EVICT_CHARS, evicted_name
from tests.run_chain import scope_of
from tests.scripting import calls, scripted, uid

pytestmark = pytest.mark.services

HISTORY_LIMIT = 256 * 1024


def new_store(minio_client: Minio) -> ArtifactStore:
    return ArtifactStore(minio_client, "history-test", namespace=uid("ns"))


@asynccontextmanager
async def agent_with_store(client: Client, store: ArtifactStore | None) -> AsyncIterator[str]:
    """An agent worker whose model activity keeps transcripts in ``store`` (None = by value)."""
    from filegate.workflows.runner import sandboxed_runner

    queue = uid("agent")
    async with agent_worker(client, queue, artifacts=store, workflow_runner=sandboxed_runner()):
        yield queue


async def model_inputs(client: Client, workflow_id: str) -> list[tuple[int, ModelTurn]]:
    """(event size, decoded input) of every model activity scheduled, across all runs."""
    found: list[tuple[int, ModelTurn]] = []
    converter = client.data_converter
    handle = client.get_workflow_handle(workflow_id)
    async for event in handle.fetch_history_events():
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        attrs = event.activity_task_scheduled_event_attributes
        if attrs.activity_type.name != "filegate.model":
            continue
        [turn] = await converter.decode(list(attrs.input.payloads), [ModelTurn])
        found.append((event.ByteSize(), turn))
    return found


def reading_script(steps: int, path: str) -> ModelSpec:
    turns = [
        calls((f"r{k}", "read_file", {"file_path": path, "limit": 1000})) for k in range(steps)
    ]
    return scripted(*turns, {"content": "read them all"})


async def test_transcript_by_reference_keeps_model_inputs_small(
    temporal_client: Client, minio_client: Minio, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "big.txt").write_text("".join(f"line {i:05d} " + "x" * 88 + "\n" for i in range(200)))
    steps = 8
    store = new_store(minio_client)
    results: dict[str, AgentResult] = {}
    sizes: dict[str, list[int]] = {}
    async with tools_worker(
        temporal_client, (tools_q := uid("tools")), {"fs": FilesystemBackend(root)}, tmp_path / "j"
    ):
        for mode, agent_store in (("value", None), ("reference", store)):
            async with agent_with_store(temporal_client, agent_store) as queue:
                workflow_id = uid("wf")
                input = AgentInput(
                    task="read it",
                    model=reading_script(steps, "/big.txt"),
                    backend=BackendSpec(
                        default=BackendRef(kind="remote", name="fs", task_queue=tools_q)
                    ),
                    model_call="activity",  # so its inputs are in history to inspect
                )
                results[mode] = await temporal_client.execute_workflow(
                    AgentWorkflow.run, input, id=workflow_id, task_queue=queue
                )
            inputs = await model_inputs(temporal_client, workflow_id)
            sizes[mode] = [size for size, _ in inputs]
            if mode == "reference":
                turns = [turn for _, turn in inputs]
                reference_id = workflow_id
    assert results["value"].transcript == results["reference"].transcript
    assert results["reference"].final_answer == "read them all"
    assert len(sizes["value"]) == len(sizes["reference"]) == steps + 1
    # By value the inputs grow by a file read per step; by reference they stay flat.
    assert sizes["value"][-1] > sizes["value"][0] + (steps - 1) * 15_000
    assert max(sizes["reference"]) < sizes["reference"][0] + 25_000
    assert sum(sizes["reference"]) * 3 < sum(sizes["value"])
    # Each call sends its delta on top of the previous call's stored transcript.
    assert turns[0].transcript is None and len(turns[0].messages) == 1
    for k in range(1, len(turns)):
        ref = turns[k].transcript
        assert ref is not None and ref.count == 1 + 2 * (k - 1)
        assert len(turns[k].messages) == 2  # the assistant call and its tool result
    # The last stored transcript is the whole conversation minus the final answer.
    transcripts = TranscriptStore(store)
    keys = store.list_thread(await scope_of(temporal_client, reference_id))
    assert len(keys) == steps + 1 and all("/transcript/" in k for k in keys)
    last_ref = turns[-1].transcript
    assert last_ref is not None
    stored = transcripts.load(last_ref)
    assert len(stored) == last_ref.count
    final_ref = _ref_of(store, keys[-1], count=len(results["reference"].transcript) - 1)
    full = [
        m.model_dump(mode="json", exclude_none=True, exclude={"name"})
        for m in transcripts.load(final_ref)
    ]
    assert full == results["reference"].transcript[:-1]


def _ref_of(store: ArtifactStore, key: str, count: int) -> TranscriptRef:
    """The ref of a stored transcript object (a segment's depth is its base's + 1)."""
    import hashlib
    import json

    body = store.client.get_object(store.bucket, key).read()
    artifact = ArtifactRef(
        bucket=store.bucket, key=key, size=len(body), sha256=hashlib.sha256(body).hexdigest()
    )
    data = json.loads(body)
    depth = data["base"]["depth"] + 1 if isinstance(data, dict) else 0
    return TranscriptRef(artifact=artifact, count=count, depth=depth)


async def test_continue_as_new_matches_a_single_run(
    temporal_client: Client, minio_client: Minio, tmp_path: Path
) -> None:
    """Forced continue-as-new every 2 steps ends with the same files and transcript."""
    script = scripted(
        calls(("w1", "write_file", {"file_path": "/notes/a.txt", "content": "one\n"})),
        calls(("w2", "write_file", {"file_path": "/ws/b.txt", "content": "bee\n"})),
        calls(("r1", "read_file", {"file_path": "/notes/a.txt"})),
        calls(("r2", "read_file", {"file_path": "/ws/b.txt"})),
        calls(
            (
                "e1",
                "edit_file",
                {"file_path": "/notes/a.txt", "old_string": "one", "new_string": "two"},
            ),
            (
                "e2",
                "edit_file",
                {"file_path": "/ws/b.txt", "old_string": "bee", "new_string": "be"},
            ),
        ),
        calls(("l1", "ls", {"path": "/notes"}), ("g1", "grep", {"pattern": "two"})),
        calls(("r3", "read_file", {"file_path": "/notes/a.txt"})),
        {"content": "finished"},
    )
    store = new_store(minio_client)
    outcomes: dict[int, tuple[AgentResult, str, int]] = {}
    for every in (2, 1000):
        root = tmp_path / f"ws-{every}"
        root.mkdir()
        async with (
            tools_worker(
                temporal_client,
                (tools_q := uid("tools")),
                {"fs": FilesystemBackend(root)},
                tmp_path / f"j{every}",
            ),
            agent_with_store(temporal_client, store) as queue,
        ):
            input = AgentInput(
                task="edit the notes",
                model=script,
                backend=BackendSpec(
                    routes=[
                        RouteSpec(
                            prefix="/ws/",
                            backend=BackendRef(kind="remote", name="fs", task_queue=tools_q),
                        )
                    ]
                ),
                continue_as_new_after_steps=every,
            )
            workflow_id = uid("wf")
            result = await temporal_client.execute_workflow(
                AgentWorkflow.run, input, id=workflow_id, task_queue=queue
            )
            runs = [
                e async for e in temporal_client.list_workflows(f"WorkflowId = '{workflow_id}'")
            ]
        outcomes[every] = (result, (root / "b.txt").read_text(), len(runs))
    hopped, single = outcomes[2], outcomes[1000]
    assert hopped[2] == 4 and single[2] == 1  # 8 steps, a hop every 2
    assert hopped[0].transcript == single[0].transcript
    assert hopped[0].final_answer == single[0].final_answer == "finished"
    assert hopped[1] == single[1] == "be\n"
    tool = {m["tool_call_id"]: m for m in hopped[0].transcript if m["role"] == "tool"}
    assert tool["e1"]["status"] == "success" and tool["e2"]["status"] == "success"
    assert "two" in tool["r3"]["content"] and tool["l1"]["content"] == "/notes/a.txt"
    assert hopped[0].steps == single[0].steps == 8


async def test_codec_keeps_every_payload_small(
    temporal_server: TemporalDevServer, minio_client: Minio, tmp_path: Path
) -> None:
    """A 300 KB user task: history holds references only, the run completes."""
    store = new_store(minio_client)
    client = await Client.connect(
        temporal_server.address,
        namespace=temporal_server.namespace,
        data_converter=filegate_data_converter(store),
    )
    task = "".join(f"requirement {i:06d}: keep it small\n" for i in range(9000))
    assert len(task) > EVICT_CHARS and len(task.encode()) > HISTORY_LIMIT
    script = scripted(
        calls(("w", "write_file", {"file_path": "/out.txt", "content": task})),
        {"content": "stored"},
    )
    workflow_id = uid("wf")
    async with agent_with_store(client, store) as queue:
        result = await client.execute_workflow(
            AgentWorkflow.run, AgentInput(task=task, model=script), id=workflow_id, task_queue=queue
        )
    assert result.final_answer == "stored"
    assert result.transcript[0]["content"] == task  # the stored transcript keeps the original
    handle = client.get_workflow_handle(workflow_id)
    events = [e async for e in handle.fetch_history_events()]
    biggest = max(e.ByteSize() for e in events)
    assert biggest < HISTORY_LIMIT, biggest
    raw = b"".join(e.SerializeToString() for e in events)
    assert CODEC_ENCODING in raw  # the big payloads went through the codec
    # The model saw a stub; the original is under /conversation_history/.
    scope = await scope_of(client, workflow_id)
    archived = store.key_for(scope, conversation_key(evicted_name(0)))
    assert store.client.get_object(store.bucket, archived).read().decode() == task
    first = json.loads(
        store.client.get_object(store.bucket, store.key_for(scope, "transcript/000000")).read()
    )
    assert len(first[0]["content"]) < 5000
    assert "/conversation_history/message-000000.md" in first[0]["content"]
    assert (
        "requirement 000000" in first[0]["content"] and "requirement 008999" in first[0]["content"]
    )


async def test_file_reads_leave_history_flat(
    temporal_server: TemporalDevServer, minio_client: Minio, tmp_path: Path
) -> None:
    """Issue 5 floors at a small scale: 30 whole-file reads of 20 KB, a hop every 10 steps.

    With the codec neither the tool result nor the model input carrying it stays
    in history: every payload is a small reference, bytes per step are far below
    a file read, and a later run (longer transcript) costs what the first did.
    """
    store = new_store(minio_client)
    client = await Client.connect(
        temporal_server.address,
        namespace=temporal_server.namespace,
        data_converter=filegate_data_converter(store),
    )
    root = tmp_path / "ws"
    root.mkdir()
    write_data(root)
    steps = 30
    workflow_id = uid("wf")
    async with (
        tools_worker(
            client, (tools_q := uid("tools")), {"fs": FilesystemBackend(root)}, tmp_path / "j"
        ),
        agent_with_store(client, store) as queue,
    ):
        input = AgentInput(
            task="read the data file once per step",
            model=script(steps),
            backend=BackendSpec(default=BackendRef(kind="remote", name="fs", task_queue=tools_q)),
            continue_as_new_after_steps=10,
        )
        result = await client.execute_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=queue
        )
    assert result.stop_reason == "final_answer" and result.steps == steps
    reads = [m for m in result.transcript if m["role"] == "tool"]
    assert len(reads) == steps - 1
    assert all(m["status"] == "success" and "00199 ddd" in m["content"] for m in reads)
    assert min(len(m["content"]) for m in reads) > 20_000

    stats = await history_stats(client, workflow_id)
    assert stats.runs == 3
    assert stats.largest_payload < MAX_PAYLOAD, stats
    assert stats.history_bytes / steps < MAX_BYTES_PER_STEP, stats
    # 29 reads of 20 KB by value would be > 580 KB; references keep it a fraction.
    assert stats.history_bytes < 29 * 20_000 / 4, stats
    first, second, _ = stats.run_bytes
    assert second <= first * MAX_GROWTH, stats.run_bytes
    # The tool results (activity results, in history) went to S3 through the codec;
    # the model turns carrying them went to a local activity and stayed inline.
    stored = [
        store.client.get_object(store.bucket, key).read() for key in store.list_thread(CODEC_THREAD)
    ]
    assert sum(b"00199 ddd" in body for body in stored) >= 1
    assert not any(b'"mode":"turn"' in body for body in stored)


async def test_local_model_call_keeps_inputs_out_of_history(
    temporal_client: Client, tmp_path: Path
) -> None:
    """With the default local-activity model call only results enter history.

    The inputs (by value here: no store) never do, so history grows by the
    tool results and small model answers, not by the transcript, even without S3.
    """
    root = tmp_path / "ws"
    root.mkdir()
    (root / "small.txt").write_text("tiny\n")
    steps = 8
    async with (
        tools_worker(
            temporal_client,
            (tools_q := uid("tools")),
            {"fs": FilesystemBackend(root)},
            tmp_path / "j",
        ),
        agent_with_store(temporal_client, None) as queue,
    ):
        workflow_id = uid("wf")
        input = AgentInput(
            task="read it " + "padding " * 2000,  # a 16 KB task message
            model=reading_script(steps, "/small.txt"),
            backend=BackendSpec(default=BackendRef(kind="remote", name="fs", task_queue=tools_q)),
        )
        result = await temporal_client.execute_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=queue
        )
    assert result.final_answer == "read them all"
    markers = []
    total = 0
    async for event in temporal_client.get_workflow_handle(workflow_id).fetch_history_events():
        total += event.ByteSize()
        marker = event.marker_recorded_event_attributes.marker_name
        if marker == "core_local_activity":  # not a version marker
            markers.append(event.ByteSize())
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            assert name != "filegate.model"
    assert len(markers) == steps + 1
    # The 16 KB task travels with every model call, but no marker carries it.
    assert max(markers) < 4_000
    # Start event (holds the task) + the rest, which stays far below 9 calls x 16 KB.
    assert total < 16_000 + 40_000
