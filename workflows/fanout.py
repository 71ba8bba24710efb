"""Composite fan-out of ls/glob/grep across route backends (SPEC §1), in the workflow.

Routes may live on different task queues, so the workflow plans the fan-out
with the pure :class:`~backends.composite.Router`, runs one ordinary tool call
per target, and merges the answers. Each target's answer comes back as the
text the tool activity rendered (already permission-filtered, paths already
virtual); it is read back into result objects here so the Router's merge
(sorting, shadowing, shared ``max_count``, OR-ed ``truncated``) has exactly one
implementation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from activities.tool_types import ToolOutcome
from backends.composite import Router, SearchPlan, SearchTarget
from backends.formatting import (
    DEFAULT_GREP_MAX,
    GLOB_TRUNCATED_NOTE,
    Rendered,
    format_error,
    format_glob,
    format_grep,
    format_ls,
    grep_truncated_note,
)
from backends.protocol import FileInfo, GlobResult, GrepMatch, GrepResult, LsResult

RunTarget = Callable[[str | None, dict[str, Any]], Awaitable[ToolOutcome]]
"""Run one tool call on route ``prefix`` (None = default) with backend-local args."""


def needs_fanout(router: Router, tool: str, args: dict[str, Any]) -> bool:
    """True when the call's answer involves more than the owner of its path."""
    if not router.prefixes or tool not in ("ls", "glob", "grep"):
        return False
    if tool == "glob" and str(args.get("pattern", "")).startswith("/"):
        return True
    return bool(router.prefixes_under(args.get("path") or "/"))


def _local(prefix: str | None, virtual: str) -> str:
    """Strip the route prefix a target's answer carries (inverse of Router.to_virtual)."""
    if prefix is None:
        return virtual
    base = prefix.rstrip("/")
    return virtual[len(base) :] or "/"


_CUT_NOTES = (GLOB_TRUNCATED_NOTE, grep_truncated_note())


def _rows(outcome: ToolOutcome) -> tuple[list[str], bool]:
    """Result rows of a rendered list, and whether a note said it was cut short.

    Rows are paths (``/...``) or grep content rows (two-space indent); notes
    (``[...]``) and the empty-result sentences are not rows.
    """
    text = outcome.content if isinstance(outcome.content, str) else ""
    rows: list[str] = []
    truncated = False
    for line in text.splitlines():
        if line in _CUT_NOTES or line.startswith("[Output truncated"):
            truncated = True
        elif line.startswith(("/", "  ")):
            rows.append(line)
    return rows, truncated


def _grep_matches(prefix: str | None, outcome: ToolOutcome) -> GrepResult:
    rows, truncated = _rows(outcome)
    matches: list[GrepMatch] = []
    current: str | None = None
    for row in rows:
        if not row.startswith("  ") and row.endswith(":"):
            current = _local(prefix, row[:-1])
            continue
        number, sep, text = row.strip(" ").partition(": ")
        if current is not None and sep and number.isdigit():
            matches.append(GrepMatch(path=current, line=int(number), text=text))
        elif current is not None and number.endswith(":") and number[:-1].isdigit():
            matches.append(GrepMatch(path=current, line=int(number[:-1]), text=""))
    return GrepResult(matches=matches, truncated=truncated)


async def _gather(
    run: RunTarget, targets: tuple[SearchTarget, ...], make_args: Callable[[SearchTarget], dict]
) -> list[tuple[SearchTarget, ToolOutcome]]:
    outcomes = await asyncio.gather(*(run(t.prefix, make_args(t)) for t in targets))
    return list(zip(targets, outcomes, strict=True))


def _first_error(parts: list[tuple[SearchTarget, ToolOutcome]]) -> Rendered | None:
    for _, outcome in parts:
        if outcome.status == "error":
            text = outcome.content if isinstance(outcome.content, str) else "search failed"
            return Rendered(text, is_error=True)
    return None


async def fan_out(router: Router, tool: str, args: dict[str, Any], run: RunTarget) -> Rendered:
    """Run ls/glob/grep over every backend the call reaches and merge the answers."""
    try:
        if tool == "ls":
            return await _ls(router, args, run)
        if tool == "glob":
            plan = router.glob_plan(args["pattern"], args.get("path") or "/")
            return await _glob(router, plan, run)
        plan = router.grep_plan(args.get("path") or "/", args.get("glob"))
        return await _grep(router, plan, args, run)
    except ValueError as error:
        return format_error(str(error))


async def _ls(router: Router, args: dict[str, Any], run: RunTarget) -> Rendered:
    path = args.get("path") or "/"
    owner = router.resolve(path)
    outcome = await run(owner.prefix, {"path": owner.local_path})
    if outcome.status == "error" and not router.mount_entries(path):
        return Rendered(str(outcome.content), is_error=True)
    entries: list[FileInfo] = []
    if outcome.status == "success":
        rows, _ = _rows(outcome)
        for row in rows:
            entries.append(FileInfo(path=_local(owner.prefix, row), is_dir=row.endswith("/")))
    merged = router.merge_ls(path, owner.prefix, LsResult(entries=entries))
    return format_ls(merged)


async def _glob(router: Router, plan: SearchPlan, run: RunTarget) -> Rendered:
    parts = await _gather(
        run, plan.targets, lambda t: {"pattern": t.pattern or "**", "path": t.local_path}
    )
    failed = _first_error(parts)
    if failed is not None:
        return failed
    results: list[tuple[SearchTarget, GlobResult]] = []
    for target, outcome in parts:
        rows, truncated = _rows(outcome)
        local = [_local(target.prefix, row) for row in rows]
        results.append((target, GlobResult(matches=local, truncated=truncated)))
    return format_glob(router.merge_glob(plan, results))


async def _grep(router: Router, plan: SearchPlan, args: dict[str, Any], run: RunTarget) -> Rendered:
    max_count = args.get("max_count") or DEFAULT_GREP_MAX

    def target_args(target: SearchTarget) -> dict[str, Any]:
        return {
            "pattern": args["pattern"],
            "path": target.local_path,
            "glob": target.pattern,
            "output_mode": "content",
            "max_count": max_count,
        }

    parts = await _gather(run, plan.targets, target_args)
    failed = _first_error(parts)
    if failed is not None:
        return failed
    results = [(target, _grep_matches(target.prefix, outcome)) for target, outcome in parts]
    merged = router.merge_grep(plan, results, max_count)
    return format_grep(merged, pattern=args["pattern"], output_mode=args["output_mode"])
