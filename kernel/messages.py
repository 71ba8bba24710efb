"""Conversation types shared by the workflow and the model activity.

The transcript format is public (contract §10): each message is
``{"role", "content", "tool_calls"?, "tool_call_id"?, "status"?}``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from filegate.kernel.limits import (
    DEFAULT_MAX_TOOL_ARGS_CHARS,
    DEFAULT_MAX_TOOL_CALLS_PER_TURN,
    MAX_TOOL_NAME_CHARS,
)
from filegate.kernel.scripts import ScriptRef


class TextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str


class MediaBlock(BaseModel):
    """Binary content for the model: image, audio, video frame, document or generic file."""

    type: Literal["image", "audio", "video", "document", "file"]
    base64: str
    mime_type: str
    path: str | None = None


ContentBlock = TextBlock | MediaBlock


MediaKind = Literal["image", "audio", "video", "document", "file"]


def _images_only() -> list[MediaKind]:
    """Most chat models take images and nothing else binary."""
    return ["image"]


RAW_ARGS_KEY = "__raw__"
"""Key of :attr:`ToolCall.args` under which a provider keeps tool-call arguments that were
not a JSON object; the workflow answers such a call with an error result."""


REFUSED_ARGS_KEY = "__refused__"
"""Key of :attr:`ToolCall.args` under which the model activity leaves a :class:`RefusedArgs`
in place of arguments it would not hand the workflow (too large, too deep, not valid
Unicode, over the calls-per-turn limit); the workflow answers the call with its message."""

RefusalReason = Literal[
    "too_large", "too_deep", "not_object", "invalid_unicode", "too_many_calls", "turn_too_large"
]


def group_digits(value: int) -> str:
    """``8 388 700``: digit groups the model cannot misread as decimals."""
    return f"{value:,}".replace(",", " ")


class RefusedArgs(BaseModel):
    """Why a call's arguments were dropped, as numbers; :meth:`message` words it once.

    Structured rather than text, so the workflow composes what the model reads
    and a marker the model forged itself can only produce one of these messages.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: RefusalReason
    chars: int = 0
    """Characters of the refused arguments (too_large, turn_too_large)."""
    limit: int = 0
    """The limit that was passed: characters, levels, calls or bytes, by reason."""
    calls: int = 0
    """too_many_calls: how many calls the turn asked for."""
    first: str = Field(default="", max_length=MAX_TOOL_NAME_CHARS)
    last: str = Field(default="", max_length=MAX_TOOL_NAME_CHARS)
    """too_many_calls: ids of the first and the last call not run."""
    text: str = Field(default="", max_length=400)
    """A short quote: the offending character (invalid_unicode) or value (not_object).
    Bounded, like the ids, so a marker the model forged cannot make a large result."""

    def marker(self) -> dict[str, Any]:
        """The arguments that stand for the refused ones in the call."""
        return {REFUSED_ARGS_KEY: self.model_dump(exclude_defaults=True)}

    def message(self, tool: str) -> str:
        n = group_digits
        not_run = f"{tool} was not run: "
        if self.reason == "too_large":
            return (
                f"{not_run}its arguments are too large ({n(self.chars)} characters, over "
                f"the {n(self.limit)}-character limit). Send smaller arguments, e.g. split "
                "a large file over several calls."
            )
        if self.reason == "too_deep":
            return (
                f"{not_run}its arguments nest deeper than {self.limit} levels. Send one "
                "JSON object matching the tool's schema."
            )
        if self.reason == "not_object":
            return f"arguments for {tool} must be a JSON object, got {self.text}."
        if self.reason == "invalid_unicode":
            return (
                f"{not_run}its arguments hold a lone surrogate ({self.text}), which is not "
                "valid Unicode. Send characters, not halves of UTF-16 surrogate pairs."
            )
        if self.reason == "turn_too_large":
            return (
                f"{not_run}this turn's calls are too large to record together (over "
                f"{n(self.limit)} bytes), so its arguments ({n(self.chars)} characters) "
                "were dropped. Send fewer or smaller calls per turn."
            )
        dropped = self.calls - self.limit
        which = self.first if dropped == 1 else f"{self.first} ... {self.last}"
        return (
            f"this turn asked for {n(self.calls)} tool calls, over the limit of "
            f"{n(self.limit)} per turn: the first {n(self.limit)} ran, the other "
            f"{n(dropped)} ({which}) were not run. Send at most {n(self.limit)} calls "
            "per turn; repeat the ones you still need."
        )


def refused_args(args: Any) -> RefusedArgs | None:
    """The refusal a call's arguments stand for, or None for ordinary arguments."""
    if not isinstance(args, dict) or set(args) != {REFUSED_ARGS_KEY}:
        return None
    try:
        return RefusedArgs.model_validate(args[REFUSED_ARGS_KEY])
    except ValidationError:
        return None  # not ours: the schema check refuses the unknown field


def nesting_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests dicts/lists deeper than ``limit`` levels.

    Iterative and stopping at the first container past the limit, so neither a
    100 000-level value nor a cyclic one can exhaust the stack or loop: every
    later step that serialises arguments (``json``, pydantic) recurses.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def args_chars(args: Any) -> int:
    """Size of arguments as ASCII JSON: the one measure of ``max_tool_args_chars``.

    Escaped non-ASCII counts as its escape, so the number bounds the bytes the
    arguments take in any JSON payload. Call it only on values that passed
    :func:`nesting_exceeds` (``json.dumps`` recurses).
    """
    return len(json.dumps(args, default=str))


_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate in any string of ``value`` (keys too), escaped; or None.

    JSON's ``\\ud800`` escapes decode to them, and no UTF-8 encoder (pydantic's,
    the payload converter's) takes them. Only for values that passed
    :func:`nesting_exceeds`.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found:
                return f"\\u{ord(found.group()):04x}"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return None


def replace_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (for text that is only shown)."""
    return _SURROGATE.sub("\ufffd", text)


class ToolCall(BaseModel):
    id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


def content_text(content: str | list[ContentBlock]) -> str:
    """Text of a message or tool result, with non-text blocks left out."""
    if isinstance(content, str):
        return content
    return "\n".join(b.text for b in content if isinstance(b, TextBlock))


class Message(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[ContentBlock] = ""
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    status: Literal["success", "error"] | None = None
    name: str | None = None

    def text(self) -> str:
        """The message's text, with non-text blocks left out."""
        return content_text(self.content)


class ToolSpec(BaseModel):
    """A tool as offered to the model: name, description and JSON schema.

    Frozen: workflows share one instance per distinct offer across model turns."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]

    def openai(self) -> dict[str, Any]:
        """The OpenAI Chat Completions ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def anthropic(self) -> dict[str, Any]:
        """The Anthropic Messages ``tools`` entry."""
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}


MODEL_OPTIONS = frozenset({"script", "params", "timeout_s", "max_tokens_field"})
"""The ``ModelSpec.options`` keys a workflow input may set: an inline script, extra body
parameters, the HTTP timeout and the name of the max-tokens field. Nothing that picks
an endpoint, a key or an environment variable (contract §11)."""


class ModelSpec(BaseModel):
    """Which model to call: a model *profile* of the agent worker and a model name.

    ``provider`` names the profile (the defaults are ``scripted``, ``openai`` and
    ``anthropic``); the profile, configured on the agent worker, holds the provider
    kind, the base URL, the key's environment variable and the allowed models. So
    a spec never carries an endpoint, a key or a variable name (contract §11).
    For ``scripted``, ``options["script"]`` holds the script inline, or ``name`` is a
    file name inside the profile's script directory (contract §10).

    Unknown fields are kept, not dropped, so :func:`check_model_spec` can refuse
    them when the run starts with one clear error instead of ignoring them.
    """

    model_config = ConfigDict(extra="allow")

    provider: str = "scripted"
    name: str = ""
    options: dict[str, Any] = Field(default_factory=dict)
    context_window: int | None = None
    max_output_tokens: int | None = None
    accepts: list[MediaKind] = Field(default_factory=_images_only)


def check_model_spec(spec: ModelSpec) -> None:
    """Refuse what a workflow input must not choose; ValueError with one line.

    Unknown fields (``base_url`` and the like; a ``None`` is harmless) and
    ``options`` keys outside :data:`MODEL_OPTIONS` (``api_key_env`` and the like).
    """
    fields = sorted(k for k, v in (spec.model_extra or {}).items() if v is not None)
    options = sorted(k for k in spec.options if k not in MODEL_OPTIONS)
    refused = [f"field {k!r}" for k in fields] + [f"option {k!r}" for k in options]
    if refused:
        raise ValueError(
            f"model spec {', '.join(refused)} not accepted: endpoints, keys and key "
            "variables are the agent worker's configuration; name one of its model "
            f"profiles instead (allowed options: {', '.join(sorted(MODEL_OPTIONS))})"
        )


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0


class ToolCallLimits(BaseModel):
    """What one model turn may hand the workflow (``Limits.max_tool_args_chars`` and
    ``max_tool_calls_per_turn``). The model activity enforces them before its result
    is recorded, because a turn too large for history fails every workflow task that
    tries to record it, and each retry would ask the model again."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_args_chars: int = Field(default=DEFAULT_MAX_TOOL_ARGS_CHARS, ge=1)
    max_calls: int = Field(default=DEFAULT_MAX_TOOL_CALLS_PER_TURN, ge=1)


class ModelRequest(BaseModel):
    model: ModelSpec
    system: str = ""
    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)
    call_index: int = 0
    """How many model calls this thread made before this one (the scripted model answers turn k)."""
    tool_limits: ToolCallLimits = Field(default_factory=ToolCallLimits)
    script: ScriptRef | None = None
    """The scripted model's script by reference (:mod:`filegate.kernel.scripts`), in place
    of ``model.options["script"]``."""


class ModelResponse(BaseModel):
    message: Message
    usage: Usage = Field(default_factory=Usage)
    stop_reason: str | None = None
