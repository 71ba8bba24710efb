"""Filegate activities: the eight file tools and the model call.

The file tools are the activities ``filegate.<tool>`` (``filegate.ls`` ...
``filegate.execute``, names in :data:`TOOL_ACTIVITY_NAMES`), bound to the
backends a tools worker holds::

    tools = FileToolActivities({"disk": FilesystemBackend("/srv/ws")}, journal_dir)
    Worker(client, task_queue="disk-tools", activities=tools.activities())

:func:`call_model` is the ``filegate.model`` activity. Importing this package
loads no model SDK (providers import ``openai``/``anthropic`` per call) and
no backend that needs optional extras.

A workflow of your own calls the tools through the typed stubs
(:mod:`filegate.activities.stubs`): ``ls`` ... ``execute`` are activity
references for ``workflow.execute_activity``, and :func:`file_tool` fills the
:class:`ToolRequest`, the options and a replay-stable call id for you (see
``docs/own-workflow.md``). The stubs load nothing but the kernel, so a
workflow module may import them.
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
        DeleteArgs,
        EditFileArgs,
        ExecuteArgs,
        GlobArgs,
        GrepArgs,
        LsArgs,
        RawListing,
        ReadFileArgs,
        ToolName,
        ToolOutcome,
        ToolRequest,
        ToolResult,
        WriteFileArgs,
        activity_call_id,
    )

    from .contract import (
        outcome_for_activity_error,
        tool_activity_options,
    )
    from .model import (
        call_model,
    )
    from .stubs import (
        STUBS,
        ActivityResult,
        ToolStub,
        delete,
        edit_file,
        execute,
        file_tool,
        glob,
        grep,
        ls,
        read_file,
        tool_request,
        write_file,
    )
    from .tools import (
        FileToolActivities,
    )

__getattr__, __dir__, __all__ = attach(__name__, __file__)
