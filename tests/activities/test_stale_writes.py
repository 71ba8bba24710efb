"""A whole-file ``write_file`` after a stale read never overwrites someone else's change
(issue 34 item 6, the workflow's half).

The tools worker refuses a write whose ``expected_fingerprint`` differs from the
file on disk; here the workflow supplies it. A real Temporal dev server and a
real HTTP server speaking the OpenAI protocol stand in for the model, so the
test can change the file *between* two model turns, as another process would.
Old code: the workflow sent no fingerprint, and the write replaced the change.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from filegate.activities.providers.profiles import ModelProfile, ModelProfiles
from filegate.backends.filesystem import FilesystemBackend
from filegate.kernel.messages import ModelSpec
from filegate.kernel.protocol import BackendProtocol
from filegate.worker import agent_worker
from filegate.workflows import AgentInput, AgentResult, AgentWorkflow, BackendRef, BackendSpec
from tests.activities.test_hostile_model_output import final_turn, tool_turn
from tests.providers_http import FakeModelServer

pytestmark = pytest.mark.services


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeModelServer]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-stale-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """The workspace, holding ``notes.md`` (``v1``)."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.md").write_text("v1\n")
    return root


def call(tool: str, **args: Any) -> dict[str, Any]:
    return tool_turn((f"c-{uuid.uuid4().hex[:6]}", tool, json.dumps(args)))


async def run(
    client: Client,
    model: FakeModelServer,
    root: Path,
    tmp_path: Path,
    turns: list[tuple[dict[str, Any], Callable[[], None] | None]],
) -> tuple[AgentResult, list[str]]:
    """The turns in order (each with what happens outside just before it is answered),
    then a final answer; returns the result and each tool result the model was sent."""
    for body, before in turns:
        model.queue_after(before, body)
    model.queue(body=final_turn())
    queue = f"stale-{uuid.uuid4().hex[:8]}"
    profiles = ModelProfiles({"openai": ModelProfile(kind="openai", base_url=f"{model.url}/v1")})
    backends: dict[str, BackendProtocol] = {"fs": FilesystemBackend(root)}
    spec = BackendSpec(default=BackendRef(kind="local", name="fs"))
    async with agent_worker(
        client, queue, backends=backends, journal_dir=tmp_path / "j", model_profiles=profiles
    ):
        result = await client.execute_workflow(
            AgentWorkflow.run,
            AgentInput(
                task="go",
                model=ModelSpec(provider="openai", name="m", context_window=100_000_000),
                backend=spec,
            ),
            id=f"stale-{uuid.uuid4().hex[:10]}",
            task_queue=queue,
        )
    said = [
        m["content"]
        for request in model.requests
        for m in request.json["messages"][-1:]
        if m["role"] == "tool"
    ]
    return result, said


async def test_a_write_after_an_outside_change_is_refused_and_the_change_kept(
    temporal_client: Client, model: FakeModelServer, ws: Path, tmp_path: Path
) -> None:
    notes = ws / "notes.md"

    def someone_edits() -> None:
        notes.write_text("v1\nadded by a colleague\n")

    steps = [
        (call("read_file", file_path="/notes.md"), None),
        (call("write_file", file_path="/notes.md", content="rewritten\n"), someone_edits),
    ]
    result, said = await run(temporal_client, model, ws, tmp_path, steps)
    assert result.stop_reason == "final_answer"
    assert notes.read_text() == "v1\nadded by a colleague\n"
    assert said[-1].startswith("Error:") and "changed since you last read it" in said[-1]
    assert str(ws) not in said[-1]


async def test_the_runs_own_changes_and_unread_files_write_freely(
    temporal_client: Client, model: FakeModelServer, ws: Path, tmp_path: Path
) -> None:
    steps: list[tuple[dict[str, Any], Callable[[], None] | None]] = [
        (call("read_file", file_path="/notes.md"), None),
        (call("edit_file", file_path="/notes.md", old_string="v1", new_string="v2"), None),
        (call("write_file", file_path="/notes.md", content="three\n"), None),
        (call("write_file", file_path="/notes.md", content="four\n"), None),
        (call("write_file", file_path="/new.md", content="fresh\n"), None),
    ]
    result, said = await run(temporal_client, model, ws, tmp_path, steps)
    assert result.stop_reason == "final_answer"
    assert all(not text.startswith("Error:") for text in said), said
    assert (ws / "notes.md").read_text() == "four\n"
    assert (ws / "new.md").read_text() == "fresh\n"


async def test_a_reread_after_the_change_lets_the_write_through(
    temporal_client: Client, model: FakeModelServer, ws: Path, tmp_path: Path
) -> None:
    notes = ws / "notes.md"

    def someone_edits() -> None:
        notes.write_text("v2\n")

    steps = [
        (call("read_file", file_path="/notes.md"), None),
        (call("write_file", file_path="/notes.md", content="x\n"), someone_edits),
        (call("read_file", file_path="/notes.md"), None),
        (call("write_file", file_path="/notes.md", content="x\n"), None),
    ]
    _, said = await run(temporal_client, model, ws, tmp_path, steps)
    assert said[1].startswith("Error:") and not said[3].startswith("Error:")
    assert notes.read_text() == "x\n"
