"""A long S3 outage under running agents (issue 34, item 1): every run completes.

Run: ``python bench/s3_outage.py [--outage 300]`` from the project root. Starts
an embedded Temporal dev server and a private S3 (SeaweedFS) in a temp dir, an
agent worker with an artifact store and a local-shell tools worker (in process,
default outage budget), then three scripted runs, and stops S3 for ``--outage``
seconds (SIGTERM, relaunched on the same ports and data directory):

* ``offload``: its command is running when S3 stops; its 90 000-character output
  must be stored (contract §7) while S3 is down;
* ``model``: started while S3 is down; its first model call must store the
  transcript;
* ``approval``: a write waits for a reviewer; approved while S3 is down, after
  which the write and the next model call need S3.

Prints, per run, whether it completed, its duration, how often each command
ran (must be once) and whether the stored output reads back, then exits 1 when
a run did not complete or something ran twice.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from filegate.activities.tools import FileToolActivities
from filegate.backends.artifacts import ArtifactStore
from filegate.backends.embedded import TemporalDevServer
from filegate.backends.embedded_s3 import S3DevServer
from filegate.backends.local_shell import LocalShellBackend
from filegate.kernel.messages import ModelSpec
from filegate.kernel.permissions import FilesystemPermission
from filegate.worker import agent_worker
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec, Decision
from filegate.workflows.inputs import Limits
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

LINES = 900
BIG = f"echo ran >> runs.log; for i in $(seq 1 {LINES}); do printf 'R%05d%093d\\n' $i 0; done"


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": args}


def command_turns(d: str) -> list[Any]:
    command = f"mkdir -p {d} && cd {d} && echo started > started; sleep 3; {BIG}"
    read = call("x2", "read_file", file_path="/large_tool_results/1:0:x1", offset=600, limit=2)
    return [
        {"tool_calls": [call("x1", "execute", command=command)]},
        {"tool_calls": [read]},
        {"content": f"{d} done"},
    ]


APPROVAL_TURNS = [
    {"tool_calls": [call("w1", "write_file", file_path="/docs/plan.md", content="plan\n")]},
    {"tool_calls": [call("r1", "read_file", file_path="/docs/plan.md")]},
    {"content": "approval done"},
]


def agent_input(turns: list[Any], ref: BackendRef, **extra: Any) -> AgentInput:
    return AgentInput(
        task="run it",
        model=ModelSpec(provider="scripted", options={"script": {"turns": turns}}),
        backend=BackendSpec(default=ref),
        limits=Limits(max_steps=10),
        **extra,
    )


async def bench(outage: float, base: Path) -> int:
    temporal = TemporalDevServer(base / "temporal").start()
    s3 = S3DevServer(base / "s3").start()
    try:
        client = await Client.connect(
            temporal.address, namespace=temporal.namespace, data_converter=pydantic_data_converter
        )
        store = ArtifactStore(s3.client(), "bench-artifacts", namespace="bench")
        root = base / "shell"
        tools = FileToolActivities(
            {"shell": LocalShellBackend(str(root))}, base / "journal", artifacts=store
        )
        agent_q, tools_q = f"b-a-{uuid.uuid4().hex[:6]}", f"b-t-{uuid.uuid4().hex[:6]}"
        ref = BackendRef(kind="remote", name="shell", task_queue=tools_q, can_execute=True)
        ask = FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="interrupt")
        began: dict[str, float] = {}

        async def start(name: str, input: AgentInput) -> Any:
            began[name] = time.monotonic()
            return await client.start_workflow(
                AgentWorkflow.run, input, id=f"bench-{name}-{uuid.uuid4().hex[:8]}",
                task_queue=agent_q,
            )  # fmt: skip

        async with (
            agent_worker(client, agent_q, artifacts=store),
            Worker(client, task_queue=tools_q, activities=tools.activities()),
        ):
            approval = await start("approval", agent_input(APPROVAL_TURNS, ref, permissions=[ask]))
            offload = await start("offload", agent_input(command_turns("offload"), ref))
            while not (root / "offload" / "started").exists():
                await asyncio.sleep(0.1)
            pending: list[Any] = []
            while not pending:
                pending = await approval.query(AgentWorkflow.pending_approvals)
                await asyncio.sleep(0.2)
            await asyncio.to_thread(s3.stop)
            down = time.monotonic()
            print(f"S3 stopped; outage of {outage:.0f} s", flush=True)
            model = await start("model", agent_input(command_turns("model"), ref))
            await asyncio.sleep(outage / 2)
            await approval.execute_update(
                AgentWorkflow.decide_update, Decision(id=pending[0].id, decision="approve")
            )
            print(f"approved at {time.monotonic() - down:.0f} s into the outage", flush=True)
            await asyncio.sleep(max(0.0, outage - (time.monotonic() - down)))
            await asyncio.to_thread(s3.start)
            print(f"S3 back after {time.monotonic() - down:.0f} s", flush=True)
            handles = {"offload": offload, "model": model, "approval": approval}
            outcomes = await asyncio.gather(
                *(asyncio.wait_for(h.result(), 900) for h in handles.values()),
                return_exceptions=True,
            )
        failed = 0
        for name, result in zip(handles, outcomes, strict=True):
            took = time.monotonic() - began[name]
            if isinstance(result, BaseException):
                print(f"{name:9s} FAILED after {took:.0f} s: {result}")
                failed += 1
                continue
            ok = result.stop_reason == "final_answer"
            ran = (root / name / "runs.log").read_text().count("ran") if name != "approval" else 1
            extra = f"command ran {ran}x" if name != "approval" else "write applied once"
            if name == "approval":
                ok = ok and (root / "docs" / "plan.md").read_text() == "plan\n"
            else:
                out = {m["tool_call_id"]: m for m in result.transcript if m["role"] == "tool"}
                ok = ok and ran == 1 and "R00601" in out["x2"]["content"]
            print(f"{name:9s} {'completed' if ok else 'WRONG':9s} in {took:.0f} s ({extra})")
            failed += 0 if ok else 1
        print(f"outage {outage:.0f} s: {3 - failed}/3 runs completed correctly")
        return 1 if failed else 0
    finally:
        s3.stop()
        temporal.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outage", type=float, default=300.0, help="seconds S3 is down")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="filegate-s3-outage-") as base:
        return asyncio.run(bench(args.outage, Path(base)))


if __name__ == "__main__":
    sys.exit(main())
