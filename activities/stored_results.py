"""Tool results kept in the artifact store: large ``execute`` output, and reads of it.

Contract §7: a too-large ``execute`` result is stored and only a stub enters
workflow history; ``read_file`` of ``/large_tool_results/<id>`` (and of
``/conversation_history/<name>``, the agent worker's archive of evicted
messages) is answered from the store, windowed like any file. Keys are built
from the calling run chain's scope, so a run reaches only its own objects.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from filegate.kernel.formatting import needs_offload, offload_stub
from filegate.kernel.protocol import ReadResult
from filegate.kernel.read_format import format_read, plan_read
from filegate.kernel.textops import split_lines
from filegate.kernel.tool_types import LARGE_RESULTS_DIR, ReadFileArgs, ToolOutcome, ToolRequest
from filegate.kernel.transcripts import CONVERSATION_DIR, conversation_key

if TYPE_CHECKING:
    from filegate.backends.artifacts import ArtifactStore

logger = logging.getLogger(__name__)


STORED_DIRS: dict[str, Callable[[str], str]] = {
    LARGE_RESULTS_DIR: lambda name: name,
    CONVERSATION_DIR: conversation_key,
}
"""Virtual directories answered from the artifact store -> artifact key of a name in them:
offloaded results (contract §7) and archived conversation text (contract §8, evicted messages)."""


def _stored_dir(request: ToolRequest, args: ReadFileArgs) -> str | None:
    """The store-backed directory a read on the default route targets (None: a backend file)."""
    if request.route_prefix != "/":
        return None
    return next((d for d in STORED_DIRS if args.file_path.startswith(d)), None)


def is_offloaded(request: ToolRequest, args: ReadFileArgs) -> bool:
    """A read of ``/large_tool_results/<id>`` or ``/conversation_history/<name>`` on the
    default route: answered from the artifact store, not a backend."""
    return _stored_dir(request, args) is not None


NOT_STORED_NOTE = (
    "Tool result too large for the context ({chars} characters, {lines} lines), and the "
    "full output could not be stored (the artifact store is unavailable), so only its "
    "first and last lines are shown below. The command did run: do not run it again just "
    "because of this note; if you need the rest, rerun it with its output redirected to a "
    "file and read that file."
)
"""Heads a result kept inline because storing it failed: says the command ran, so the
model does not take a storage failure for a failed (and repeatable) command."""


def offload_large(
    store: ArtifactStore,
    scope: str,
    request: ToolRequest,
    outcome: ToolOutcome,
    stored: Callable[[int], None] | None = None,
) -> ToolOutcome:
    """Store a too-large text result and return a stub in its place (contract §7).

    Keyed by run chain (``scope``, :func:`~filegate.activities.identity.run_scope`)
    and tool-call id, so a retried activity overwrites the same object with the
    same bytes, and a later run under the same workflow id never touches it. A call
    id the store refuses as a key keeps the full result (logged): losing output
    would be worse.

    The command has run by now. The store waits out an S3 outage for its budget;
    when storing fails anyway (S3 down past the budget, refused, anything) the
    result is still a success: the stub's head and tail lines inline, with a note
    that the full output could not be stored. Failing the call instead told the
    model the command had failed, and it ran the command again.
    ``stored`` is told how many bytes went to the store (the caller's metrics).
    """
    text = outcome.content
    if not isinstance(text, str) or not needs_offload(text):
        return outcome
    location = LARGE_RESULTS_DIR + request.tool_call_id
    data = text.encode()
    try:
        store.put(scope, request.tool_call_id, data, "text/plain; charset=utf-8")
    except ValueError as exc:
        logger.warning("not offloading result of %s: %s", request.tool_call_id, exc)
        return outcome
    except Exception as exc:  # any failure to store: the command ran, keep its head and tail
        logger.warning("result of %s kept inline, cut: %s", request.tool_call_id, exc)
        rows = offload_stub(location, text).partition("\n")[2]
        note = NOT_STORED_NOTE.format(chars=len(text), lines=len(split_lines(text)))
        return outcome.model_copy(update={"content": note + "\n" + rows})
    if stored is not None:
        stored(len(data))
    return outcome.model_copy(update={"content": offload_stub(location, text)})


def unreadable(exc: Exception) -> str:
    """What the model reads when a stored result exists but S3 cannot serve it now."""
    from filegate.backends.artifact_errors import ArtifactStoreDown

    why = "is not answering" if isinstance(exc, ArtifactStoreDown) else "refused the read"
    return (
        f"the artifact store (S3) {why}, so this stored output cannot be read right now; "
        "it has not been lost: try the read again later"
    )


def read_offloaded(
    store: ArtifactStore, scope: str, request: ToolRequest, args: ReadFileArgs
) -> ToolOutcome:
    """``read_file`` of this thread's offloaded result or archived conversation text,
    windowed like any file. Only the calling run chain's own objects are reachable:
    the key is built from ``scope``, which comes from the activity's own info."""
    from filegate.backends.artifact_errors import ArtifactError, ArtifactNotFound

    path = args.file_path
    plan = plan_read(args.offset, args.limit)
    if plan.early is not None:
        return ToolOutcome(content=format_read(ReadResult(path=path), plan).text)
    directory = _stored_dir(request, args) or LARGE_RESULTS_DIR
    not_found = ReadResult(path=path, error=f"file not found: {path}", code="file_not_found")
    try:
        ref = store.stat(scope, STORED_DIRS[directory](path[len(directory) :]))
    except (ValueError, ArtifactNotFound):  # a malformed name, or no such object
        result = not_found
    except ArtifactError as exc:  # S3 down past its budget, or refusing: never "not found"
        logger.warning("stored result %s unreadable: %s", path, exc)
        result = ReadResult(path=path, error=unreadable(exc), code="io_error")
    else:
        result = store.read_text_window(ref, plan.offset, plan.limit, path=path)
    rendered = format_read(result, plan)
    return ToolOutcome(content=rendered.text, status="error" if rendered.is_error else "success")
