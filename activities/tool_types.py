"""Tool argument schemas (what the model fills in) and the tool activity contract.

The argument models are the single source of the JSON schemas sent to the model
(every field carries a description written for the model) and of argument
validation in the workflow and the activities.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from activities.messages import ContentBlock
from backends.permissions import FilesystemPermission

ToolName = Literal[
    "ls", "read_file", "write_file", "edit_file", "delete", "glob", "grep", "execute"
]
TOOL_ORDER: tuple[ToolName, ...] = (
    "ls",
    "read_file",
    "write_file",
    "edit_file",
    "delete",
    "glob",
    "grep",
    "execute",
)
"""Fixed order in which tools are offered to the model (prompt-cache friendly)."""


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LsArgs(_Args):
    path: str = Field("/", description="Absolute directory path to list, e.g. '/src'.")


class ReadFileArgs(_Args):
    file_path: str = Field(description="Absolute path of the file to read, e.g. '/src/app.py'.")
    offset: int = Field(
        0, description="Line number to start from (0 = first line). For video: seconds to skip."
    )
    limit: int = Field(
        100, description="Maximum number of lines to read. For video: seconds to sample."
    )


class WriteFileArgs(_Args):
    file_path: str = Field(description="Absolute path of the file to create or overwrite.")
    content: str = Field(description="The complete new content of the file.")


class EditFileArgs(_Args):
    file_path: str = Field(description="Absolute path of the file to edit. Read it first.")
    old_string: str = Field(
        description="Exact text to replace, including whitespace; must be unique unless "
        "replace_all is true."
    )
    new_string: str = Field(description="Replacement text; must differ from old_string.")
    replace_all: bool = Field(False, description="Replace every occurrence of old_string.")


class DeleteArgs(_Args):
    file_path: str = Field(description="Absolute path of the file or directory to delete.")


class GlobArgs(_Args):
    pattern: str = Field(
        description="Glob pattern such as '**/*.py' or '*.md'. '**' crosses directories; "
        "a pattern without '/' matches file names at any depth."
    )
    path: str | None = Field(None, description="Directory to search from (default '/').")


class GrepArgs(_Args):
    pattern: str = Field(description="Literal text to search for (not a regular expression).")
    path: str | None = Field(None, description="File or directory to search (default '/').")
    glob: str | None = Field(None, description="Only search files whose path matches this glob.")
    output_mode: Literal["files_with_matches", "content", "count"] = Field(
        "files_with_matches",
        description="'files_with_matches' lists paths, 'content' shows matching lines, "
        "'count' shows matches per file.",
    )
    max_count: int | None = Field(
        None, description="Stop after this many matches in total (default 1000)."
    )


class ExecuteArgs(_Args):
    command: str = Field(description="Shell command to run in the workspace.")
    timeout: float | None = Field(
        None, description="Seconds before the command is killed (default 120)."
    )


TOOL_ARGS: dict[ToolName, type[_Args]] = {
    "ls": LsArgs,
    "read_file": ReadFileArgs,
    "write_file": WriteFileArgs,
    "edit_file": EditFileArgs,
    "delete": DeleteArgs,
    "glob": GlobArgs,
    "grep": GrepArgs,
    "execute": ExecuteArgs,
}


class ToolRequest(BaseModel):
    """One tool call routed to a backend worker.

    ``args`` are the validated tool arguments with paths already made
    backend-local by the route; ``route_prefix`` maps result paths back to
    virtual paths so the activity can filter them against ``permissions``
    (virtual-path rules) before anything enters workflow history.
    """

    tool: ToolName
    backend: str
    args: dict[str, Any]
    tool_call_id: str
    workflow_id: str = ""
    route_prefix: str = "/"
    permissions: list[FilesystemPermission] = Field(default_factory=list)
    reviewer_edited: bool = False


class ToolOutcome(BaseModel):
    """What the model sees for one tool call, plus facts the workflow tracks."""

    content: str | list[ContentBlock]
    status: Literal["success", "error"] = "success"
    touched_path: str | None = None
    """Backend-local path read or written successfully (feeds the read-before-edit set)."""
    artifact: str | None = None
    """Artifact reference when the full result was offloaded to S3."""
