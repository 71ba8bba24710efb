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


class Message(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[ContentBlock] = ""
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    status: Literal["success", "error"] | None = None
    name: str | None = None

    def text(self) -> str:
        """The message's text, with non-text blocks left out."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))


class ToolSpec(BaseModel):
    """A tool as offered to the model: name, description and JSON schema.

    Frozen: workflows share one instance per distinct offer across model turns."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]


class ModelSpec(BaseModel):
    """Which model to call. Never carries secrets: keys live in the worker's env.

    ``provider`` is ``scripted``, ``openai`` or ``anthropic``; for ``scripted``
    the ``name`` is the path of the JSON script (contract §10) as seen by the agent
    worker, or ``options["script"]`` holds the script inline.
    """

    provider: Literal["scripted", "openai", "anthropic"] = "scripted"
    name: str = ""
    options: dict[str, Any] = Field(default_factory=dict)
    base_url: str | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None
    accepts: list[MediaKind] = Field(default_factory=_images_only)


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
