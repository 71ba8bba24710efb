"""Deterministic scripted model (contract §10) for demos and tests.

The answer depends only on the script and ``request.call_index``, never on
in-process state, so a retried activity or a restarted worker gives the same turn.
"""

from __future__ import annotations

import json
from typing import Any

from filegate.activities.providers.common import request_error
from filegate.activities.providers.profiles import ModelProfile, script_path
from filegate.kernel.limits import MAX_TOOL_ARGS_DEPTH
from filegate.kernel.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
    nesting_exceeds,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

END_OF_SCRIPT_STOP = "end_of_script"


class ScriptToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    """Optional; a stable id ``s<turn>_<n>`` is derived when absent."""
    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


def call_id_for(call: ScriptToolCall, turn: int, n: int) -> str:
    """The script's id, or a stable one derived from the call's position."""
    return call.id or f"s{turn}_{n}"


class ScriptTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool_calls: list[ScriptToolCall] | None = None
    content: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ScriptTurn:
        if self.tool_calls is None and self.content is None:
            raise ValueError("a turn needs 'tool_calls' or 'content'")
        if self.tool_calls is not None and not self.tool_calls:
            raise ValueError("'tool_calls' must not be empty")
        return self


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turns: list[ScriptTurn]

    @model_validator(mode="after")
    def _unique_ids(self) -> Script:
        # Tool activities are idempotent per call id: a reused id would replay
        # the first call's result instead of running the second one.
        seen: dict[str, int] = {}
        for k, turn in enumerate(self.turns):
            for n, call in enumerate(turn.tool_calls or []):
                call_id = call_id_for(call, k, n)
                if call_id in seen:
                    raise ValueError(
                        f"tool call id {call_id!r} is used in turn {seen[call_id]} and "
                        f"turn {k}; ids must be unique"
                    )
                seen[call_id] = k
        return self


def load_script(source: Any, origin: str) -> Script:
    """Validate a script (dict or JSON text); errors name the origin and the bad field."""
    try:
        data = json.loads(source) if isinstance(source, str) else source
    except RecursionError:
        # Caught, not retried: the same script fails the same way every attempt.
        raise request_error(f"scripted model {origin} nests too deeply to parse") from None
    except ValueError as exc:  # JSONDecodeError, and integers of more than 4300 digits
        raise request_error(f"scripted model {origin} is not valid JSON: {exc}") from None
    try:
        return Script.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()
        )
        raise request_error(f"invalid scripted model {origin}: {problems}") from None


def script_for(request: ModelRequest, profile: ModelProfile | None = None) -> Script:
    """The script inline in ``options["script"]`` or in the file ``model.name`` names
    inside the profile's script directory (never any other path on the worker)."""
    spec = request.model
    profile = profile or ModelProfile(kind="scripted")
    path = script_path(profile, spec.name) if spec.name else None
    if "script" in spec.options:
        return load_script(spec.options["script"], "inline script")
    if path is None:
        raise request_error(
            "scripted model needs a script: options['script'] or a file name in the "
            "profile's script directory as the name"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise request_error(f"scripted model file {spec.name!r} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise request_error(f"cannot read scripted model file {spec.name!r}: {exc}") from None
    return load_script(text, f"file {spec.name!r}")


def _rough_tokens(request: ModelRequest) -> int:
    """~4 chars per token, so context-size logic has something to react to in demos."""
    chars = len(request.system) + sum(len(m.text()) for m in request.messages)
    return chars // 4


class ScriptedProvider:
    """Answers turn ``call_index`` of the script; past the end, says the script ended."""

    def __init__(self, profile: ModelProfile | None = None) -> None:
        self.profile = profile or ModelProfile(kind="scripted")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        script = script_for(request, self.profile)
        k = request.call_index
        usage = Usage(input_tokens=_rough_tokens(request))
        if k < 0 or k >= len(script.turns):
            text = (
                f"[scripted model] The script has ended: it has {len(script.turns)} turn(s) "
                f"and this is call {k}. No further actions."
            )
            return ModelResponse(
                message=Message(role="assistant", content=text),
                usage=usage.model_copy(update={"output_tokens": len(text) // 4}),
                stop_reason=END_OF_SCRIPT_STOP,
            )
        turn = script.turns[k]
        calls = [
            ToolCall(id=call_id_for(c, k, n), name=c.name, args=c.args)
            for n, c in enumerate(turn.tool_calls or [])
        ]
        content = turn.content or ""
        # Script arguments are capped like a model's (model_output.limit_turn), after
        # this: measure only what json.dumps can walk without recursing too deep.
        measurable = [c.args for c in calls if not nesting_exceeds(c.args, MAX_TOOL_ARGS_DEPTH)]
        usage.output_tokens = (len(content) + len(json.dumps(measurable))) // 4
        return ModelResponse(
            message=Message(role="assistant", content=content, tool_calls=calls or None),
            usage=usage,
            stop_reason="tool_use" if calls else "end_turn",
        )
