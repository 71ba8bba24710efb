"""Turn a raw model tool call into a checked, routed call (pure; runs in the workflow).

Order matters and mirrors contract §2-5: schema -> path validation -> route ->
deny gate -> approval trigger. Every refusal is a ``Rendered`` error the model
reads as a tool result; nothing here raises for bad model input and nothing
touches a backend.

Approvals come from two sources, merged per tool by :func:`approval_trigger`:

- *generated*: ``mode="interrupt"`` permission rules (contract §5), for the
  path-taking tools;
- *explicit*: ``AgentInput.interrupt_on``, one :class:`ToolInterrupt` per tool
  name (``always`` or argument predicates). An explicit entry for a tool
  **replaces** the generated approvals for that tool: the user said exactly
  when that tool needs a human, so interrupt rules no longer apply to it
  (deny rules still do; the gate runs first). ``{"read_file": false}`` thus
  switches approvals off for ``read_file`` while an interrupt rule keeps
  asking for ``write_file``.

``execute`` entries may also name ``allow_prefixes``: commands whose argv
starts with one of them run unasked (``kernel.command_rules``, strict and
fail-closed). That waives the human question only; the execute gate, deny
rules and the sandbox's view still apply to the command.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from wcmatch import fnmatch as wc_fnmatch

from filegate.kernel.command_rules import allowing_prefix, check_prefixes, describe_prefixes
from filegate.kernel.formatting import Rendered, format_error, permission_denied
from filegate.kernel.limits import MAX_TOOL_ARGS_DEPTH, execute_timeout_problem
from filegate.kernel.messages import (
    RAW_ARGS_KEY,
    RefusedArgs,
    args_chars,
    nesting_exceeds,
    refused_args,
)
from filegate.kernel.paths import validate_path
from filegate.kernel.permissions import (
    FilesystemPermission,
    check_permission,
    delete_blocked_message,
    delete_blockers,
    matching_interrupt_rule,
)
from filegate.kernel.registry import TOOLS
from filegate.kernel.routing import Router
from filegate.kernel.rule_patterns import normalise_rule_path, pattern_matches
from filegate.kernel.tool_types import TOOL_ARGS, ToolName
from filegate.kernel.visibility import answers_unasked, search_root_denied, search_roots

MISSING_FILE_PATH = (
    "{tool} needs a file path, but {field} is empty. "
    "Give the absolute path of a file, e.g. '/src/app.py'."
)


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
    return format_error(f"invalid arguments for {tool}: " + "; ".join(problems), "invalid_argument")


def check_call(
    tool: str,
    raw_args: Any,
    *,
    allowed: list[ToolName],
    router: Router,
    max_args_chars: int,
    max_execute_timeout: float,
) -> CheckedCall | Rendered:
    """Schema-validate, path-validate and route one call.

    A call the model activity refused (its arguments replaced by a
    :class:`RefusedArgs` marker: too large, too deep, too many calls) gets that
    refusal first, whatever the tool. The depth and size caps are checked here
    again for calls that did not come through that activity (a host workflow's
    own model, a reviewer's edit), depth first: ``json.dumps`` recurses, and a
    ``RecursionError`` in workflow code would fail every workflow task.
    """
    refused = refused_args(raw_args)
    if refused is not None:
        return format_error(refused.message(tool), "invalid_argument")
    if tool not in allowed:
        names = ", ".join(allowed)
        return format_error(f"unknown tool {tool!r}; available tools: {names}", "invalid_argument")
    if not isinstance(raw_args, dict):
        return format_error(f"arguments for {tool} must be a JSON object", "invalid_argument")
    unparsed = raw_args.get(RAW_ARGS_KEY)
    if set(raw_args) == {RAW_ARGS_KEY} and isinstance(unparsed, str):
        # The provider could not parse the model's argument text (truncated or
        # not JSON); say so instead of "extra field __raw__".
        return format_error(
            f"arguments for {tool} were not valid JSON: {_preview(unparsed)}. "
            "Send the arguments as one JSON object matching the tool's schema.",
            "invalid_argument",
        )
    if nesting_exceeds(raw_args, MAX_TOOL_ARGS_DEPTH):
        return format_error(
            RefusedArgs(reason="too_deep", limit=MAX_TOOL_ARGS_DEPTH).message(tool),
            "invalid_argument",
        )
    size = args_chars(raw_args)
    if size > max_args_chars:
        refusal = RefusedArgs(reason="too_large", chars=size, limit=max_args_chars)
        return format_error(refusal.message(tool), "invalid_argument")
    name: ToolName = tool  # type: ignore[assignment]
    try:
        parsed = TOOL_ARGS[name].model_validate(raw_args)
    except ValidationError as error:
        return _validation_error(tool, error)
    args = parsed.model_dump()
    if name in TOOLS.running:
        problem = execute_timeout_problem(args.get("timeout"), max_execute_timeout)
        if problem:
            return format_error(problem, "invalid_argument")
        return CheckedCall(name, args, None, None, None)
    field = TOOLS.path_fields[name]
    if name in TOOLS.needing_path and str(args.get(field) or "").strip() in ("", "."):
        # No file named: fail here, before any rule could ask a human about "/".
        return format_error(MISSING_FILE_PATH.format(tool=name, field=field), "invalid_argument")
    try:
        path = validate_path(args.get(field))
        match = router.resolve(path)
    except ValueError as error:
        return format_error(str(error), "invalid_path")
    if name in TOOLS.editing and args["old_string"] == args["new_string"]:
        return format_error(
            f"new_string is identical to old_string, so {path} would not change. "
            "Provide a different new_string.",
            "unchanged",
        )
    args[field] = path
    return CheckedCall(name, args, path, match.prefix, match.local_path)


def _preview(text: str, limit: int = 200) -> str:
    """The start of unparsable argument text, quoted (enough to see what went wrong)."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _bulk_denied(rules: list[FilesystemPermission], op: str, root: str) -> bool:
    """A search root is refused when its deciding rule, or one covering it all, denies."""
    return search_root_denied(rules, op, root)


def _answers_unasked(rules: list[FilesystemPermission], call: CheckedCall) -> bool:
    """No answer of this ls/glob/grep needs a human: all would be denied (kernel.visibility)."""
    narrowing = TOOLS.narrowing.get(call.tool)
    pattern = call.args.get(narrowing) if narrowing is not None else None
    roots = search_roots(str(call.path), pattern)
    op = TOOLS.operations[call.tool]
    return answers_unasked(
        rules, op, roots, result_root=call.path if call.tool in TOOLS.root_results else None
    )


def deny_gate(
    rules: list[FilesystemPermission], call: CheckedCall, *, has_descendants: bool = True
) -> Rendered | None:
    """The entry-gate refusal for ``call``, or None when it may proceed."""
    if not rules or call.path is None:
        return None
    op = TOOLS.operations[call.tool]
    if call.tool in TOOLS.removing:
        blockers = delete_blockers(rules, call.path, has_descendants=has_descendants)
        if not blockers:
            return None
        return format_error(delete_blocked_message(call.path, blockers), "denied")
    if call.tool in TOOLS.listing:
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


# --------------------------------------------------------------------------- #
# Explicit approval rules (AgentInput.interrupt_on)
# --------------------------------------------------------------------------- #

PredicateKind = Literal["glob", "contains", "equals", "regex"]
_PREDICATE_KINDS: tuple[PredicateKind, ...] = ("glob", "contains", "equals", "regex")

TEXT_GLOB_FLAGS = wc_fnmatch.BRACE | wc_fnmatch.DOTMATCH | wc_fnmatch.FORCEUNIX | wc_fnmatch.CASE
"""Flags for ``glob`` on a non-path argument (e.g. a command): ``*`` matches any text."""


@lru_cache(maxsize=1024)
def _text_glob(pattern: str) -> tuple[re.Pattern[str], ...]:
    """Compiled through ``re`` (not wcmatch's matcher) to stay sandbox-safe, like rule globs."""
    include, _exclude = wc_fnmatch.translate(pattern, flags=TEXT_GLOB_FLAGS)
    return tuple(re.compile(regex) for regex in include)


class _GivenFieldsOnly(BaseModel):
    """Serialises only the fields that were given, so "unset" survives a round trip.

    These models tell "not given" from an explicit ``null`` (``equals: null``,
    ``timeout_seconds: null``); the workflow input is serialised into history
    and read back, which would otherwise turn every unset field into a given one.
    """

    @model_serializer(mode="wrap")
    def _given_only(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if key in self.model_fields_set}
        return data


class ArgPredicate(_GivenFieldsOnly):
    """A test on one tool argument; exactly one of glob / contains / equals / regex.

    - ``glob`` on the tool's path argument (``file_path``/``path``) is a
      permission-style glob over the validated virtual path (``**`` crosses
      directories, dotfiles included); on any other argument it matches the
      whole text (``*`` matches anything, ``/`` too).
    - ``contains``: the argument is a string holding this substring.
    - ``equals``: the argument equals this JSON value.
    - ``regex``: Python ``re.search`` on a string argument.

    A missing or non-string argument never matches ``glob``/``contains``/``regex``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    arg: str = Field(min_length=1, description="Argument name, e.g. 'file_path' or 'command'.")
    glob: str | None = None
    contains: str | None = None
    equals: Any = None
    regex: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ArgPredicate:
        given = [kind for kind in _PREDICATE_KINDS if kind in self.model_fields_set]
        if len(given) != 1:
            raise ValueError(
                f"predicate on {self.arg!r} needs exactly one of glob, contains, equals, regex"
            )
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"predicate on {self.arg!r}: invalid regex: {exc}") from exc
        if self.glob is not None and not self.glob:
            raise ValueError(f"predicate on {self.arg!r}: empty glob")
        return self

    @property
    def kind(self) -> PredicateKind:
        return next(k for k in _PREDICATE_KINDS if k in self.model_fields_set)

    def matches(self, tool: str, args: dict[str, Any]) -> bool:
        present = self.arg in args
        value = args.get(self.arg)
        kind = self.kind
        if kind == "equals":
            return present and value == self.equals
        if not isinstance(value, str):
            return False
        if kind == "contains":
            return (self.contains or "") in value
        if kind == "regex":
            return re.search(self.regex or "", value) is not None
        pattern = self.glob or ""
        if TOOLS.path_fields.get(tool) == self.arg:
            try:
                return pattern_matches(normalise_rule_path(pattern), value)
            except ValueError:
                return False  # not a path glob (relative, '..'): cannot match a virtual path
        return any(regex.match(value) for regex in _text_glob(pattern))

    def describe(self) -> str:
        kind = self.kind
        return f"{self.arg} {kind} {json.dumps(getattr(self, kind), default=str)}"


COMMAND_ARG = "command"
"""The ``execute`` argument ``allow_prefixes`` judges."""
PREFIX_TOOL: ToolName = "execute"
"""The one tool whose entries may name ``allow_prefixes``."""


class ToolInterrupt(_GivenFieldsOnly):
    """When calls of one tool wait for a human (``AgentInput.interrupt_on[tool]``).

    ``always: true`` asks for every call; ``when`` asks when *all* its
    predicates match (one predicate may be given without a list);
    ``always: false`` (or the bare value ``false``) never asks, which also
    switches off approvals generated from interrupt rules for that tool. The
    bare value ``true`` is short for ``{"always": true}``.

    ``allow_prefixes`` (``execute`` only): a command that
    :func:`~filegate.kernel.command_rules.allowing_prefix` allows runs
    unasked. Alone it asks for every other command; with ``when``, a call
    waits when ``when`` matches and no prefix allows it. With ``always`` it is
    refused (``always: true`` is what it already means without the list).

    ``timeout_seconds`` / ``on_timeout``, when given, override
    ``AgentInput.approvals`` for this tool's approvals (``timeout_seconds:
    null`` given explicitly means wait without a deadline).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    always: bool | None = None
    when: list[ArgPredicate] = Field(default_factory=list)
    allow_prefixes: list[str] | None = Field(
        default=None,
        description="execute only: commands starting with one of these argvs run unasked.",
    )
    description: str | None = Field(
        default=None, description="Shown to reviewers instead of the generated description."
    )
    timeout_seconds: float | None = Field(default=None, gt=0)
    on_timeout: Literal["reject", "escalate"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, bool):
            return {"always": data}
        if isinstance(data, dict) and isinstance(data.get("when"), dict):
            return {**data, "when": [data["when"]]}
        return data

    @field_validator("allow_prefixes")
    @classmethod
    def _valid_prefixes(cls, prefixes: list[str] | None) -> list[str] | None:
        return None if prefixes is None else check_prefixes(prefixes)

    @model_validator(mode="after")
    def _one_trigger(self) -> ToolInterrupt:
        if self.always is None and not self.when and self.allow_prefixes is None:
            raise ValueError("an interrupt_on entry needs 'always', 'when' or 'allow_prefixes'")
        if self.always is not None and self.when:
            raise ValueError("give either 'always' or 'when', not both")
        if self.always is not None and self.allow_prefixes is not None:
            raise ValueError(
                "give either 'always' or 'allow_prefixes', not both "
                "(allow_prefixes alone asks for every other command)"
            )
        return self

    def tool_problem(self, tool: str) -> str | None:
        """Why this entry cannot stand for ``tool`` (``allow_prefixes`` off execute), or None."""
        if self.allow_prefixes is not None and tool != PREFIX_TOOL:
            return f"allow_prefixes applies to {PREFIX_TOOL} only, not {tool}"
        return None

    def allowed_by(self, tool: str, args: dict[str, Any]) -> str | None:
        """The ``allow_prefixes`` entry that lets this call run unasked, or None."""
        if self.allow_prefixes is None or tool != PREFIX_TOOL:
            return None
        return allowing_prefix(self.allow_prefixes, args.get(COMMAND_ARG))

    def fires(self, tool: str, args: dict[str, Any]) -> bool:
        if self.always is not None:
            return self.always
        if self.allowed_by(tool, args) is not None:
            return False
        return all(predicate.matches(tool, args) for predicate in self.when)

    def describe(self, tool: str) -> str:
        if self.description:
            return self.description
        if self.always is not None:
            return f"interrupt_on[{tool}]: always"
        parts = [p.describe() for p in self.when]
        if self.allow_prefixes is not None:
            parts.append(f"{COMMAND_ARG} not allowed by {describe_prefixes(self.allow_prefixes)}")
        return f"interrupt_on[{tool}]: when " + " and ".join(parts)

    def deadline_overrides(self) -> dict[str, Any]:
        """The timeout settings this entry gives explicitly (the rest come from defaults)."""
        return {
            key: getattr(self, key)
            for key in ("timeout_seconds", "on_timeout")
            if key in self.model_fields_set
        }


@dataclass(frozen=True)
class ApprovalTrigger:
    """Why a call needs approval: what reviewers see and which timeout applies.

    ``rule`` is the pending approval's ``rule`` (JSON; ``source`` is
    ``permissions`` or ``interrupt_on``, ``description`` is one readable line);
    ``rule_index`` is the permission rule's position (for
    ``ApprovalConfig.per_rule``), None for interrupt_on entries;
    ``overrides`` are an interrupt_on entry's explicit timeout settings.
    """

    rule: dict[str, Any]
    rule_index: int | None = None
    overrides: tuple[tuple[str, Any], ...] = ()


def _describe_permission(index: int, rule: FilesystemPermission) -> str:
    operations = "/".join(rule.operations)
    # Numbered from 1 for people; ``rule_index`` (ApprovalConfig.per_rule) stays 0-based.
    return f"permission rule #{index + 1}: {operations} {', '.join(rule.paths)} -> {rule.mode}"


def approval_trigger(
    rules: list[FilesystemPermission],
    interrupt_on: Mapping[ToolName, ToolInterrupt],
    call: CheckedCall,
) -> ApprovalTrigger | None:
    """The approval ``call`` needs, or None; an explicit entry replaces generated ones.

    None, too, for a search whose every result would be denied (contract §4:
    an earlier deny covering the subtree wins over a later interrupt), and for
    an exact tool without a path (:func:`check_call` refuses it first).
    """
    if call.tool in TOOLS.needing_path and call.path is None:
        return None
    bulk = call.tool in TOOLS.listing and call.path is not None
    if bulk and rules and _answers_unasked(rules, call):
        return None
    explicit = interrupt_on.get(call.tool)
    if explicit is not None:
        if not explicit.fires(call.tool, call.args):
            return None
        rule = explicit.model_dump(mode="json")
        return ApprovalTrigger(
            rule={
                "source": "interrupt_on",
                "tool": call.tool,
                **rule,
                "description": explicit.describe(call.tool),
            },
            overrides=tuple(explicit.deadline_overrides().items()),
        )
    matched = matching_interrupt_rule(rules, call.tool, call.args)
    if matched is None:
        return None
    index = rule_index(rules, matched)
    return ApprovalTrigger(
        rule={
            "source": "permissions",
            **matched.model_dump(mode="json"),
            "index": index,
            "description": _describe_permission(index, matched),
        },
        rule_index=index,
    )
