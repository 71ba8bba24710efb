"""Turn a raw model tool call into a checked, routed call (pure; runs in the workflow).

Order matters and mirrors SPEC §2-5: schema -> path validation -> route ->
deny gate. Every refusal is a ``Rendered`` error the model reads as a tool
result; nothing here raises for bad model input and nothing touches a backend.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from activities.providers.common import RAW_ARGS_KEY
from activities.tool_types import TOOL_ARGS, ToolName
from backends.composite import Router
from backends.formatting import Rendered, format_error, permission_denied
from backends.paths import validate_path
from backends.permissions import (
    TOOL_OPERATIONS,
    FilesystemPermission,
    check_permission,
    delete_blocked_message,
    delete_blockers,
)

PATH_FIELDS: dict[str, str] = {
    "ls": "path",
    "read_file": "file_path",
    "write_file": "file_path",
    "edit_file": "file_path",
    "delete": "file_path",
    "glob": "path",
    "grep": "path",
}
"""The argument holding each tool's path (execute has none)."""


@dataclass(frozen=True)
class CheckedCall:
    """A call that passed schema, path and route checks.

    ``args`` are the validated arguments with the path normalised (virtual);
    ``path`` is that virtual path (None for execute); ``prefix`` the owning
    route (None = default backend).
    """

    tool: ToolName
    args: dict[str, Any]
    path: str | None
    prefix: str | None
    local_path: str | None


def _validation_error(tool: str, error: ValidationError) -> Rendered:
    problems = []
    for item in error.errors()[:5]:
        where = ".".join(str(p) for p in item["loc"]) or "arguments"
        problems.append(f"{where}: {item['msg']}")
    return format_error(f"invalid arguments for {tool}: " + "; ".join(problems))


def check_call(
    tool: str,
    raw_args: Any,
    *,
    allowed: list[ToolName],
    router: Router,
    max_args_chars: int,
    max_execute_timeout: float,
) -> CheckedCall | Rendered:
    """Schema-validate, path-validate and route one call."""
    if tool not in allowed:
        names = ", ".join(allowed)
        return format_error(f"unknown tool {tool!r}; available tools: {names}")
    if not isinstance(raw_args, dict):
        return format_error(f"arguments for {tool} must be a JSON object")
    unparsed = raw_args.get(RAW_ARGS_KEY)
    if set(raw_args) == {RAW_ARGS_KEY} and isinstance(unparsed, str):
        # The provider could not parse the model's argument text (truncated or
        # not JSON); say so instead of "extra field __raw__".
        return format_error(
            f"arguments for {tool} were not valid JSON: {_preview(unparsed)}. "
            "Send the arguments as one JSON object matching the tool's schema."
        )
    size = len(json.dumps(raw_args, default=str))
    if size > max_args_chars:
        return format_error(
            f"arguments for {tool} are too large ({size} characters, limit {max_args_chars})"
        )
    name: ToolName = tool  # type: ignore[assignment]
    try:
        parsed = TOOL_ARGS[name].model_validate(raw_args)
    except ValidationError as error:
        return _validation_error(tool, error)
    args = parsed.model_dump()
    if name == "execute":
        timeout = args.get("timeout")
        if timeout is not None and (timeout < 0 or timeout > max_execute_timeout):
            return format_error(
                f"timeout must be between 0 and {max_execute_timeout:g} seconds, got {timeout:g}"
            )
        return CheckedCall(name, args, None, None, None)
    field = PATH_FIELDS[name]
    try:
        path = validate_path(args.get(field))
        match = router.resolve(path)
    except ValueError as error:
        return format_error(str(error))
    if name == "edit_file" and args["old_string"] == args["new_string"]:
        return format_error(
            f"new_string is identical to old_string, so {path} would not change. "
            "Provide a different new_string."
        )
    args[field] = path
    return CheckedCall(name, args, path, match.prefix, match.local_path)


def _preview(text: str, limit: int = 200) -> str:
    """The start of unparsable argument text, quoted (enough to see what went wrong)."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _bulk_denied(rules: list[FilesystemPermission], op: str, root: str) -> bool:
    """A search root is refused when its deciding rule, or one covering it all, denies."""
    if check_permission(rules, op, root) == "deny":
        return True
    for rule in rules:
        if rule.governs(op) and rule.covers_subtree(root):  # type: ignore[arg-type]
            return rule.mode == "deny"
    return False


def deny_gate(
    rules: list[FilesystemPermission], call: CheckedCall, *, has_descendants: bool = True
) -> Rendered | None:
    """The entry-gate refusal for ``call``, or None when it may proceed."""
    if not rules or call.path is None:
        return None
    op = TOOL_OPERATIONS[call.tool]
    if call.tool == "delete":
        blockers = delete_blockers(rules, call.path, has_descendants=has_descendants)
        return format_error(delete_blocked_message(call.path, blockers)) if blockers else None
    if call.tool in ("ls", "glob", "grep"):
        denied = _bulk_denied(rules, op, call.path)
    else:
        denied = check_permission(rules, op, call.path) == "deny"
    return permission_denied(op, call.path) if denied else None


def rule_index(rules: list[FilesystemPermission], rule: FilesystemPermission) -> int:
    """Position of ``rule`` in ``rules`` (identity first, equality as fallback)."""
    for index, candidate in enumerate(rules):
        if candidate is rule:
            return index
    return rules.index(rule)
