"""What the model fills in for each tool: one pydantic model per tool.

They are the single source of the JSON schemas sent to the model (every field
carries a description written for the model) and of argument validation in
the workflow and the activities. Pure: pydantic only, so the tool registry
(:mod:`filegate.kernel.registry`) can sit below every other kernel module.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ToolName = Literal[
    "ls", "read_file", "write_file", "edit_file", "delete", "glob", "grep", "execute"
]
"""The tools' names, as the model, the rules and the activities spell them."""


class ToolArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LsArgs(ToolArgs):
    path: str = Field("/", description="Absolute directory path to list, e.g. '/src'.")


class ReadFileArgs(ToolArgs):
    file_path: str = Field(description="Absolute path of the file to read, e.g. '/src/app.py'.")
    offset: int = Field(0, description="Line number to start from (0 = first line).")
    limit: int = Field(100, description="Maximum number of lines to read.")


class WriteFileArgs(ToolArgs):
    file_path: str = Field(description="Absolute path of the file to create or overwrite.")
    content: str = Field(description="The complete new content of the file.")


class EditFileArgs(ToolArgs):
    file_path: str = Field(description="Absolute path of the file to edit. Read it first.")
    old_string: str = Field(
        description="Exact text to replace, including whitespace; must be unique unless "
        "replace_all is true."
    )
    new_string: str = Field(description="Replacement text; must differ from old_string.")
    replace_all: bool = Field(False, description="Replace every occurrence of old_string.")


class DeleteArgs(ToolArgs):
    file_path: str = Field(description="Absolute path of the file or directory to delete.")


class GlobArgs(ToolArgs):
    pattern: str = Field(
        description="Glob pattern such as '**/*.py' or '*.md'. '**' crosses directories; "
        "a pattern without '/' matches file names at any depth."
    )
    path: str | None = Field(None, description="Directory to search from (default '/').")


class GrepArgs(ToolArgs):
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


class ExecuteArgs(ToolArgs):
    command: str = Field(description="Shell command to run in the workspace.")
    timeout: float | None = Field(
        None, description="Seconds before the command is killed (default 120)."
    )
