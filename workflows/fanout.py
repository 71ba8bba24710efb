"""Composite fan-out of ls/glob/grep across route backends (contract §1), in the workflow.

Routes may live on different task queues, so the workflow plans the fan-out
with the pure :class:`~backends.composite.Router`, runs one ordinary tool call
per target, and merges the answers with the Router's ``merge_*`` (sorting,
shadowing, shared ``max_count``, OR-ed ``truncated``, "root absent here" is
not an error) before rendering once. Each target is asked for its structured
result (``ToolRequest.want_raw``): already permission-filtered inside the
activity, with backend-local paths, so nothing is parsed back from text.
Each target also carries its own virtual path (``ToolRequest.virtual_path``),
so the activity checks that one path once instead of the local path and the
route prefix apart (kernel.dispatch.parse_args).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

from filegate.kernel.formatting import Rendered, format_error, format_glob, format_grep, format_ls
from filegate.kernel.limits import DEFAULT_GREP_MAX
from filegate.kernel.protocol import GlobResult, GrepResult, LsResult
from filegate.kernel.registry import TOOLS
from filegate.kernel.routing import Router, SearchPlan, SearchTarget
from filegate.kernel.tool_types import ToolOutcome

RunTarget = Callable[[str | None, dict[str, Any], str], Awaitable[ToolOutcome]]
"""``run(prefix, args, virtual_path)``: one tool call on route ``prefix``
(None = default) with backend-local args.

Must send the call with ``want_raw=True`` (the merge reads
``ToolOutcome.raw``) and ``virtual_path`` as ``ToolRequest.virtual_path``: the
target's search root in the virtual tree, so the activity checks one path.
"""

_Kind = Literal["ls", "glob", "grep"]
_R = TypeVar("_R", LsResult, GlobResult, GrepResult)


class _Failed(Exception):
    """A target answered without a structured result (entry gate, bad argument)."""

    def __init__(self, rendered: Rendered) -> None:
        super().__init__(rendered.text)
        self.rendered = rendered


def needs_fanout(router: Router, tool: str, args: dict[str, Any]) -> bool:
    """True when the call's answer involves more than the owner of its path."""
    if not router.prefixes or tool not in TOOLS.listing:
        return False
    if tool in TOOLS.pattern_reaching and str(args.get(TOOLS.narrowing[tool], "")).startswith("/"):
        return True
    return bool(router.prefixes_under(args.get("path") or "/"))


def _structured(outcome: ToolOutcome, kind: _Kind, expected: type[_R]) -> _R:
    """The target's structured result; its rendered error when it has none."""
    raw = getattr(outcome.raw, kind, None) if outcome.raw is not None else None
    if isinstance(raw, expected):
        return raw
    if outcome.status == "error":
        text = outcome.content if isinstance(outcome.content, str) else f"{kind} failed"
        raise _Failed(Rendered(text, is_error=True, code=outcome.code or "failed"))
    raise _Failed(format_error(f"{kind} returned no structured result to merge", "failed"))


def _target_path(router: Router, prefix: str | None, local_path: str) -> str:
    """The virtual path of a target's backend-local search root (a route root is its mount)."""
    virtual = router.to_virtual(prefix, local_path)
    return virtual.rstrip("/") or "/"


def _call(
    run: RunTarget, router: Router, prefix: str | None, args: dict[str, Any]
) -> Awaitable[ToolOutcome]:
    """Run one target with the target's virtual path."""
    return run(prefix, args, _target_path(router, prefix, args["path"]))


async def _gather(
    run: RunTarget,
    router: Router,
    targets: tuple[SearchTarget, ...],
    make_args: Callable[[SearchTarget], dict[str, Any]],
) -> list[tuple[SearchTarget, ToolOutcome]]:
    outcomes = await asyncio.gather(*(_call(run, router, t.prefix, make_args(t)) for t in targets))
    return list(zip(targets, outcomes, strict=True))


async def fan_out(router: Router, tool: str, args: dict[str, Any], run: RunTarget) -> Rendered:
    """Run ls/glob/grep over every backend the call reaches and merge the answers."""
    try:
        if tool == "ls":
            return await _ls(router, args, run)
        if tool == "glob":
            plan = router.glob_plan(args["pattern"], args.get("path") or "/")
            return await _glob(plan, router, run)
        plan = router.grep_plan(args.get("path") or "/", args.get("glob"))
        return await _grep(plan, router, args, run)
    except ValueError as error:
        return format_error(str(error), "invalid_argument")
    except _Failed as failed:
        return failed.rendered


async def _ls(router: Router, args: dict[str, Any], run: RunTarget) -> Rendered:
    path = args.get("path") or "/"
    owner = router.resolve(path)
    outcome = await _call(run, router, owner.prefix, {"path": owner.local_path})
    listing = _structured(outcome, "ls", LsResult)
    return format_ls(router.merge_ls(path, owner.prefix, listing))


async def _glob(plan: SearchPlan, router: Router, run: RunTarget) -> Rendered:
    parts = await _gather(
        run, router, plan.targets, lambda t: {"pattern": t.pattern or "**", "path": t.local_path}
    )
    results = [(target, _structured(outcome, "glob", GlobResult)) for target, outcome in parts]
    return format_glob(router.merge_glob(plan, results))


async def _grep(plan: SearchPlan, router: Router, args: dict[str, Any], run: RunTarget) -> Rendered:
    requested = args.get("max_count")
    max_count = DEFAULT_GREP_MAX if requested is None else requested

    def target_args(target: SearchTarget) -> dict[str, Any]:
        return {
            "pattern": args["pattern"],
            "path": target.local_path,
            "glob": target.pattern,
            "output_mode": "content",
            "max_count": max_count,
        }

    parts = await _gather(run, router, plan.targets, target_args)
    results = [(target, _structured(outcome, "grep", GrepResult)) for target, outcome in parts]
    merged = router.merge_grep(plan, results, max_count)
    return format_grep(merged, pattern=args["pattern"], output_mode=args["output_mode"])
