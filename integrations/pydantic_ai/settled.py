"""An interrupted workspace call as Pydantic AI's deferred approval, and its settled answer.

The round trip, for a call an ``interrupt`` rule stops (a write, a removal):

1. the first run of the tool raises ``ApprovalRequired`` whose metadata names
   the Filegate call to approve (:func:`ask`); Pydantic AI defers the tool call;
2. :class:`~.approvals.FilegateCapability`, in the agent's workflow, runs that
   call through ``FileTools``: a pending approval in Filegate's handlers, a
   reviewer's decision (``filegate approve``, the UI), and on approval the
   ``filegate.<tool>`` activity scheduled by the workflow that holds the
   decision; it answers the deferral with ``ToolApproved`` and the call's
   outcome in the call's metadata (:func:`settled_metadata`), or ``ToolDenied``;
3. Pydantic AI runs the tool again with ``ctx.tool_call_approved``; the same
   workspace call finds its answer there (:func:`answer_for`) and returns it
   without running anything a second time.

Why not let the re-run send the call with an approval flag: a tool runs in an
activity, whose Filegate call is a standalone activity (or a one-operation
workflow) with no history holding the reviewer's decision, so the tools worker
rightly refuses such a claim. A call is recognised by a digest of its tool
and arguments, so an approval settles that very call and no other.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, NoReturn

from pydantic_ai import ApprovalRequired, RunContext
from pydantic_ai._run_context import get_current_run_context

METADATA_KEY = "filegate"
"""The key of Filegate's entry in a deferred call's metadata (request and result)."""


@dataclass(frozen=True)
class Settled:
    """The outcome of an approved call as the workflow ran it: ok, the tool's text and,
    for a failure, its :data:`~filegate.kernel.protocol.OutcomeCode`."""

    ok: bool
    text: str
    code: str | None = None


def call_key(tool: str, args: dict[str, Any]) -> str:
    """A digest naming one call (tool and arguments), short enough for metadata."""
    canonical = json.dumps({"tool": tool, "args": args}, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def request_metadata(tool: str, args: dict[str, Any], shown: str) -> dict[str, Any]:
    """The ``ApprovalRequired`` metadata of a call: what ``FileTools`` will run."""
    return {METADATA_KEY: {"tool": tool, "args": args, "path": shown, "key": call_key(tool, args)}}


def requested_call(metadata: Any) -> tuple[str, dict[str, Any], str] | None:
    """``(tool, args, key)`` from a deferred call's metadata, None when it is not Filegate's."""
    entry = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
    if not isinstance(entry, dict):
        return None
    tool, args, key = entry.get("tool"), entry.get("args"), entry.get("key")
    if not isinstance(tool, str) or not isinstance(args, dict) or not isinstance(key, str):
        return None
    return tool, args, key


def settled_metadata(key: str, ok: bool, text: str) -> dict[str, Any]:
    """The ``DeferredToolResults.metadata`` entry carrying an approved call's outcome."""
    return {METADATA_KEY: {key: {"ok": ok, "text": text}}}


def current(bound: RunContext[Any] | None) -> RunContext[Any] | None:
    """The run context of the tool call a workspace call belongs to.

    ``bound``: the context the workspace was selected with (a durable unit
    rebuilds the workspace from the tool call's own serialized context);
    else Pydantic AI's ambient one, where a run sets it.
    """
    return bound if bound is not None else get_current_run_context()


def answer_for(ctx: RunContext[Any] | None, tool: str, args: dict[str, Any]) -> Settled | None:
    """The settled outcome of this call in the approved re-run of its tool, if any."""
    if ctx is None or not ctx.tool_call_approved:
        return None
    metadata = ctx.tool_call_metadata
    entries = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
    entry = entries.get(call_key(tool, args)) if isinstance(entries, dict) else None
    if not isinstance(entry, dict):
        return None
    code = entry.get("code")
    return Settled(
        ok=bool(entry.get("ok")),
        text=str(entry.get("text", "")),
        code=code if isinstance(code, str) else None,
    )


def ask(ctx: RunContext[Any] | None, tool: str, args: dict[str, Any], *, shown: str) -> NoReturn:
    """Raise for a call that needs a human: ``ApprovalRequired`` inside an agent run.

    Outside a run there is no one to ask, and an approved re-run without a
    settled answer was approved somewhere Filegate cannot see (the tools
    worker would refuse it anyway): both are ``PermissionError``.
    """
    needs = f"{shown}: {tool} needs human approval (an interrupt rule matches)"
    if ctx is None:
        raise PermissionError(f"{needs}; outside an agent run nobody can give it")
    if ctx.tool_call_approved:
        raise PermissionError(
            f"{needs}, and this call's approval was not given through Filegate "
            "(FilegateCapability in the agent's workflow), so the tools worker cannot honour it"
        )
    raise ApprovalRequired(metadata=request_metadata(tool, args, shown))


__all__ = [
    "METADATA_KEY",
    "Settled",
    "answer_for",
    "ask",
    "call_key",
    "current",
    "request_metadata",
    "requested_call",
    "settled_metadata",
]
