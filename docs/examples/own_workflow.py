"""Filegate's file tools from a workflow of your own (docs/own-workflow.md).

``ChangelogWorkflow`` collects the TODO lines of a workspace into
``/TODO.md`` with Filegate's ``grep`` and ``write_file`` activities, then
reads the result back. Run it on its own (it starts an embedded Temporal dev
server, so it needs the ``devstack`` extra)::

    python docs/examples/own_workflow.py ./some/workspace

``tests/activities/test_stubs.py`` runs :func:`main` against the test servers.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio import workflow
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

with workflow.unsafe.imports_passed_through():
    from filegate.activities import (
        GrepArgs,
        ReadFileArgs,
        WriteFileArgs,
        file_tool,
        grep,
        read_file,
        write_file,
    )

BACKEND = "workspace"
"""The name the tools worker serves the workspace under (``--name``)."""


@workflow.defn
class ChangelogWorkflow:
    @workflow.run
    async def run(self, tools_queue: str) -> str:
        found = await file_tool(
            grep,
            GrepArgs(pattern="TODO", output_mode="content"),
            task_queue=tools_queue,
            backend=BACKEND,
        )
        # The structured answer, no parsing of the model text:
        assert found.listing is not None and found.listing.grep is not None
        lines = [f"- {m.path}:{m.line} {m.text.strip()}" for m in found.listing.grep.matches]
        await file_tool(
            write_file,
            WriteFileArgs(file_path="/TODO.md", content="\n".join(["# TODO", *lines]) + "\n"),
            task_queue=tools_queue,
            backend=BACKEND,
        )
        summary = await file_tool(
            read_file, ReadFileArgs(file_path="/TODO.md"), task_queue=tools_queue, backend=BACKEND
        )
        return summary.text  # numbered lines, as a model would read them


async def main(client: Client, workspace: Path) -> str:
    """Serve ``workspace`` and run the workflow once on one worker; return its answer.

    ``FilegatePlugin`` gives the worker the ``filegate.<tool>`` activities over
    ``backends`` next to your workflow, and the sandbox settings Filegate's
    modules need. ``client`` carries Filegate's converter: the pydantic one
    here, ``filegate.plugin.connect``'s when S3 is configured.
    """
    from temporalio.worker import Worker

    from filegate import FilegatePlugin
    from filegate.backends import FilesystemBackend

    queue = f"own-workflow-{uuid.uuid4().hex[:8]}"
    journal = Path(tempfile.mkdtemp(prefix="filegate-journal-"))
    tools = FilegatePlugin(backends={BACKEND: FilesystemBackend(workspace)}, journal_dir=journal)
    async with Worker(client, task_queue=queue, workflows=[ChangelogWorkflow], plugins=[tools]):
        result: str = await client.execute_workflow(
            ChangelogWorkflow.run,
            queue,  # the tools run on the workflow's own queue
            id=f"changelog-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
            execution_timeout=timedelta(minutes=1),
        )
        return result


async def _standalone(workspace: Path) -> None:
    from filegate import TemporalDevServer

    with TemporalDevServer(tempfile.mkdtemp(prefix="filegate-temporal-")) as server:
        client = await Client.connect(server.address, data_converter=pydantic_data_converter)
        print(await main(client, workspace))


if __name__ == "__main__":
    asyncio.run(_standalone(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
