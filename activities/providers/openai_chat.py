"""OpenAI-compatible Chat Completions (OpenAI, vLLM, Ollama, llama.cpp, ...).

Uses the official ``openai`` SDK with its retries off: Temporal retries the
activity, using the error classification in ``common``.
"""

from __future__ import annotations

import json
from typing import Any

from filegate.activities.providers.common import (
    prepare_sdk_call,
    retryable_error,
    sdk_errors,
    sdk_timeout,
)
from filegate.activities.providers.model_output import parse_arguments
from filegate.activities.providers.profiles import ModelProfile
from filegate.kernel.limits import DEFAULT_MAX_TOOL_ARGS_CHARS
from filegate.kernel.messages import (
    RAW_ARGS_KEY,
    MediaBlock,
    Message,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolCall,
    ToolSpec,
    Usage,
)

PROVIDER = "openai"
KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
AUDIO_FORMATS = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}


def encodable(block: MediaBlock) -> bool:
    """What a Chat Completions content part can carry."""
    mime = block.mime_type
    return mime.startswith("image/") or mime in AUDIO_FORMATS or mime == "application/pdf"


def _part(block: TextBlock | MediaBlock) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    mime = block.mime_type
    if mime.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{block.base64}"}}
    if mime in AUDIO_FORMATS:
        audio = {"data": block.base64, "format": AUDIO_FORMATS[mime]}
        return {"type": "input_audio", "input_audio": audio}
    filename = (block.path or "document.pdf").rsplit("/", 1)[-1]
    return {
        "type": "file",
        "file": {"filename": filename, "file_data": f"data:{mime};base64,{block.base64}"},
    }


def _user_content(message: Message) -> str | list[dict[str, Any]]:
    if isinstance(message.content, str):
        return message.content
    return [_part(b) for b in message.content]


def _arguments(call: ToolCall) -> str:
    """Send back exactly what the model produced, even when it was not valid JSON."""
    if set(call.args) == {RAW_ARGS_KEY} and isinstance(call.args[RAW_ARGS_KEY], str):
        return call.args[RAW_ARGS_KEY]
    return json.dumps(call.args, ensure_ascii=False)


def _assistant(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.text() or None}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": _arguments(c)},
            }
            for c in message.tool_calls
        ]
    elif out["content"] is None:
        out["content"] = ""
    return out


def _to_openai_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    """Our transcript as Chat Completions messages.

    Tool messages can only carry text, so media in tool results (e.g. an image
    returned by read_file) is lifted into one user message placed right after
    the run of tool messages it came from: tool results stay contiguous.
    """
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    lifted: list[dict[str, Any]] = []

    def flush() -> None:
        if lifted:
            out.append({"role": "user", "content": list(lifted)})
            lifted.clear()

    for m in messages:
        if m.role != "tool":
            flush()
        if m.role == "system":
            out.append({"role": "system", "content": m.text()})
        elif m.role == "user":
            out.append({"role": "user", "content": _user_content(m)})
        elif m.role == "assistant":
            out.append(_assistant(m))
        else:
            out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.text()})
            blocks = m.content if isinstance(m.content, list) else []
            media = [b for b in blocks if isinstance(b, MediaBlock)]
            if media:
                label = f"Attachments of tool result {m.tool_call_id}:"
                lifted.append({"type": "text", "text": label})
                lifted.extend(_part(b) for b in media)
    flush()
    return out


def _to_openai_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [t.openai() for t in tools]


def from_openai_response(
    completion: Any, call_index: int, max_args_chars: int = DEFAULT_MAX_TOOL_ARGS_CHARS
) -> ModelResponse:
    """The first choice as our assistant message, with usage.

    Argument text is parsed by :func:`~.model_output.parse_arguments` (no parse of
    text over ``max_args_chars``, none that recurses without bound). Fields a
    compatible server got wrong (no name, a non-text content) become values the
    workflow answers with an error result, never a failed activity: retrying
    would only ask the model again.
    """
    if not completion.choices:
        raise retryable_error(f"{PROVIDER} API returned no choices")
    choice = completion.choices[0]
    msg = choice.message
    calls: list[ToolCall] = []
    for n, tc in enumerate(msg.tool_calls or []):
        fn = getattr(tc, "function", None)
        if fn is None:  # custom (non-function) tool calls: we never offer those
            continue
        calls.append(
            ToolCall(
                # Some local servers omit ids; they must still be unique in the thread.
                id=str(tc.id or f"call_{call_index}_{n}"),
                name=str(fn.name or ""),
                args=parse_arguments(fn.arguments, max_args_chars),
            )
        )
    content = msg.content if isinstance(msg.content, str) else ""
    usage = completion.usage
    return ModelResponse(
        message=Message(role="assistant", content=content, tool_calls=calls or None),
        usage=Usage(
            input_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            output_tokens=getattr(usage, "completion_tokens", 0) or 0,
        ),
        stop_reason=str(choice.finish_reason) if choice.finish_reason else None,
    )


class OpenAIChatProvider:
    """Chat Completions with function tools; endpoint and key variable from the worker's
    model profile (default: OPENAI_BASE_URL and the SDK default)."""

    def __init__(self, profile: ModelProfile | None = None) -> None:
        self.profile = profile or ModelProfile(kind="openai")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        spec = request.model
        call = prepare_sdk_call(
            request, self.profile, PROVIDER, KEY_ENV, BASE_URL_ENV, "openai", encodable
        )
        openai, base_url = call.sdk, call.base_url
        kwargs: dict[str, Any] = {
            "model": spec.name,
            "messages": _to_openai_messages(request.system, call.messages),
        }
        if request.tools:
            kwargs["tools"] = _to_openai_tools(request.tools)
        if spec.max_output_tokens:
            # api.openai.com wants max_completion_tokens; many compatible servers
            # only know max_tokens.
            default_field = "max_tokens" if base_url else "max_completion_tokens"
            field = str(spec.options.get("max_tokens_field") or default_field)
            kwargs[field] = spec.max_output_tokens
        if spec.options.get("params"):
            kwargs["extra_body"] = dict(spec.options["params"])

        client = openai.AsyncOpenAI(
            api_key=call.api_key,
            base_url=base_url,
            max_retries=0,
            timeout=sdk_timeout(spec),
        )
        with sdk_errors(PROVIDER, openai, call.api_key):
            async with client:
                completion = await client.chat.completions.create(**kwargs)
        return from_openai_response(
            completion, request.call_index, request.tool_limits.max_args_chars
        )
