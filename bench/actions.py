"""What Filegate costs in Temporal Actions: per agent step, per approval, per call.

Run: ``python bench/actions.py [--steps 50] [--ui-seconds 60]`` (from the project root).

On Temporal Cloud every workflow start, activity attempt, heartbeat, signal,
query, update and timer is a billed Action. The server meters them itself:
its ``action`` counter (``/metrics``, labelled by ``action_type``) is what
this bench reads, before and after each scenario, on a private dev server:

- **step**: a ``--steps``-step scripted run (one ``read_file`` per model turn)
  on an agent worker and a remote tools worker, started and awaited with the
  client only (the library path);
- **step, with filegate run's progress**: the same run through ``filegate run``
  (its in-process workers and its progress display, which polls the run);
- **approval**: a run that stops for one approval, the approval UI's listing
  open for ``--ui-seconds`` (one refresh every 2 s, as the page does), then the
  decision; the UI's part is reported on its own;
- **call**: one ``filegate call read_file`` against a tools worker (a
  standalone activity).

Prints a table and a JSON line. There is no floor: the numbers are for
docs/benchmarks.md and for cutting what polling costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Bench, call, remote, scripted_input, temporal_bench

from filegate.backends.filesystem import FilesystemBackend
from filegate.cli.run import approval_counters
from filegate.cli.ui.listing import approval_listing
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.protocol import BackendProtocol
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import AgentWorkflow, Decision

REFRESH_SECONDS = 2.0
"""The approval page's refresh interval (cli/ui/static/approvals.js)."""

_ACTION = re.compile(r"^action\{(?P<labels>[^}]*)\}\s+(?P<value>[0-9.e+]+)$")


def actions(bench: Bench) -> Counter[str]:
    """The server's ``action`` counter for the bench namespace, by action type."""
    url = f"http://127.0.0.1:{bench.server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    found: Counter[str] = Counter()
    for line in text.splitlines():
        match = _ACTION.match(line)
        if match is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if labels.get("namespace") == bench.server.namespace:
            found[labels.get("action_type", "?")] += int(float(match["value"]))
    return found


async def settled(bench: Bench) -> Counter[str]:
    """The counter once it stops moving (the server meters asynchronously)."""
    last = actions(bench)
    while True:
        await asyncio.sleep(1.0)
        now = actions(bench)
        if now == last:
            return now
        last = now


def delta(after: Counter[str], before: Counter[str]) -> Counter[str]:
    return Counter({k: after[k] - before[k] for k in after if after[k] - before[k] > 0})


def env_for(bench: Bench) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FILEGATE_", "TEMPORAL_"))}
    env.update(
        TEMPORAL_ADDRESS=bench.server.address,
        TEMPORAL_NAMESPACE=bench.server.namespace,
        FILEGATE_STATE_DIR=str(bench.tmp / "cli-state"),
    )
    return env


def reads(steps: int) -> list[dict[str, object]]:
    return [{"tool_calls": [call(f"r{n}", "read_file", file_path="/a.txt")]} for n in range(steps)]


async def step_scenario(bench: Bench, steps: int) -> Counter[str]:
    agent_q, tools_q = bench.queues()
    root = bench.tmp / "ws-step"
    root.mkdir()
    (root / "a.txt").write_text("hello\n")
    fs: dict[str, BackendProtocol] = {"fs": FilesystemBackend(str(root), virtual_mode=True)}
    async with (
        agent_worker(bench.client, agent_q),
        tools_worker(bench.client, tools_q, fs, bench.tmp / "journal-step"),
    ):
        before = await settled(bench)
        await bench.client.execute_workflow(
            AgentWorkflow.run,
            scripted_input(reads(steps), remote("fs", tools_q)),
            id=f"actions-step-{agent_q}",
            task_queue=agent_q,
        )
        return delta(await settled(bench), before)


async def run_cli_scenario(bench: Bench, steps: int) -> Counter[str]:
    root = bench.tmp / "ws-run"
    root.mkdir()
    (root / "a.txt").write_text("hello\n")
    script = bench.tmp / "script.json"
    script.write_text(json.dumps({"turns": [*reads(steps), {"content": "done"}]}))
    before = await settled(bench)
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "filegate", "run", "read", "--model", f"scripted:{script}",
         "--root", str(root), "--max-steps", str(steps + 5)],
        env=env_for(bench), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"filegate run failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return delta(await settled(bench), before)


async def approval_scenario(bench: Bench, ui_seconds: float) -> tuple[Counter[str], Counter[str]]:
    agent_q, tools_q = bench.queues()
    root = bench.tmp / "ws-approval"
    (root / "docs").mkdir(parents=True)
    fs: dict[str, BackendProtocol] = {"fs": FilesystemBackend(str(root), virtual_mode=True)}
    write = call("w", "write_file", file_path="/docs/a.md", content="hi\n")
    input = scripted_input([{"tool_calls": [write]}], remote("fs", tools_q))
    input.permissions = [
        FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="interrupt")
    ]
    async with (
        agent_worker(bench.client, agent_q),
        tools_worker(bench.client, tools_q, fs, bench.tmp / "journal-approval"),
    ):
        before = await settled(bench)
        # With the approval counters, as filegate run / submit start runs.
        handle = await bench.client.start_workflow(
            AgentWorkflow.run, input, id=f"actions-approval-{agent_q}", task_queue=agent_q,
            search_attributes=await approval_counters(bench.client),
        )  # fmt: skip
        while not (pending := await handle.query(AgentWorkflow.pending_approvals)) or any(
            p.preview_pending for p in pending
        ):
            await asyncio.sleep(0.5)
        ui_before = await settled(bench)
        end = time.monotonic() + ui_seconds
        while time.monotonic() < end:
            await approval_listing(bench.client)
            await asyncio.sleep(REFRESH_SECONDS)
        ui = delta(await settled(bench), ui_before)
        decision = Decision(id=pending[0].id, decision="approve")
        await handle.execute_update(AgentWorkflow.decide_update, decision)
        await handle.result()
        whole = delta(await settled(bench), before)
    return whole, ui


async def call_scenario(bench: Bench) -> Counter[str]:
    _, tools_q = bench.queues()
    root = bench.tmp / "ws-call"
    root.mkdir()
    (root / "a.txt").write_text("hello\n")
    fs: dict[str, BackendProtocol] = {"fs": FilesystemBackend(str(root), virtual_mode=True)}
    async with tools_worker(bench.client, tools_q, fs, bench.tmp / "journal-call"):
        before = await settled(bench)
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "filegate", "call", "read_file",
             "--args", '{"file_path": "/a.txt"}', "--backend", "filesystem",
             "--tools-queue", tools_q, "--name", "fs"],
            env=env_for(bench), capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"filegate call failed: {done.stderr[-2000:]}")
        return delta(await settled(bench), before)


def line(name: str, counts: Counter[str], per: float = 1.0, unit: str = "") -> str:
    total = sum(counts.values())
    top = ", ".join(f"{k.removeprefix('grpc_')} {v}" for k, v in counts.most_common(4))
    scaled = f" = {total / per:.1f}{unit}" if per != 1.0 else ""
    return f"  {name:<34} {total:>6} actions{scaled}   ({top})"


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--ui-seconds", type=float, default=60.0)
    args = parser.parse_args()
    async with temporal_bench("actions") as bench:
        step = await step_scenario(bench, args.steps)
        run_cli = await run_cli_scenario(bench, args.steps)
        approval, ui = await approval_scenario(bench, args.ui_seconds)
        one_call = await call_scenario(bench)
    print(f"Temporal Actions (the server's own action counter), {args.steps}-step runs:")
    print(line(f"run, client only ({args.steps} steps)", step, args.steps, "/step"))
    print(line(f"filegate run ({args.steps} steps)", run_cli, args.steps, "/step"))
    print(line("one approval, whole run", approval))
    print(line(f"  of which the UI open {args.ui_seconds:g} s", ui, args.ui_seconds / 60, "/min"))
    print(line("one filegate call", one_call))
    if not one_call:
        print("    (this server's action counter does not meter standalone activities;"
              " Temporal Cloud bills the activity: at least 1)")  # fmt: skip
    print(json.dumps({
        "bench": "actions", "steps": args.steps,
        "per_step_client": round(sum(step.values()) / args.steps, 2),
        "per_step_filegate_run": round(sum(run_cli.values()) / args.steps, 2),
        "approval_run": sum(approval.values()),
        "ui_per_minute": round(sum(ui.values()) / (args.ui_seconds / 60), 1),
        "call": sum(one_call.values()),
        "by_type": {"step": step, "filegate_run": run_cli, "approval": approval, "ui": ui,
                    "call": one_call},
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    code = asyncio.run(main())
    sys.stdout.flush()
    os._exit(code)  # a connected client can hang the interpreter's exit (sdk-python #300)
