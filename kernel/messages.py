"""Conversation types shared by the workflow and the model activity.

The transcript format is public (contract §10): each message is
``{"role", "content", "tool_calls"?, "tool_call_id"?, "status"?}``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


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


class ModelRequest(BaseModel):
    model: ModelSpec
    system: str = ""
    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)
    call_index: int = 0
    """How many model calls this thread made before this one (the scripted model answers turn k)."""


class ModelResponse(BaseModel):
    message: Message
    usage: Usage = Field(default_factory=Usage)
    stop_reason: str | None = None
