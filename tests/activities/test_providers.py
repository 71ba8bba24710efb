"""Model providers against real local HTTP servers speaking each wire protocol."""

from __future__ import annotations

import dataclasses
import json
import socket
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from filegate.activities.model import ModelActivities, ModelProvider, call_model
from filegate.activities.providers import (
    REQUEST_ERROR_TYPE,
    RETRYABLE_TYPE,
    AnthropicMessagesProvider,
    OpenAIChatProvider,
    ScriptedProvider,
)
from filegate.activities.providers.common import (
    downgrade_messages,
    lazy_import,
    model_accepts,
    parse_retry_after,
)
from filegate.activities.providers.profiles import ModelProfile, ModelProfiles
from filegate.kernel.messages import (
    MediaBlock,
    Message,
    ModelRequest,
    ModelResponse,
    ModelSpec,
    TextBlock,
    ToolCall,
    ToolSpec,
)
from tests.providers_http import FakeModelServer

OPENAI_KEY = "sk-test-openai-0123456789"
ANTHROPIC_KEY = "sk-ant-test-0123456789"
PNG = MediaBlock(type="image", base64="iVBORw0KGgo=", mime_type="image/png", path="/pic.png")
WAV = MediaBlock(type="audio", base64="UklGRg==", mime_type="audio/wav", path="/a.wav")
READ_TOOL = ToolSpec(
    name="read_file",
    description="Read a file.",
    parameters={
        "type": "object",
        "properties": {"file_path": {"type": "string"}},
        "required": ["file_path"],
    },
)


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as s:
        yield s


@pytest.fixture(autouse=True)
def model_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys set, base URLs unset: each test decides where the model lives."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def activity_env(start_to_close_s: float) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, start_to_close_timeout=timedelta(seconds=start_to_close_s)
    )
    return env


async def expect_error(provider: ModelProvider, request: ModelRequest) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        await provider.complete(request)
    return info.value


def tool_round_trip_messages() -> list[Message]:
    """A user turn, two parallel tool calls, their results (one failed, one with an image)."""
    return [
        Message(role="user", content="Look at /a.txt and /pic.png"),
        Message(
            role="assistant",
            content="Reading both.",
            tool_calls=[
                ToolCall(id="call_a", name="read_file", args={"file_path": "/a.txt"}),
                ToolCall(id="call_b", name="read_file", args={"file_path": "/pic.png"}),
            ],
        ),
        Message(
            role="tool", tool_call_id="call_a", status="error", content="Error: file not found"
        ),
        Message(
            role="tool",
            tool_call_id="call_b",
            status="success",
            content=[TextBlock(text="image /pic.png"), PNG],
        ),
    ]


# --- scripted ------------------------------------------------------------------

SCRIPT = {
    "turns": [
        {
            "tool_calls": [
                {"id": "c1", "name": "read_file", "args": {"file_path": "/a.txt"}},
                {"name": "ls", "args": {"path": "/"}},
            ]
        },
        {"content": "All done."},
    ]
}


def scripted(call_index: int, **spec: Any) -> ModelRequest:
    return ModelRequest(
        model=ModelSpec(provider="scripted", **spec),
        messages=[Message(role="user", content="task")],
        call_index=call_index,
    )


async def test_scripted_answers_turn_k_at_call_k() -> None:
    provider = ScriptedProvider()
    first = await provider.complete(scripted(0, options={"script": SCRIPT}))
    assert first.message.role == "assistant"
    assert [(c.id, c.name, c.args) for c in first.message.tool_calls or []] == [
        ("c1", "read_file", {"file_path": "/a.txt"}),
        ("s0_1", "ls", {"path": "/"}),
    ]
    second = await provider.complete(scripted(1, options={"script": SCRIPT}))
    assert second.message.content == "All done."
    assert second.message.tool_calls is None
    # No hidden counter: asking for call 0 again (a retry, a new worker) repeats turn 0.
    again = await provider.complete(scripted(0, options={"script": SCRIPT}))
    assert again == first


async def test_scripted_past_the_end_says_so() -> None:
    response = await ScriptedProvider().complete(scripted(2, options={"script": SCRIPT}))
    assert response.message.tool_calls is None
    assert "script has ended" in response.message.text()
    assert "2 turn(s)" in response.message.text()
    assert response.stop_reason == "end_of_script"


async def test_scripted_file_and_inline_json_string(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT), encoding="utf-8")
    # Script files are named inside the worker profile's script directory.
    provider = ScriptedProvider(ModelProfile(kind="scripted", script_dir=tmp_path))
    from_file = await provider.complete(scripted(1, name="script.json"))
    from_text = await provider.complete(scripted(1, options={"script": json.dumps(SCRIPT)}))
    assert from_file.message.content == from_text.message.content == "All done."


@pytest.mark.parametrize(
    ("script", "needle"),
    [
        ({"turns": [{}]}, "turns.0: Value error, a turn needs 'tool_calls' or 'content'"),
        ({"turns": [{"tool_calls": []}]}, "'tool_calls' must not be empty"),
        ({"turns": [{"content": "x", "extra": 1}]}, "turns.0.extra"),
        ({"steps": []}, "turns: Field required"),
        ({"turns": [{"tool_calls": [{"args": {}}]}]}, "turns.0.tool_calls.0.name"),
        (
            {
                "turns": [
                    {"tool_calls": [{"id": "x", "name": "ls"}]},
                    {"tool_calls": [{"id": "x", "name": "ls"}]},
                ]
            },
            "tool call id 'x' is used in turn 0 and turn 1",
        ),
        ("{not json", "not valid JSON"),
    ],
)
async def test_scripted_invalid_script_is_a_clear_non_retryable_error(
    script: Any, needle: str
) -> None:
    err = await expect_error(ScriptedProvider(), scripted(0, options={"script": script}))
    assert err.non_retryable and err.type == REQUEST_ERROR_TYPE
    assert needle in err.message


async def test_scripted_missing_file_and_missing_script(tmp_path: Path) -> None:
    provider = ScriptedProvider(ModelProfile(kind="scripted", script_dir=tmp_path))
    err = await expect_error(provider, scripted(0, name="nope.json"))
    assert err.non_retryable and "'nope.json' not found" in err.message
    assert str(tmp_path) not in err.message
    err = await expect_error(ScriptedProvider(), scripted(0))
    assert err.non_retryable and "needs a script" in err.message


# --- OpenAI Chat Completions ---------------------------------------------------


def openai_profile(url: str, **fields: Any) -> ModelProfile:
    """The agent worker's profile for a compatible server: endpoint and key variable."""
    return ModelProfile(kind="openai", base_url=f"{url}/v1", **fields)


def openai_at(server: FakeModelServer, **fields: Any) -> OpenAIChatProvider:
    return OpenAIChatProvider(openai_profile(server.url, **fields))


def openai_request(server: FakeModelServer, messages: list[Message], **spec: Any) -> ModelRequest:
    return ModelRequest(
        model=ModelSpec(provider="openai", name="gpt-test", **spec),
        system="You are a file agent.",
        messages=messages,
        tools=[READ_TOOL],
        call_index=3,
    )


def openai_completion(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49},
    }


def openai_tool_calls(*calls: tuple[str | None, str, str]) -> dict[str, Any]:
    return openai_completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                for i, n, a in calls
            ],
        },
        finish="tool_calls",
    )


async def test_openai_tool_call_response_is_parsed(server: FakeModelServer) -> None:
    server.queue(
        body=openai_tool_calls(
            ("call_1", "read_file", '{"file_path": "/a.txt"}'),
            ("call_2", "read_file", '{"file_path": "/b'),  # cut-off JSON
            ("call_3", "ls", ""),
        )
    )
    response = await openai_at(server).complete(
        openai_request(server, [Message(role="user", content="hi")])
    )
    calls = response.message.tool_calls or []
    assert [(c.id, c.name, c.args) for c in calls] == [
        ("call_1", "read_file", {"file_path": "/a.txt"}),
        ("call_2", "read_file", {"__raw__": '{"file_path": "/b'}),
        ("call_3", "ls", {}),
    ]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (42, 7)
    assert response.stop_reason == "tool_calls"

    sent = server.last
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert sent.json["model"] == "gpt-test"
    assert sent.json["messages"] == [
        {"role": "system", "content": "You are a file agent."},
        {"role": "user", "content": "hi"},
    ]
    assert sent.json["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file.",
                "parameters": READ_TOOL.parameters,
            },
        }
    ]
    assert "max_tokens" not in sent.json and "max_completion_tokens" not in sent.json


async def test_openai_serialises_tool_results(server: FakeModelServer) -> None:
    server.queue(body=openai_completion({"role": "assistant", "content": "Done."}))
    messages = [
        *tool_round_trip_messages(),
        Message(role="user", content=[TextBlock(text="and this:"), PNG, WAV]),
        Message(
            role="assistant",
            tool_calls=[ToolCall(id="call_c", name="ls", args={"__raw__": "{bad"})],
        ),
        Message(role="tool", tool_call_id="call_c", status="error", content="Error: bad args"),
    ]
    response = await openai_at(server).complete(
        openai_request(server, messages, max_output_tokens=512)
    )
    assert response.message.content == "Done." and response.message.tool_calls is None

    sent = server.last.json
    assert [m["role"] for m in sent["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "user",
        "assistant",
        "tool",
    ]
    _, _, assistant, tool_a, tool_b, lifted, user, assistant2, tool_c = sent["messages"]
    assert assistant["content"] == "Reading both."
    assert assistant["tool_calls"] == [
        {
            "id": "call_a",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"file_path": "/a.txt"}'},
        },
        {
            "id": "call_b",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"file_path": "/pic.png"}'},
        },
    ]
    assert tool_a == {"role": "tool", "tool_call_id": "call_a", "content": "Error: file not found"}
    assert tool_b == {"role": "tool", "tool_call_id": "call_b", "content": "image /pic.png"}
    # Tool messages carry text only: the image comes right after the tool results.
    assert lifted["content"] == [
        {"type": "text", "text": "Attachments of tool result call_b:"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]
    # Audio is not in ModelSpec.accepts (default ["image"]): a placeholder goes instead.
    assert user["content"][:2] == [
        {"type": "text", "text": "and this:"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]
    assert user["content"][2]["type"] == "text"
    assert "audio /a.wav (audio/wav) omitted" in user["content"][2]["text"]
    # Malformed arguments go back exactly as the model wrote them.
    assert assistant2["tool_calls"][0]["function"]["arguments"] == "{bad"
    assert tool_c["tool_call_id"] == "call_c"
    # A custom base URL means a compatible server: plain max_tokens.
    assert sent["max_tokens"] == 512


async def test_openai_audio_when_accepted(server: FakeModelServer) -> None:
    server.queue(body=openai_completion({"role": "assistant", "content": "ok"}))
    await openai_at(server).complete(
        openai_request(server, [Message(role="user", content=[WAV])], accepts=["audio"])
    )
    assert server.last.json["messages"][1]["content"] == [
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    ]


async def test_openai_base_url_from_env(
    server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/compat/v1")
    server.queue(body=openai_completion({"role": "assistant", "content": "hello"}))
    request = ModelRequest(
        model=ModelSpec(provider="openai", name="local-model"),
        messages=[Message(role="user", content="hi")],
    )
    response = await OpenAIChatProvider().complete(request)
    assert response.message.content == "hello"
    assert server.last.path == "/compat/v1/chat/completions"
    assert "tools" not in server.last.json


@pytest.mark.parametrize(
    ("headers", "delay"),
    [({"retry_after": "7"}, 7.0), ({"retry_after_ms": "1500"}, 1.5), ({}, None)],
)
async def test_openai_429_is_retryable_with_delay(
    server: FakeModelServer, headers: dict[str, str], delay: float | None
) -> None:
    server.queue(429, {"error": {"message": "Rate limit reached", "type": "requests"}}, **headers)
    err = await expect_error(
        openai_at(server), openai_request(server, [Message(role="user", content="hi")])
    )
    assert err.type == RETRYABLE_TYPE and not err.non_retryable
    assert "HTTP 429" in err.message and "Rate limit reached" in err.message
    expected = timedelta(seconds=delay) if delay is not None else None
    assert err.next_retry_delay == expected
    assert len(server.requests) == 1  # SDK retries are off: Temporal retries


async def test_openai_status_mapping(server: FakeModelServer) -> None:
    provider = openai_at(server)
    request = openai_request(server, [Message(role="user", content="hi")])
    server.queue(500, {"error": {"message": "boom"}})
    err = await expect_error(provider, request)
    assert err.type == RETRYABLE_TYPE and not err.non_retryable and "HTTP 500" in err.message

    server.queue(400, {"error": {"message": "Invalid 'messages[1].content'"}})
    err = await expect_error(provider, request)
    assert err.type == REQUEST_ERROR_TYPE and err.non_retryable
    assert "HTTP 400" in err.message and "Invalid 'messages[1].content'" in err.message

    server.queue(429, {"error": {"message": "quota", "code": "insufficient_quota"}})
    err = await expect_error(provider, request)
    assert err.non_retryable, "an exhausted quota does not come back by waiting"

    # A server echoing the key back must not get it into the error (and so history).
    server.queue(401, {"error": {"message": f"Incorrect API key provided: {OPENAI_KEY}"}})
    err = await expect_error(provider, request)
    assert err.non_retryable and OPENAI_KEY not in err.message and "***" in err.message
    assert len(server.requests) == 4


async def test_openai_connection_error_is_retryable() -> None:
    request = ModelRequest(
        model=ModelSpec(provider="openai", name="m"),
        messages=[Message(role="user", content="hi")],
    )
    err = await expect_error(OpenAIChatProvider(openai_profile(closed_port_url())), request)
    assert err.type == RETRYABLE_TYPE and not err.non_retryable and "unreachable" in err.message


async def test_openai_missing_key(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    err = await expect_error(
        openai_at(server), openai_request(server, [Message(role="user", content="hi")])
    )
    assert err.non_retryable and "OPENAI_API_KEY" in err.message
    # The worker's profile can name another env var (a name, never the key itself).
    monkeypatch.setenv("LOCAL_LLM_KEY", "local-key")
    server.queue(body=openai_completion({"role": "assistant", "content": "ok"}))
    request = openai_request(server, [Message(role="user", content="hi")])
    await openai_at(server, api_key_env="LOCAL_LLM_KEY").complete(request)
    assert server.last.headers["authorization"] == "Bearer local-key"
    assert len(server.requests) == 1


def activity_for(server: FakeModelServer) -> ModelActivities:
    """A model activity whose worker profiles point ``openai`` and ``anthropic`` at ``server``."""
    return ModelActivities(
        profiles=ModelProfiles(
            {
                "openai": openai_profile(server.url),
                "anthropic": ModelProfile(kind="anthropic", base_url=server.url),
            }
        )
    )


async def test_call_model_activity_openai(server: FakeModelServer) -> None:
    server.queue(body=openai_tool_calls(("call_9", "read_file", '{"file_path": "/x"}')))
    request = openai_request(server, [Message(role="user", content="hi")])
    response = await activity_env(start_to_close_s=30).run(activity_for(server).call_model, request)
    assert isinstance(response, ModelResponse)
    assert response.message.tool_calls == [
        ToolCall(id="call_9", name="read_file", args={"file_path": "/x"})
    ]
    assert OPENAI_KEY not in response.model_dump_json()
    assert OPENAI_KEY not in request.model_dump_json()
    # The HTTP timeout stays just inside the attempt's start-to-close timeout.
    assert float(server.last.headers["x-stainless-read-timeout"]) == 29.0


# --- Anthropic Messages --------------------------------------------------------


def anthropic_request(
    server: FakeModelServer, messages: list[Message], **spec: Any
) -> ModelRequest:
    return ModelRequest(
        model=ModelSpec(provider="anthropic", name="claude-test", **spec),
        system="You are a file agent.",
        messages=messages,
        tools=[READ_TOOL],
    )


def anthropic_at(server: FakeModelServer) -> AnthropicMessagesProvider:
    return AnthropicMessagesProvider(ModelProfile(kind="anthropic", base_url=server.url))


def anthropic_message(content: list[dict[str, Any]], stop: str = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 9, "cache_read_input_tokens": 12},
    }


async def test_anthropic_tool_use_response_is_parsed(server: FakeModelServer) -> None:
    server.queue(
        body=anthropic_message(
            [
                {"type": "text", "text": "Let me look."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "read_file",
                    "input": {"file_path": "/a.txt"},
                },
            ],
            stop="tool_use",
        )
    )
    response = await anthropic_at(server).complete(
        anthropic_request(server, [Message(role="user", content="hi")])
    )
    assert response.message.content == "Let me look."
    assert response.message.tool_calls == [
        ToolCall(id="toolu_1", name="read_file", args={"file_path": "/a.txt"})
    ]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (42, 9)
    assert response.stop_reason == "tool_use"

    sent = server.last
    assert sent.path == "/v1/messages"
    # SDK versions differ on the header (x-api-key or bearer); the key is the worker's.
    auth = {sent.headers.get("x-api-key"), sent.headers.get("authorization")}
    assert auth & {ANTHROPIC_KEY, f"Bearer {ANTHROPIC_KEY}"}
    assert sent.json["system"] == "You are a file agent."
    assert sent.json["max_tokens"] == 8192
    assert sent.json["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert sent.json["tools"] == [
        {"name": "read_file", "description": "Read a file.", "input_schema": READ_TOOL.parameters}
    ]


async def test_anthropic_merges_tool_results(server: FakeModelServer) -> None:
    server.queue(body=anthropic_message([{"type": "text", "text": "Done."}]))
    frames = Message(
        role="user",
        content=[
            TextBlock(text="Frame at t=00:00:00.000"),
            MediaBlock(type="video", base64="/9j/", mime_type="image/jpeg", path="/v.mp4"),
        ],
    )
    messages = [
        *tool_round_trip_messages(),
        frames,
        Message(role="system", content="Summary of earlier work: none."),
    ]
    response = await anthropic_at(server).complete(
        anthropic_request(server, messages, max_output_tokens=1000)
    )
    assert response.message.content == "Done."

    sent = server.last.json
    assert sent["max_tokens"] == 1000
    assert sent["system"] == "You are a file agent.\n\nSummary of earlier work: none."
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assistant, results = sent["messages"][1:]
    assert assistant["content"] == [
        {"type": "text", "text": "Reading both."},
        {"type": "tool_use", "id": "call_a", "name": "read_file", "input": {"file_path": "/a.txt"}},
        {
            "type": "tool_use",
            "id": "call_b",
            "name": "read_file",
            "input": {"file_path": "/pic.png"},
        },
    ]
    png_source = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
    # Both tool results in ONE user message, first, then the frames message's blocks.
    assert results["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "call_a",
            "is_error": True,
            "content": [{"type": "text", "text": "Error: file not found"}],
        },
        {
            "type": "tool_result",
            "tool_use_id": "call_b",
            "content": [
                {"type": "text", "text": "image /pic.png"},
                {"type": "image", "source": png_source},
            ],
        },
        {"type": "text", "text": "Frame at t=00:00:00.000"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}},
    ]


async def test_anthropic_unsupported_media_becomes_placeholder(server: FakeModelServer) -> None:
    server.queue(body=anthropic_message([{"type": "text", "text": "ok"}]))
    await anthropic_at(server).complete(
        anthropic_request(server, [Message(role="user", content=[WAV])], accepts=["audio"])
    )
    (block,) = server.last.json["messages"][0]["content"]
    assert block["type"] == "text" and "audio /a.wav (audio/wav) omitted" in block["text"]


async def test_anthropic_status_mapping(server: FakeModelServer) -> None:
    provider = anthropic_at(server)
    request = anthropic_request(server, [Message(role="user", content="hi")])
    error = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    server.queue(429, error, retry_after="3")
    err = await expect_error(provider, request)
    assert err.type == RETRYABLE_TYPE and not err.non_retryable
    assert err.next_retry_delay == timedelta(seconds=3) and "slow down" in err.message

    server.queue(529, {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
    err = await expect_error(provider, request)
    assert err.type == RETRYABLE_TYPE and err.next_retry_delay is None

    server.queue(500, {"type": "error", "error": {"type": "api_error", "message": "boom"}})
    err = await expect_error(provider, request)
    assert err.type == RETRYABLE_TYPE and not err.non_retryable

    bad = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "messages.0.content: empty"},
    }
    server.queue(400, bad)
    err = await expect_error(provider, request)
    assert err.type == REQUEST_ERROR_TYPE and err.non_retryable
    assert "messages.0.content: empty" in err.message
    assert len(server.requests) == 4


async def test_anthropic_missing_key_and_connection_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = ModelRequest(
        model=ModelSpec(provider="anthropic", name="m"),
        messages=[Message(role="user", content="hi")],
    )
    provider = AnthropicMessagesProvider(ModelProfile(kind="anthropic", base_url=closed_port_url()))
    err = await expect_error(provider, request)
    assert err.type == RETRYABLE_TYPE and "unreachable" in err.message
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    err = await expect_error(provider, request)
    assert err.non_retryable and "ANTHROPIC_API_KEY" in err.message


async def test_call_model_activity_anthropic(
    server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    server.queue(body=anthropic_message([{"type": "text", "text": "hello"}]))
    request = ModelRequest(
        model=ModelSpec(provider="anthropic", name="claude-test"),
        messages=[Message(role="user", content="hi")],
    )
    response = await activity_env(start_to_close_s=30).run(call_model, request)
    assert isinstance(response, ModelResponse)
    assert response.message.content == "hello"
    assert "system" not in server.last.json and "tools" not in server.last.json
    assert float(server.last.headers["x-stainless-read-timeout"]) == 29.0


async def test_call_model_activity_scripted_and_unknown_provider() -> None:
    response = await ActivityEnvironment().run(call_model, scripted(1, options={"script": SCRIPT}))
    assert isinstance(response, ModelResponse)
    assert response.message.content == "All done."
    unknown = ModelRequest(
        model=ModelSpec(provider="nope"), messages=[Message(role="user", content="hi")]
    )
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(call_model, unknown)
    assert info.value.non_retryable and "unknown model profile 'nope'" in info.value.message
    assert "scripted" in info.value.message


# --- through a real Temporal server: retries are Temporal's --------------------


@workflow.defn(name="ProvidersTestModelCall")
class ModelCallWorkflow:
    """Just the model activity, with a fast retry policy so the server's delay shows."""

    @workflow.run
    async def run(self, request: ModelRequest) -> ModelResponse:
        return await workflow.execute_activity(
            "filegate.model",
            request,
            result_type=ModelResponse,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=50), maximum_attempts=4
            ),
        )


async def run_model_workflow(
    client: Client, request: ModelRequest, server: FakeModelServer
) -> ModelResponse:
    queue = f"providers-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[ModelCallWorkflow],
        activities=[activity_for(server).call_model],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        return await client.execute_workflow(
            ModelCallWorkflow.run, request, id=f"wf-{queue}", task_queue=queue
        )


@pytest.mark.services
@pytest.mark.slow
async def test_temporal_honours_retry_after_and_stops_on_4xx(
    server: FakeModelServer, temporal_client: Client
) -> None:
    request = openai_request(server, [Message(role="user", content="hi")])
    server.queue(429, {"error": {"message": "slow down"}}, retry_after="2")
    server.queue(body=openai_tool_calls(("call_1", "read_file", '{"file_path": "/a"}')))
    response = await run_model_workflow(temporal_client, request, server)
    assert response.message.tool_calls == [
        ToolCall(id="call_1", name="read_file", args={"file_path": "/a"})
    ]
    first, second = server.requests
    waited = second.at - first.at
    assert waited >= 1.9, f"retry came after {waited:.2f}s, server asked for 2s"

    server.requests.clear()
    server.queue(400, {"error": {"message": "bad request"}})
    with pytest.raises(WorkflowFailureError) as info:
        await run_model_workflow(temporal_client, request, server)
    cause = info.value.cause
    assert isinstance(cause, ActivityError) and isinstance(cause.cause, ApplicationError)
    assert cause.cause.type == REQUEST_ERROR_TYPE and cause.cause.non_retryable
    assert len(server.requests) == 1, "a 4xx must not be retried"


# --- shared helpers --------------------------------------------------------------


def test_parse_retry_after_forms() -> None:
    assert parse_retry_after({"Retry-After": "2.5"}) == 2.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    http_date = "Wed, 21 Oct 2015 07:28:10 GMT"
    assert parse_retry_after({"retry-after": http_date}, now=1445412480.0) == 10.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after": "-1"}) is None
    assert parse_retry_after({}) is None


def test_placeholders_leave_the_original_untouched() -> None:
    frame = MediaBlock(type="video", base64="x", mime_type="image/jpeg")
    clip = MediaBlock(type="video", base64="x", mime_type="video/mp4", path="/v.mp4")
    assert model_accepts(frame, ["image"]) and not model_accepts(clip, ["image"])
    original = [Message(role="user", content=[frame, clip]), Message(role="user", content="t")]
    out = downgrade_messages(original, lambda b: model_accepts(b, ["image"]))
    assert out[0].content[0] == frame  # type: ignore[index]
    assert isinstance(out[0].content[1], TextBlock)  # type: ignore[index]
    assert "video /v.mp4 (video/mp4) omitted" in out[0].content[1].text  # type: ignore[index,union-attr]
    assert original[0].content[1] == clip  # type: ignore[index]
    assert out[1] is original[1]


def test_missing_sdk_is_a_clear_non_retryable_error() -> None:
    with pytest.raises(ApplicationError) as info:
        lazy_import("filegate_no_such_sdk", "openai")
    assert info.value.non_retryable
    assert "filegate_no_such_sdk" in info.value.message and "filegate[openai]" in info.value.message
