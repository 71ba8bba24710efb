"""Fault injection: killed workers, a restarted Temporal server, an S3 outage, approvals.

Every run is a scripted agent that writes, edits (growing edits: ``x`` ->
``xx``, so an edit applied twice shows as ``xxx``) and deletes inside its own
directory. Outcomes are checked on disk and in results, never in logs:

- workers are real ``filegate worker`` subprocesses killed with SIGKILL at seeded
  random points (12 runs with a tools-worker kill, 8 with an agent-worker kill,
  the two groups concurrently, then 6 with the kill of an agent worker that
  hosts the backend itself) and restarted; every run completes and its
  directory is byte-identical to the same script's fault-free run;
- a dedicated Temporal dev server restarted mid-run (same SQLite file): runs
  complete;
- a dedicated S3 server stopped for 10 s while large execute results are
  offloaded: runs complete and the artifacts are intact;
- an approval pending while both workers restart: the decision afterwards
  completes the run.

Short heartbeat, model and workflow-task timeouts make retries fast.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from filegate.activities.tools import FileToolActivities
from filegate.backends.artifacts import ArtifactStore
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.local_shell import LocalShellBackend
from filegate.devstack.s3 import S3DevServer
from filegate.devstack.servers import TemporalDevServer
from filegate.kernel.messages import ModelSpec
from filegate.kernel.permissions import FilesystemPermission
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import (
    AgentInput,
    AgentResult,
    AgentWorkflow,
    BackendRef,
    BackendSpec,
    Decision,
)
from filegate.workflows.inputs import Limits
from tests.roots import made
from tests.run_chain import scope_of

pytestmark = [pytest.mark.services, pytest.mark.slow]


SEED = 20251130
FAST = Limits(max_steps=20, tool_heartbeat_timeout_seconds=2, model_timeout_seconds=5)
TASK_TIMEOUT = timedelta(seconds=2)
"""Workflow task timeout: a task lost with a killed agent worker is retried after this."""

# --------------------------------------------------------------------------- helpers


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": args}


def mutation_script(d: str) -> list[dict[str, Any]]:
    """Write, grow-edit twice, delete, rewrite: every effect shows in the final bytes."""
    return [
        {
            "tool_calls": [
                call("w1", "write_file", file_path=f"/{d}/a.txt", content="x\n"),
                call("w2", "write_file", file_path=f"/{d}/b.txt", content="y\n"),
                call("w3", "write_file", file_path=f"/{d}/c.txt", content="gone\n"),
            ]
        },
        {
            "tool_calls": [
                call("r1", "read_file", file_path=f"/{d}/a.txt"),
                call("r2", "read_file", file_path=f"/{d}/b.txt"),
            ]
        },
        {
            "tool_calls": [
                call(
                    "e1", "edit_file", file_path=f"/{d}/a.txt", old_string="x\n", new_string="xx\n"
                ),
                call(
                    "e2", "edit_file", file_path=f"/{d}/b.txt", old_string="y\n", new_string="yy\n"
                ),
            ]
        },
        {
            "tool_calls": [
                call("d1", "delete", file_path=f"/{d}/c.txt"),
                call("w4", "write_file", file_path=f"/{d}/d.txt", content="new\n"),
            ]
        },
        {
            "tool_calls": [
                call(
                    "e3", "edit_file", file_path=f"/{d}/a.txt", old_string="x\n", new_string="xx\n"
                )
            ]
        },
        {
            "tool_calls": [
                call(
                    "e4", "edit_file", file_path=f"/{d}/b.txt", old_string="y\n", new_string="yy\n"
                )
            ]
        },
        {"content": f"{d} done"},
    ]


def agent_input(turns: list[Any], backend: BackendRef, **extra: Any) -> AgentInput:
    return AgentInput(
        task="mutate",
        model=ModelSpec(provider="scripted", options={"script": {"turns": turns}}),
        backend=BackendSpec(default=backend),
        limits=FAST,
        **extra,
    )


def fs_ref(queue: str, name: str = "filesystem") -> BackendRef:
    return BackendRef(kind="remote", name=name, task_queue=queue)


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


async def start(client: Client, input: AgentInput, queue: str) -> WorkflowHandle[Any, Any]:
    return await client.start_workflow(
        AgentWorkflow.run,
        input,
        id=f"fault-{uuid.uuid4().hex[:10]}",
        task_queue=queue,
        task_timeout=TASK_TIMEOUT,
    )


class WorkerProcess:
    """A ``filegate worker`` subprocess that can be SIGKILLed and started again."""

    def __init__(self, server: TemporalDevServer, args: list[str], state: Path) -> None:
        self.args = args
        self.env = {
            **os.environ,
            "TEMPORAL_ADDRESS": server.address,
            "TEMPORAL_NAMESPACE": server.namespace,
            "FILEGATE_STATE_DIR": str(state),
        }
        self.proc: asyncio.subprocess.Process | None = None
        self.kills = 0

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "filegate",
            "worker",
            *self.args,
            env=self.env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )

    async def kill(self) -> None:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
            self.kills += 1
        await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 20)
            except TimeoutError:
                await self.kill()


@asynccontextmanager
async def worker_process(
    server: TemporalDevServer, args: list[str], state: Path
) -> AsyncIterator[WorkerProcess]:
    process = WorkerProcess(server, args, state)
    await process.start()
    try:
        yield process
    finally:
        await process.stop()


def tools_args(root: Path, queue: str, journal: Path, backend: str = "filesystem") -> list[str]:
    return [
        "--role",
        "tools",
        "--backend",
        backend,
        "--root",
        str(root),
        "--task-queue",
        queue,
        "--journal-dir",
        str(journal),
    ]


async def reference_trees(client: Client, base: Path, dirs: list[str]) -> dict[str, bytes]:
    """The fault-free outcome of every script, run with in-process workers."""
    root = base / "reference"
    root.mkdir()
    agent_q, tools_q = f"ref-a-{uuid.uuid4().hex[:6]}", f"ref-t-{uuid.uuid4().hex[:6]}"
    fs = FilesystemBackend(str(root), virtual_mode=True)
    async with (
        agent_worker(client, agent_q),
        tools_worker(client, tools_q, {"filesystem": fs}, base / "ref-journal"),
    ):
        handles = [
            await start(client, agent_input(mutation_script(d), fs_ref(tools_q)), agent_q)
            for d in dirs
        ]
        for handle in handles:
            result: AgentResult = await asyncio.wait_for(handle.result(), 60)
            assert result.tool_errors == 0, [
                m for m in result.transcript if m.get("status") == "error"
            ]
    return tree(root)


async def killing_rounds(
    client: Client,
    victim: WorkerProcess,
    dirs: list[str],
    agent_q: str,
    tools_q: str | None,
    rng: random.Random,
    progress: Callable[[str], bool] | None = None,
) -> list[AgentResult]:
    """One run per dir; during each, SIGKILL ``victim`` at a random point and restart it.

    ``tools_q`` None: the backend is hosted by the agent worker (``kind="local"``).
    """
    results = []
    for d in dirs:
        ref = fs_ref(tools_q) if tools_q else BackendRef(kind="local", name="filesystem")
        handle = await start(client, agent_input(mutation_script(d), ref), agent_q)
        if progress is not None:
            # Runs take well under a second: kill once this one is under way.
            deadline = time.monotonic() + 60
            while not progress(d):
                assert time.monotonic() < deadline, f"run {d} made no progress in 60 s"
                await asyncio.sleep(0.005)
            await asyncio.sleep(rng.uniform(0.0, 0.2))
        else:
            await asyncio.sleep(rng.uniform(0.05, 1.5))
        await victim.kill()
        await asyncio.sleep(rng.uniform(0.0, 0.5))
        await victim.start()
        results.append(await asyncio.wait_for(handle.result(), 90))
    return results


# --------------------------------------------------------------------------- tests


async def test_sigkilled_workers_leave_byte_identical_workspaces(
    temporal_server: TemporalDevServer, temporal_client: Client, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    tools_dirs = [f"t{i}" for i in range(12)]
    agent_dirs = [f"a{i}" for i in range(8)]
    expected = await reference_trees(temporal_client, tmp_path, tools_dirs + agent_dirs)
    root = tmp_path / "faulty"
    root.mkdir()
    suffix = uuid.uuid4().hex[:6]
    # Group 1: the tools worker is a subprocess (killed); the agent worker in-process.
    # Group 2: the agent worker is a subprocess (killed); the tools worker in-process.
    agent_q1, tools_q1 = f"k1-a-{suffix}", f"k1-t-{suffix}"
    agent_q2, tools_q2 = f"k2-a-{suffix}", f"k2-t-{suffix}"
    fs = FilesystemBackend(str(root), virtual_mode=True)
    began = time.monotonic()
    async with (
        worker_process(
            temporal_server, tools_args(root, tools_q1, tmp_path / "journal1"), tmp_path / "state1"
        ) as tools_proc,
        worker_process(
            temporal_server, ["--role", "agent", "--task-queue", agent_q2], tmp_path / "state2"
        ) as agent_proc,
        agent_worker(temporal_client, agent_q1),
        tools_worker(temporal_client, tools_q2, {"filesystem": fs}, tmp_path / "journal2"),
    ):
        results = await asyncio.gather(
            killing_rounds(
                temporal_client,
                tools_proc,
                tools_dirs,
                agent_q1,
                tools_q1,
                random.Random(rng.random()),
            ),
            killing_rounds(
                temporal_client,
                agent_proc,
                agent_dirs,
                agent_q2,
                tools_q2,
                random.Random(rng.random()),
            ),
        )
    elapsed = time.monotonic() - began
    assert tools_proc.kills == 12 and agent_proc.kills == 8
    for result in results[0] + results[1]:
        assert result.stop_reason == "final_answer", result.transcript[-2:]
        assert result.tool_errors == 0, [m for m in result.transcript if m.get("status") == "error"]
    assert tree(root) == expected  # no edit lost or applied twice, deletes and writes landed
    print(f"20 runs with SIGKILLed workers in {elapsed:.1f}s")


async def test_sigkilled_agent_worker_hosting_a_local_backend(
    temporal_server: TemporalDevServer, temporal_client: Client, tmp_path: Path
) -> None:
    """kind=local: the agent worker runs the tools as local activities, so a kill
    loses the local activities of its open workflow task, which run again on the
    restarted worker; the journal keeps every mutation applied exactly once."""
    rng = random.Random(SEED + 1)
    dirs = [f"l{i}" for i in range(6)]
    expected = await reference_trees(temporal_client, tmp_path, dirs)
    root = tmp_path / "faulty"
    root.mkdir()
    agent_q = f"k3-a-{uuid.uuid4().hex[:6]}"
    args = [
        "--role", "agent", "--task-queue", agent_q, "--local-backend",
        "--backend", "filesystem", "--root", str(root), "--journal-dir", str(tmp_path / "j3"),
    ]  # fmt: skip
    async with worker_process(temporal_server, args, tmp_path / "state3") as agent_proc:
        results = await killing_rounds(
            temporal_client,
            agent_proc,
            dirs,
            agent_q,
            None,
            rng,
            progress=lambda d: (root / d / "a.txt").exists(),
        )
    assert agent_proc.kills == 6
    for result in results:
        assert result.stop_reason == "final_answer", result.transcript[-2:]
        assert result.tool_errors == 0, [m for m in result.transcript if m.get("status") == "error"]
    got = tree(root)
    differing = {p: (got.get(p), expected.get(p)) for p in set(got) | set(expected)
                 if got.get(p) != expected.get(p)}  # fmt: skip
    assert not differing, differing  # path -> (after kills, fault-free)


async def test_temporal_server_restart_mid_run(tmp_path: Path) -> None:
    server = TemporalDevServer(tmp_path / "temporal").start()
    try:
        client = await Client.connect(
            server.address, namespace=server.namespace, data_converter=pydantic_data_converter
        )
        root = tmp_path / "ws"
        root.mkdir()
        fs = FilesystemBackend(str(root), virtual_mode=True)
        agent_q, tools_q = "restart-agent", "restart-tools"
        dirs = [f"s{i}" for i in range(4)]
        async with (
            agent_worker(client, agent_q),
            tools_worker(client, tools_q, {"filesystem": fs}, tmp_path / "journal"),
        ):
            handles = [
                await start(client, agent_input(mutation_script(d), fs_ref(tools_q)), agent_q)
                for d in dirs
            ]
            await asyncio.sleep(0.3)
            await asyncio.to_thread(server.restart)
            results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 120)
        for result in results:
            assert result.stop_reason == "final_answer" and result.tool_errors == 0
        for d in dirs:
            assert (root / d / "a.txt").read_text() == "xxx\n"
            assert (root / d / "b.txt").read_text() == "yyy\n"
            assert not (root / d / "c.txt").exists()
    finally:
        server.stop()


async def test_s3_outage_during_offload(temporal_client: Client, tmp_path: Path) -> None:
    s3 = S3DevServer(tmp_path / "s3").start()
    try:
        store = ArtifactStore(s3.client(), "fault-artifacts", namespace="faults")
        shell = LocalShellBackend(made(tmp_path / "shell"))
        tools = FileToolActivities({"shell": shell}, tmp_path / "journal", artifacts=store)
        agent_q, tools_q = f"s3-a-{uuid.uuid4().hex[:6]}", f"s3-t-{uuid.uuid4().hex[:6]}"
        # 90 000 chars: over the 80 000-char offload threshold, under the shell's 100 000 cap.
        command = (
            "echo ran >> runs.log; for i in $(seq 1 900); do printf 'R%05d%093d\\n' $i 0; done"
        )
        ref = BackendRef(kind="remote", name="shell", task_queue=tools_q, can_execute=True)
        turns = [
            {"tool_calls": [call("x1", "execute", command=command)]},
            {
                "tool_calls": [
                    call(
                        "x2",
                        "read_file",
                        file_path="/large_tool_results/1:0:x1",
                        offset=600,
                        limit=2,
                    )
                ]
            },
            {"content": "done"},
        ]
        async with (
            agent_worker(temporal_client, agent_q),
            Worker(temporal_client, task_queue=tools_q, activities=tools.activities()),
        ):
            await asyncio.to_thread(s3.stop)
            handles = [
                await start(temporal_client, agent_input(turns, ref), agent_q) for _ in range(2)
            ]
            await asyncio.sleep(10)
            await asyncio.to_thread(s3.start)
            results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 120)
        for handle, result in zip(handles, results, strict=True):
            out = {m["tool_call_id"]: m for m in result.transcript if m["role"] == "tool"}
            assert out["x1"]["status"] == "success", out["x1"]["content"][:500]
            assert "/large_tool_results/1:0:x1" in out["x1"]["content"]
            assert len(out["x1"]["content"]) < 10_000
            assert "R00601" in out["x2"]["content"] and "R00602" in out["x2"]["content"]
            [key] = store.list_thread(await scope_of(temporal_client, handle.id))
            body = store.client.get_object(store.bucket, key).read().decode()
            assert "".join(f"R{i:05d}{0:093d}\n" for i in range(1, 901)) in body
        # Each command ran once: retries of the failed offload reused the journaled result.
        assert (tmp_path / "shell" / "runs.log").read_text() == "ran\n" * len(handles)
    finally:
        s3.stop()


async def _pending_approvals(handle: WorkflowHandle[Any, Any], *, shown: bool) -> list[Any]:
    """The run's pending approvals once there are some (and, with ``shown``, once
    each shows its preview), while its worker may still be starting."""
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, f"no approval became pending ({shown=})"
        await asyncio.sleep(0.2)
        try:
            pending = await handle.query(AgentWorkflow.pending_approvals)
        except Exception:  # worker still starting: the query cannot be answered yet
            continue
        if pending and not (shown and any(a.preview_pending for a in pending)):
            return list(pending)


async def test_approval_survives_restart_of_both_workers(
    temporal_server: TemporalDevServer, temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    suffix = uuid.uuid4().hex[:6]
    agent_q, tools_q = f"ap-a-{suffix}", f"ap-t-{suffix}"
    turns = [
        {"tool_calls": [call("w1", "write_file", file_path="/docs/plan.md", content="plan\n")]},
        {"tool_calls": [call("r1", "read_file", file_path="/docs/plan.md")]},
        {"content": "approved and written"},
    ]
    input = agent_input(
        turns,
        fs_ref(tools_q),
        permissions=[
            FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="interrupt")
        ],
    )
    async with (
        worker_process(
            temporal_server, ["--role", "agent", "--task-queue", agent_q], tmp_path / "s1"
        ) as agent_proc,
        worker_process(
            temporal_server, tools_args(root, tools_q, tmp_path / "journal"), tmp_path / "s2"
        ) as tools_proc,
    ):
        handle = await start(temporal_client, input, agent_q)
        pending = await _pending_approvals(handle, shown=False)
        await asyncio.gather(agent_proc.kill(), tools_proc.kill())
        assert not (root / "docs" / "plan.md").exists()
        await asyncio.sleep(1)
        await asyncio.gather(agent_proc.start(), tools_proc.start())
        # The kill may have cut the preview off: a reviewer decides once it is shown
        # again (an approve sent before that is refused, contract §5).
        assert [a.id for a in await _pending_approvals(handle, shown=True)] == [pending[0].id]
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=pending[0].id, decision="approve")
        )
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.final_answer == "approved and written" and result.approvals == 1
    assert (root / "docs" / "plan.md").read_text() == "plan\n"
    out = {m["tool_call_id"]: m for m in result.transcript if m["role"] == "tool"}
    assert out["w1"]["status"] == "success" and "plan" in out["r1"]["content"]
