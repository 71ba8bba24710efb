"""Anthropic Messages API through the official ``anthropic`` SDK (retries off).

The Messages API is stricter than our transcript: one top-level system prompt,
strictly alternating roles, tool results as blocks of a *user* message, no
empty text blocks. The mapping below absorbs those rules.
"""

from __future__ import annotations

from typing import Any

from filegate.activities.providers.common import (
    prepare_sdk_call,
    sdk_errors,
    sdk_timeout,
)
from filegate.activities.providers.model_output import parse_arguments
from filegate.activities.providers.profiles import ModelProfile
from filegate.kernel.messages import (
    MediaBlock,
    Message,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolCall,
    ToolSpec,
    Usage,
)

PROVIDER = "anthropic"
KEY_ENV = "ANTHROPIC_API_KEY"
BASE_URL_ENV = "ANTHROPIC_BASE_URL"
DEFAULT_MAX_TOKENS = 8192
IMAGE_MIMES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


def encodable(block: MediaBlock) -> bool:
    """What a Messages content block can carry: common images and PDFs."""
    return block.mime_type in IMAGE_MIMES or block.mime_type == "application/pdf"


def _block(block: TextBlock | MediaBlock) -> dict[str, Any] | None:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text} if block.text else None
    kind = "image" if block.mime_type in IMAGE_MIMES else "document"
    return {
        "type": kind,
        "source": {"type": "base64", "media_type": block.mime_type, "data": block.base64},
    }


def _blocks(message: Message) -> list[dict[str, Any]]:
    content = message.content
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [b for b in (_block(x) for x in content) if b is not None]


def _tool_result(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id or ""}
    content = _blocks(message)
    if content:  # the API rejects empty text blocks; an absent content is fine
        out["content"] = content
    if message.status == "error":
        out["is_error"] = True
    return out


def _assistant(message: Message) -> list[dict[str, Any]]:
    blocks = _blocks(message)
    for c in message.tool_calls or []:
        blocks.append({"type": "tool_use", "id": c.id, "name": c.name, "input": c.args})
    return blocks


def _to_anthropic(system: str, messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """(system prompt, messages) for the Messages API.

    System messages inside the transcript join the top-level system prompt.
    Consecutive tool messages become ONE user message of tool_result blocks, and
    any same-role neighbours are merged so roles alternate; tool_result blocks
    stay first in their user message, as the API requires.
    """
    system_parts = [system] if system else []
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            if m.text():
                system_parts.append(m.text())
            continue
        if m.role == "tool":
            role, blocks = "user", [_tool_result(m)]
        elif m.role == "user":
            role, blocks = "user", _blocks(m)
        else:
            role, blocks = "assistant", _assistant(m)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return "\n\n".join(system_parts), out


def _to_anthropic_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [t.anthropic() for t in tools]


def _from_anthropic_response(message: Any) -> ModelResponse:
    """Text blocks joined, tool_use blocks as ToolCalls; thinking blocks are not kept.

    The SDK has parsed each ``input`` already (a body nested past Python's parser
    fails in ``sdk_errors``); its depth, size and text are capped by the model
    activity (``model_output.limit_turn``), like every provider's.
    """
    texts: list[str] = []
    calls: list[ToolCall] = []
    for n, block in enumerate(message.content):
        if block.type == "text":
            texts.append(block.text if isinstance(block.text, str) else "")
        elif block.type == "tool_use":
            args = parse_arguments(block.input)
            call_id = str(block.id or f"toolu_{n}")
            calls.append(ToolCall(id=call_id, name=str(block.name or ""), args=args))
    usage = message.usage
    cached = (getattr(usage, "cache_creation_input_tokens", 0) or 0) + (
        getattr(usage, "cache_read_input_tokens", 0) or 0
    )
    return ModelResponse(
        message=Message(role="assistant", content="".join(texts), tool_calls=calls or None),
        usage=Usage(
            input_tokens=(usage.input_tokens or 0) + cached,
            output_tokens=usage.output_tokens or 0,
        ),
        stop_reason=message.stop_reason,
    )


class AnthropicMessagesProvider:
    """Messages API with tools; endpoint and key variable from the worker's
    model profile (default: ANTHROPIC_BASE_URL and the SDK default)."""

    def __init__(self, profile: ModelProfile | None = None) -> None:
        self.profile = profile or ModelProfile(kind="anthropic")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        spec = request.model
        call = prepare_sdk_call(
            request, self.profile, PROVIDER, KEY_ENV, BASE_URL_ENV, "anthropic", encodable
        )
        anthropic = call.sdk
        system, messages = _to_anthropic(request.system, call.messages)
        kwargs: dict[str, Any] = {
            "model": spec.name,
            "max_tokens": spec.max_output_tokens or DEFAULT_MAX_TOKENS,
            "messages": messages,
        }
        if system:
            kwargs["system"] = system
        if request.tools:
            kwargs["tools"] = _to_anthropic_tools(request.tools)
        if spec.options.get("params"):
            kwargs["extra_body"] = dict(spec.options["params"])

        client = anthropic.AsyncAnthropic(
            api_key=call.api_key,
            base_url=call.base_url,
            max_retries=0,
            timeout=sdk_timeout(spec),
        )
        with sdk_errors(PROVIDER, anthropic, call.api_key):
            async with client:
                response = await client.messages.create(**kwargs)
        return _from_anthropic_response(response)
