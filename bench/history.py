"""History-size benchmark: the model transcript by value vs by reference (SPEC §8).

Run: ``python bench/history.py [--steps 50]`` from the project root. Starts an
embedded Temporal dev server and S3 (SeaweedFS) in a temp dir, a Filesystem
tools worker over a 20 KB file, and runs the same scripted agent (one
``read_file`` of the whole file per step) twice: with an agent worker without
an artifact store (every model call carries the whole conversation) and with
one (model calls carry a transcript reference plus the new messages). A third
run adds the S3 payload codec. Prints history bytes, event count and the
largest event per run (summed over the continue-as-new chain), and one JSON
line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from temporalio.client import Client  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from activities.history import filegate_data_converter  # noqa: E402
from activities.messages import ModelSpec  # noqa: E402
from activities.model import ModelActivities  # noqa: E402
from backends.artifacts import ArtifactStore  # noqa: E402
from backends.embedded import S3DevServer, TemporalDevServer  # noqa: E402
from backends.filesystem import FilesystemBackend  # noqa: E402
from backends.protocol import BackendProtocol  # noqa: E402
from worker import tools_worker  # noqa: E402
from workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec, Limits  # noqa: E402
from workflows.agent import sandboxed_runner  # noqa: E402

FILE_LINES = 200
LINE = 99  # + newline: 200 x 100 = 20 000 chars


def script(steps: int) -> ModelSpec:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"id": f"r{k}", "name": "read_file",
                         "args": {"file_path": "/data.txt", "limit": FILE_LINES}}]}
        for k in range(steps - 1)
    ]  # fmt: skip
    turns.append({"content": "done"})
    return ModelSpec(provider="scripted", options={"script": {"turns": turns}})


async def one_run(
    client: Client, store: ArtifactStore | None, tools_queue: str, steps: int
) -> dict[str, Any]:
    queue, workflow_id = f"agent-{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}"
    input = AgentInput(
        task="read the data file once per step",
        model=script(steps),
        backend=BackendSpec(default=BackendRef(kind="remote", name="fs", task_queue=tools_queue)),
        limits=Limits(max_steps=steps + 1),
    )
    async with Worker(
        client,
        task_queue=queue,
        workflows=[AgentWorkflow],
        activities=[ModelActivities(store).call_model],
        workflow_runner=sandboxed_runner(),
    ):
        result = await client.execute_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=queue
        )
    events = []
    runs = [e async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    for run in runs:  # continue-as-new (suggested by the server) makes several runs
        handle = client.get_workflow_handle(workflow_id, run_id=run.run_id)
        events += [e async for e in handle.fetch_history_events()]
    return {
        "steps": result.steps,
        "runs": len(runs),
        "history_bytes": sum(e.ByteSize() for e in events),
        "events": len(events),
        "largest_event_bytes": max(e.ByteSize() for e in events),
    }


async def main(steps: int) -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root = base / "ws"
        root.mkdir()
        (root / "data.txt").write_text(
            "".join(f"{i:05d} " + "d" * (LINE - 6) + "\n" for i in range(FILE_LINES))
        )
        with TemporalDevServer(base / "temporal") as temporal, S3DevServer(base / "s3") as s3:
            store = ArtifactStore(s3.client(), "bench-artifacts", namespace="bench")
            plain = await Client.connect(temporal.address, namespace=temporal.namespace,
                                         data_converter=filegate_data_converter(None))  # fmt: skip
            coded = await Client.connect(temporal.address, namespace=temporal.namespace,
                                         data_converter=filegate_data_converter(store))  # fmt: skip
            out: dict[str, dict[str, Any]] = {}
            fs: dict[str, BackendProtocol] = {"fs": FilesystemBackend(root)}
            for name, client, agent_store in (
                ("by_value", plain, None),
                ("by_reference", plain, store),
                ("by_reference+codec", coded, store),
            ):
                queue = f"tools-{uuid.uuid4().hex[:8]}"
                async with tools_worker(client, queue, fs, base / f"journal-{name}"):
                    out[name] = await one_run(client, agent_store, queue, steps)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    numbers = asyncio.run(main(parser.parse_args().steps))
    header = f"{'run':<22}{'runs':>5}{'steps':>6}{'history bytes':>15}{'events':>8}"
    print(header + f"{'largest event':>15}")
    for name, row in numbers.items():
        print(
            f"{name:<22}{row['runs']:>5}{row['steps']:>6}{row['history_bytes']:>15,}{row['events']:>8}"
            f"{row['largest_event_bytes']:>15,}"
        )
    print(json.dumps(numbers))
