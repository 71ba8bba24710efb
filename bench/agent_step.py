"""Agent step cost: a 50-step scripted loop, each step one read_file of a 20 KB file.

Run: ``python bench/agent_step.py``. Each Filegate variant's process CPU per step is
printed, and ``local`` and ``remote`` are divided by the bare SDK's step of the same
shape, run on the same server in the same run (:mod:`bare_step`: issue 55).
Starts a private Temporal dev server and in-process workers (Filesystem
backend) and runs the loop once per variant:

- ``local`` (the floor): the Filesystem backend hosted by the agent worker
  (``BackendRef(kind="local")``, ``filegate worker --role agent --local-backend``):
  model call and read_file are local activities, one workflow task per step
  or fewer, no task-queue trips;
- ``remote``: the backend on its own tools worker and task queue (the model
  call still local): one activity round trip through the server per step;
- ``remote-process`` (a floor): ``remote`` with the tools worker in a separate
  process, started as ``python -m filegate worker --role tools`` the way a
  deployment runs it (the trip crosses a process boundary, and the two
  workers no longer share one event loop and one GIL);
- ``co-hosted-process``: the deployment's common path: the backend's tools
  worker in its own process also runs the agent (``filegate worker --role
  tools --serve-agents``), the run started on its queue, so read_file is a
  local activity there (contract §8); no agent worker at all;
- ``remote-activity-model``: also the model call as a regular activity
  (``model_call="activity"``), the shape before local activities: two round trips;
- ``remote-no-sticky``: ``remote`` with ``max_cached_workflows=0``, so every
  workflow task replays the whole history (what a worker restart or cache
  eviction costs per step; a ``local`` loop runs in one workflow task);
- ``local-200B-file``: the loop on a 200-byte file, the fixed per-step cost.

For each it prints wall time per step and where it went (server event times):
workflow-task queueing, workflow-task run time (workflow code, local
activities, payload conversion), the model activity and the tool activity
(regular activities only). A second table times, outside Temporal, the
payload conversion of the model request at step 1/25/50 and the scripted
provider itself. Floors (exit 1 if one is missed; each printed ok/MISSED):
``local`` <= 10 ms per step, ``remote-process`` <= 30 ms per step. (History
bytes per step have their floor in ``bench/history.py``.) Every remote
variant's tool call crosses the server's history transfer queue, which the
embedded dev server lets poll 1000x/s per shard (``DYNAMIC_CONFIG`` in
``devstack/servers.py``; at the server default of 20/s a remote step cost
about 83 ms, see ``bench/hop_probe.py``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bare_step import BareInput, BareStep, bare_model, bare_read
from common import (
    Bench,
    breakdown,
    call,
    emit_json,
    ms,
    print_table,
    remote,
    scripted_input,
    temporal_bench,
    text_file,
)
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from filegate.activities.history import filegate_data_converter
from filegate.activities.providers.scripted import ScriptedProvider
from filegate.backends.filesystem import FilesystemBackend
from filegate.kernel.messages import Message, ModelRequest, ModelSpec, ToolCall
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef

STEPS = int(os.environ.get("BENCH_STEPS", "50"))
FILE_BYTES = 20 * 1024
FLOORS_MS = {"local": 10.0, "remote-process": 30.0}
"""Per-step wall time (server clock) each of these variants must stay under."""
PROCESS_START_TIMEOUT = 60.0


@dataclass(frozen=True)
class Variant:
    backend: str = "local"
    """``local``: hosted by the agent worker; ``remote``: its own tools worker in
    this process; ``remote-process``: its own tools worker in another process;
    ``co-hosted-process``: that process also runs the agent (``--serve-agents``)."""
    model_call: str = "local_activity"
    small_file: bool = False
    worker_options: dict[str, Any] = field(default_factory=dict)


VARIANTS: dict[str, Variant] = {
    "local": Variant(),
    "remote": Variant(backend="remote"),
    "remote-process": Variant(backend="remote-process"),
    "co-hosted-process": Variant(backend="co-hosted-process"),
    "remote-activity-model": Variant(backend="remote", model_call="activity"),
    "remote-no-sticky": Variant(backend="remote", worker_options={"max_cached_workflows": 0}),
    "local-200B-file": Variant(small_file=True),
}
FLOOR_VARIANT = "local"
"""The headline ``per_step_ms`` of the JSON line (``bench/run_all.py``)."""


def turns(path: str = "/data.txt") -> list[dict[str, Any]]:
    return [{"tool_calls": [call(f"r{i}", "read_file", file_path=path)]} for i in range(STEPS)]


def worker_env(bench: Bench) -> dict[str, str]:
    """This environment without Temporal / Filegate settings, pointed at the bench's server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "FILEGATE_"))}
    env.update(
        TEMPORAL_ADDRESS=bench.server.address,
        TEMPORAL_NAMESPACE=bench.server.namespace,
        FILEGATE_STATE_DIR=str(bench.tmp / "tools-process-state"),
    )
    return env


async def has_activity_pollers(bench: Bench, task_queue: str) -> bool:
    resp = await bench.client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=bench.client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        )
    )
    return bool(resp.pollers)


@asynccontextmanager
async def tools_process(
    bench: Bench, root: Path, task_queue: str, *flags: str
) -> AsyncIterator[None]:
    """``filegate worker --role tools`` for ``root`` in its own process, once it polls."""
    log_path = bench.tmp / f"tools-worker-{task_queue}.log"
    cmd = [sys.executable, "-m", "filegate", "worker", "--role", "tools",
           "--backend", "filesystem", "--root", str(root), "--task-queue", task_queue,
           "--name", "fs", *flags]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            cmd, env=worker_env(bench), stdout=log, stderr=subprocess.STDOUT, cwd=bench.tmp
        )
    try:
        deadline = time.monotonic() + PROCESS_START_TIMEOUT
        while not await has_activity_pollers(bench, task_queue):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"tools worker process did not poll {task_queue}:\n{tail}")
            await asyncio.sleep(0.2)
        yield
    finally:
        proc.terminate()  # SIGTERM: run_until_stopped shuts the worker down gracefully
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def one_variant(
    bench: Bench, fs: FilesystemBackend, root: Path, variant: Variant
) -> dict[str, Any]:
    agent_q, tools_q = bench.queues()
    path = "/small.txt" if variant.small_file else "/data.txt"
    if variant.backend == "local":
        ref = BackendRef(kind="local", name="fs")
        hosted: dict[str, Any] = {"backends": {"fs": fs}, "journal_dir": bench.tmp / "journal"}
    else:
        ref = remote("fs", tools_q)
        hosted = {}

    def agent_input(steps: int) -> AgentInput:
        base = scripted_input(turns(path)[:steps], ref)
        return base.model_copy(update={"model_call": variant.model_call})

    async with AsyncExitStack() as stack:
        if variant.backend == "co-hosted-process":
            agent_q = tools_q  # the run's own queue: the tools worker runs it
            workers: list[AbstractAsyncContextManager[Any]] = [
                tools_process(bench, root, tools_q, "--serve-agents")
            ]
        else:
            agent = agent_worker(bench.client, agent_q, **hosted, **variant.worker_options)
            tools = (
                tools_process(bench, root, tools_q)
                if variant.backend == "remote-process"
                else tools_worker(bench.client, tools_q, {"fs": fs}, bench.tmp / "journal")
            )
            workers = [agent, tools]
        for worker in workers:
            await stack.enter_async_context(worker)
        # Warm-up run: first-use imports and sandbox setup are not a per-step cost.
        await bench.client.execute_workflow(
            AgentWorkflow.run, agent_input(2), id=f"warm-{uuid.uuid4().hex[:8]}", task_queue=agent_q
        )
        began, cpu = time.perf_counter(), process_cpu()
        handle = await bench.client.start_workflow(
            AgentWorkflow.run,
            agent_input(STEPS),
            id=f"step-{uuid.uuid4().hex[:8]}",
            task_queue=agent_q,
        )
        result = await asyncio.wait_for(handle.result(), 300)
        wall, cpu = time.perf_counter() - began, process_cpu() - cpu
    assert result.tool_calls == STEPS and result.tool_errors == 0, result.transcript[-2:]
    split = await breakdown(bench.client, handle)
    steps = result.steps  # model calls, the final answer included
    return {
        "client_wall_ms_per_step": ms(wall / STEPS),
        "process_cpu_ms_per_step": ms(cpu / STEPS),
        **split.per(steps),
        "workflow_tasks": split.workflow_tasks,
        "runs": split.runs,
        "history_kb": round(split.history_bytes / 1024),
    }


def process_cpu() -> float:
    """CPU seconds of this process (its workers, the client, the bench), all threads."""
    times = os.times()
    return times.user + times.system


BARE = {"bare-local": False, "bare-remote": True}
"""The bare SDK's step in Filegate's two shapes (:mod:`bare_step`): read as a local
activity, or on another worker's queue."""
RATIOS = {"local": "bare-local", "remote": "bare-remote"}
"""Filegate's variant -> the bare step of the same shape it is divided by."""


async def bare_variant(bench: Bench, root: Path, remote: bool) -> dict[str, Any]:
    """The bare step (:mod:`bare_step`) on this server, workers in this process."""
    agent_q, tools_q = bench.queues()
    args = BareInput(
        steps=STEPS, path=str(root / "data.txt"), tool_queue=tools_q if remote else None
    )
    served: list[tuple[str, list[Callable[..., Any]], list[type]]] = [
        (agent_q, [bare_model] if remote else [bare_model, bare_read], [BareStep])
    ]
    if remote:
        served.append((tools_q, [bare_read], []))
    async with AsyncExitStack() as stack:
        pool = stack.enter_context(concurrent.futures.ThreadPoolExecutor(8))
        for queue, activities, flows in served:
            worker = Worker(
                bench.client, task_queue=queue, workflows=flows, activities=activities,
                activity_executor=pool,
            )  # fmt: skip
            await stack.enter_async_context(worker)
        warm = args.model_copy(update={"steps": 2})
        await bench.client.execute_workflow(
            BareStep.run, warm, id=f"bare-warm-{uuid.uuid4().hex[:8]}", task_queue=agent_q
        )
        began, cpu = time.perf_counter(), process_cpu()
        await bench.client.execute_workflow(
            BareStep.run, args, id=f"bare-{uuid.uuid4().hex[:8]}", task_queue=agent_q
        )
        wall, cpu = time.perf_counter() - began, process_cpu() - cpu
    return {"client_wall_ms_per_step": ms(wall / STEPS), "process_cpu_ms_per_step": ms(cpu / STEPS)}


async def provider_seconds(provider: ScriptedProvider, request: ModelRequest) -> float:
    """Mean seconds of one scripted answer (one event loop for all: its start-up is not
    part of a model call)."""
    runs = 20
    began = time.perf_counter()
    for _ in range(runs):
        await provider.complete(request)
    return (time.perf_counter() - began) / runs


def conversion_costs() -> list[tuple[str, float, float, float, float]]:
    """(label, request KB, to_payloads ms, from_payloads ms, provider ms) at steps 1/25/50."""
    content = text_file(FILE_BYTES)
    fs_text = "\n".join(f"{n + 1:6d}\t{line}" for n, line in enumerate(content.splitlines()))
    script = {"turns": [*turns(), {"content": "done"}]}
    converter = pydantic_data_converter.payload_converter
    provider = ScriptedProvider()
    rows = []
    for step in (1, STEPS // 2, STEPS):
        messages = [Message(role="user", content="bench")]
        for i in range(step - 1):
            messages.append(
                Message(
                    role="assistant",
                    content="",
                    tool_calls=[ToolCall(id=f"r{i}", name="read_file", args={"file_path": "/d"})],
                )
            )
            messages.append(Message(role="tool", content=fs_text, tool_call_id=f"r{i}"))
        request = ModelRequest(
            model=ModelSpec(provider="scripted", options={"script": script}),
            system="system prompt " * 200,
            messages=messages,
            tools=[],
            call_index=step - 1,
        )
        began = time.perf_counter()
        payloads = converter.to_payloads([request])
        to_ms = time.perf_counter() - began
        began = time.perf_counter()
        converter.from_payloads(payloads, [ModelRequest])
        from_ms = time.perf_counter() - began
        provider_ms = asyncio.run(provider_seconds(provider, request))
        size_kb = payloads[0].ByteSize() / 1024
        rows.append((f"step {step}", round(size_kb, 1), ms(to_ms), ms(from_ms), ms(provider_ms)))
    return rows


async def measure() -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with temporal_bench("agent-step") as bench:
        root = bench.tmp / "ws"
        root.mkdir()
        (root / "data.txt").write_text(text_file(FILE_BYTES))
        (root / "small.txt").write_text(text_file(200))
        fs = FilesystemBackend(str(root), virtual_mode=True)
        # Filegate's variants on a client with Filegate's converter (as connect() builds
        # it); the bare SDK's on the SDK's pydantic converter.
        ours = await Client.connect(
            bench.server.address,
            namespace=bench.server.namespace,
            data_converter=filegate_data_converter(None),
        )
        filegate = dataclasses.replace(bench, client=ours)
        for name, variant in VARIANTS.items():
            results[name] = await one_variant(filegate, fs, root, variant)
        for name, remote in BARE.items():
            results[name] = await bare_variant(bench, root, remote)
    return results


def main() -> int:
    results = asyncio.run(measure())
    print(f"{STEPS} steps, each one read_file of a {FILE_BYTES // 1024} KB file (ms per step)")
    cols = ["wall_ms", "wft_queue_ms", "wft_run_ms", "model_activity_ms", "tool_activity_ms"]
    filegate = {name: r for name, r in results.items() if name not in BARE}
    print_table(
        ["variant", "wall", "wf-task wait", "wf-task run", "model act", "tool act", "wf tasks",
         "runs", "history KB", "CPU/step"],
        [(name, *(r[c] for c in cols), r["workflow_tasks"], r["runs"], r["history_kb"],
          r["process_cpu_ms_per_step"]) for name, r in filegate.items()],
    )  # fmt: skip
    print("against the bare SDK's step of the same shape (bench/bare_step.py), client wall")
    print_table(
        ["variant", "ms/step", "bare ms/step", "ratio", "CPU ms/step", "bare CPU ms/step"],
        [(name, results[name]["client_wall_ms_per_step"], results[bare]["client_wall_ms_per_step"],
          round(results[name]["client_wall_ms_per_step"]
                / results[bare]["client_wall_ms_per_step"], 2),
          results[name]["process_cpu_ms_per_step"], results[bare]["process_cpu_ms_per_step"])
         for name, bare in RATIOS.items()],
    )  # fmt: skip
    conv = conversion_costs()
    print("model request by value (a regular model activity without S3; local calls send deltas)")
    print_table(["at", "KB", "to_payloads ms", "from_payloads ms", "scripted provider ms"], conv)
    per_step = results[FLOOR_VARIANT]["wall_ms"]
    print(f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    floors: dict[str, bool] = {}
    for name, floor in FLOORS_MS.items():
        measured = results[name]["wall_ms"]
        floors[name] = measured <= floor
        verdict = "ok" if floors[name] else "MISSED"
        print(f"{name}: {measured} ms per step (floor <= {floor:g} ms) {verdict}")
    ok = all(floors.values())
    numbers: dict[str, Any] = {
        "steps": STEPS,
        "per_step_ms": per_step,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "floors_ms": FLOORS_MS,
        "floors_missed": [name for name, met in floors.items() if not met],
    }
    for name, r in results.items():  # the bare SDK's rows time the client only
        numbers[f"{name}_ms"] = r.get("wall_ms", r["client_wall_ms_per_step"])
    numbers["variants"] = results
    numbers["model_request"] = [
        {"at": a, "kb": kb, "to_ms": t, "from_ms": f, "provider_ms": p} for a, kb, t, f, p in conv
    ]
    emit_json("agent_step", numbers, ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
