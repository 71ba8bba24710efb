"""contract §7 context management: human-message eviction and summarization.

Pure view logic first (workflows.context), then real runs on the dev server
with a scripted model whose context window is tiny, with and without an
artifact store on the agent worker.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from minio import Minio
from temporalio.client import Client

from filegate.activities.history import TranscriptStore
from filegate.kernel.messages import Message, ModelSpec, ToolCall
from filegate.kernel.transcripts import conversation_key
from filegate.workflows import AgentInput, AgentWorkflow
from filegate.workflows.context import (
    EVICT_CHARS,
    ContextState,
    TokenTally,
    cut_for_summary,
    model_view,
    summarize_threshold,
    to_archive,
    view_tokens,
)
from tests.run_chain import scope_of
from tests.scripting import calls, scripted, uid
from tests.workflows.test_history_size import agent_with_store, model_inputs, new_store


def _turns(n: int, size: int) -> list[Message]:
    """A user task, then n (assistant tool call, tool result of ``size`` chars) pairs."""
    messages = [Message(role="user", content="task")]
    for k in range(n):
        call = ToolCall(id=f"c{k}", name="read_file", args={"file_path": "/a"})
        messages.append(Message(role="assistant", tool_calls=[call]))
        messages.append(Message(role="tool", content="y" * size, tool_call_id=f"c{k}"))
    return messages


def test_token_tally_counts_each_message_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Same totals as view_tokens, turn after turn, estimating only the new messages."""
    import filegate.workflows.context as context

    estimated: list[Message] = []
    real = context.message_tokens

    def counting(message: Message) -> int:
        estimated.append(message)
        return real(message)

    monkeypatch.setattr(context, "message_tokens", counting)
    tally = TokenTally()
    messages = _turns(3, 400)
    assert tally.view_tokens(messages, "sys" * 40) == view_tokens(messages, "sys" * 40)
    messages += _turns(1, 900)[1:]
    estimated.clear()
    total = tally.view_tokens(messages)
    assert len(estimated) == 2  # only the two new messages
    assert total == view_tokens(messages)
    # A message replaced by another object (a stub, a summary) is estimated afresh.
    messages[1] = Message(role="user", content="z" * 4000)
    assert tally.view_tokens(messages) == view_tokens(messages)


def test_threshold_defaults_to_170k_tokens() -> None:
    assert summarize_threshold(ModelSpec()) == int(0.85 * 170_000)
    assert summarize_threshold(ModelSpec(context_window=1000)) == 850


def test_cut_never_orphans_a_tool_result() -> None:
    messages = _turns(6, 800)
    for threshold in (100, 300, 700, 1000, 2000):
        cut = cut_for_summary(messages, ContextState(), threshold)
        assert 0 < cut <= len(messages)
        assert cut == len(messages) or messages[cut].role != "tool"
    later = ContextState(start=5)
    assert cut_for_summary(messages, later, 300) > 5


def test_long_user_message_is_stubbed_and_archived_once() -> None:
    big = "".join(f"row {i}\n" for i in range(EVICT_CHARS // 6 + 10))
    messages = [Message(role="user", content=big), Message(role="assistant", content="ok")]
    state = ContextState()
    view = model_view(messages, state)
    assert view[1] == messages[1]
    stub = view[0].text()
    assert len(stub) < 2000 and "/conversation_history/message-000000.md" in stub
    assert "row 0" in stub and f"row {EVICT_CHARS // 6 + 9}" in stub
    assert to_archive(messages, state) == {"message-000000.md": big}
    assert to_archive(messages, ContextState(archived_upto=2)) == {}
    assert messages[0].text() == big  # the transcript itself is untouched
    assert view_tokens(view) < view_tokens(messages) // 50


# --------------------------------------------------------------------------- real runs

FILE = "".join(f"{i:04d} " + "z" * 75 + "\n" for i in range(40))  # 3 200 chars
READS = 6


def _script() -> ModelSpec:
    turns = [calls(("w", "write_file", {"file_path": "/f.txt", "content": FILE}))]
    turns += [calls((f"r{k}", "read_file", {"file_path": "/f.txt"})) for k in range(READS)]
    return scripted(*turns, {"content": "summarized and done"}, context_window=3000)


@pytest.mark.services
@pytest.mark.parametrize("with_store", [True, False], ids=["by-reference", "by-value"])
async def test_summarization_with_small_context_window(
    temporal_client: Client, minio_client: Minio, tmp_path: Path, with_store: bool
) -> None:
    store = new_store(minio_client) if with_store else None
    workflow_id = uid("wf")
    async with agent_with_store(temporal_client, store) as queue:
        result = await temporal_client.execute_workflow(
            AgentWorkflow.run,
            AgentInput(task="read the file many times", model=_script(), model_call="activity"),
            id=workflow_id,
            task_queue=queue,
        )
    # Summaries never consumed a scripted turn: every turn ran, in order.
    assert result.final_answer == "summarized and done"
    assert result.steps == READS + 2 and result.tool_calls == READS + 1
    # The stored transcript keeps everything, no summary inside.
    assert len(result.transcript) == 1 + 2 * (READS + 1) + 1
    assert not any("Summary of" in json.dumps(m) for m in result.transcript)

    inputs = [turn for _, turn in await model_inputs(temporal_client, workflow_id)]
    summaries = [t for t in inputs if t.purpose == "summarize"]
    responds = [t for t in inputs if t.purpose == "respond"]
    assert summaries and [t.call_index for t in responds] == list(range(READS + 2))
    threshold_chars = 4 * summarize_threshold(_script())
    last = responds[-1]
    if store is not None:
        # By reference: the last call's view (stored transcript + its new messages)
        # starts with the summary.
        assert last.transcript is not None
        stored = TranscriptStore(store).load(last.transcript) + list(last.messages)
        view = [m.model_dump(mode="json") for m in stored]
        archive_key = conversation_key(f"summary-{summaries[0].call_index:06d}.md")
        archived = store.client.get_object(
            store.bucket,
            store.key_for(await scope_of(temporal_client, workflow_id), archive_key),
        ).read()
        assert b"read the file many times" in archived and b"0039 zzz" in archived
        assert "/conversation_history/summary-" in view[0]["content"]
    else:
        view = [m.model_dump(mode="json") for m in last.messages]
    assert view[0]["role"] == "user" and "Summary of" in view[0]["content"]
    assert "Intent: read the file many times" in view[0]["content"]
    assert "Artifacts: /f.txt" in view[0]["content"]
    assert sum(len(json.dumps(m)) for m in view) < threshold_chars
    assert len(view) < len(result.transcript) - 1
