"""Shared set-up of the approval-UI tests: real workers, gated one-turn agents.

Used by tests/cli/test_ui.py (TestClient), tests/cli/test_ui_browser.py (Chromium) and
tests/cli/test_ui_security.py (attacks on a real uvicorn). Every UI here runs behind
its guard, so a client logs in through the token URL as a reviewer would.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.local_shell import LocalShellBackend
from filegate.cli.ui.app import ClientFactory, uvicorn_server
from filegate.cli.ui.web_guard import UiAccess
from filegate.devstack.servers import TemporalDevServer
from filegate.kernel.messages import ModelSpec
from filegate.kernel.permissions import FilesystemPermission
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import (
    AgentInput,
    AgentResult,
    AgentWorkflow,
    ApprovalConfig,
    BackendRef,
    BackendSpec,
    PendingApproval,
)

TOKEN = "test-reviewer-token-0123456789"
"""The UI token of these tests (``FILEGATE_UI_TOKEN`` in production)."""
REVIEWER = "ana"
WEB_UI = "http://127.0.0.1:8233"
"""The Temporal Web UI the cards link to (a fixed setting; nothing is fetched there)."""


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
    """Poll the workflow's own query until it holds ``count`` pending approvals, each
    showing its preview (an approve sent while one is computed is refused)."""
    deadline = time.monotonic() + 30
    while True:
        found: list[PendingApproval] = await handle.query(AgentWorkflow.pending_approvals)
        if len(found) == count and not any(a.preview_pending for a in found):
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


def delete_call(call_id: str, path: str) -> dict[str, Any]:
    return {"id": call_id, "name": "delete", "args": {"file_path": path}}


def execute_call(call_id: str, command: str) -> dict[str, Any]:
    return {"id": call_id, "name": "execute", "args": {"command": command}}


@asynccontextmanager
async def agent_stack(
    client: Client, root: Path, journal: Path, *, shell: bool = False
) -> AsyncIterator[AgentStarter]:
    """Agent + tools workers (Filesystem, or LocalShell with ``shell``); yields a
    starter for gated one-turn agents."""
    suffix = uuid.uuid4().hex[:8]
    queue, tools_queue = f"ui-agent-{suffix}", f"ui-tools-{suffix}"
    root.mkdir(parents=True, exist_ok=True)
    backend = LocalShellBackend(str(root)) if shell else FilesystemBackend(root)
    async with (
        agent_worker(client, queue),
        tools_worker(client, tools_queue, {"fs": backend}, journal),
    ):
        yield AgentStarter(client, queue, tools_queue, str(root) if shell else None)


class AgentStarter:
    """Starts agents whose one tool turn waits on the /docs interrupt rule (or on
    the ``interrupt_on`` entries given)."""

    def __init__(
        self, client: Client, queue: str, tools_queue: str, shell: str | None = None
    ) -> None:
        self.client, self.queue, self.tools_queue = client, queue, tools_queue
        self.shell = shell

    async def start(
        self,
        *tool_calls: dict[str, Any],
        task: str = "write the docs",
        said: str | None = None,
        interrupt_on: dict[Any, Any] | None = None,
        approvals: ApprovalConfig | None = None,
        turns: int = 1,
        before: tuple[dict[str, Any], ...] = (),
    ) -> WorkflowHandle[Any, AgentResult]:
        """One agent; ``said`` is the model's text in the turn with the calls;
        ``turns`` > 1 repeats that turn (the agent keeps running after a decision);
        ``before``: earlier turns (a ``read_file`` an edit needs)."""
        turn: dict[str, Any] = {"tool_calls": list(tool_calls)}
        if said is not None:
            turn["content"] = said
        repeated = [
            {**turn, "tool_calls": [{**c, "id": f"{c['id']}-{n}"} for c in tool_calls]}
            if n
            else turn
            for n in range(turns)
        ]
        script = {"turns": [*before, *repeated, {"content": "done"}]}
        ref = BackendRef(
            kind="remote",
            name="fs",
            task_queue=self.tools_queue,
            can_execute=self.shell is not None,
            shell_path=self.shell,
        )
        input = AgentInput(
            task=task,
            model=ModelSpec(provider="scripted", options={"script": script}),
            backend=BackendSpec(default=ref),
            permissions=[] if self.shell else DOCS_INTERRUPT,
            interrupt_on=interrupt_on or {},
            approvals=approvals or ApprovalConfig(),
        )
        return await self.client.start_workflow(
            AgentWorkflow.run,
            input,
            id=f"ui-wf-{uuid.uuid4().hex[:10]}",
            task_queue=self.queue,
            search_attributes=await listing_attributes(self.client),
        )


PENDING_KEY = SearchAttributeKey.for_int("FilegatePendingApprovals")
DECIDED_KEY = SearchAttributeKey.for_int("FilegateDecidedApprovals")


async def has_listing_attributes(client: Client) -> bool:
    """Whether the server registered the approval counters (the embedded dev server does)."""
    request = ListSearchAttributesRequest(namespace=client.namespace)
    for attempt in range(3):
        try:
            found = await client.operator_service.list_search_attributes(request, retry=True)
            break
        except RPCError as error:
            # A call racing the server's close of an idle connection comes back
            # CANCELLED (seen with four xdist workers); the SDK retries only
            # UNAVAILABLE and its kin, and this helper is not what a test tests.
            if error.status != RPCStatusCode.CANCELLED or attempt == 2:
                raise
            await asyncio.sleep(0.5)
    return {PENDING_KEY.name, DECIDED_KEY.name} <= set(found.custom_attributes)


async def listing_attributes(client: Client) -> TypedSearchAttributes:
    """What a gated run starts with: both counters at 0 where the server has them
    (a workflow keeps them up to date only when started with them), else nothing."""
    if not await has_listing_attributes(client):
        return TypedSearchAttributes.empty
    pairs = [SearchAttributePair(PENDING_KEY, 0), SearchAttributePair(DECIDED_KEY, 0)]
    return TypedSearchAttributes(pairs)


def artifacts_dir(name: str) -> Path:
    """Where a test keeps its screenshots: ``$FILEGATE_TEST_ARTIFACTS`` or
    ``.filegate/test-artifacts`` (gitignored) under the repository."""
    base = os.environ.get("FILEGATE_TEST_ARTIFACTS")
    root = (
        Path(base)
        if base
        else Path(__file__).resolve().parent.parent / ".filegate" / "test-artifacts"
    )
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    return path
