"""Per-hop latency probe: how long does one trip through Temporal matching take?

Bare SDK, no Filegate code in the measured path. Starts its own embedded dev
server (``TemporalDevServer`` plus optional ``--dynamic-config-value`` flags),
then runs a workflow doing ``--steps`` sequential no-op activities in each
variant:

* ``eager``       activity on the workflow's own task queue, same Worker
                  (eager activity dispatch: the activity rides on the
                  workflow-task completion response, no matching hop)
* ``same-tq``     same task queue and Worker, eager dispatch disabled
                  (activity goes through history's transfer queue + matching)
* ``other-tq``    activity on another task queue, served by a second Worker
                  in this process
* ``other-proc``  activity on another task queue, served by a Worker in a
                  separate Python process

Per step it reads from the workflow history (server clock):
  act_sched_start   ActivityTaskScheduled -> ActivityTaskStarted
  act_start_done    ActivityTaskStarted  -> ActivityTaskCompleted
  act_done_wft      ActivityTaskCompleted -> next WorkflowTaskScheduled
  wft_sched_start   WorkflowTaskScheduled -> WorkflowTaskStarted
  wft_start_done    WorkflowTaskStarted  -> WorkflowTaskCompleted
and from the worker's own clock (same host, so comparable):
  act_recv_lag      activity code entered - info.started_time
                    (server dispatch -> worker got the poll response)
  wft_recv_lag      workflow code resumed - workflow.now()
                    (WorkflowTaskStarted time -> worker runs the activation)
  step              one full activity step (ActivityTaskScheduled to the next)

Prints an aligned table (median / p90 in ms) and one JSON line.

Examples::

    .venv/bin/python bench/hop_probe.py
    .venv/bin/python bench/hop_probe.py --steps 30 --variants other-tq,eager
    .venv/bin/python bench/hop_probe.py \
        --dynamic-config history.transferProcessorMaxPollRPS=1000
    .venv/bin/python bench/hop_probe.py --address 127.0.0.1:7233  # existing server
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))

from temporalio import activity, workflow  # noqa: E402
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

VARIANTS = ("eager", "same-tq", "other-tq", "other-proc")
METRICS = (
    "act_sched_start",
    "act_recv_lag",
    "act_start_done",
    "act_done_wft",
    "wft_sched_start",
    "wft_recv_lag",
    "wft_start_done",
    "step",
)


# --------------------------------------------------------------------------
# workflow + activity


@activity.defn(name="hop_noop")
async def hop_noop() -> float:
    """Returns how long after the server's ActivityTaskStarted the code ran (ms)."""
    now = time.time()
    started = activity.info().started_time.timestamp()
    return (now - started) * 1000.0


@workflow.defn(name="HopProbe", sandboxed=False)
class HopProbe:
    """``steps`` sequential no-op activities on ``task_queue``.

    Unsandboxed on purpose: it reads the wall clock to measure how late the
    worker runs each activation; the values only go into the result."""

    @workflow.run
    async def run(self, steps: int, task_queue: str) -> dict[str, list[float]]:
        act_lag: list[float] = []
        wft_lag: list[float] = []
        for _ in range(steps):
            lag = await workflow.execute_activity(
                hop_noop,
                task_queue=task_queue,
                start_to_close_timeout=timedelta(seconds=30),
            )
            act_lag.append(lag)
            wft_lag.append((time.time() - workflow.now().timestamp()) * 1000.0)
        return {"act_recv_lag": act_lag, "wft_recv_lag": wft_lag}


# --------------------------------------------------------------------------
# history analysis


def _ts(event: Any) -> float:
    return event.event_time.ToMicroseconds() / 1000.0  # ms


async def hops_from_history(client: Client, workflow_id: str) -> dict[str, list[float]]:
    events = [e async for e in client.get_workflow_handle(workflow_id).fetch_history_events()]
    by_id = {e.event_id: e for e in events}
    out: dict[str, list[float]] = {k: [] for k in METRICS if not k.endswith("recv_lag")}
    sched_times: list[float] = []
    for i, ev in enumerate(events):
        et = ev.event_type
        if et == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            sched = by_id[ev.activity_task_started_event_attributes.scheduled_event_id]
            out["act_sched_start"].append(_ts(ev) - _ts(sched))
        elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            sched_times.append(_ts(ev))
        elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = ev.activity_task_completed_event_attributes
            out["act_start_done"].append(_ts(ev) - _ts(by_id[done.started_event_id]))
            # the WorkflowTaskScheduled that this completion triggered
            for nxt in events[i + 1 :]:
                if nxt.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
                    out["act_done_wft"].append(_ts(nxt) - _ts(ev))
                    break
        elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            sched = by_id[ev.workflow_task_started_event_attributes.scheduled_event_id]
            if sched.event_id > 2:  # skip the first WFT (workflow start)
                out["wft_sched_start"].append(_ts(ev) - _ts(sched))
        elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            wft = ev.workflow_task_completed_event_attributes
            out["wft_start_done"].append(_ts(ev) - _ts(by_id[wft.started_event_id]))
    out["step"] = [b - a for a, b in itertools.pairwise(sched_times)]
    return out


def summarize(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    s = sorted(values)
    return {
        "n": len(s),
        "p50": round(statistics.median(s), 3),
        "p90": round(s[min(len(s) - 1, int(0.9 * len(s)))], 3),
        "mean": round(statistics.fmean(s), 3),
        "max": round(s[-1], 3),
    }


# --------------------------------------------------------------------------
# workers


def worker_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kw: dict[str, Any] = {}
    if args.wft_polls is not None:
        kw["max_concurrent_workflow_task_polls"] = args.wft_polls
    if args.act_polls is not None:
        kw["max_concurrent_activity_task_polls"] = args.act_polls
    if args.sticky_ratio is not None:
        kw["nonsticky_to_sticky_poll_ratio"] = args.sticky_ratio
    return kw


async def wait_for_pollers(client: Client, task_queue: str, timeout: float = 20.0) -> None:
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        resp = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
            )
        )
        if resp.pollers:
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"no activity pollers on {task_queue} after {timeout}s")


async def run_variant(client: Client, variant: str, args: argparse.Namespace) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:8]
    wf_tq = f"hop-wf-{suffix}"
    act_tq = wf_tq if variant in ("eager", "same-tq") else f"hop-act-{suffix}"
    kw = worker_kwargs(args)
    workers: list[Worker] = []
    proc: subprocess.Popen[bytes] | None = None
    if variant in ("eager", "same-tq"):
        workers.append(
            Worker(
                client,
                task_queue=wf_tq,
                workflows=[HopProbe],
                activities=[hop_noop],
                disable_eager_activity_execution=(variant == "same-tq"),
                **kw,
            )
        )
    else:
        workers.append(Worker(client, task_queue=wf_tq, workflows=[HopProbe], **kw))
        if variant == "other-tq":
            workers.append(Worker(client, task_queue=act_tq, activities=[hop_noop], **kw))
        else:
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker-only",
                "--address",
                args.address,
                "--task-queue",
                act_tq,
            ]
            for flag, val in (
                ("--act-polls", args.act_polls),
                ("--wft-polls", args.wft_polls),
                ("--sticky-ratio", args.sticky_ratio),
            ):
                if val is not None:
                    cmd += [flag, str(val)]
            proc = subprocess.Popen(cmd)
    try:
        async with contextlib_async(workers):
            if proc is not None:
                await wait_for_pollers(client, act_tq)
            await asyncio.sleep(0.5)  # let all pollers settle
            wf_id = f"hop-{variant}-{suffix}"
            began = time.perf_counter()
            result = await client.execute_workflow(
                HopProbe.run,
                args=[args.steps, act_tq],
                id=wf_id,
                task_queue=wf_tq,
            )
            wall = (time.perf_counter() - began) * 1000.0
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
    hops = await hops_from_history(client, wf_id)
    hops.update(result)
    return {
        "variant": variant,
        "workflow_id": wf_id,
        "wall_ms": round(wall, 1),
        "per_step_wall_ms": round(wall / args.steps, 2),
        "hops": {k: summarize(hops.get(k, [])) for k in METRICS},
        "raw": {k: [round(v, 3) for v in hops.get(k, [])] for k in METRICS} if args.raw else None,
    }


class contextlib_async:  # tiny helper: enter several workers at once
    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers

    async def __aenter__(self) -> None:
        for w in self.workers:
            await w.__aenter__()

    async def __aexit__(self, *exc: Any) -> None:
        for w in reversed(self.workers):
            await w.__aexit__(*exc)


async def worker_only(args: argparse.Namespace) -> None:
    client = await Client.connect(args.address)
    async with Worker(
        client, task_queue=args.task_queue, activities=[hop_noop], **worker_kwargs(args)
    ):
        await asyncio.Event().wait()


# --------------------------------------------------------------------------
# output


def print_table(results: list[dict[str, Any]]) -> None:
    cols = ["variant", *METRICS, "wall/step"]
    rows = []
    for r in results:
        row = [r["variant"]]
        for m in METRICS:
            s = r["hops"].get(m) or {}
            row.append(f"{s.get('p50', float('nan')):.2f}/{s.get('p90', float('nan')):.2f}")
        row.append(f"{r['per_step_wall_ms']:.1f}")
        rows.append(row)
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    print("per-hop ms, p50/p90 (history event times; *_recv_lag from the worker clock)")
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


# --------------------------------------------------------------------------
# main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument(
        "--variants", default="eager,same-tq,other-tq,other-proc", help=f"comma list of {VARIANTS}"
    )
    p.add_argument(
        "--dynamic-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="passed as --dynamic-config-value to the dev server (value is JSON)",
    )
    p.add_argument("--server-arg", action="append", default=[], help="extra raw arg for start-dev")
    p.add_argument("--address", help="use an already running server instead of starting one")
    p.add_argument("--repeat", type=int, default=1, help="run each variant this many times")
    p.add_argument("--wft-polls", type=int)
    p.add_argument("--act-polls", type=int)
    p.add_argument("--sticky-ratio", type=float)
    p.add_argument("--raw", action="store_true", help="include raw per-step values in the JSON")
    p.add_argument("--worker-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--task-queue", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for v in args.variants.split(","):
        if v not in VARIANTS:
            p.error(f"unknown variant {v!r}; choose from {VARIANTS}")
    return args


async def probe(args: argparse.Namespace) -> list[dict[str, Any]]:
    client = await Client.connect(args.address)
    results = []
    for _ in range(args.repeat):
        for v in args.variants.split(","):
            results.append(await run_variant(client, v, args))
    return results


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker_only:
        asyncio.run(worker_only(args))
        return
    if args.address:
        results = asyncio.run(probe(args))
        server_info: dict[str, Any] = {"address": args.address}
    else:
        from filegate.devstack.servers import TemporalDevServer

        class ProbeServer(TemporalDevServer):
            """TemporalDevServer plus extra start-dev flags (dynamic config)."""

            def _command(self) -> list[str]:
                cmd = super()._command()
                for kv in args.dynamic_config:
                    cmd += ["--dynamic-config-value", kv]
                return cmd + list(args.server_arg)

        with (
            tempfile.TemporaryDirectory(prefix="hop-probe-") as tmp,
            ProbeServer(Path(tmp) / "temporal") as server,
        ):
            args.address = server.address
            results = asyncio.run(probe(args))
            server_info = {"address": server.address, "startup_s": server.startup_seconds}
    print_table(results)
    print(
        json.dumps(
            {
                "bench": "hop_probe",
                "steps": args.steps,
                "dynamic_config": args.dynamic_config,
                "server_args": args.server_arg,
                "worker_options": worker_kwargs(args),
                "server": server_info,
                "pid": os.getpid(),
                "results": [{k: v for k, v in r.items() if v is not None} for r in results],
            }
        )
    )


if __name__ == "__main__":
    main()
