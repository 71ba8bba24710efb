"""A Deep Agents agent whose files and shell are a Filegate bwrap sandbox (docs/deepagents.md).

The agent writes a script, runs it and reads its output, all through
``FilegateBackend``: each operation is a Filegate activity on a tools worker,
here run through a Temporal client (the agent runs outside any workflow).
The model is scripted, so the example needs no API key; put a real chat model
in its place. Run it on its own (embedded Temporal dev server; needs the
``devstack`` and ``deepagents`` extras and bubblewrap)::

    python docs/examples/deepagents_agent.py ./some/workspace

``tests/integrations/test_deepagents_adapter.py`` runs :func:`main` against the test servers.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from deepagents import create_deep_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from filegate.backends import BwrapSandboxBackend
from filegate.integrations.deepagents import FilegateBackend, tools_worker


class ScriptedModel(FakeMessagesListChatModel):
    """Answers from a fixed list; tools are "bound" by ignoring them."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def _call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


SCRIPT = [
    _call(
        "write_file",
        {"file_path": "/workspace/hello.sh", "content": "echo hello from $(uname -s)\n"},
        "1",
    ),
    _call("execute", {"command": "sh hello.sh > out.txt; cat out.txt"}, "2"),
    _call("read_file", {"file_path": "/workspace/out.txt"}, "3"),
    AIMessage(content="The script ran in the sandbox."),
]


async def main(client: Client, workspace: Path) -> list[Any]:
    """Serve ``workspace`` in a bwrap sandbox and run the scripted agent once."""
    queue = f"deepagents-{uuid.uuid4().hex[:8]}"
    journal = Path(tempfile.mkdtemp(prefix="filegate-journal-"))
    sandbox = BwrapSandboxBackend(workspace)  # the workspace appears at /workspace
    async with tools_worker(client, queue, {"sandbox": sandbox}, journal):
        backend = FilegateBackend(
            backend="sandbox", task_queue=queue, client=client, mount="/workspace"
        )
        agent = create_deep_agent(model=ScriptedModel(responses=SCRIPT), backend=backend)
        state = await agent.ainvoke({"messages": [{"role": "user", "content": "Say hello."}]})
        messages: list[Any] = state["messages"]
        return messages


async def _standalone(workspace: Path) -> None:
    from filegate import TemporalDevServer

    with TemporalDevServer(tempfile.mkdtemp(prefix="filegate-temporal-")) as server:
        client = await Client.connect(server.address, data_converter=pydantic_data_converter)
        for message in await main(client, workspace):
            print(f"{type(message).__name__}: {message.content}")


if __name__ == "__main__":
    asyncio.run(_standalone(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
