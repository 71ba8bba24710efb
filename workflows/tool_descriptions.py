"""What the model is told about its tools, decided per model request (contract §3).

Visibility follows capabilities, and descriptions follow visibility: a model
must never be told to use a tool it cannot see (grep without ``execute`` does
not mention ``rg``; ``execute`` has one variant per grep/glob combination).
User-supplied descriptions are taken verbatim.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Mapping

from filegate.kernel.media_types import describe_read_file
from filegate.kernel.messages import ToolSpec
from filegate.kernel.tool_types import TOOL_ARGS, TOOL_ORDER, ToolName
from filegate.workflows.inputs import BackendSpec

LS_DESCRIPTION = (
    "List the files and directories directly inside a directory (not recursive). "
    "Directory entries end with '/'. Use absolute paths such as '/' or '/src'."
)
READ_FILE_DESCRIPTION = (
    "Read a file. Text comes back with line numbers (cat -n style), 100 lines by "
    "default; page through long files with offset and limit. Images, audio and PDFs "
    "come back as content blocks. Read a file before you edit it."
)
WRITE_FILE_DESCRIPTION = (
    "Create a file or overwrite it completely with the given content; parent "
    "directories are created. Prefer edit_file for changes to an existing file."
)
EDIT_FILE_DESCRIPTION = (
    "Replace an exact string in a file. old_string must match exactly (including "
    "indentation) and be unique unless replace_all is true; new_string must differ. "
    "You must read the file (or have written it) earlier in this conversation, "
    "otherwise the edit is refused."
)
DELETE_DESCRIPTION = "Delete a file or a directory with everything below it. This cannot be undone."
GLOB_DESCRIPTION = (
    "Find files by name pattern. '**' crosses directories, '*' stays inside one, "
    "'{a,b}' alternates; a pattern without '/' matches file names at any depth. "
    "Returns matching file paths."
)
_GREP_BASE = (
    "Search file contents for a literal text (not a regular expression). To find "
    "several words, grep for each separately. output_mode selects file paths, "
    "matching lines or counts per file."
)
GREP_DESCRIPTION_WITH_EXECUTE = (
    _GREP_BASE + " If you really need a regular expression, run `rg` through the "
    "execute tool instead."
)
GREP_DESCRIPTION = _GREP_BASE

_EXECUTE_BASE = (
    "Run a shell command in the workspace and return its output and exit code. "
    "Commands run with a timeout (default 120 s; pass timeout for longer jobs)."
)
EXECUTE_DESCRIPTIONS: dict[tuple[bool, bool], str] = {
    (True, True): _EXECUTE_BASE
    + " To search file contents use the grep tool, and to find files by name use "
    "the glob tool, rather than shell grep or find.",
    (True, False): _EXECUTE_BASE
    + " To search file contents use the grep tool rather than shell grep; to find "
    "files by name you may use `find` in the shell.",
    (False, True): _EXECUTE_BASE
    + " To find files by name use the glob tool rather than `find`; to search file "
    "contents you may use `rg` or `grep` in the shell.",
    (False, False): _EXECUTE_BASE
    + " Use `rg` or `grep` to search file contents and `find` to locate files.",
}
"""Keyed by (grep visible, glob visible)."""

BUILTIN_DESCRIPTIONS: dict[ToolName, str] = {
    "ls": LS_DESCRIPTION,
    "read_file": READ_FILE_DESCRIPTION,
    "write_file": WRITE_FILE_DESCRIPTION,
    "edit_file": EDIT_FILE_DESCRIPTION,
    "delete": DELETE_DESCRIPTION,
    "glob": GLOB_DESCRIPTION,
    "grep": GREP_DESCRIPTION_WITH_EXECUTE,
    "execute": EXECUTE_DESCRIPTIONS[(True, True)],
}


def whitelisted_tools(whitelist: Iterable[str] | None) -> list[ToolName]:
    """Apply the user whitelist once; read_file is mandatory. Keeps TOOL_ORDER."""
    if whitelist is None:
        return list(TOOL_ORDER)
    wanted = set(whitelist) | {"read_file"}
    return [name for name in TOOL_ORDER if name in wanted]


def _default_can_execute(spec: BackendSpec) -> bool:
    """execute runs on the default backend only, so routes do not count."""
    return spec.default.can_execute


def _any_can_delete(spec: BackendSpec) -> bool:
    """delete is routed per path, so any backend that can delete makes it useful."""
    return any(b.can_delete for b in spec.all_backends())


def any_can_read_video(spec: BackendSpec) -> bool:
    """read_file is routed per path, so one video-capable backend is enough to advertise it."""
    return any(b.can_read_video for b in spec.all_backends())


def visible_tools(enabled: Iterable[ToolName], spec: BackendSpec) -> list[ToolName]:
    """The tools offered on this request: whitelist minus what the backend cannot do."""
    hidden: set[str] = set()
    if not _default_can_execute(spec):
        hidden.add("execute")
    if not _any_can_delete(spec):
        hidden.add("delete")
    enabled_set = set(enabled)
    return [name for name in TOOL_ORDER if name in enabled_set and name not in hidden]


def describe(
    name: ToolName, visible: list[ToolName], custom: Mapping[str, str], *, video: bool = False
) -> str:
    """The description of one visible tool, consistent with the others' visibility.

    ``video`` says whether a backend can sample video frames; only then does
    read_file advertise video (contract §6).
    """
    if name in custom:
        return custom[name]
    if name == "read_file":
        return describe_read_file(READ_FILE_DESCRIPTION, video=video)
    if name == "grep":
        return GREP_DESCRIPTION_WITH_EXECUTE if "execute" in visible else GREP_DESCRIPTION
    if name == "execute":
        return EXECUTE_DESCRIPTIONS[("grep" in visible, "glob" in visible)]
    return BUILTIN_DESCRIPTIONS[name]


@functools.cache
def _cached_schema(name: ToolName) -> dict[str, object]:
    schema = TOOL_ARGS[name].model_json_schema()
    schema.pop("title", None)
    return schema


def tool_schema(name: ToolName) -> dict[str, object]:
    """JSON schema of a tool's arguments, straight from its pydantic model.

    Built once per process: the models never change, and rebuilding the schema
    on every model request was the largest CPU cost of a workflow task.
    """
    return copy.deepcopy(_cached_schema(name))


def tool_specs(
    visible: list[ToolName], custom: Mapping[str, str], *, video: bool = False
) -> list[ToolSpec]:
    """The tools offered to the model, built once per distinct offer.

    Every model turn of every workflow asks for them, and the offer changes only
    with the visible set; rebuilding them (schema copies included) was a tenth
    of a workflow task's CPU. The specs are shared: treat them as read-only.
    """
    return list(_cached_specs(tuple(visible), tuple(sorted(custom.items())), video))


@functools.lru_cache(maxsize=256)
def _cached_specs(
    visible: tuple[ToolName, ...], custom: tuple[tuple[str, str], ...], video: bool
) -> tuple[ToolSpec, ...]:
    names, overrides = list(visible), dict(custom)
    return tuple(
        ToolSpec(
            name=name,
            description=describe(name, names, overrides, video=video),
            parameters=tool_schema(name),
        )
        for name in visible
    )


def _slash(prefix: str) -> str:
    stripped = prefix.strip("/")
    return "/" + stripped + "/" if stripped else "/"


def _shell_paths_section(spec: BackendSpec) -> str:
    """Tell the model how virtual paths map to the shell's host paths.

    Rewriting shell commands would mean parsing shell syntax; telling the model
    the prefix mapping lets it write correct commands itself. A mount with no
    known host path is listed as unreachable rather than guessed.
    """
    mapped: list[str] = []
    unreachable: list[str] = []
    for route in sorted(spec.routes, key=lambda r: _slash(r.prefix)):
        prefix = _slash(route.prefix)
        host = route.backend.shell_path
        if host is None:
            unreachable.append(f"- `{prefix}`")
        else:
            host_slash = host.rstrip("/") + "/"
            example = f"(e.g. `{prefix}dir/x.py` -> `{host_slash}dir/x.py`)"
            mapped.append(f"- `{prefix}` -> `{host_slash}` {example}")
    lines = [
        "## Shell paths vs. virtual paths",
        "",
        "File tools use virtual paths; the `execute` tool runs a real shell on the "
        "default backend, which sees host paths. Translate paths before using them "
        "in shell commands.",
    ]
    if spec.default.shell_path:
        lines += [
            "",
            f"Paths outside the mounts below live in the shell's working directory "
            f"`{spec.default.shell_path}`: virtual `/x` is `./x` in the shell.",
        ]
    if mapped:
        lines += ["", "Host path mappings:", *mapped]
    if unreachable:
        lines += [
            "",
            "Virtual mounts without a host path mapping (not accessible from the shell):",
            *unreachable,
        ]
    return "\n".join(lines)


DEFAULT_SYSTEM_PROMPT_INTRO = (
    "You are an agent that works on files through the tools you are given. "
    "Do what the task asks, then answer with a short final message."
)
FILESYSTEM_SECTION = (
    "## The virtual filesystem\n\n"
    "The file tools work on a virtual filesystem whose root is `/`. Always pass "
    "absolute virtual paths that start with `/` (for example `/src/main.py`); "
    "relative paths and `..` are refused. Start with `ls /` to see what is there."
)
READ_BEFORE_EDIT = (
    "Read a file with read_file before you edit it: an edit of a file you have not "
    "read (or written) in this conversation is refused."
)
PAGING_SECTION = (
    "## Large results and earlier messages\n\n"
    "A tool result too large to show is saved under `/large_tool_results/` and you "
    "get a preview naming that path: page through it with read_file (offset and "
    "limit) instead of running the tool again. Older parts of this conversation may "
    "be moved to `/conversation_history/`; read them there when you need earlier "
    "details."
)
APPROVALS_SECTION = (
    "## Permissions and approvals\n\n"
    "Some operations are denied by rules and some tool calls wait for a human's "
    "approval. A reviewer may approve, edit the arguments, reject the call or answer "
    "with a message instead; a refused or denied call's result says so. Respect it: "
    "do not retry the same call or work around the refusal by other means."
)


def default_system_prompt(visible: list[ToolName]) -> str:
    """What every model is told unless the caller replaces it (contract §3).

    Tool names appear only when the tool is visible.
    """
    filesystem = FILESYSTEM_SECTION
    if "edit_file" in visible:
        filesystem += " " + READ_BEFORE_EDIT
    return "\n\n".join([DEFAULT_SYSTEM_PROMPT_INTRO, filesystem, PAGING_SECTION, APPROVALS_SECTION])


def system_prompt(
    user_prompt: str | None,
    visible: list[ToolName],
    spec: BackendSpec,
    *,
    extend: bool = False,
) -> str:
    """The system prompt of one model request.

    ``user_prompt`` None: the default prompt. Otherwise it replaces the default,
    or with ``extend`` follows it. The path-mapping section is added when it
    matters (a composite backend with execute visible).
    """
    if user_prompt is None:
        parts = [default_system_prompt(visible)]
    elif extend:
        parts = [default_system_prompt(visible), user_prompt]
    else:
        parts = [user_prompt]
    if spec.is_composite and "execute" in visible:
        parts.append(_shell_paths_section(spec))
    return "\n\n".join(p.strip() for p in parts if p.strip())
