"""No model output can kill or wedge a run (issue 26 item 4; contract §2, §11).

A real Temporal dev server, a real S3 server (weed) where the case says so,
and a real HTTP server speaking the OpenAI Chat Completions wire protocol
stand where the model would be. Each case sends one hostile turn, then a
final answer, and checks what matters to a user: the run finishes, the model
was asked exactly twice (no retry, no workflow-task failure loop calls it
again), the hostile call got an error result the model can read, and what the
model is sent next is small.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from minio import Minio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError, FailureError

from filegate.activities.providers.profiles import ModelProfile, ModelProfiles
from filegate.backends.artifacts import ArtifactStore
from filegate.kernel.messages import ModelSpec
from filegate.wiring.connection import with_payload_codec
from filegate.worker import agent_worker
from filegate.workflows import AgentInput, AgentResult, AgentWorkflow, Limits
from tests.providers_http import FakeModelServer
from tests.scripting import uid

pytestmark = pytest.mark.services

MIB = 1 << 20
DONE = "all done"


@pytest.fixture
def model() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


@pytest.fixture(autouse=True)
def model_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-hostile-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def completion(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def tool_turn(*calls: tuple[str, str, str]) -> dict[str, Any]:
    """A response making the calls ``(id, name, arguments text)`` (arguments verbatim)."""
    tool_calls = [
        {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls
    ]
    return completion(
        {"role": "assistant", "content": None, "tool_calls": tool_calls}, "tool_calls"
    )


def final_turn(text: str = DONE) -> dict[str, Any]:
    return completion({"role": "assistant", "content": text})


@dataclass
class Run:
    result: AgentResult
    handle: WorkflowHandle[Any, Any]
    model: FakeModelServer

    def tool_results(self, request: int = 1) -> dict[str, str]:
        """tool_call_id -> text of the tool messages the model was sent in ``request``."""
        messages = self.model.requests[request].json["messages"]
        return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}

    def request_bytes(self, request: int = 1) -> int:
        return len(json.dumps(self.model.requests[request].json))


@asynccontextmanager
async def agent(
    client: Client, model: FakeModelServer, store: ArtifactStore | None = None
) -> AsyncIterator[tuple[Client, str]]:
    """An agent worker whose ``openai`` profile is ``model``; with ``store``, S3 and its codec."""
    queue = uid("hostile")
    client = with_payload_codec(client, store)
    profiles = ModelProfiles({"openai": ModelProfile(kind="openai", base_url=f"{model.url}/v1")})
    async with agent_worker(client, queue, artifacts=store, model_profiles=profiles):
        yield client, queue


async def task_failures(handle: WorkflowHandle[Any, Any]) -> list[str]:
    found = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            found.append(event.workflow_task_failed_event_attributes.failure.message)
    return found


async def start(
    client: Client, queue: str, limits: Limits | None = None
) -> WorkflowHandle[Any, Any]:
    # A window no test turn comes near: a summary call would be one more model request.
    model = ModelSpec(provider="openai", name="m", context_window=100_000_000)
    input = AgentInput(task="go", model=model, limits=limits or Limits())
    return await client.start_workflow(AgentWorkflow.run, input, id=uid("wf"), task_queue=queue)


async def settle(
    handle: WorkflowHandle[Any, Any], model: FakeModelServer, timeout: float
) -> AgentResult:
    """The run's result; a run still going after ``timeout`` is stopped and the test fails."""
    try:
        return await asyncio.wait_for(handle.result(), timeout)
    except TimeoutError:
        failures = await task_failures(handle)
        await handle.terminate("test timed out")
        pytest.fail(
            f"run still going after {timeout:.0f}s: {len(model.requests)} model requests, "
            f"{len(failures)} failed workflow tasks (first: {failures[:1]})"
        )


async def run_turn(
    client: Client,
    model: FakeModelServer,
    turn: dict[str, Any],
    *,
    store: ArtifactStore | None = None,
    limits: Limits | None = None,
    timeout: float = 30.0,
) -> Run:
    """One hostile turn, then the final answer: the run must end with that answer."""
    model.queue(body=turn)
    model.queue(body=final_turn())
    async with agent(client, model, store) as (client, queue):
        handle = await start(client, queue, limits)
        result = await settle(handle, model, timeout)
    run = Run(result, handle, model)
    assert result.stop_reason == "final_answer" and result.final_answer == DONE
    assert len(model.requests) == 2, "the model is asked once for the hostile turn"
    assert await task_failures(handle) == []
    return run


def new_store(minio_client: Minio) -> ArtifactStore:
    return ArtifactStore(minio_client, "hostile-test", namespace=uid("ns"))


# --------------------------------------------------------------------------- nesting


@pytest.mark.parametrize("depth", [100_000, 250])
async def test_deeply_nested_arguments_get_an_error_result(
    temporal_client: Client, model: FakeModelServer, depth: int
) -> None:
    """H4: 100 000 levels raised RecursionError in the parse; 250 levels parsed, but no
    payload converter can encode or decode them (pydantic's limits are ~200)."""
    nested = '{"file_path": ' + "[" * depth + "]" * depth + "}"
    run = await run_turn(
        temporal_client,
        model,
        tool_turn(("deep", "read_file", nested), ("fine", "write_file", WRITE_OK)),
    )
    results = run.tool_results()
    assert results["deep"].startswith("Error:") and "nest deeper than 64 levels" in results["deep"]
    assert results["fine"] == "Successfully wrote /ok.txt."
    assert run.request_bytes() < 20_000


WRITE_OK = json.dumps({"file_path": "/ok.txt", "content": "ok\n"})


# --------------------------------------------------------------------------- size


def big_write(chars: int) -> str:
    return json.dumps({"file_path": "/big.txt", "content": "x" * chars})


@pytest.mark.parametrize("with_s3", [False, True], ids=["no-s3", "s3"])
@pytest.mark.parametrize(
    "size",
    [pytest.param(8 * MIB, id="8MiB"), pytest.param(50 * MIB, id="50MiB", marks=pytest.mark.slow)],
)
async def test_oversized_arguments_are_refused_in_the_model_activity(
    temporal_client: Client,
    minio_client: Minio,
    model: FakeModelServer,
    size: int,
    with_s3: bool,
) -> None:
    """H5: without S3 the 8 MiB turn failed every workflow task and each retry asked the
    model again; with S3 the run went on but sent the 8 MiB back on every later request,
    which no real model's context window takes. Now the call is refused once, the model
    reads why, and the arguments never reach history or a later request."""
    store = new_store(minio_client) if with_s3 else None
    arguments = big_write(size)
    run = await run_turn(
        temporal_client,
        model,
        tool_turn(("big", "write_file", arguments), ("fine", "write_file", WRITE_OK)),
        store=store,
        timeout=90.0,
    )
    results = run.tool_results()
    chars = f"{len(arguments):,}".replace(",", " ")
    assert results["big"] == (
        f"Error: write_file was not run: its arguments are too large ({chars} characters, "
        "over the 1 000 000-character limit). Send smaller arguments, e.g. split a large "
        "file over several calls."
    )
    assert results["fine"] == "Successfully wrote /ok.txt."
    assert run.request_bytes() < 20_000, "the refused arguments are not sent back"
    transcript = json.dumps(run.result.transcript)
    assert len(transcript) < 20_000


async def test_calls_together_too_large_to_record_without_s3(
    temporal_client: Client, model: FakeModelServer
) -> None:
    """Each call is under the per-call limit, but three of them are more than one model
    turn may record inline (no S3): the largest are refused until the turn fits."""
    chars = 700_000
    run = await run_turn(
        temporal_client,
        model,
        tool_turn(
            ("a", "write_file", json.dumps({"file_path": "/a.txt", "content": "a" * chars})),
            ("b", "write_file", json.dumps({"file_path": "/b.txt", "content": "b" * (chars + 1)})),
            ("c", "write_file", json.dumps({"file_path": "/c.txt", "content": "c" * (chars + 2)})),
        ),
    )
    results = run.tool_results()
    assert results["a"] == "Successfully wrote /a.txt."
    for refused in ("b", "c"):
        assert results[refused].startswith("Error: write_file was not run: this turn's calls")
        assert "too large to record together" in results[refused]


async def test_a_turn_too_large_to_record_fails_the_run_clearly(
    temporal_client: Client, model: FakeModelServer
) -> None:
    """A text answer over what a turn may record inline (no S3) cannot be cut into an
    error result: the run fails once, with a reason, and the model is asked once."""
    model.queue(body=final_turn("y" * (3 * MIB)))
    async with agent(temporal_client, model) as (client, queue):
        handle = await start(client, queue)
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 30)
    cause: BaseException | None = info.value.cause
    while isinstance(cause, FailureError) and not isinstance(cause, ApplicationError):
        cause = cause.cause
    assert isinstance(cause, ApplicationError) and cause.type == "ModelTurnTooLarge"
    assert cause.non_retryable and "too large to record" in cause.message
    assert len(model.requests) == 1
    assert await task_failures(handle) == []


# --------------------------------------------------------------------------- many calls


@pytest.mark.slow
async def test_ten_thousand_calls_in_one_turn(
    temporal_client: Client, model: FakeModelServer
) -> None:
    """The first 64 calls run; one error result stands for the 9 936 dropped ones."""
    calls = [(f"c{n}", "ls", '{"path": "/"}') for n in range(10_000)]
    run = await run_turn(temporal_client, model, tool_turn(*calls))
    results = run.tool_results()
    assert len(results) == 65
    assert all(results[f"c{n}"] == "No files found" for n in range(64))
    assert results["c64"] == (
        "Error: this turn asked for 10 000 tool calls, over the limit of 64 per turn: "
        "the first 64 ran, the other 9 936 (c64 ... c9999) were not run. "
        "Send at most 64 calls per turn; repeat the ones you still need."
    )
    assert run.request_bytes() < 50_000
    assert run.result.tool_calls == 65


async def test_calls_per_turn_limit_is_configurable(
    temporal_client: Client, model: FakeModelServer
) -> None:
    calls = [(f"c{n}", "ls", '{"path": "/"}') for n in range(5)]
    run = await run_turn(
        temporal_client, model, tool_turn(*calls), limits=Limits(max_tool_calls_per_turn=2)
    )
    results = run.tool_results()
    assert sorted(results) == ["c0", "c1", "c2"]
    assert "the other 3 (c2 ... c4) were not run" in results["c2"]


# --------------------------------------------------------------------------- bad text


HOSTILE_TEXT = {
    "invalid-json": ('{"file_path": "/a.txt", "content": "x"', "were not valid JSON"),
    "lone-surrogate": ('{"file_path": "/a.txt", "content": "\\ud800"}', "lone surrogate"),
    # The surrogate itself in the text (JSON-escaped only in the HTTP body):
    "raw-lone-surrogate-in-invalid-json": ('{"file_path": "\udfff', "lone surrogate"),
    "nul-in-path": ('{"file_path": "/a\\u0000.txt", "content": "x"}', "NUL"),
    "raw-nul": ('{"file_path": "/a.txt", "content": "a\x00b"}', "were not valid JSON"),
    "huge-integer": ('{"file_path": "/a.txt", "content": ' + "9" * 5000 + "}", "valid JSON"),
    "not-an-object": ("[1, 2, 3]", "must be a JSON object, got '[1, 2, 3]'"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TEXT))
async def test_hostile_argument_text_gets_an_error_result(
    temporal_client: Client, model: FakeModelServer, case: str
) -> None:
    arguments, expected = HOSTILE_TEXT[case]
    run = await run_turn(
        temporal_client,
        model,
        tool_turn(("bad", "write_file", arguments), ("fine", "write_file", WRITE_OK)),
    )
    results = run.tool_results()
    assert results["bad"].startswith("Error:") and expected in results["bad"], results["bad"]
    assert results["fine"] == "Successfully wrote /ok.txt."


async def test_nul_bytes_in_content_are_written_as_given(
    temporal_client: Client, model: FakeModelServer
) -> None:
    """NUL is valid in JSON text; only paths refuse it (contract §1 path validation)."""
    arguments = json.dumps({"file_path": "/n.txt", "content": "a\x00b"})
    read = json.dumps({"file_path": "/n.txt"})
    model.queue(body=tool_turn(("w", "write_file", arguments)))
    model.queue(body=tool_turn(("r", "read_file", read)))
    model.queue(body=final_turn())
    async with agent(temporal_client, model) as (client, queue):
        handle = await start(client, queue)
        result = await settle(handle, model, 30)
    assert result.stop_reason == "final_answer" and len(model.requests) == 3
    read_back = Run(result, handle, model).tool_results(2)["r"]
    assert "a\x00b" in read_back
