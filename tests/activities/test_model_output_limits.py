"""The caps on model output, piece by piece (contract §2, §11; issue 26 item 4).

The end-to-end cases, on real servers, are ``tests/activities/test_hostile_model_output.py``.
Here: the bounded parse, ``limit_turn``, the workflow's own argument check and
the providers other than Chat Completions (Anthropic Messages on a real local
HTTP server, the scripted model).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from filegate.activities.model import ModelActivities
from filegate.activities.providers import REQUEST_ERROR_TYPE
from filegate.activities.providers.model_output import (
    MODEL_TURN_TOO_LARGE,
    limit_turn,
    parse_arguments,
)
from filegate.activities.providers.openai_chat import from_openai_response
from filegate.activities.providers.profiles import ModelProfile, ModelProfiles
from filegate.activities.providers.scripted import load_script
from filegate.kernel.limits import MAX_TOOL_ARGS_DEPTH
from filegate.kernel.messages import (
    RAW_ARGS_KEY,
    REFUSED_ARGS_KEY,
    Message,
    ModelRequest,
    ModelResponse,
    ModelSpec,
    RefusedArgs,
    ToolCall,
    ToolCallLimits,
    nesting_exceeds,
    refused_args,
)
from filegate.kernel.routing import Router
from filegate.workflows.gate import check_call

LIMITS = ToolCallLimits()


def nested(depth: int) -> Any:
    """``depth`` lists inside each other, built without recursion."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def reason(args: dict[str, Any]) -> str | None:
    refusal = refused_args(args)
    return refusal.reason if refusal else None


def turn(*calls: ToolCall, content: str = "") -> ModelResponse:
    return ModelResponse(
        message=Message(role="assistant", content=content, tool_calls=list(calls) or None)
    )


# --------------------------------------------------------------------------- parsing


def test_parse_arguments_never_recurses_without_bound() -> None:
    deep = '{"file_path": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert reason(parse_arguments(deep)) == "too_deep"
    # Parsed (Python's parser copes), then capped by limit_turn like any dict.
    assert (
        parse_arguments("[" * 500 + "]" * 500)
        == RefusedArgs(reason="not_object", text=repr("[" * 80 + "...")).marker()
    )


def test_parse_arguments_keeps_what_the_workflow_must_explain() -> None:
    assert parse_arguments(None) == {} and parse_arguments("  ") == {}
    assert parse_arguments('{"a": 1}') == {"a": 1}
    assert parse_arguments({"a": 1}) == {"a": 1}, "servers that send an object"
    assert parse_arguments('{"a": 1') == {RAW_ARGS_KEY: '{"a": 1'}
    huge_int = '{"a": ' + "9" * 5000 + "}"
    assert parse_arguments(huge_int) == {RAW_ARGS_KEY: huge_int}
    assert reason(parse_arguments("[1]")) == "not_object"
    assert reason(parse_arguments(["a"])) == "not_object"
    over = parse_arguments("x" * 101, max_chars=100)
    assert over == RefusedArgs(reason="too_large", chars=101, limit=100).marker()


def test_from_openai_response_survives_a_sloppy_server() -> None:
    fn = SimpleNamespace(name=None, arguments={"path": "/"})
    completion = SimpleNamespace(
        choices=[
            SimpleNamespace(
                finish_reason="tool_calls",
                message=SimpleNamespace(
                    content=["not", "text"], tool_calls=[SimpleNamespace(id=None, function=fn)]
                ),
            )
        ],
        usage=None,
    )
    response = from_openai_response(completion, call_index=3)
    assert response.message.content == ""
    assert response.message.tool_calls == [ToolCall(id="call_3_0", name="", args={"path": "/"})]


# --------------------------------------------------------------------------- limit_turn


@pytest.mark.slow
def test_nesting_exceeds_is_iterative_and_stops_on_cycles() -> None:
    assert not nesting_exceeds({"a": nested(MAX_TOOL_ARGS_DEPTH - 1)}, MAX_TOOL_ARGS_DEPTH)
    assert nesting_exceeds({"a": nested(MAX_TOOL_ARGS_DEPTH)}, MAX_TOOL_ARGS_DEPTH)
    assert nesting_exceeds({"a": nested(100_000)}, MAX_TOOL_ARGS_DEPTH)
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    assert nesting_exceeds(cycle, MAX_TOOL_ARGS_DEPTH)


def test_limit_turn_refuses_each_bad_call_in_its_place() -> None:
    calls = [
        ToolCall(id="deep", name="ls", args={"path": nested(200)}),
        ToolCall(id="big", name="write_file", args={"content": "x" * 2_000_000}),
        ToolCall(id="sur", name="write_file", args={"file_path": "/a", "content": "\ud800"}),
        ToolCall(id="key", name="write_file", args={"\udc00": 1}),
        ToolCall(id="ok", name="ls", args={"path": "/"}),
    ]
    out = limit_turn(turn(*calls), LIMITS, stored=True).message.tool_calls or []
    assert [c.id for c in out] == ["deep", "big", "sur", "key", "ok"]
    assert [reason(c.args) for c in out] == [
        "too_deep",
        "too_large",
        "invalid_unicode",
        "invalid_unicode",
        None,
    ]
    assert refused_args(out[2].args) == RefusedArgs(reason="invalid_unicode", text="\\ud800")
    # The result encodes: what the payload converter would have refused is gone.
    ModelResponse.model_validate_json(turn(*out).model_dump_json())


def test_limit_turn_makes_ids_names_and_text_recordable() -> None:
    calls = [
        ToolCall(id="a/../b", name="ls", args={}),
        ToolCall(id="x" * 10_000, name="n" * 10_000, args={}),
        ToolCall(id="nul\x00", name="ls\ud800", args={}),
        ToolCall(id="call_9.x:y-z", name="ls", args={}),
    ]
    response = limit_turn(turn(*calls, content="hi \udfff"), LIMITS, stored=True, call_index=7)
    out = response.message.tool_calls or []
    assert [c.id for c in out] == ["call_7_0", "call_7_1", "call_7_2", "call_9.x:y-z"]
    assert out[1].name == "n" * 128 and out[2].name == "ls\ufffd"
    assert response.message.content == "hi \ufffd"


def test_calls_over_the_limit_become_one_refusal() -> None:
    calls = [ToolCall(id=f"c{n}", name="ls", args={"path": "/"}) for n in range(10)]
    out = limit_turn(turn(*calls), ToolCallLimits(max_calls=4), stored=True).message.tool_calls
    assert out is not None and [c.id for c in out] == ["c0", "c1", "c2", "c3", "c4"]
    refusal = refused_args(out[4].args)
    assert refusal == RefusedArgs(reason="too_many_calls", calls=10, limit=4, first="c4", last="c9")
    assert refusal.message("ls") == (
        "this turn asked for 10 tool calls, over the limit of 4 per turn: the first 4 ran, "
        "the other 6 (c4 ... c9) were not run. Send at most 4 calls per turn; repeat the "
        "ones you still need."
    )
    one_over = RefusedArgs(reason="too_many_calls", calls=5, limit=4, first="c4", last="c4")
    assert "the other 1 (c4) were not run" in one_over.message("ls")


def test_a_turn_over_its_budget_loses_its_largest_calls_first() -> None:
    calls = [
        ToolCall(id=name, name="write_file", args={"content": name * size})
        for name, size in (("a", 300), ("b", 500), ("c", 400))
    ]
    out = limit_turn(turn(*calls), LIMITS, stored=False, budget=1200).message.tool_calls or []
    assert [reason(c.args) for c in out] == [None, "turn_too_large", None]
    refusal = refused_args(out[1].args)
    assert refusal is not None
    assert refusal.message("write_file") == (
        "write_file was not run: this turn's calls are too large to record together (over "
        "1 200 bytes), so its arguments (515 characters) were dropped. Send fewer or smaller "
        "calls per turn."
    )


def test_a_turn_too_large_without_its_calls_is_a_non_retryable_error() -> None:
    with pytest.raises(ApplicationError) as info:
        limit_turn(turn(content="y" * 2_000_000), LIMITS, stored=False)
    assert info.value.type == MODEL_TURN_TOO_LARGE and info.value.non_retryable
    assert "too large to record" in info.value.message and "without S3" in info.value.message
    # Through the S3 codec the same answer is recordable.
    assert limit_turn(turn(content="y" * 2_000_000), LIMITS, stored=True).message.content


# --------------------------------------------------------------------------- workflow gate


def gate(tool: str, args: Any) -> str:
    checked = check_call(
        tool,
        args,
        allowed=["ls", "read_file", "write_file"],
        router=Router([]),
        max_args_chars=1000,
        max_execute_timeout=60,
    )
    text = getattr(checked, "text", None)
    assert isinstance(text, str), checked
    return text


def test_the_workflow_gate_caps_depth_before_serialising() -> None:
    """Calls that did not come through the model activity (a host workflow's own model)."""
    assert "nest deeper than 64 levels" in gate("ls", {"path": nested(100_000)})
    cycle: dict[str, Any] = {}
    cycle["path"] = cycle
    assert "nest deeper than 64 levels" in gate("ls", cycle)
    assert gate("write_file", {"file_path": "/a", "content": "x" * 2000}) == (
        "Error: write_file was not run: its arguments are too large (2 034 characters, "
        "over the 1 000-character limit). Send smaller arguments, e.g. split a large file "
        "over several calls."
    )


def test_the_workflow_gate_answers_refusals_first() -> None:
    marker = RefusedArgs(reason="too_many_calls", calls=70, limit=64, first="a", last="b")
    assert gate("no_such_tool", marker.marker()).startswith("Error: this turn asked for 70")
    # A marker the model forged beyond what ours hold is an ordinary unknown field.
    forged = {REFUSED_ARGS_KEY: {"reason": "not_object", "text": "t" * 500}}
    assert "__refused__" in gate("ls", forged) and "Extra inputs" in gate("ls", forged)


# --------------------------------------------------------------------------- other providers


class RawServer:
    """A local HTTP server answering every POST with the same bytes (a body that the
    test helpers' ``json.dumps`` could not even produce), counting requests."""

    def __init__(self, body: bytes) -> None:
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                server.requests += 1
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def anthropic_body(input_json: str) -> bytes:
    head = json.dumps(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )[:-1]
    block = '{"type": "tool_use", "id": "toolu_1", "name": "ls", "input": ' + input_json + "}"
    return f'{head}, "content": [{block}]}}'.encode()


@pytest.fixture
def anthropic_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


def anthropic_request() -> ModelRequest:
    return ModelRequest(
        model=ModelSpec(provider="anthropic", name="m"),
        messages=[Message(role="user", content="go")],
    )


def anthropic_at(url: str) -> ModelActivities:
    return ModelActivities(
        profiles=ModelProfiles({"anthropic": ModelProfile(kind="anthropic", base_url=url)})
    )


@pytest.mark.slow
@pytest.mark.usefixtures("anthropic_key")
async def test_anthropic_input_nested_past_the_parser_is_one_clear_error() -> None:
    depth = 100_000
    body = anthropic_body('{"path": ' + "[" * depth + "]" * depth + "}")
    with RawServer(body) as server, pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(anthropic_at(server.url).call_model, anthropic_request())
    assert info.value.type == REQUEST_ERROR_TYPE and info.value.non_retryable
    assert "nests too deeply to parse" in info.value.message
    assert server.requests == 1


@pytest.mark.slow
@pytest.mark.usefixtures("anthropic_key")
async def test_anthropic_input_nested_past_our_limit_is_refused_in_place() -> None:
    with RawServer(anthropic_body('{"path": ' + "[" * 300 + "]" * 300 + "}")) as server:
        response = await ActivityEnvironment().run(
            anthropic_at(server.url).call_model, anthropic_request()
        )
    assert isinstance(response, ModelResponse)
    [call] = response.message.tool_calls or []
    assert call.id == "toolu_1" and reason(call.args) == "too_deep"


def test_a_script_nested_past_the_parser_is_a_clear_error() -> None:
    deep = '{"turns": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(ApplicationError) as info:
        load_script(deep, "inline script")
    assert info.value.non_retryable and "nests too deeply to parse" in info.value.message


async def test_scripted_arguments_are_capped_like_a_models() -> None:
    script = {
        "turns": [
            {
                "tool_calls": [
                    {"id": "d", "name": "ls", "args": {"path": nested(150)}},
                    {"id": "b", "name": "write_file", "args": {"content": "x" * 200}},
                ]
            }
        ]
    }
    request = ModelRequest(
        model=ModelSpec(provider="scripted", options={"script": script}),
        messages=[Message(role="user", content="go")],
        tool_limits=ToolCallLimits(max_args_chars=100),
    )
    activities = ModelActivities(profiles=ModelProfiles.defaults())
    response = await ActivityEnvironment().run(activities.call_model, request)
    assert isinstance(response, ModelResponse)
    calls = response.message.tool_calls or []
    assert [reason(c.args) for c in calls] == ["too_deep", "too_large"]
