"""History-size and cost-per-step benchmark and its floors (contract §8 "history stays small").

Run: ``python bench/history.py [--steps 100 1000] [--threshold BYTES] [--compare]``
or ``python bench/history.py --flat`` from the project root. Starts an embedded
Temporal dev server and S3 (SeaweedFS) in a temp dir, a Filesystem tools
worker over a 20 KB file, and an agent worker with an artifact store, all on
the S3 payload codec (the production setup). A scripted agent reads the whole
file once per step; each run reports total history bytes summed over its
continue-as-new chain, event count, the largest payload, bytes per step and
time per step (the chain's first to last event, server time, over its steps;
also for its first and its last run alone), then checks the floors:

* bytes per step under 20 000 (the 100-step history under 2 MB);
* bytes per step at most 2 233, the measured baseline of this workload
  (``BASELINE_BYTES_PER_STEP``): a change may keep history as small or make it
  smaller, not grow it;
* every run completes (final answer after exactly N steps);
* bytes per step of the longest run at most 1.2x those of the shortest
  (growth does not depend on the transcript's length);
* every payload in history under 64 KiB;
* with ``--flat``: N=100 (``SHORT_REPEATS`` runs, their median) and N=10 000,
  and time per step at N=10 000 at most 1.2x that at N=100 (the script, the
  transcript and the carry over continue-as-new must not make a step cost
  more the longer the run). Without it the time ratio is printed, not checked.

Exits 1 when a floor fails. ``--compare`` adds runs of at most 50 steps without
the codec (transcript by reference only, and fully by value), for reference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))

from google.protobuf.descriptor import FieldDescriptor  # noqa: E402
from google.protobuf.message import Message as ProtoMessage  # noqa: E402
from temporalio.api.common.v1 import Payload  # noqa: E402
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.api.history.v1 import HistoryEvent  # noqa: E402
from temporalio.client import Client  # noqa: E402

from filegate.activities.history import CODEC_THRESHOLD, filegate_data_converter  # noqa: E402
from filegate.backends.artifacts import ArtifactStore  # noqa: E402
from filegate.backends.filesystem import FilesystemBackend  # noqa: E402
from filegate.devstack.s3 import S3DevServer  # noqa: E402
from filegate.devstack.servers import TemporalDevServer  # noqa: E402
from filegate.kernel.messages import ModelSpec  # noqa: E402
from filegate.kernel.protocol import BackendProtocol  # noqa: E402
from filegate.worker import agent_worker, tools_worker  # noqa: E402
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec, Limits  # noqa: E402
from filegate.workflows.runner import sandboxed_runner  # noqa: E402

FILE_LINES = 200
LINE = 99  # + newline: 200 x 100 = 20 000 chars
DEFAULT_STEPS = (100, 1000)
MAX_BYTES_PER_STEP = 20_000  # = a 100-step history under 2 MB
BASELINE_BYTES_PER_STEP = 2_233
"""Bytes per step measured for this workload before the remote-speed work; the
100- and 1000-step runs must stay at or under it (history must not grow)."""
MAX_GROWTH = 1.2
"""Bytes per step and, with ``--flat``, time per step: the longest run over the shortest."""
FLAT_STEPS = (100, 10_000)
SHORT_REPEATS = 3
"""``--flat``: runs of the short length; their median time per step is the baseline
(one 100-step run lasts seconds, so one busy moment of a shared machine moves it)."""
MAX_PAYLOAD = 64 * 1024
COMPARE_STEPS = 50
"""Without the codec, the result of a longer run (its transcript) exceeds Temporal's 2 MB."""


# ------------------------------------------------------------------ measuring history


def payload_sizes(message: ProtoMessage) -> Iterator[int]:
    """Serialized size of every Payload anywhere in ``message`` (maps and lists too)."""
    for field, value in message.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            items = list(value.values())
        elif isinstance(value, ProtoMessage):
            items = [value]
        else:  # a repeated message field
            items = list(value)
        for item in items:
            if isinstance(item, Payload):
                yield item.ByteSize()
            elif isinstance(item, ProtoMessage):
                yield from payload_sizes(item)


@dataclass
class HistoryStats:
    """Size of one workflow's history, summed over its continue-as-new chain."""

    runs: int
    events: int
    history_bytes: int
    largest_event: int
    largest_payload: int
    run_bytes: list[int]
    """History bytes of each run, oldest first."""
    seconds: float = 0.0
    """The chain's first event to its last (server time)."""
    run_step_ms: list[float] | None = None
    """Per run: its first event to its last over its tool calls, in ms (oldest first)."""

    @classmethod
    def of(cls, runs: list[list[HistoryEvent]]) -> HistoryStats:
        events = [e for run in runs for e in run]
        return cls(
            runs=len(runs),
            events=len(events),
            history_bytes=sum(e.ByteSize() for e in events),
            largest_event=max(e.ByteSize() for e in events),
            largest_payload=max((s for e in events for s in payload_sizes(e)), default=0),
            run_bytes=[sum(e.ByteSize() for e in run) for run in runs],
            seconds=span(events),
            run_step_ms=[1000 * span(run) / max(tool_calls(run), 1) for run in runs],
        )


def span(events: list[HistoryEvent]) -> float:
    """Seconds from the first event to the last."""
    return (
        events[-1].event_time.ToDatetime().timestamp()
        - events[0].event_time.ToDatetime().timestamp()
    )


def tool_calls(events: list[HistoryEvent]) -> int:
    """Tool activities a run scheduled (one per step in this workload)."""
    return sum(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED for e in events)


async def history_stats(client: Client, workflow_id: str) -> HistoryStats:
    """Walk back from the latest run through ``continued_execution_run_id`` links.

    (Following the links, not visibility, so a just-finished chain is complete.)
    """
    runs: list[list[HistoryEvent]] = []
    run_id: str | None = None
    while True:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        events = [e async for e in handle.fetch_history_events()]
        runs.append(events)
        started = events[0].workflow_execution_started_event_attributes
        if not started.continued_execution_run_id:
            return HistoryStats.of(runs[::-1])
        run_id = started.continued_execution_run_id


# ------------------------------------------------------------------ the scripted runs


def script(steps: int) -> ModelSpec:
    """``steps`` model calls: a whole-file read each, then the final answer."""
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"id": f"r{k}", "name": "read_file",
                         "args": {"file_path": "/data.txt", "limit": FILE_LINES}}]}
        for k in range(steps - 1)
    ]  # fmt: skip
    turns.append({"content": "done"})
    return ModelSpec(provider="scripted", options={"script": {"turns": turns}})


def write_data(root: Path) -> None:
    (root / "data.txt").write_text(
        "".join(f"{i:05d} " + "d" * (LINE - 6) + "\n" for i in range(FILE_LINES))
    )


async def one_run(
    client: Client, store: ArtifactStore | None, tools_queue: str, steps: int
) -> dict[str, Any]:
    """One scripted run on an agent worker holding ``store``; its numbers."""
    queue, workflow_id = f"agent-{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}"
    input = AgentInput(
        task="read the data file once per step",
        model=script(steps),
        backend=BackendSpec(default=BackendRef(kind="remote", name="fs", task_queue=tools_queue)),
        limits=Limits(max_steps=steps + 1),
    )
    started = time.perf_counter()
    async with agent_worker(client, queue, artifacts=store, workflow_runner=sandboxed_runner()):
        result = await client.execute_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=queue
        )
    seconds = time.perf_counter() - started
    stats = history_stats_row(await history_stats(client, workflow_id), result.steps)
    completed = result.stop_reason == "final_answer" and result.steps == steps
    earlier = result.earlier_transcript  # messages the workflow let go as transcript pages
    return {
        "steps": result.steps,
        "completed": completed,
        "seconds": round(seconds, 1),
        "paged_messages": earlier.end if earlier is not None else 0,
        **stats,
    }


def history_stats_row(stats: HistoryStats, steps: int) -> dict[str, Any]:
    row = asdict(stats)
    del row["run_bytes"], row["run_step_ms"], row["seconds"]
    step_ms = stats.run_step_ms or [0.0]
    return {
        **row,
        "bytes_per_step": round(stats.history_bytes / max(steps, 1)),
        "ms_per_step": round(1000 * stats.seconds / max(steps, 1), 1),
        "first_run_ms_per_step": round(step_ms[0], 1),
        "last_run_ms_per_step": round(step_ms[-1], 1),
        "run_ms_per_step": [round(ms, 1) for ms in step_ms],
    }


# ------------------------------------------------------------------ floors


def short_and_long(rows: dict[str, dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The runs of the fewest steps, and the (first) run of the most."""
    fewest = min(r["steps"] for r in rows.values())
    most = max(rows.values(), key=lambda r: r["steps"])
    return [r for r in rows.values() if r["steps"] == fewest], most


def time_ratio(rows: dict[str, dict[str, Any]]) -> tuple[float, float, float]:
    """(short ms/step: the median of the shortest runs, long ms/step, their ratio)."""
    short, long = short_and_long(rows)
    base = statistics.median(r["ms_per_step"] for r in short)
    return base, long["ms_per_step"], long["ms_per_step"] / max(base, 1e-9)


def check_floors(
    rows: dict[str, dict[str, Any]], flat: bool = False
) -> list[tuple[str, bool, str]]:
    """(floor, passed, measured) for the codec runs in ``rows``; ``flat``: time per step too."""
    checks: list[tuple[str, bool, str]] = []
    for name, row in rows.items():
        checks.append((f"{name}: completes", row["completed"], f"{row['steps']} steps"))
        checks.append((
            f"{name}: bytes/step < {MAX_BYTES_PER_STEP:,}",
            row["bytes_per_step"] < MAX_BYTES_PER_STEP,
            f"{row['bytes_per_step']:,}",
        ))  # fmt: skip
        checks.append((
            f"{name}: bytes/step <= {BASELINE_BYTES_PER_STEP:,} (baseline)",
            row["bytes_per_step"] <= BASELINE_BYTES_PER_STEP,
            f"{row['bytes_per_step']:,}",
        ))  # fmt: skip
        checks.append((
            f"{name}: largest payload < {MAX_PAYLOAD:,}",
            row["largest_payload"] < MAX_PAYLOAD,
            f"{row['largest_payload']:,}",
        ))  # fmt: skip
    if len(rows) > 1:
        shorts, long = short_and_long(rows)
        short = shorts[0]
        ratio = long["bytes_per_step"] / max(short["bytes_per_step"], 1)
        checks.append((
            f"bytes/step {long['steps']} vs {short['steps']} steps <= {MAX_GROWTH}x",
            ratio <= MAX_GROWTH,
            f"{ratio:.2f}x",
        ))  # fmt: skip
        if flat:
            base, per_step, ratio = time_ratio(rows)
            checks.append((
                f"ms/step {long['steps']} vs {short['steps']} steps <= {MAX_GROWTH}x",
                ratio <= MAX_GROWTH,
                f"{ratio:.2f}x ({per_step} vs {base:.1f} ms)",
            ))  # fmt: skip
    return checks


def run_plan(steps: list[int], flat: bool) -> list[tuple[str, int]]:
    """(row name, steps) of the codec runs: with ``flat``, the shortest ``SHORT_REPEATS`` times."""
    plan: list[tuple[str, int]] = []
    for n in steps:
        repeats = SHORT_REPEATS if flat and n == min(steps) else 1
        plan += [
            (f"codec N={n}" + (f" #{k + 1}" if repeats > 1 else ""), n) for k in range(repeats)
        ]
    return plan


async def main(
    steps: list[int], threshold: int, compare: bool, flat: bool = False
) -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root = base / "ws"
        root.mkdir()
        write_data(root)
        with TemporalDevServer(base / "temporal") as temporal, S3DevServer(base / "s3") as s3:
            store = ArtifactStore(s3.client(), "bench-artifacts", namespace="bench")

            async def client_for(codec: bool) -> Client:
                converter = filegate_data_converter(store if codec else None, threshold)
                return await Client.connect(
                    temporal.address, namespace=temporal.namespace, data_converter=converter
                )

            coded, plain = await client_for(True), await client_for(False)
            runs: list[tuple[str, Client, ArtifactStore | None, int]] = [
                (name, coded, store, n) for name, n in run_plan(steps, flat)
            ]
            if compare:
                n = min(*steps, COMPARE_STEPS)
                runs += [
                    (f"ref, no codec N={n}", plain, store, n),
                    (f"by value N={n}", plain, None, n),
                ]
            fs: dict[str, BackendProtocol] = {"fs": FilesystemBackend(root)}
            out: dict[str, dict[str, Any]] = {}
            for name, client, agent_store, n in runs:
                queue = f"tools-{uuid.uuid4().hex[:8]}"
                journal = base / f"journal-{uuid.uuid4().hex[:8]}"
                async with tools_worker(client, queue, fs, journal):
                    out[name] = await one_run(client, agent_store, queue, n)
    return out


def report(rows: dict[str, dict[str, Any]], flat: bool = False) -> bool:
    """Print the table and the floors; True when every floor holds."""
    print(
        f"{'run':<24}{'runs':>5}{'steps':>6}{'history bytes':>15}{'events':>8}"
        f"{'largest payload':>17}{'bytes/step':>12}{'ms/step':>9}{'first/last run':>16}"
        f"{'seconds':>9}"
    )
    for name, row in rows.items():
        runs = f"{row['first_run_ms_per_step']}/{row['last_run_ms_per_step']}"
        print(
            f"{name:<24}{row['runs']:>5}{row['steps']:>6}{row['history_bytes']:>15,}"
            f"{row['events']:>8}{row['largest_payload']:>17,}{row['bytes_per_step']:>12,}"
            f"{row['ms_per_step']:>9}{runs:>16}{row['seconds']:>9}"
        )
    coded = {k: v for k, v in rows.items() if k.startswith("codec")}
    checks = check_floors(coded, flat)
    print()
    for floor, passed, measured in checks:
        print(f"{'PASS' if passed else 'FAIL'}  {floor:<48} {measured}")
    ok = all(passed for _, passed, _ in checks)
    numbers: dict[str, Any] = {"runs": rows, "floors_pass": ok}
    if len(coded) > 1:
        base, per_step, ratio = time_ratio(coded)
        numbers["ms_per_step_ratio"] = round(ratio, 2)
        if not flat:
            print(f"info  ms/step longest vs shortest run: {ratio:.2f}x ({per_step} vs {base:.1f})")
    load = os.getloadavg()[0]
    print(f"load average (1 min) {load:.2f} on {os.cpu_count()} CPUs")
    print(json.dumps({**numbers, "load_avg_1m": round(load, 2)}))
    return ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps",
        type=int,
        nargs="+",
        default=None,
        help=f"run lengths (default {DEFAULT_STEPS}; with --flat {FLAT_STEPS})",
    )
    parser.add_argument(
        "--flat",
        action="store_true",
        help=f"check time per step: {SHORT_REPEATS} short runs and a long one",
    )
    parser.add_argument("--threshold", type=int, default=CODEC_THRESHOLD,
                        help="payload codec threshold in bytes")  # fmt: skip
    parser.add_argument("--compare", action="store_true",
                        help="also run <= 50 steps without the codec and by value")  # fmt: skip
    args = parser.parse_args()
    steps = args.steps or list(FLAT_STEPS if args.flat else DEFAULT_STEPS)
    rows = asyncio.run(main(steps, args.threshold, args.compare, args.flat))
    sys.exit(0 if report(rows, args.flat) else 1)
