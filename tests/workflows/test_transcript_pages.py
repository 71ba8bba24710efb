"""Transcript pages (issue 28 item 17): a long thread lets its summarized messages go.

Once the summarized part of the transcript the workflow holds passes
``PAGE_OUT_CHARS``, the next summary call stores it as a page in S3 and the
workflow drops it: neither its memory, nor its continue-as-new carry, nor its
result hold it any more, and ``full_transcript`` joins the pages back. Pure view
logic first, then real runs (dev server, weed) with a tiny context window.
"""

from __future__ import annotations

from typing import Any

import pytest
from minio import Minio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Replayer

import filegate.workflows.turns as turns
from filegate.activities.pages import full_transcript, load_transcript
from filegate.backends.artifacts import ArtifactStore
from filegate.kernel.messages import Message, ModelSpec, ToolCall
from filegate.worker import agent_worker
from filegate.workflows import AgentInput, AgentResult, AgentWorkflow
from filegate.workflows.context import (
    EVICT_CHARS,
    ContextState,
    cut_for_summary,
    model_view,
    to_archive,
)
from filegate.workflows.inputs import AgentInput as AgentInputModel
from filegate.workflows.runner import sandboxed_runner
from tests.scripting import uid

FILE = "".join(f"{i:04d} " + "p" * 75 + "\n" for i in range(40))  # 3 200 chars
READS = 14


def _messages(n: int) -> list[Message]:
    """A task, an evicted user message, then n (tool call, 500-char result) pairs."""
    messages = [
        Message(role="user", content="task"),
        Message(role="user", content="u" * (EVICT_CHARS + 1)),
    ]
    for k in range(n):
        call = ToolCall(id=f"c{k}", name="read_file", args={"file_path": "/a"})
        messages.append(Message(role="assistant", tool_calls=[call]))
        messages.append(Message(role="tool", content=f"{k} " + "y" * 500, tool_call_id=f"c{k}"))
    return messages


def test_the_view_of_a_paged_list_is_the_view_of_the_whole() -> None:
    """With ``offset`` messages dropped, view, archive and cut use transcript indices."""
    messages = _messages(12)
    for offset in (0, 1, 3, 7):
        whole = ContextState(start=7, archived_upto=1)
        paged = whole.model_copy(update={"offset": offset})
        tail = messages[offset:]
        assert model_view(tail, paged) == model_view(messages, whole)
        assert cut_for_summary(tail, paged, 400) == cut_for_summary(messages, whole, 400)
        early = ContextState(start=offset, archived_upto=offset, offset=offset)
        assert to_archive(tail, early) == to_archive(messages, ContextState(archived_upto=offset))
    assert list(to_archive(messages, ContextState(archived_upto=1))) == ["message-000001.md"]


def _script(tag: str) -> ModelSpec:
    turns_: list[dict[str, Any]] = [
        {"tool_calls": [{"id": f"{tag}w", "name": "write_file",
                         "args": {"file_path": "/f.txt", "content": FILE}}]}
    ]  # fmt: skip
    turns_ += [
        {"tool_calls": [{"id": f"{tag}r{k}", "name": "read_file", "args": {"file_path": "/f.txt"}}]}
        for k in range(READS)
    ]
    turns_.append({"content": "paged and done"})
    return ModelSpec(
        provider="scripted", options={"script": {"turns": turns_}}, context_window=3000
    )


async def _run(client: Client, store: ArtifactStore, tag: str) -> tuple[AgentResult, str]:
    queue, workflow_id = uid("agent"), uid("wf")
    input = AgentInput(
        task="read the file many times", model=_script(tag), continue_as_new_after_steps=5
    )
    async with agent_worker(client, queue, artifacts=store, workflow_runner=sandboxed_runner()):
        result = await client.execute_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=queue
        )
    return result, workflow_id


@pytest.mark.services
async def test_a_long_thread_pages_its_transcript_out(
    temporal_client: Client, minio_client: Minio, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ArtifactStore(minio_client, "pages-test", namespace=uid("ns"))
    tag = uid("t")
    whole, _ = await _run(temporal_client, store, tag)  # PAGE_OUT_CHARS: 8 MiB, never reached
    assert whole.earlier_transcript is None
    monkeypatch.setattr(turns, "PAGE_OUT_CHARS", 8_000)
    paged, workflow_id = await _run(temporal_client, store, tag)

    assert paged.final_answer == whole.final_answer == "paged and done"
    assert paged.steps == whole.steps == READS + 2
    page = paged.earlier_transcript
    assert page is not None and page.start > 0  # a chain of several pages
    assert len(paged.transcript) < len(whole.transcript) - page.start
    assert full_transcript(store, page, paged.transcript) == whole.transcript
    assert len(load_transcript(store, page)) == page.end
    with pytest.raises(ValueError, match="needs the artifact store"):
        full_transcript(None, page, paged.transcript)

    # The last run started from a carry without the paged messages, and replays.
    handle = temporal_client.get_workflow_handle(workflow_id)
    history = await handle.fetch_history()
    started = history.events[0]
    assert started.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
    [input] = await temporal_client.data_converter.decode(
        list(started.workflow_execution_started_event_attributes.input.payloads),
        [AgentInputModel],
    )
    assert input.carry is not None and input.carry.context.offset > 0
    carried = input.carry.context.offset + len(input.carry.messages)
    assert carried < len(whole.transcript)
    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=temporal_client.data_converter,
        workflow_runner=sandboxed_runner(),
    )
    await replayer.replay_workflow(history)
