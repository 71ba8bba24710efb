"""Command-prefix allow rules for Deep Agents' own ``interrupt_on`` (the adapter's counterpart
of ``AgentInput.interrupt_on.execute.allow_prefixes``).

Deep Agents asks its human-in-the-loop questions itself (LangChain's
``HumanInTheLoopMiddleware``), so Filegate's workflow gate never sees them.
:func:`execute_interrupt_on` builds the middleware's ``InterruptOnConfig``
for ``execute`` whose ``when`` predicate is the workflow gate's own matcher
(:func:`filegate.kernel.command_rules.allowing_prefix`): a command the
workflow would run unasked is not interrupted here either, and every other
command is. The predicate is deterministic, as the middleware requires (it
runs again on resume).

As in the workflow, it waives the question only: the tools worker's execute
gate and the sandbox's view apply to the command whatever Deep Agents decided.

Pure: no deepagents or LangChain import (the config is a plain dict, the
request is read by attribute), so it loads anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from filegate.kernel.command_rules import allowing_prefix, check_prefixes

DEFAULT_DECISIONS = ("approve", "edit", "reject", "respond")
"""What a reviewer may answer: the middleware's default for ``{"execute": True}``."""


def execute_interrupt_on(
    allow_prefixes: Sequence[str],
    *,
    allowed_decisions: Sequence[str] = DEFAULT_DECISIONS,
    description: str | None = None,
) -> dict[str, Any]:
    """An ``InterruptOnConfig`` for ``execute``: ask unless a prefix allows the command.

    ``create_deep_agent(..., interrupt_on={"execute": execute_interrupt_on(["git status"])})``.
    Raises :class:`~filegate.kernel.command_rules.CommandPrefixError` (a
    ``ValueError``, one line) for a prefix the workflow would refuse too.
    """
    prefixes = tuple(check_prefixes(list(allow_prefixes)))

    def when(request: Any) -> bool:
        call = getattr(request, "tool_call", None) or {}
        args = call.get("args") if isinstance(call, dict) else None
        command = args.get("command") if isinstance(args, dict) else None
        return allowing_prefix(prefixes, command) is None

    config: dict[str, Any] = {"allowed_decisions": list(allowed_decisions), "when": when}
    if description is not None:
        config["description"] = description
    return config


__all__ = ["DEFAULT_DECISIONS", "execute_interrupt_on"]
