"""Model profiles live on the agent worker; the workflow input names one (contract §11).

The input chooses a profile and a model name, never an endpoint, a key or the
name of an environment variable. A local capture server stands where an
attacker would put one: it must never see a request, let alone a secret.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from filegate.activities.model import ModelActivities
from filegate.activities.providers.profiles import (
    PROFILE_ERROR_TYPE,
    ModelProfile,
    ModelProfiles,
)
from filegate.backends.settings import ModelSettings, Settings
from filegate.kernel.messages import Message, ModelRequest, ModelSpec, check_model_spec
from filegate.worker import agent_worker
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec
from tests.providers_http import FakeModelServer

S3_SECRET = "s3-secret-do-not-leak-0123"
OPENAI_KEY = "sk-worker-openai-0123"
ANTHROPIC_KEY = "sk-ant-worker-0123"
SCRIPT = {"turns": [{"content": "done"}]}


@pytest.fixture
def capture() -> Iterator[FakeModelServer]:
    with FakeModelServer() as s:
        yield s


@pytest.fixture(autouse=True)
def worker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Secrets a real agent worker holds; no base URLs configured."""
    monkeypatch.setenv("FILEGATE_S3_SECRET_KEY", S3_SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "FILEGATE_MODEL_PROFILES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("FILEGATE_MODEL_PROFILES_FILE", raising=False)


def leaked(server: FakeModelServer) -> list[str]:
    """Every secret that reached the server, in any header or body."""
    seen = " ".join(json.dumps([r.headers, r.json, r.path]) for r in server.requests)
    return [s for s in (S3_SECRET, OPENAI_KEY, ANTHROPIC_KEY) if s in seen]


async def run_agent(client: Client, model: ModelSpec, **worker: Any) -> Any:
    queue = f"profiles-{uuid.uuid4().hex[:8]}"
    input = AgentInput(
        task="hi", model=model, backend=BackendSpec(default=BackendRef(kind="state"))
    )
    async with agent_worker(client, queue, **worker):
        return await client.execute_workflow(
            AgentWorkflow.run, input, id=f"wf-{queue}", task_queue=queue
        )


def failure_message(info: pytest.ExceptionInfo[WorkflowFailureError]) -> str:
    """The innermost ApplicationError's message (the workflow's or the activity's)."""
    error: BaseException | None = info.value
    message = ""
    while error is not None:
        if isinstance(error, ApplicationError):
            message = error.message
        error = error.__cause__
    return message


# --- the two exfiltration paths, through real workflows --------------------------


@pytest.mark.services
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_input_key_variable_never_reaches_any_server(
    temporal_client: Client,
    capture: FakeModelServer,
    monkeypatch: pytest.MonkeyPatch,
    provider: str,
) -> None:
    # Even with the worker's own endpoint at the capture server, naming another
    # variable must not send its value anywhere.
    monkeypatch.setenv("OPENAI_BASE_URL", f"{capture.url}/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", capture.url)
    model = ModelSpec.model_validate(
        {"provider": provider, "name": "m", "options": {"api_key_env": "FILEGATE_S3_SECRET_KEY"}}
    )
    with pytest.raises(WorkflowFailureError) as info:
        await run_agent(temporal_client, model)
    message = failure_message(info)
    assert "api_key_env" in message and "\n" not in message
    assert capture.requests == [] and leaked(capture) == []


@pytest.mark.services
@pytest.mark.parametrize(("provider", "suffix"), [("openai", "/v1"), ("anthropic", "")])
async def test_input_base_url_never_reaches_the_capture_server(
    temporal_client: Client, capture: FakeModelServer, provider: str, suffix: str
) -> None:
    model = ModelSpec.model_validate(
        {"provider": provider, "name": "m", "base_url": capture.url + suffix}
    )
    with pytest.raises(WorkflowFailureError) as info:
        await run_agent(temporal_client, model)
    message = failure_message(info)
    assert "base_url" in message and "\n" not in message
    assert capture.requests == [] and leaked(capture) == []


@pytest.mark.services
async def test_scripted_host_path_fails_the_run_without_an_oracle(
    temporal_client: Client, tmp_path: Path
) -> None:
    messages = []
    for name in ("/etc/passwd", f"/etc/filegate-absent-{uuid.uuid4().hex}"):
        with pytest.raises(WorkflowFailureError) as info:
            await run_agent(temporal_client, ModelSpec(provider="scripted", name=name))
        message = failure_message(info)
        assert "\n" not in message
        messages.append(message.replace(name, "NAME"))
    assert messages[0] == messages[1], "the answer must not depend on whether the file exists"
    assert "not found" not in messages[0] and "JSON" not in messages[0]


@pytest.mark.services
async def test_configured_profile_serves_its_own_endpoint(
    temporal_client: Client, capture: FakeModelServer
) -> None:
    capture.queue(
        body={
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "local-model",
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
                                                                  "content": "hello"}}
            ],
        }
    )  # fmt: skip
    profiles = ModelProfiles(
        {
            "local": ModelProfile(
                kind="openai", base_url=f"{capture.url}/v1", api_key_env="OPENAI_API_KEY",
                models=["local-model"],
            )
        }
    )  # fmt: skip
    result = await run_agent(
        temporal_client, ModelSpec(provider="local", name="local-model"), model_profiles=profiles
    )
    assert result.final_answer == "hello"
    assert capture.last.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    # Configured profiles replace the defaults, and the allow-list holds.
    for model, needle in (
        (ModelSpec(provider="openai", name="gpt"), "unknown model profile 'openai'"),
        (ModelSpec(provider="local", name="other"), "model 'other' is not allowed"),
    ):
        with pytest.raises(WorkflowFailureError) as info:
            await run_agent(temporal_client, model, model_profiles=profiles)
        assert needle in failure_message(info)
    assert len(capture.requests) == 1


# --- the activity checks the same things (a client may schedule it directly) -----


async def call(activities: ModelActivities, spec: ModelSpec) -> Any:
    request = ModelRequest(model=spec, messages=[Message(role="user", content="hi")])
    return await ActivityEnvironment().run(activities.call_model, request)


async def refused(activities: ModelActivities, spec: ModelSpec) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        await call(activities, spec)
    assert info.value.non_retryable and "\n" not in info.value.message
    return info.value


async def test_activity_refuses_input_endpoints_and_key_variables(
    capture: FakeModelServer,
) -> None:
    activities = ModelActivities(profiles=ModelProfiles.defaults())
    bad = [
        {"provider": "openai", "name": "m", "base_url": f"{capture.url}/v1"},
        {"provider": "openai", "name": "m", "options": {"api_key_env": "FILEGATE_S3_SECRET_KEY"}},
        {"provider": "anthropic", "name": "m", "options": {"base_url": capture.url}},
    ]
    for raw in bad:
        err = await refused(activities, ModelSpec.model_validate(raw))
        assert err.type == PROFILE_ERROR_TYPE
    assert capture.requests == []


async def test_scripted_files_only_inside_the_script_dir(tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    (scripts / "sub").mkdir(parents=True)
    (scripts / "sub" / "ok.json").write_text(json.dumps(SCRIPT))
    (tmp_path / "outside.json").write_text(json.dumps(SCRIPT))
    (scripts / "link.json").symlink_to(tmp_path / "outside.json")
    profiles = ModelProfiles({"scripted": ModelProfile(kind="scripted", script_dir=scripts)})
    activities = ModelActivities(profiles=profiles)
    answer = await call(activities, ModelSpec(provider="scripted", name="sub/ok.json"))
    assert answer.message.content == "done"
    inline = await call(activities, ModelSpec(provider="scripted", options={"script": SCRIPT}))
    assert inline.message.content == "done"
    for name in ("../outside.json", "link.json", str(tmp_path / "outside.json"), "/etc/passwd"):
        err = await refused(activities, ModelSpec(provider="scripted", name=name))
        assert "outside the script directory" in err.message, err.message
    # Defaults: inline scripts only, whatever the name.
    default = ModelActivities(profiles=ModelProfiles.defaults())
    err = await refused(default, ModelSpec(provider="scripted", name=str(scripts / "sub/ok.json")))
    assert "inline scripts only" in err.message


def test_check_model_spec_allows_only_harmless_options() -> None:
    check_model_spec(
        ModelSpec(
            options={"script": SCRIPT, "params": {"temperature": 0}, "timeout_s": 5,
                     "max_tokens_field": "max_tokens"}
        )
    )  # fmt: skip
    for raw in ({"options": {"api_key_env": "X"}}, {"base_url": "http://x"}, {"endpoint": "x"}):
        with pytest.raises(ValueError, match="agent worker"):
            check_model_spec(ModelSpec.model_validate(raw))


def test_profiles_from_settings(tmp_path: Path) -> None:
    raw = {"local": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1",
                     "api_key_env": "LOCAL_KEY", "models": ["a"]}}  # fmt: skip
    from_json = ModelProfiles.from_settings(ModelSettings(profiles=json.dumps(raw)))
    assert list(from_json.profiles) == ["local"]
    assert from_json.profiles["local"].api_key_env == "LOCAL_KEY"
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps(raw))
    from_file = ModelProfiles.from_settings(ModelSettings(profiles_file=path))
    assert from_file == from_json
    env = {"FILEGATE_MODEL_PROFILES_FILE": str(path)}
    assert ModelProfiles.from_settings(Settings.from_env(env).models) == from_json
    defaults = ModelProfiles.from_settings(ModelSettings())
    assert sorted(defaults.profiles) == ["anthropic", "openai", "scripted"]
    for bad in ('{"x": {"kind": "openai", "api_key": "sk"}}', "{not json", '{"x": {"kind": "?"}}'):
        with pytest.raises(ValueError, match="FILEGATE_MODEL_PROFILES"):
            ModelProfiles.from_settings(ModelSettings(profiles=bad))
    assert os.environ.get("FILEGATE_MODEL_PROFILES") is None
