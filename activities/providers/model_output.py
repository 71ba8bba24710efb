"""What one model turn may hand the workflow (contract §2, §11): bounded parsing, caps.

The model activity's result is recorded in workflow history before the workflow
reads it. A result that cannot be encoded (a lone surrogate, nesting deeper than
pydantic's limits) fails the activity, and one too large to record (over
Temporal's payload limit) fails the workflow task that records it; either way
each retry asks the model again and gets the same kind of answer. So every cap
on model output is applied here, inside the activity, before the result leaves
it: a call over a limit keeps its place in the turn, its arguments replaced by a
small :class:`~filegate.kernel.messages.RefusedArgs` marker that the workflow
answers with an error result for that call. Only a turn still too large once
its calls' arguments are gone (a huge text answer) is an error, and a
non-retryable one: asking again would not make it smaller.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pydantic_core
from temporalio.exceptions import ApplicationError

from filegate.kernel import wire
from filegate.kernel.limits import (
    DEFAULT_MAX_TOOL_ARGS_CHARS,
    MAX_TOOL_ARGS_DEPTH,
    MAX_TOOL_NAME_CHARS,
    MODEL_TURN_INLINE_BYTES,
    MODEL_TURN_STORED_BYTES,
)
from filegate.kernel.messages import (
    RAW_ARGS_KEY,
    ContentBlock,
    Message,
    ModelResponse,
    RefusedArgs,
    TextBlock,
    ToolCall,
    ToolCallLimits,
    args_chars,
    group_digits,
    lone_surrogate,
    nesting_exceeds,
    replace_surrogates,
)

MODEL_TURN_TOO_LARGE = wire.MODEL_TURN_TOO_LARGE_ERROR
"""Error type of a model turn too large to record even without its calls' arguments."""

SAFE_CALL_ID = re.compile(f"[A-Za-z0-9_.:-]{{1,{MAX_TOOL_NAME_CHARS}}}")
"""Call ids kept as the model sent them. Others (empty, huge, with ``/``, NUL or other
text) are replaced: ids end up in journal records, S3 keys and virtual paths
(``/large_tool_results/<id>``), and the model only needs them to pair calls with
results, which a replacement used on both sides still does."""


def _preview(text: str, limit: int = 80) -> str:
    return repr(replace_surrogates(text if len(text) <= limit else text[:limit] + "..."))


def parse_arguments(raw: Any, max_chars: int = DEFAULT_MAX_TOOL_ARGS_CHARS) -> dict[str, Any]:
    """A call's argument text as a dict, without unbounded recursion or huge parses.

    Text over ``max_chars`` is not parsed at all; nesting past Python's recursion
    limit ends the parse (the depth cap itself is :func:`limit_turn`'s); text that
    is not JSON (or has an integer past Python's digit limit) is kept raw under
    ``RAW_ARGS_KEY`` so the model is shown what it sent; JSON of another type is
    refused. Some servers send an object instead of text: it is taken as it is.
    """
    if isinstance(raw, dict):
        return raw
    if raw is None:
        return {}
    if not isinstance(raw, str):  # a list, say: repr() could recurse, so name its type
        return RefusedArgs(reason="not_object", text=f"a {type(raw).__name__}").marker()
    if not raw.strip():
        return {}
    if len(raw) > max_chars:
        return RefusedArgs(reason="too_large", chars=len(raw), limit=max_chars).marker()
    try:
        value = json.loads(raw)
    except RecursionError:
        return RefusedArgs(reason="too_deep", limit=MAX_TOOL_ARGS_DEPTH).marker()
    except ValueError:  # JSONDecodeError, and integers of more than 4300 digits
        return {RAW_ARGS_KEY: raw}
    if not isinstance(value, dict):
        return RefusedArgs(reason="not_object", text=_preview(raw)).marker()
    return value


def _args_refusal(args: dict[str, Any], max_chars: int) -> RefusedArgs | None:
    """Why ``args`` may not reach the workflow, or None. Depth first: the other checks
    serialise the value. Applied to markers too, so a forged one cannot carry 8 MiB."""
    if nesting_exceeds(args, MAX_TOOL_ARGS_DEPTH):
        return RefusedArgs(reason="too_deep", limit=MAX_TOOL_ARGS_DEPTH)
    chars = args_chars(args)
    if chars > max_chars:
        return RefusedArgs(reason="too_large", chars=chars, limit=max_chars)
    surrogate = lone_surrogate(args)
    if surrogate is not None:
        return RefusedArgs(reason="invalid_unicode", text=surrogate)
    return None


def _call_id(call: ToolCall, call_index: int, n: int) -> str:
    return call.id if SAFE_CALL_ID.fullmatch(call.id) else f"call_{call_index}_{n}"


def _name(call: ToolCall) -> str:
    return replace_surrogates(call.name[:MAX_TOOL_NAME_CHARS])


def _checked(call: ToolCall, n: int, call_index: int, max_chars: int) -> ToolCall:
    refusal = _args_refusal(call.args, max_chars)
    update: dict[str, Any] = {"id": _call_id(call, call_index, n), "name": _name(call)}
    if refusal is not None:
        update["args"] = refusal.marker()
    return call.model_copy(update=update)


def _over_count(calls: list[ToolCall], limit: int, call_index: int) -> ToolCall:
    """One call standing for all calls past ``limit``: one error result answers them."""
    first = calls[limit]
    marker = RefusedArgs(
        reason="too_many_calls",
        calls=len(calls),
        limit=limit,
        first=_call_id(first, call_index, limit),
        last=_call_id(calls[-1], call_index, len(calls) - 1),
    )
    return ToolCall(id=marker.first, name=_name(first), args=marker.marker())


def _clean_content(content: str | list[ContentBlock]) -> str | list[ContentBlock]:
    if isinstance(content, str):
        return replace_surrogates(content)
    return [
        b.model_copy(update={"text": replace_surrogates(b.text)}) if isinstance(b, TextBlock) else b
        for b in content
    ]


def _fit(message: Message, budget: int, stored: bool) -> Message:
    """Refuse the largest calls until the message fits ``budget`` bytes, else raise."""
    calls = list(message.tool_calls or [])
    sizes = sorted(((args_chars(c.args), n) for n, c in enumerate(calls)), reverse=True)
    bare = message.model_copy(
        update={"tool_calls": [c.model_copy(update={"args": {}}) for c in calls] or None}
    )
    total = len(pydantic_core.to_json(bare)) + sum(size for size, _ in sizes)
    for size, n in sizes:
        if total <= budget:
            break
        marker = RefusedArgs(reason="turn_too_large", chars=size, limit=budget).marker()
        calls[n] = calls[n].model_copy(update={"args": marker})
        total += args_chars(marker) - size
    if total > budget:
        hint = (
            ""
            if stored
            else " without S3 (an agent worker with an S3 store records up to "
            f"{group_digits(MODEL_TURN_STORED_BYTES)} bytes)"
        )
        raise ApplicationError(
            f"the model's answer is too large to record: {group_digits(total)} bytes once "
            f"its tool calls were refused, over the {group_digits(budget)}-byte limit of "
            f"one model turn{hint}",
            type=MODEL_TURN_TOO_LARGE,
            non_retryable=True,
        )
    return message.model_copy(update={"tool_calls": calls or None})


def limit_turn(
    response: ModelResponse,
    limits: ToolCallLimits,
    *,
    stored: bool,
    call_index: int = 0,
    budget: int | None = None,
) -> ModelResponse:
    """``response`` as the workflow may record it (module docstring).

    Per call: the id made safe, the name cut to :data:`MAX_TOOL_NAME_CHARS`, and
    arguments nested past :data:`MAX_TOOL_ARGS_DEPTH`, over ``limits.max_args_chars``
    or holding a lone surrogate replaced by a marker. Calls past
    ``limits.max_calls`` are dropped, one marker call (with the first dropped
    call's id) standing for them all. Lone surrogates in text become U+FFFD.
    Then the turn must fit ``budget`` bytes (default: what one turn may record
    inline, or through the S3 codec when ``stored``): the largest calls are
    refused until it does; a turn that still does not fit raises a non-retryable
    ``ModelTurnTooLarge`` ApplicationError.
    """
    if budget is None:
        budget = MODEL_TURN_STORED_BYTES if stored else MODEL_TURN_INLINE_BYTES
    message = response.message
    calls = message.tool_calls or []
    kept = [
        _checked(call, n, call_index, limits.max_args_chars)
        for n, call in enumerate(calls[: limits.max_calls])
    ]
    if len(calls) > limits.max_calls:
        kept.append(_over_count(calls, limits.max_calls, call_index))
    message = message.model_copy(
        update={"content": _clean_content(message.content), "tool_calls": kept or None}
    )
    stop = response.stop_reason
    return response.model_copy(
        update={
            "message": _fit(message, budget, stored),
            "stop_reason": replace_surrogates(stop[:MAX_TOOL_NAME_CHARS]) if stop else stop,
        }
    )
