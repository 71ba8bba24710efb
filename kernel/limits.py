"""Every size, count and time default of a tool call, in one place (contract §2, §7).

Workflow and activities decide limits from these same numbers, so a model sees
one rule whichever side renders or checks a call. Budgets are in characters,
estimated from tokens with one ratio.
"""

from __future__ import annotations

CHARS_PER_TOKEN = 4
"""Rough characters-per-token ratio used for every size budget."""

TOOL_TOKEN_LIMIT = 20_000
"""Default ``tool_token_limit_before_evict`` (tokens): larger results are offloaded."""

HUMAN_TOKEN_LIMIT = 50_000
"""User messages larger than this (tokens) are evicted from the model's view."""

DEFAULT_CONTEXT_TOKENS = 170_000
"""Summarization threshold when the model's context window is unknown."""

MAX_LINE_CHARS = 5000
"""Source lines longer than this are split into ``N.1``, ``N.2`` continuation rows."""

READ_OUTPUT_CHAR_LIMIT = CHARS_PER_TOKEN * TOOL_TOKEN_LIMIT
"""read_file output is cut (at a whole line) above this many characters."""

LIST_CHAR_LIMIT = CHARS_PER_TOKEN * TOOL_TOKEN_LIMIT
"""ls / glob / grep output is cut (at a whole line) above this many characters."""

DEFAULT_READ_FILE_LIMIT = 100
"""Lines read_file shows when the model gives no ``limit``."""

DEFAULT_VIDEO_WINDOW = DEFAULT_READ_FILE_LIMIT
"""Seconds of video sampled when the model gives no ``limit`` (read_file's default)."""

DEFAULT_READ_LIMIT = 2000
"""Lines a backend returns when its caller gives no limit."""

DEFAULT_GREP_MAX = 1000
"""Matches a grep returns when the model gives no ``max_count``."""

DEFAULT_EXECUTE_TIMEOUT = 120.0
"""Seconds a command may run when the model gives no timeout (contract §1)."""

DEFAULT_MAX_EXECUTE_TIMEOUT = 3600.0
"""The largest timeout a model may ask of ``execute`` (a worker may lower it)."""

DEFAULT_MAX_OUTPUT_BYTES = 100_000
"""Bytes of a command's combined output kept; the rest is dropped and flagged."""

DEFAULT_SEARCH_TIMEOUT = 20.0
"""Seconds a glob/grep may search before it is stopped and the model told to narrow it."""

DEFAULT_TOOL_WORKER_WAIT = 60.0
"""Seconds a call on a remote backend waits for a tools worker to take it from the
backend's task queue (the activity's schedule-to-start timeout, per attempt) before
it ends with an error result saying no worker polls that queue
(``Limits.tool_worker_wait_seconds``; ``workflows/unserved.py``). Long enough for a
tools worker to restart, short enough that a queue nobody serves is reported."""

PARTIAL_SEARCH_SHARE = 0.75
"""Share of a glob/grep's time budget after which a backend that can stop itself
(Filesystem, LocalShell) ends its walk and answers with what it found so far,
``truncated`` and with a note naming the time (contract §1). The rest of the
budget is for sorting, rendering and the trip back, so the partial answer
arrives before the activity's hard stop at the full budget, which would only
say "narrow it"."""


def partial_search_seconds(budget: float) -> float:
    """The soft time limit of a search whose hard budget is ``budget`` seconds: the one rule."""
    return budget * PARTIAL_SEARCH_SHARE


DEFAULT_S3_OUTAGE_SECONDS = 900.0
"""Seconds one artifact-store (S3) call keeps retrying while S3 gives no answer
(connection refused or reset, timeout, 5xx, SlowDown) before it fails with an error
naming S3 (``FILEGATE_S3_OUTAGE_SECONDS``; ``backends.s3.OutageWaiter``). Covers a
rolling restart of MinIO with room to spare; an outage is waited out instead of
using up a model call's or tool call's attempts. The activities' timeouts leave
room for it (``activities.contract``)."""

OFFLOAD_HEAD_LINES = 5
OFFLOAD_TAIL_LINES = 5
"""Lines of an offloaded result shown in its stub, from the start and the end."""

PREVIEW_LINE_CHARS = 1000
"""A preview line in an offload stub is cut to this many characters, so one huge
line cannot make the stub itself large."""

# -- model output (contract §2, §11): what one model turn may hand the workflow --

DEFAULT_MAX_TOOL_ARGS_CHARS = 1_000_000
"""Characters of one call's arguments (as ASCII JSON) above which the call is refused
with an error result, in the model activity before the turn reaches history."""

DEFAULT_MAX_TOOL_CALLS_PER_TURN = 64
"""Tool calls of one model turn that run; the rest are answered by one error result."""

MAX_TOOL_ARGS_DEPTH = 64
"""Nesting levels of a call's arguments. No tool takes more than three; pydantic, which
encodes and decodes every payload, stops near 200, and Python's parser near 1000."""

MAX_TOOL_NAME_CHARS = 128
"""A tool name or call id longer than this is cut (names) or replaced (ids): no tool
name is that long, and both are quoted back to the model and recorded."""

MODEL_TURN_INLINE_BYTES = 1 << 20
"""Bytes a model turn may record when its result stays in workflow history (no S3
store on the agent worker): under Temporal's 2 MiB payload limit, with room for the
tool requests the same workflow task schedules."""

MODEL_TURN_STORED_BYTES = 16 << 20
"""Bytes a model turn may record when the payload codec moves it to S3: the workflow
still holds the turn in memory and keeps it in the transcript."""

# -- execute bounds (contract §11): per command, a worker may raise them ------

DEFAULT_EXECUTE_MEMORY_BYTES = 1 << 30
"""Memory one process of a command may allocate (``RLIMIT_DATA``: heap and private
mappings), 1 GiB. Per process: all processes together are bounded by
:data:`DEFAULT_EXECUTE_COMMAND_MEMORY_BYTES` where the worker can make cgroups."""

DEFAULT_EXECUTE_MAX_PROCESSES = 64
"""Live processes a command may have at once (its whole tree, daemons included). With a
per-command cgroup the kernel enforces it too (``pids.max``, which counts threads)."""

DEFAULT_EXECUTE_COMMAND_MEMORY_BYTES = 2 << 30
"""Memory all processes of one command may use together (its cgroup's memory limit,
page cache and tmpfs included), 2 GiB: one full-size process plus room for the rest."""

DEFAULT_EXECUTE_WRITE_BYTES = 256 << 20
"""Bytes one command may write to disk (its processes' ``write_bytes`` together),
256 MiB; the command is killed above it."""

DEFAULT_EXECUTE_FILE_BYTES = 64 << 20
"""Largest file a command may write (``RLIMIT_FSIZE``), 64 MiB: the file tools'
read cap, so whatever a command writes can still be read back."""

DEFAULT_SANDBOX_TMP_BYTES = 64 << 20
"""Size of the sandbox's private ``/tmp`` (and of its ``/dev/shm``), 64 MiB each."""

EXECUTE_WATCH_SECONDS = 0.02
"""How often the command supervisor counts the command's processes."""


def execute_timeout_problem(
    timeout: float | None, maximum: float = DEFAULT_MAX_EXECUTE_TIMEOUT
) -> str | None:
    """Why an ``execute`` timeout is refused, or None when it is fine: the one rule.

    A timeout must be more than 0 and at most ``maximum`` seconds (None: the
    default applies). The workflow's gate, :func:`~filegate.kernel.dispatch.run_tool`
    and the shell backends (with their worker's own maximum) all ask this, so
    0 and negative values get the same answer wherever they are caught.
    """
    if timeout is None:
        return None
    if not 0 < timeout <= maximum:  # also refuses NaN
        return f"timeout must be between 0 and {maximum:g} seconds, got {timeout:g}"
    return None


def reads_nothing(limit: int) -> bool:
    """The one rule for a read window's ``limit`` (lines, or seconds of video).

    Below 1 asks for nothing: read_file answers without calling the backend
    (:func:`~filegate.kernel.read_format.plan_read`), and every backend's
    ``read`` answers it the same way (:func:`~filegate.kernel.textops.nothing_requested`:
    a binary file's bytes and an empty file whatever the limit, as the reference;
    other text refused with :func:`~filegate.kernel.textops.bad_limit`).
    """
    return limit < 1
