"""Agent step cost: a 50-step scripted loop, each step one read_file of a 20 KB file.

Run: ``python bench/agent_step.py``. Starts a private Temporal dev server and
in-process agent + tools workers (Filesystem backend) and runs the loop once
per worker variant:

- ``default``: the workers exactly as ``filegate worker`` builds them;
- ``passthrough``: the agent worker with ``workflows.agent.sandboxed_runner()``;
- ``unsandboxed``: the agent worker without the workflow sandbox (diagnostic
  only: it shows what the sandbox costs, it is not a recommended setting);
- ``no-sticky``: ``max_cached_workflows=0``, so every workflow task replays the
  whole history (what a worker restart or cache eviction costs per step).

For each it prints wall time per step and where it went (server event times):
workflow-task queueing, workflow-task run time (workflow code + sandbox +
payload conversion), the model activity and the tool activity. A second table
times, outside Temporal, the payload conversion of the model request at step
1/25/50 (the whole transcript travels with every model call) and the scripted
provider itself. Floor: default variant <= 30 ms per step (exit 1 if missed).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

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
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import UnsandboxedWorkflowRunner

from activities.messages import Message, ModelRequest, ModelSpec, ToolCall
from activities.providers.scripted import ScriptedProvider
from backends.filesystem import FilesystemBackend
from worker import agent_worker, tools_worker
from workflows import AgentWorkflow
from workflows.agent import sandboxed_runner

STEPS = int(os.environ.get("BENCH_STEPS", "50"))
FILE_BYTES = 20 * 1024
FLOOR_MS = 30.0

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "passthrough": {"workflow_runner": sandboxed_runner()},
    "unsandboxed": {"workflow_runner": UnsandboxedWorkflowRunner()},
    "no-sticky": {"max_cached_workflows": 0},
    "default-200B-file": {},
}
SMALL_VARIANT = "default-200B-file"
"""Same loop on a 200-byte file: the fixed per-step cost without the transcript growth."""


def turns(path: str = "/data.txt") -> list[dict[str, Any]]:
    return [{"tool_calls": [call(f"r{i}", "read_file", file_path=path)]} for i in range(STEPS)]


async def one_variant(
    bench: Bench, fs: FilesystemBackend, options: dict[str, Any], path: str
) -> dict[str, Any]:
    agent_q, tools_q = bench.queues()
    input = scripted_input(turns(path), remote("fs", tools_q))
    async with (
        agent_worker(bench.client, agent_q, **options),
        tools_worker(bench.client, tools_q, {"fs": fs}, bench.tmp / "journal"),
    ):
        # Warm-up run: first-use imports and sandbox setup are not a per-step cost.
        warm = scripted_input(turns()[:2], remote("fs", tools_q))
        await bench.client.execute_workflow(
            AgentWorkflow.run, warm, id=f"warm-{uuid.uuid4().hex[:8]}", task_queue=agent_q
        )
        began = time.perf_counter()
        handle = await bench.client.start_workflow(
            AgentWorkflow.run, input, id=f"step-{uuid.uuid4().hex[:8]}", task_queue=agent_q
        )
        result = await asyncio.wait_for(handle.result(), 300)
        wall = time.perf_counter() - began
    assert result.tool_calls == STEPS and result.tool_errors == 0, result.transcript[-2:]
    split = await breakdown(bench.client, handle)
    steps = result.steps  # model calls, the final answer included
    return {
        "client_wall_ms_per_step": ms(wall / STEPS),
        **split.per(steps),
        "runs": split.runs,
        "history_kb": round(split.history_bytes / 1024),
    }


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
        began = time.perf_counter()
        asyncio.run(provider.complete(request))
        provider_ms = time.perf_counter() - began
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
        for name, options in VARIANTS.items():
            path = "/small.txt" if name == SMALL_VARIANT else "/data.txt"
            results[name] = await one_variant(bench, fs, options, path)
    return results


def main() -> int:
    results = asyncio.run(measure())
    print(f"{STEPS} steps, each one read_file of a {FILE_BYTES // 1024} KB file (ms per step)")
    cols = ["wall_ms", "wft_queue_ms", "wft_run_ms", "model_activity_ms", "tool_activity_ms"]
    print_table(
        ["variant", "wall", "wf-task wait", "wf-task run", "model act", "tool act", "runs",
         "history KB"],
        [(name, *(r[c] for c in cols), r["runs"], r["history_kb"]) for name, r in results.items()],
    )  # fmt: skip
    conv = conversion_costs()
    print("model request payload (whole transcript travels with each model call)")
    print_table(["at", "KB", "to_payloads ms", "from_payloads ms", "scripted provider ms"], conv)
    per_step = results["default"]["wall_ms"]
    ok = per_step <= FLOOR_MS
    print(f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"default: {per_step} ms per step (floor <= {FLOOR_MS:g} ms) {'ok' if ok else 'MISSED'}")
    numbers: dict[str, Any] = {
        "steps": STEPS,
        "per_step_ms": per_step,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    for name, r in results.items():
        numbers[f"{name}_ms"] = r["wall_ms"]
    numbers["variants"] = results
    numbers["model_request"] = [
        {"at": a, "kb": kb, "to_ms": t, "from_ms": f, "provider_ms": p} for a, kb, t, f, p in conv
    ]
    emit_json("agent_step", numbers, ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
