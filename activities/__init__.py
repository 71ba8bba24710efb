"""Filegate activities: the eight file tools and the model call.

The file tools are the activities ``filegate.<tool>`` (``filegate.ls`` ...
``filegate.execute``, names in :data:`TOOL_ACTIVITY_NAMES`), bound to the
backends a tools worker holds::

    tools = FileToolActivities({"disk": FilesystemBackend("/srv/ws")}, journal_dir)
    Worker(client, task_queue="disk-tools", activities=tools.activities())

:func:`call_model` is the ``filegate.model`` activity. Importing this package
loads no model SDK (providers import ``openai``/``anthropic`` per call) and
no backend that needs optional extras.
"""

from activities.dispatch import run_tool
from activities.model import call_model
from activities.tool_types import (
    TOOL_ARGS,
    TOOL_ORDER,
    RawListing,
    ToolName,
    ToolOutcome,
    ToolRequest,
    activity_call_id,
)
from activities.tools import (
    TOOL_ACTIVITY_NAMES,
    FileToolActivities,
    outcome_for_activity_error,
    tool_activity_options,
)

__all__ = [
    "TOOL_ACTIVITY_NAMES",
    "TOOL_ARGS",
    "TOOL_ORDER",
    "FileToolActivities",
    "RawListing",
    "ToolName",
    "ToolOutcome",
    "ToolRequest",
    "activity_call_id",
    "call_model",
    "outcome_for_activity_error",
    "run_tool",
    "tool_activity_options",
]
