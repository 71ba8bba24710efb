"""The ``filegate.preview`` activity: what a gated call would change, read-only.

A reviewer deciding on ``write_file``/``edit_file``/``delete`` needs to see the
change, not just the arguments, and the workflow cannot read the workspace.
So the preview is computed where the files are: on the tools worker of the
call's route (a local activity for ``kind="local"``; in the workflow itself
for the State backend, with the same :func:`compute_preview`). It reads, never
writes, through the same permission gate and worker policies as the call, so
it can never show what the call itself could not touch: a path whose current
content the rules hide gives an ``unavailable`` preview, never its bytes.

:func:`filegate.kernel.previews.compute_preview` is pure apart from the backend it is handed (no
Temporal, no backends import), which is what lets the workflow run it on its
State backend; :class:`PreviewActivities` is the thin Temporal wrapper. Any
failure becomes ``kind="unavailable"`` with ``error``: a preview is advice
for the reviewer and must never fail the call or the workflow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio import activity

from filegate.kernel import wire
from filegate.kernel.previews import ChangePreview, compute_preview
from filegate.kernel.tool_types import ToolRequest

if TYPE_CHECKING:
    from filegate.activities.tools import FileToolActivities

PREVIEW_ACTIVITY_NAME = wire.PREVIEW_ACTIVITY
"""Also :data:`filegate.activities.contract.PREVIEW_ACTIVITY` (what the workflow schedules)."""


class PreviewActivities:
    """The ``filegate.preview`` activity over the backends of a tools worker.

    Shares the tool activities' backends, policies and audit log
    (:meth:`FileToolActivities.run_read_only`), so a preview reads exactly as
    the call would: the same backend by name, the same worker policies.
    """

    def __init__(self, tools: FileToolActivities) -> None:
        self.tools = tools

    @activity.defn(name=PREVIEW_ACTIVITY_NAME)
    async def preview(self, request: ToolRequest) -> ChangePreview:
        try:
            return await self.tools.run_read_only(request, lambda b: compute_preview(b, request))
        except Exception as exc:  # a preview is advice: never fail the call over it
            activity.logger.warning("preview of %s failed: %s", request.tool_call_id, exc)
            return ChangePreview(kind="unavailable", path=request.virtual_path, error=str(exc))
