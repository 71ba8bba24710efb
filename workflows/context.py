"""Context management (contract §7): what the model is shown of a long conversation.

Pure and deterministic, so the workflow can recompute it on every step and on
replay. The stored transcript (the workflow's message list, the result's
``transcript``) is never changed; only the *view* sent to the model is:

* a user message over :data:`EVICT_CHARS` characters is shown as a stub with a
  head/tail preview pointing at ``/conversation_history/message-<n>.md`` (the
  model activity stores the original there);
* once the view reaches :data:`SUMMARIZE_FRACTION` of the context window, the
  workflow asks the model activity for a summary, and the view becomes that
  summary followed by the most recent messages (:func:`cut_for_summary`);
* once the summarized messages the workflow still holds reach
  :data:`PAGE_OUT_CHARS`, the next summary call stores them as a transcript
  page (:class:`~filegate.kernel.transcripts.TranscriptPage`) and the workflow
  lets them go: its list then starts at ``ContextState.offset``. Indices here
  (``start``, ``archived_upto``, evicted names) stay transcript indices.

Each step's work here is proportional to the view (bounded by the context
window), never to the whole transcript.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic import BaseModel

from filegate.kernel.formatting import offload_stub
from filegate.kernel.limits import CHARS_PER_TOKEN, DEFAULT_CONTEXT_TOKENS, HUMAN_TOKEN_LIMIT
from filegate.kernel.messages import MediaBlock, Message, ModelSpec
from filegate.kernel.transcripts import CONVERSATION_DIR, TranscriptPage

EVICT_CHARS = CHARS_PER_TOKEN * HUMAN_TOKEN_LIMIT
"""User messages longer than this (4 chars x 50 000 tokens = 200 000 chars) are evicted
from the view, as tool results are over 4 x 20 000 (contract §7)."""
SUMMARIZE_FRACTION = 0.85
KEEP_FRACTION = 0.3
"""After summarizing, recent messages up to this share of the threshold stay verbatim."""
MEDIA_BLOCK_TOKENS = 1_000
"""Rough cost of one image/audio/video block (base64 length says nothing about tokens)."""
PAGE_OUT_CHARS = 8 * 1024 * 1024
"""Characters of summarized messages the workflow holds before a summary call stores them
as a transcript page: below it a thread's result and continue-as-new carry hold the
whole transcript, as before pages; above it they stay a few MB whatever its length."""


def message_tokens(message: Message) -> int:
    """Tokens of one message, estimated at ~4 characters per token."""
    chars = len(message.text())
    for call in message.tool_calls or []:
        chars += len(call.name) + len(json.dumps(call.args))
    media = 0
    if not isinstance(message.content, str):
        media = sum(1 for b in message.content if isinstance(b, MediaBlock))
    return chars // CHARS_PER_TOKEN + media * MEDIA_BLOCK_TOKENS


def message_chars(message: Message) -> int:
    """Characters one message adds to a payload: text, tool-call arguments, media."""
    chars = len(message.text())
    for call in message.tool_calls or []:
        chars += len(call.name) + len(json.dumps(call.args))
    if not isinstance(message.content, str):
        chars += sum(len(b.base64) for b in message.content if isinstance(b, MediaBlock))
    return chars


def view_tokens(messages: Sequence[Message], system: str = "") -> int:
    return len(system) // CHARS_PER_TOKEN + sum(message_tokens(m) for m in messages)


class TokenTally:
    """:func:`view_tokens` that counts each message once, not once per turn.

    A turn's view is mostly the previous turn's messages plus a few new ones;
    re-estimating all of them (a JSON dump of every tool call's arguments)
    made each turn cost more the longer the conversation, and a whole run grow
    with its square. Messages are never changed in place, so an estimate is
    kept per message object (by identity, the object held so its id stays its
    own) for as long as the message stays in the view.
    """

    def __init__(self) -> None:
        self._known: dict[int, tuple[Message, int]] = {}

    def view_tokens(self, messages: Sequence[Message], system: str = "") -> int:
        known, kept = self._known, {}
        total = len(system) // CHARS_PER_TOKEN
        for message in messages:
            entry = known.get(id(message))
            if entry is None or entry[0] is not message:
                entry = (message, message_tokens(message))
            kept[id(message)] = entry
            total += entry[1]
        self._known = kept  # only the current view: stubs and summarized messages go
        return total


def summarize_threshold(model: ModelSpec) -> int:
    """Tokens at which the conversation is summarized: 85 % of the window (or of 170 000)."""
    return int(SUMMARIZE_FRACTION * (model.context_window or DEFAULT_CONTEXT_TOKENS))


def evicted_name(index: int) -> str:
    """Name under ``/conversation_history/`` of transcript message ``index``."""
    return f"message-{index:06d}.md"


def _is_evicted(message: Message) -> bool:
    return message.role == "user" and len(message.text()) > EVICT_CHARS


def shown(message: Message, index: int) -> Message:
    """The message as the model sees it: a stub for an over-long user message."""
    if not _is_evicted(message):
        return message
    stub = offload_stub(CONVERSATION_DIR + evicted_name(index), message.text(), what="Message")
    return Message(role="user", content=stub)


def summary_message(summary: str, archived: Sequence[str]) -> Message:
    where = f" The earlier transcript is saved at {', '.join(archived)}." if archived else ""
    return Message(
        role="user",
        content=f"[Summary of the conversation so far.{where}]\n\n{summary}",
    )


class ContextState(BaseModel):
    """What the workflow remembers about the view (carried over continue-as-new)."""

    start: int = 0
    """Index of the first transcript message shown verbatim (earlier ones are summarized)."""
    summary: Message | None = None
    archived_upto: int = 0
    """Evicted messages below this index were already sent for archiving."""
    offset: int = 0
    """Transcript index of the workflow's first message in memory: the ones before it
    are in transcript pages (``page``), neither held nor carried."""
    page: TranscriptPage | None = None
    """The newest transcript page; it ends at ``offset``."""
    summarized_chars: int = 0
    """:func:`message_chars` of the messages in ``[offset, start)``."""
    paging: bool = True
    """False once a summary call stored no page (an agent worker without a store)."""
    paged_answer: str = ""
    """The latest final answer (assistant text without tool calls) in the pages."""


def last_answer(messages: Sequence[Message], default: str = "") -> str:
    """The text of the latest assistant message without tool calls; ``default`` if none."""
    for message in reversed(messages):
        if message.role == "assistant" and not message.tool_calls:
            return message.text()
    return default


def model_view(messages: Sequence[Message], state: ContextState) -> list[Message]:
    """Summary (if any) plus the messages from ``state.start``, evicted ones as stubs.

    ``messages`` is the workflow's list: transcript messages from ``state.offset``.
    """
    head = [state.summary] if state.summary is not None else []
    first = max(state.start - state.offset, 0)
    return head + [shown(m, state.start + i) for i, m in enumerate(messages[first:])]


def to_archive(messages: Sequence[Message], state: ContextState) -> dict[str, str]:
    """Originals of evicted messages not yet sent for archiving: name -> text."""
    first = max(state.archived_upto - state.offset, 0)
    return {
        evicted_name(state.archived_upto + i): m.text()
        for i, m in enumerate(messages[first:])
        if _is_evicted(m)
    }


def cut_for_summary(messages: Sequence[Message], state: ContextState, threshold: int) -> int:
    """First message to keep verbatim after a summary; ``state.start`` when nothing to cut.

    Keeps the newest messages worth up to ``KEEP_FRACTION`` of the threshold,
    never starting on a tool result (it would lose its tool call) and always
    summarizing at least one message. A transcript index, as ``state.start``.
    """
    budget = int(threshold * KEEP_FRACTION)
    start, offset = state.start - state.offset, state.offset
    cut = len(messages)
    used = 0
    while cut > start + 1:
        cost = message_tokens(shown(messages[cut - 1], offset + cut - 1))
        if used + cost > budget:
            break
        used += cost
        cut -= 1
    back = cut
    while back > start and back < len(messages) and messages[back].role == "tool":
        back -= 1  # keep the assistant message that made these tool calls
    if back > start:
        return offset + back
    while cut < len(messages) and messages[cut].role == "tool":
        cut += 1
    return offset + cut
