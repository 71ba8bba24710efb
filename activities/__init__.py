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

from typing import TYPE_CHECKING

from filegate._lazy import attach

if TYPE_CHECKING:
    from filegate.kernel.dispatch import (
        run_tool,
    )
    from filegate.kernel.tool_types import (
        TOOL_ACTIVITY_NAMES,
        TOOL_ARGS,
        TOOL_ORDER,
        RawListing,
        ToolName,
        ToolOutcome,
        ToolRequest,
        activity_call_id,
    )

    from .contract import (
        outcome_for_activity_error,
        tool_activity_options,
    )
    from .model import (
        call_model,
    )
    from .tools import (
        FileToolActivities,
    )

__getattr__, __dir__, __all__ = attach(
    __name__,
    {
        ".contract": [
            "outcome_for_activity_error",
            "tool_activity_options",
        ],
        "filegate.kernel.dispatch": [
            "run_tool",
        ],
        ".model": [
            "call_model",
        ],
        "filegate.kernel.tool_types": [
            "TOOL_ACTIVITY_NAMES",
            "TOOL_ARGS",
            "TOOL_ORDER",
            "RawListing",
            "ToolName",
            "ToolOutcome",
            "ToolRequest",
            "activity_call_id",
        ],
        ".tools": [
            "FileToolActivities",
        ],
    },
)
