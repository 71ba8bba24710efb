"""The tool registry: one frozen definition per tool, and every per-tool set derived from it.

Why: a tool's facts (which argument holds its path, which rule operation
governs it, whether a retry could apply it twice, whether it is previewed,
offloaded, batched...) used to be string-keyed tables spread over the kernel,
the workflows and the activities, each listing tools by hand. Adding a tool
meant finding them all. Here a tool is one :class:`ToolDef`; the tables the
rest of the code reads are properties of a :class:`ToolRegistry`, so a new
entry reaches all of them. Maps that hold code (the kernel's handlers, the
model-facing descriptions, the typed stubs) stay beside that code; a test
checks that each covers exactly :data:`TOOLS`.

Pure: pydantic argument models only, so every kernel module can import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from filegate.kernel.tool_args import (
    DeleteArgs,
    EditFileArgs,
    ExecuteArgs,
    GlobArgs,
    GrepArgs,
    LsArgs,
    ReadFileArgs,
    ToolArgs,
    ToolName,
    WriteFileArgs,
)

Operation = Literal["read", "write"]
"""The rule operation a path-taking tool is judged under (contract §4)."""
PathScope = Literal["exact", "tree"]
"""What a tool's path names: exactly the one file it touches, or a root it may touch
anything below (a listing, a search, a recursive delete)."""
Effect = Literal["lists", "reads", "writes", "edits", "removes", "searches", "runs"]
"""What a call does, which the gate, the run's bookkeeping, grants, previews and the
approval cards dispatch on (never on a tool's name): ``writes`` replaces a file's
whole content (a stale read refuses it), ``edits`` changes part of a file (which
must have been read first), ``removes`` deletes a path and all below it, ``runs``
runs a command (its own gate and view; it may change any file, so what the run
knew of file contents is forgotten)."""


@dataclass(frozen=True)
class ToolDef:
    """Everything the code outside a tool's handler needs to know about it."""

    name: ToolName
    args: type[ToolArgs]
    """The model-facing argument model (its JSON schema is the tool's parameters)."""
    path_field: str | None
    """The argument holding the tool's path; None for a tool without one (``execute``)."""
    operation: Operation | None
    """The rule operation that governs the path; None without a path."""
    scope: PathScope | None
    """What the path names (:data:`PathScope`); None without a path."""
    needs_path: bool = False
    """A call must name a path: an empty one is refused rather than taken as the root."""
    mutates: bool = False
    """A retry must not apply it twice: the activities journal it."""
    searches: bool = False
    """It may run unboundedly long on a big tree: a time budget with partial results."""
    lists: bool = False
    """Its answer lists paths, which the rules filter entry by entry."""
    batched: bool = True
    """Calls of one turn may share one ``filegate.tool_batch`` activity."""
    previewed: bool = False
    """A reviewer sees what the call would change before deciding."""
    offloaded: bool = False
    """A large result goes to the artifact store; the others cut their own output."""
    effect: Effect = "reads"
    """What a call does (:data:`Effect`)."""
    narrowed_by: str | None = None
    """The argument narrowing where a listing's answers lie (glob's pattern, grep's file
    filter): the rules judge the roots it leaves (kernel.visibility)."""
    pattern_reaches: bool = False
    """Its narrowing pattern is part of where it reaches (glob: it may be absolute), so
    interrupt rules, grants and the fan-out over backends judge the pattern too."""
    root_is_result: bool = False
    """Its root may itself be the answer (grep of one file), judged as such."""

    @property
    def activity(self) -> str:
        """The activity type name, e.g. ``filegate.read_file`` (a wire name: never change)."""
        return f"filegate.{self.name}"


class ToolRegistry:
    """Tools in the order they are offered to the model, and the sets derived from them.

    Fixed once built, so each set is derived once (``cached_property``): workflow
    code asks ``TOOLS.listing`` and the like on every call."""

    def __init__(self, tools: Iterable[ToolDef]) -> None:
        self._tools: dict[str, ToolDef] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"tool {tool.name!r} is defined twice")
            if (tool.path_field is None) != (tool.operation is None) or (
                tool.path_field is None
            ) != (tool.scope is None):
                raise ValueError(f"tool {tool.name!r}: a path needs an operation and a scope")
            self._tools[tool.name] = tool

    def __iter__(self) -> Iterator[ToolDef]:
        return iter(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __getitem__(self, name: str) -> ToolDef:
        return self._tools[name]

    def get(self, name: str) -> ToolDef | None:
        return self._tools.get(name)

    def _where(self, test: Callable[[ToolDef], bool]) -> frozenset[ToolName]:
        return frozenset(tool.name for tool in self if test(tool))

    @cached_property
    def order(self) -> tuple[ToolName, ...]:
        """Fixed order in which tools are offered to the model (prompt-cache friendly)."""
        return tuple(tool.name for tool in self)

    @cached_property
    def args(self) -> dict[ToolName, type[ToolArgs]]:
        return {tool.name: tool.args for tool in self}

    @cached_property
    def activity_names(self) -> dict[ToolName, str]:
        return {tool.name: tool.activity for tool in self}

    @cached_property
    def path_fields(self) -> dict[str, str]:
        """Tool -> the argument holding its path (tools without a path are absent)."""
        return {tool.name: tool.path_field for tool in self if tool.path_field is not None}

    @cached_property
    def operations(self) -> dict[str, Operation]:
        """Tool -> the rule operation governing its path (tools without a path are absent)."""
        return {tool.name: tool.operation for tool in self if tool.operation is not None}

    @cached_property
    def exact(self) -> frozenset[ToolName]:
        return self._where(lambda tool: tool.scope == "exact")

    @cached_property
    def tree(self) -> frozenset[ToolName]:
        return self._where(lambda tool: tool.scope == "tree")

    @cached_property
    def needing_path(self) -> frozenset[ToolName]:
        return self._where(lambda tool: tool.needs_path)

    @cached_property
    def mutating(self) -> frozenset[ToolName]:
        """Tools whose retry must not apply twice (journaled by the activities)."""
        return self._where(lambda tool: tool.mutates)

    @cached_property
    def searching(self) -> frozenset[ToolName]:
        """Tools that may run unboundedly long on a big tree and get a hard time limit."""
        return self._where(lambda tool: tool.searches)

    @cached_property
    def listing(self) -> frozenset[ToolName]:
        return self._where(lambda tool: tool.lists)

    @cached_property
    def batched(self) -> frozenset[ToolName]:
        """Tools a batch may hold (``execute``'s timeout is its command's)."""
        return self._where(lambda tool: tool.batched)

    @cached_property
    def previewed(self) -> frozenset[ToolName]:
        return self._where(lambda tool: tool.previewed)

    @cached_property
    def offloaded(self) -> frozenset[ToolName]:
        return self._where(lambda tool: tool.offloaded)

    @cached_property
    def writing(self) -> frozenset[ToolName]:
        """Tools that replace a file's whole content (a stale read refuses them)."""
        return self._where(lambda tool: tool.effect == "writes")

    @cached_property
    def editing(self) -> frozenset[ToolName]:
        """Tools that change part of a file, which the run must have read first."""
        return self._where(lambda tool: tool.effect == "edits")

    @cached_property
    def removing(self) -> frozenset[ToolName]:
        """Tools that delete a path and everything below it."""
        return self._where(lambda tool: tool.effect == "removes")

    @cached_property
    def narrowing(self) -> dict[str, str]:
        """Tool -> the argument narrowing where its answers lie (:attr:`ToolDef.narrowed_by`)."""
        return {tool.name: tool.narrowed_by for tool in self if tool.narrowed_by is not None}

    @cached_property
    def pattern_reaching(self) -> frozenset[ToolName]:
        """Tools whose pattern is part of where they reach (:attr:`ToolDef.pattern_reaches`)."""
        return self._where(lambda tool: tool.pattern_reaches)

    @cached_property
    def root_results(self) -> frozenset[ToolName]:
        """Tools whose root may itself be the answer (:attr:`ToolDef.root_is_result`)."""
        return self._where(lambda tool: tool.root_is_result)

    @cached_property
    def changing_files(self) -> frozenset[ToolName]:
        """Tools that change files by path (not a command): their thread must finish once
        started, and a summary names the files they touched."""
        return self.writing | self.editing | self.removing

    @cached_property
    def running(self) -> frozenset[ToolName]:
        """Tools that run a command (the execute gate and view apply, not path rules)."""
        return self._where(lambda tool: tool.effect == "runs")


TOOLS = ToolRegistry(
    [
        ToolDef("ls", LsArgs, "path", "read", "tree", lists=True, effect="lists"),
        ToolDef("read_file", ReadFileArgs, "file_path", "read", "exact", needs_path=True),
        ToolDef(
            "write_file",
            WriteFileArgs,
            "file_path",
            "write",
            "exact",
            needs_path=True,
            mutates=True,
            previewed=True,
            effect="writes",
        ),
        ToolDef(
            "edit_file",
            EditFileArgs,
            "file_path",
            "write",
            "exact",
            needs_path=True,
            mutates=True,
            previewed=True,
            effect="edits",
        ),
        ToolDef(
            "delete",
            DeleteArgs,
            "file_path",
            "write",
            "tree",
            needs_path=True,
            mutates=True,
            previewed=True,
            effect="removes",
        ),
        ToolDef(
            "glob",
            GlobArgs,
            "path",
            "read",
            "tree",
            searches=True,
            lists=True,
            effect="searches",
            narrowed_by="pattern",
            pattern_reaches=True,
        ),
        ToolDef(
            "grep",
            GrepArgs,
            "path",
            "read",
            "tree",
            searches=True,
            lists=True,
            effect="searches",
            narrowed_by="glob",
            root_is_result=True,
        ),
        ToolDef(
            "execute",
            ExecuteArgs,
            None,
            None,
            None,
            mutates=True,
            batched=False,  # its timeout is its command's, and it may run for minutes
            previewed=True,
            offloaded=True,
            effect="runs",
        ),
    ]
)
"""Filegate's eight tools (the reference design's file tools plus ``delete``)."""

__all__ = ["TOOLS", "Effect", "Operation", "PathScope", "ToolDef", "ToolName", "ToolRegistry"]
