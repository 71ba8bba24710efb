"""One operation from outside a workflow reaches a plain tools worker, or says who is missing.

Issue 36, measured by an operator: ``filegate call read_file ... --backend
filesystem`` against a plain ``filegate worker --role tools`` on a server
without standalone activities printed nothing until killed (it fell back to an
``OperationWorkflow`` the plain worker did not host); the Deep Agents adapter
could not ``read`` from a plain worker at all (``filegate.transfer.read`` not
registered: ~18 s of retries, then a traceback); a call to a queue nobody polls
was still waiting after 11 minutes. Now every tools worker
(``filegate.worker.tools_worker``, ``FilegatePlugin(backends=...)``, co-hosting
included) hosts the operation workflow and the transfer activities, and
``filegate call --timeout`` ends a call nobody answers with one line naming the
queue, on the server too (a timed-out call never runs later).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.worker import Worker

from filegate.backends.filesystem import FilesystemBackend
from filegate.kernel.operation_types import Operation, ReadWindowRequest
from filegate.kernel.tool_types import ToolRequest
from filegate.operations import OperationTimedOut, has_pollers, run_outside
from filegate.plugin import FilegatePlugin
from filegate.worker import tools_worker
from tests.cli.test_cli import cli, cli_env, cli_parallel, start_worker, stop_worker
from tests.scripting import uid

__all__ = ["cli_env"]  # the fixture, shared with test_cli

pytestmark = pytest.mark.services

BACKEND = "ws"


def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.md").write_text("one\ntwo\n")
    return root


async def polled(client: Client, queue: str, *, workflow: bool) -> None:
    """Wait (60 s at most) until a worker polls ``queue``."""
    deadline = time.monotonic() + 60
    while not await has_pollers(client, queue, workflow=workflow):
        assert time.monotonic() < deadline, f"no worker polled {queue}"
        await asyncio.sleep(0.2)


# --------------------------------------------------------------------------- filegate call


async def test_call_through_the_operation_workflow_reaches_a_plain_tools_worker(
    cli_env: dict[str, str], temporal_client: Client, tmp_path: Path
) -> None:
    """The operator's case: ``filegate call --via workflow`` (what a server without
    standalone activities gets) against ``filegate worker --role tools``."""
    root = workspace(tmp_path)
    queue = uid("plain-tools")
    worker = start_worker(
        cli_env, "--role", "tools", "--backend", "filesystem", "--root", str(root),
        "--name", BACKEND, "--task-queue", queue,
    )  # fmt: skip
    try:
        await polled(temporal_client, queue, workflow=False)
        on_queue = ["--tools-queue", queue, "--name", BACKEND, "--json"]
        read = ["call", "read_file", "--args", '{"file_path": "/notes.md"}', *on_queue]
        # Bounded by the subprocess timeout, not --timeout: the old code hung here.
        done = await asyncio.to_thread(cli, cli_env, *read, "--via", "workflow", timeout=45)
        direct = await asyncio.to_thread(cli, cli_env, *read, "--via", "standalone", timeout=45)
    finally:
        output = await asyncio.to_thread(stop_worker, worker)
    assert done.returncode == 0, done.stdout + done.stderr + output
    answer = json.loads(done.stdout)
    assert (answer["via"], answer["tool"]) == ("workflow", "read_file")
    assert "one" in answer["outcome"]["content"] and "two" in answer["outcome"]["content"]
    assert done.stderr == ""  # nothing on stderr when the call is served
    assert direct.returncode == 0, direct.stderr
    assert json.loads(direct.stdout)["outcome"] == answer["outcome"]


WAITING = "waiting up to 3 s for one"


def test_call_to_a_queue_nobody_polls_ends_within_its_timeout(cli_env: dict[str, str]) -> None:
    queue = uid("nobody-polls")
    args = ["call", "ls", "--tools-queue", queue, "--timeout", "3"]
    started = time.monotonic()
    runs = cli_parallel(cli_env, args, [*args, "--via", "workflow"])
    elapsed = time.monotonic() - started
    assert elapsed < 3 + 20, elapsed  # the deadline plus two interpreters' start-up
    for code, out, err in runs:
        assert code == 1 and out == "" and "Traceback" not in err, (code, out, err)
        notice, error = err.rstrip("\n").splitlines()
        assert notice == f"  !! no tools worker polls task queue {queue} yet: {WAITING}"
        assert error.startswith(f"filegate: no worker polls task queue '{queue}': ")
        assert "the ls call got no answer within 3 s" in error


async def test_a_call_that_timed_out_never_runs_later(
    cli_env: dict[str, str], temporal_client: Client, tmp_path: Path
) -> None:
    """The deadline is the server's too: a worker that comes up afterwards runs nothing."""
    root = workspace(tmp_path)
    queue = uid("late-worker")
    write = ["call", "write_file", "--tools-queue", queue, "--name", BACKEND, "--timeout", "2"]
    late = [
        [*write, "--args", json.dumps({"file_path": "/standalone.txt", "content": "x"})],
        [*write, "--args", json.dumps({"file_path": "/workflow.txt", "content": "x"}),
         "--via", "workflow"],
    ]  # fmt: skip
    runs = await asyncio.to_thread(cli_parallel, cli_env, *late)
    assert [code for code, _, _ in runs] == [1, 1], runs
    backend = FilesystemBackend(str(root), virtual_mode=True)
    async with tools_worker(temporal_client, queue, {BACKEND: backend}, tmp_path / "journal"):
        await polled(temporal_client, queue, workflow=True)
        await asyncio.sleep(3)
    assert sorted(p.name for p in root.iterdir()) == ["notes.md"]


# --------------------------------------------------------------------------- the client path


def tool_op(queue: str) -> Operation:
    request = ToolRequest(
        tool="read_file", backend=BACKEND, args={"file_path": "/notes.md"}, tool_call_id=""
    )
    return Operation(task_queue=queue, tool=request)


def window_op(queue: str) -> Operation:
    return Operation(
        task_queue=queue, read=ReadWindowRequest(backend=BACKEND, file_path="/notes.md")
    )


WorkerFactory = Callable[[Client, str, Path, Path], AbstractAsyncContextManager[Any]]


def core_worker(client: Client, queue: str, root: Path, journal: Path) -> Any:
    return tools_worker(client, queue, {BACKEND: FilesystemBackend(root)}, journal)


def co_hosting_worker(client: Client, queue: str, root: Path, journal: Path) -> Any:
    return tools_worker(
        client, queue, {BACKEND: FilesystemBackend(root)}, journal, serve_agents=True
    )


def plugin_worker(client: Client, queue: str, root: Path, journal: Path) -> Any:
    plugin = FilegatePlugin(
        backends={BACKEND: FilesystemBackend(root)}, journal_dir=journal, artifacts=None
    )
    return Worker(client, task_queue=queue, plugins=[plugin])


@pytest_asyncio.fixture(params=["tools_worker", "serve_agents", "FilegatePlugin"])
async def plain_queue(
    request: pytest.FixtureRequest, temporal_client: Client, tmp_path: Path
) -> AsyncIterator[str]:
    """A plain core tools worker, built each way a user builds one."""
    factories: dict[str, WorkerFactory] = {
        "tools_worker": core_worker,
        "serve_agents": co_hosting_worker,
        "FilegatePlugin": plugin_worker,
    }
    queue = uid("core-tools")
    root = workspace(tmp_path)
    async with factories[request.param](temporal_client, queue, root, tmp_path / "journal"):
        yield queue


@pytest.mark.parametrize("path", ["standalone", "workflow"])
async def test_every_core_tools_worker_serves_operations_both_ways(
    temporal_client: Client, plain_queue: str, path: Any
) -> None:
    for op in (tool_op(plain_queue), window_op(plain_queue)):
        ran = await asyncio.wait_for(
            run_outside(temporal_client, op, operation_task_queue=plain_queue, path=path), 30
        )
        assert ran.via == path
        if op.read is not None:
            assert ran.result.read is not None and ran.result.read.lines == ["one", "two"]
        else:
            outcome = ran.result.outcome
            assert outcome is not None and outcome.status == "success", outcome
            assert "two" in outcome.content


async def test_the_fallback_workflow_names_a_queue_no_worker_hosts_it_on(
    temporal_client: Client, tmp_path: Path
) -> None:
    """Tools served, but the fallback workflow sent to a queue nobody polls: that queue."""
    queue, elsewhere = uid("served"), uid("no-workflows")
    backend = FilesystemBackend(str(workspace(tmp_path)), virtual_mode=True)
    async with tools_worker(temporal_client, queue, {BACKEND: backend}, tmp_path / "journal"):
        with pytest.raises(OperationTimedOut) as caught:
            await run_outside(
                temporal_client, tool_op(queue), operation_task_queue=elsewhere,
                path="workflow", operation_timeout=timedelta(seconds=2),
            )  # fmt: skip
    assert caught.value.unpolled == elsewhere and caught.value.via == "workflow"
    assert str(caught.value).startswith(
        f"no worker hosting OperationWorkflow polls task queue '{elsewhere}'"
    )


# --------------------------------------------------------------------------- the adapter


async def test_the_deep_agents_adapter_reads_from_a_plain_core_tools_worker(
    temporal_client: Client, tmp_path: Path
) -> None:
    pytest.importorskip("deepagents")
    from filegate.integrations.deepagents import FilegateBackend

    queue = uid("adapter-plain")
    root = workspace(tmp_path)
    backend = FilesystemBackend(str(root), virtual_mode=True)
    async with tools_worker(temporal_client, queue, {BACKEND: backend}, tmp_path / "journal"):
        for path in ("standalone", "workflow"):
            adapter = FilegateBackend(
                backend=BACKEND, task_queue=queue, client=temporal_client, can_execute=False,
                operation_path=path,  # type: ignore[arg-type]
            )  # fmt: skip
            # Bounded: the old plain worker retried the unregistered activity for ~18 s.
            read = await asyncio.wait_for(adapter.aread("/notes.md"), 15)
            assert read.error is None and read.file_data is not None, read
            assert read.file_data["content"].startswith("one\ntwo")
            [up] = await asyncio.wait_for(adapter.aupload_files([(f"/{path}.bin", b"\0\1")]), 15)
            assert up.error is None
            [down] = await asyncio.wait_for(adapter.adownload_files([f"/{path}.bin"]), 15)
            assert (down.error, down.content) == (None, b"\0\1")
