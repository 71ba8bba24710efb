"""Shared set-up of the approval-UI tests: real workers, gated one-turn agents.

Used by tests/test_ui.py (TestClient), tests/test_ui_browser.py (Chromium) and
tests/test_ui_security.py (attacks on a real uvicorn). Every UI here runs behind
its guard, so a client logs in through the token URL as a reviewer would.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from filegate.backends.embedded import TemporalDevServer
from filegate.backends.filesystem import FilesystemBackend
from filegate.cli.ui import ClientFactory, uvicorn_server
from filegate.cli.web_guard import UiAccess
from filegate.kernel.messages import ModelSpec
from filegate.kernel.permissions import FilesystemPermission
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import (
    AgentInput,
    AgentResult,
    AgentWorkflow,
    BackendRef,
    BackendSpec,
    PendingApproval,
)
from starlette.types import ASGIApp
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

TOKEN = "test-reviewer-token-0123456789"
"""The UI token of these tests (``FILEGATE_UI_TOKEN`` in production)."""
REVIEWER = "ana"


def ui_access(reviewer: str = REVIEWER) -> UiAccess:
    """The guard settings of a UI bound to 127.0.0.1 whose token holder is ``reviewer``."""
    return UiAccess.for_address("127.0.0.1", {"FILEGATE_UI_REVIEWER": reviewer}, token=TOKEN)


@contextmanager
def served(app: ASGIApp) -> Iterator[str]:
    """``app`` served by a real uvicorn on its own thread and loop; yields the base URL."""
    port = free_port()
    server = uvicorn_server(app, "127.0.0.1", port)
    thread = threading.Thread(target=server.run, name="ui-uvicorn", daemon=True)
    thread.start()
    for _ in range(200):
        if server.started or not thread.is_alive():
            break
        threading.Event().wait(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def pending(handle: WorkflowHandle[Any, Any], count: int) -> list[PendingApproval]:
    """Poll the workflow's own query until it holds ``count`` pending approvals."""
    deadline = time.monotonic() + 30
    while True:
        found: list[PendingApproval] = await handle.query(AgentWorkflow.pending_approvals)
        if len(found) == count:
            return found
        assert time.monotonic() < deadline, f"expected {count} approvals, last saw {found}"
        await asyncio.sleep(0.2)


DOCS_INTERRUPT = [FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="interrupt")]


def client_factory(server: TemporalDevServer) -> ClientFactory:
    """Connects on whatever loop the app runs on (TestClient's or uvicorn's thread)."""

    async def connect() -> Client:
        return await Client.connect(
            server.address, namespace=server.namespace, data_converter=pydantic_data_converter
        )

    return connect


def write_call(call_id: str, path: str, content: str) -> dict[str, Any]:
    return {"id": call_id, "name": "write_file", "args": {"file_path": path, "content": content}}


def edit_call(call_id: str, path: str, old: str, new: str) -> dict[str, Any]:
    args = {"file_path": path, "old_string": old, "new_string": new}
    return {"id": call_id, "name": "edit_file", "args": args}


def tool_results(result: AgentResult) -> dict[str, dict[str, Any]]:
    return {m["tool_call_id"]: m for m in result.transcript if m["role"] == "tool"}


@asynccontextmanager
async def agent_stack(client: Client, root: Path, journal: Path) -> AsyncIterator[AgentStarter]:
    """Agent + Filesystem tools workers; yields a starter for gated one-turn agents."""
    suffix = uuid.uuid4().hex[:8]
    queue, tools_queue = f"ui-agent-{suffix}", f"ui-tools-{suffix}"
    root.mkdir(parents=True, exist_ok=True)
    async with (
        agent_worker(client, queue),
        tools_worker(client, tools_queue, {"fs": FilesystemBackend(root)}, journal),
    ):
        yield AgentStarter(client, queue, tools_queue)


class AgentStarter:
    """Starts agents whose one tool turn waits on the /docs interrupt rule."""

    def __init__(self, client: Client, queue: str, tools_queue: str) -> None:
        self.client, self.queue, self.tools_queue = client, queue, tools_queue

    async def start(self, *tool_calls: dict[str, Any]) -> WorkflowHandle[Any, AgentResult]:
        script = {"turns": [{"tool_calls": list(tool_calls)}, {"content": "done"}]}
        ref = BackendRef(kind="remote", name="fs", task_queue=self.tools_queue)
        input = AgentInput(
            task="write the docs",
            model=ModelSpec(provider="scripted", options={"script": script}),
            backend=BackendSpec(default=ref),
            permissions=DOCS_INTERRUPT,
        )
        return await self.client.start_workflow(
            AgentWorkflow.run, input, id=f"ui-wf-{uuid.uuid4().hex[:10]}", task_queue=self.queue
        )
