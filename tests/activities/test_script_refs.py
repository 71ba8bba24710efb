"""Scripts by reference (issue 28 item 17): a long scripted run's model calls stay one size.

A script over ``SCRIPT_BY_REFERENCE_OVER`` bytes travels inline in the first
model call only; the activity hands back a :class:`ScriptRef` and later calls
name the script by it. The worker parses each distinct script once
(``ScriptCache``). Real Temporal dev server and S3 (weed) where a test says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from minio import Minio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

from filegate.activities import model as model_module
from filegate.activities.providers import scripted
from filegate.activities.providers.profiles import ModelProfile
from filegate.activities.providers.scripted import SCRIPTS, ScriptCache, ScriptedProvider
from filegate.backends.artifacts import ArtifactStore
from filegate.kernel.messages import ModelRequest, ModelResponse, ModelSpec
from filegate.kernel.scripts import (
    SCRIPT_BY_REFERENCE_OVER,
    ScriptRef,
    canonical_script,
    script_digest,
)
from filegate.kernel.transcripts import ModelTurn
from filegate.worker import agent_worker
from filegate.workflows import AgentInput, AgentResult, AgentWorkflow
from filegate.workflows.runner import sandboxed_runner
from tests.scripting import uid

STEPS = 6


def long_script(tag: str, steps: int = STEPS) -> dict[str, Any]:
    """``steps`` model calls (an ``ls`` each, then the answer), over the by-reference size."""
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"id": f"{tag}-{k}", "name": "ls", "args": {"path": "/"}}]}
        for k in range(steps - 1)
    ]
    turns.append({"content": "done " + "." * SCRIPT_BY_REFERENCE_OVER})
    return {"turns": turns}


def count_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ``load_script`` call from now on, by origin."""
    origins: list[str] = []
    load = scripted.load_script

    def counting(source: Any, origin: str) -> scripted.Script:
        origins.append(origin)
        return load(source, origin)

    monkeypatch.setattr(scripted, "load_script", counting)
    return origins


async def run_agent(
    client: Client, script: dict[str, Any], store: ArtifactStore | None, **fields: Any
) -> tuple[AgentResult, WorkflowHistory]:
    queue, workflow_id = uid("agent"), uid("wf")
    spec = ModelSpec(provider="scripted", options={"script": script})
    input = AgentInput(task="list the root once per step", model=spec, **fields)
    async with agent_worker(client, queue, artifacts=store, workflow_runner=sandboxed_runner()):
        result = await client.execute_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=queue
        )
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return result, history


async def replay(client: Client, history: WorkflowHistory) -> None:
    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=client.data_converter,
        workflow_runner=sandboxed_runner(),
    )
    await replayer.replay_workflow(history)


# ------------------------------------------------------------------ the worker's cache


def test_the_cache_parses_each_distinct_script_once(monkeypatch: pytest.MonkeyPatch) -> None:
    loads = count_loads(monkeypatch)
    cache = ScriptCache(size=2)
    script = long_script(uid("t"))
    first = cache.parse(script, "inline script")
    assert cache.parse(json.dumps(script), "inline script") == first  # text or dict: one script
    assert first.sha256 == script_digest(canonical_script(script))
    assert first.size == len(canonical_script(script)) > SCRIPT_BY_REFERENCE_OVER
    assert len(loads) == 1
    cache.parse(long_script(uid("u")), "inline script")
    cache.parse(long_script(uid("v")), "inline script")  # the first one drops out
    assert cache.get(first.sha256) is None and len(loads) == 3
    with pytest.raises(ApplicationError, match="a turn needs"):
        cache.parse({"turns": [{}]}, "inline script")
    with pytest.raises(ApplicationError, match="a turn needs"):
        cache.parse({"turns": [{}]}, "inline script")  # never kept: it fails again
    assert len(loads) == 5


def test_script_files_are_parsed_again_only_when_they_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = count_loads(monkeypatch)
    cache = ScriptCache()
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"turns": [{"content": "one"}]}))
    assert cache.parse_file(path, "a.json").script.turns[0].content == "one"
    cache.parse_file(path, "a.json")
    assert len(loads) == 1
    path.write_text(json.dumps({"turns": [{"content": "two!"}]}))
    assert cache.parse_file(path, "a.json").script.turns[0].content == "two!"
    assert len(loads) == 2


async def test_a_reference_this_worker_does_not_hold_is_refused_plainly() -> None:
    digest = script_digest(b"{}")
    request = ModelRequest(
        model=ModelSpec(provider="scripted"),
        messages=[],
        script=ScriptRef(sha256=digest, size=2),
    )
    with pytest.raises(ApplicationError) as info:
        await ScriptedProvider(ModelProfile(kind="scripted")).complete(request)
    assert info.value.type == "ScriptUnavailable" and info.value.non_retryable
    assert digest[:12] in info.value.message


# ------------------------------------------------------------------ through Temporal


@pytest.mark.services
async def test_model_calls_name_a_long_script_by_reference(
    temporal_client: Client, minio_client: Minio, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regular model activities (their inputs are in history): after the first call the
    script is a ref to its object in S3, and every input has the same size."""
    loads = count_loads(monkeypatch)
    store = ArtifactStore(minio_client, "script-refs-test", namespace=uid("ns"))
    script = long_script(uid("s"))
    result, history = await run_agent(temporal_client, script, store, model_call="activity")
    assert result.stop_reason == "final_answer" and result.steps == STEPS
    sizes: list[int] = []
    turns: list[ModelTurn] = []
    for event in history.events:
        attributes = event.activity_task_scheduled_event_attributes
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        assert attributes.activity_type.name == "filegate.model"
        [turn] = await temporal_client.data_converter.decode(
            list(attributes.input.payloads), [ModelTurn]
        )
        sizes.append(event.ByteSize())
        turns.append(turn)
    assert len(turns) == STEPS
    assert turns[0].model.options["script"] == script and turns[0].script is None
    canonical = canonical_script(script)
    for turn in turns[1:]:
        assert "script" not in turn.model.options
        assert turn.script is not None and turn.script.sha256 == script_digest(canonical)
        assert turn.script.artifact is not None
    # The first input carries the script; the others a ref of a few hundred bytes instead.
    assert max(sizes[1:]) < sizes[0] - len(canonical) + 1_000, sizes
    assert max(sizes[1:]) - min(sizes[1:]) < 600, sizes
    assert loads == ["inline script"]  # parsed once for the whole run
    ref = turns[1].script
    assert ref is not None and ref.artifact is not None
    assert store.get(ref.artifact) == canonical  # another worker could fetch it
    await replay(temporal_client, history)


@pytest.mark.services
async def test_a_worker_that_lost_the_script_gets_it_inline_again(
    temporal_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Local model calls without a store: the ref names the worker's parsed copy. A
    worker that no longer holds it says so, and the workflow sends the script again."""
    seen: list[str] = []
    forget = False

    class Recording(ScriptedProvider):
        async def complete(self, request: ModelRequest) -> ModelResponse:
            response = await super().complete(request)
            seen.append("ref" if request.script is not None else "inline")
            if forget:
                SCRIPTS.clear()  # as if the next call landed on a restarted worker
            return response

    monkeypatch.setitem(model_module.PROVIDERS, "scripted", Recording)
    result, _ = await run_agent(temporal_client, long_script(uid("k")), None)
    assert result.steps == STEPS and seen == ["inline"] + ["ref"] * (STEPS - 1)

    seen.clear()
    forget = True
    result, history = await run_agent(temporal_client, long_script(uid("f")), None)
    assert result.stop_reason == "final_answer" and result.steps == STEPS
    assert result.final_answer.startswith("done ")
    assert seen == ["inline"] * STEPS  # every ref missed, every retry came inline
    await replay(temporal_client, history)


@pytest.mark.services
async def test_runs_recorded_with_inline_scripts_replay(
    temporal_client: Client, minio_client: Minio
) -> None:
    """A history from before script refs: its model results hand out no ref, so the
    replaying workflow keeps the script inline and issues the same commands."""
    store = ArtifactStore(minio_client, "script-refs-test", namespace=uid("ns"))
    _, history = await run_agent(temporal_client, long_script(uid("r")), store)
    stripped = 0
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
            continue
        details = event.marker_recorded_event_attributes.details
        if "result" not in details or not details["result"].payloads:
            continue
        payload = details["result"].payloads[0]
        result = json.loads(payload.data)
        if isinstance(result, dict) and result.pop("script", None) is not None:
            payload.data = json.dumps(result).encode()
            stripped += 1
    assert stripped == 1  # only the first call got the script inline
    await replay(temporal_client, history)


@pytest.mark.services
async def test_a_worker_without_the_script_fetches_it_from_the_store(
    temporal_client: Client, minio_client: Minio, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an artifact store, a worker that does not hold the script reads it from its
    object under the run chain: no call has to bring it inline again."""
    seen: list[str] = []

    class Forgetting(ScriptedProvider):
        async def complete(self, request: ModelRequest) -> ModelResponse:
            response = await super().complete(request)
            seen.append("ref" if request.script is not None else "inline")
            SCRIPTS.clear()  # the next call lands on a worker that never parsed it
            return response

    monkeypatch.setitem(model_module.PROVIDERS, "scripted", Forgetting)
    loads = count_loads(monkeypatch)
    store = ArtifactStore(minio_client, "script-refs-test", namespace=uid("ns"))
    result, _ = await run_agent(temporal_client, long_script(uid("g")), store)
    assert result.stop_reason == "final_answer" and result.steps == STEPS
    assert seen == ["inline"] + ["ref"] * (STEPS - 1)
    assert loads == ["inline script"] + ["stored script"] * (STEPS - 1)
