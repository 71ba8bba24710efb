"""An S3 outage in the deployment shape (issue 49, items 2 and 3).

Separate ``filegate worker --role agent`` and ``--role tools`` processes, runs
started and followed by ``filegate submit``, a real SeaweedFS stopped for
:data:`OUTAGE_SECONDS` and started again on the same ports and data. Under one
outage:

- run ``exec``: an ``execute`` whose 29 KB of output is ready while S3 is down;
- run ``read``: a ``read_file`` of 40 KB answered while S3 is down (on a tools
  worker in this process whose read waits for the outage to begin);
- run ``gate``: a waiting 22 KB ``write_file`` approved with ``filegate approve``
  while S3 is down.

The code before reported the command and the read as failed ("activity
Heartbeat timeout": the codec's wait for S3 after the activity returned raced
the heartbeat timeout, and the command ran once), and ``approve`` said no worker
answered (the codec's 3 s wait filled the 3 s workflow task). Now each comes
back ``[ok]`` with the real result, the command ran once, the approval is
answered at once and the write is applied once.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from filegate.activities.history import CODEC_THRESHOLD
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.settings import Settings
from filegate.devstack.s3 import S3DevServer
from filegate.devstack.servers import TemporalDevServer
from filegate.kernel.protocol import ReadResult
from filegate.wiring.connection import settings_store, with_payload_codec
from filegate.worker import tools_worker
from filegate.workflows import AgentWorkflow
from tests.cli.test_cli import CLI, call, cli, start_worker, stop_worker, write_json
from tests.cli.test_cli_outage import Lines

pytestmark = [pytest.mark.services, pytest.mark.slow]

OUTAGE_SECONDS = 60.0
BUCKET = "deployed-outage"
EXEC_LINES = 290
"""29 000 characters of output: over the codec's threshold, under the offload limit."""
READ_LINES = 1000
"""40 000 characters in the file read."""


def env_of(server: TemporalDevServer, s3: S3DevServer, state: Path) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("FILEGATE_", "TEMPORAL_"))}
    env.update(
        TEMPORAL_ADDRESS=server.address, TEMPORAL_NAMESPACE=server.namespace,
        FILEGATE_S3_ENDPOINT=s3.endpoint, FILEGATE_S3_ACCESS_KEY=s3.access_key,
        FILEGATE_S3_SECRET_KEY=s3.secret_key, FILEGATE_S3_BUCKET=BUCKET,
        FILEGATE_STATE_DIR=str(state),
    )  # fmt: skip
    return env


class ReadDuringOutage(FilesystemBackend):
    """A filesystem whose ``read`` says it began, then waits until the outage has."""

    def __init__(self, root: Path, began: Path, outage: Path) -> None:
        super().__init__(str(root))
        self.began = began
        self.outage = outage

    def read(self, path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        self.began.touch()
        deadline = time.monotonic() + 120
        while not self.outage.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return super().read(path, offset, limit)


def tool_results(transcript_file: Path) -> dict[str, dict[str, Any]]:
    messages = json.loads(transcript_file.read_text())
    return {m["tool_call_id"]: m for m in messages if m.get("role") == "tool"}


def submit(env: dict[str, str], tmp: Path, name: str, turns: list[Any], *args: str) -> Lines:
    script = write_json(tmp / f"{name}.script.json", {"turns": turns})
    return Lines(
        subprocess.Popen(
            [
                *CLI,
                "submit",
                f"run {name}",
                "--model",
                f"scripted:{script}",
                "--transcript",
                str(tmp / f"{name}.transcript.json"),
                *args,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    )


async def wait_until(what: str, check: Any, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.1)


@pytest.mark.slow(seconds=OUTAGE_SECONDS + 20)
async def test_results_and_a_decision_during_an_outage_in_the_deployment_shape(
    temporal_server: TemporalDevServer, temporal_client: Client, s3: S3DevServer, tmp_path: Path
) -> None:
    env = env_of(temporal_server, s3, tmp_path / "state")
    root, read_root = tmp_path / "ws", tmp_path / "read-ws"
    root.mkdir()
    read_root.mkdir()
    (read_root / "big.txt").write_text(
        "".join(f"{i:06d} " + "r" * 32 + "\n" for i in range(READ_LINES))
    )
    outage, read_began = tmp_path / "outage-began", tmp_path / "read-began"
    suffix = uuid.uuid4().hex[:8]
    agent_q, shell_q, read_q = f"dep-a-{suffix}", f"dep-s-{suffix}", f"dep-r-{suffix}"
    command = (
        f"echo started > started; while [ ! -e {outage} ]; do sleep 0.1; done; sleep 1; "
        f"echo ran >> runs.log; "
        f"for i in $(seq 1 {EXEC_LINES}); do printf 'X%05d%093d\\n' $i 0; done"
    )
    content = "w" * 22_000 + "\n"
    gate = write_json(tmp_path / "gate.json", {"write_file": {"always": True}})
    store = settings_store(Settings.from_env(env).s3)  # the workers' own
    assert store is not None
    client = with_payload_codec(temporal_client, store)
    workers = [
        start_worker(env, "--role", "agent", "--task-queue", agent_q),
        start_worker(env, "--role", "tools", "--backend", "local-shell", "--root", str(root),
                     "--task-queue", shell_q, "--journal-dir", str(tmp_path / "journal")),
    ]  # fmt: skip
    runs: dict[str, Lines] = {}
    try:
        async with tools_worker(
            client, read_q, {"filesystem": ReadDuringOutage(read_root, read_began, outage)},
            tmp_path / "read-journal",
        ):  # fmt: skip
            common = ("--agent-queue", agent_q, "--workflow-id")
            runs["exec"] = submit(env, tmp_path, "exec", [
                {"tool_calls": [call("x1", "execute", command=command)]}, {"content": "exec done"},
            ], "--backend", "local-shell", "--tools-queue", shell_q,
               *common, f"dep-exec-{suffix}")  # fmt: skip
            runs["read"] = submit(env, tmp_path, "read", [
                {"tool_calls": [call("r1", "read_file", file_path="/big.txt", limit=READ_LINES)]},
                {"content": "read done"},
            ], "--tools-queue", read_q, *common, f"dep-read-{suffix}")  # fmt: skip
            runs["gate"] = submit(env, tmp_path, "gate", [
                {"tool_calls": [call("w1", "write_file", file_path="/gated.txt", content=content)]},
                {"content": "gate done"},
            ], "--backend", "local-shell", "--tools-queue", shell_q, "--interrupt-on", gate,
               *common, f"dep-gate-{suffix}")  # fmt: skip
            handle = client.get_workflow_handle(f"dep-gate-{suffix}")

            async def pending() -> list[Any]:
                try:
                    return list(await handle.query(AgentWorkflow.pending_approvals))
                except Exception:
                    return []

            waiting: list[Any] = []

            async def gate_ready() -> None:
                deadline = time.monotonic() + 90
                while not waiting or waiting[0].preview_pending:
                    alive = runs["gate"].proc.poll() is None
                    assert alive and time.monotonic() < deadline, runs["gate"].text()
                    waiting[:] = await pending()
                    await asyncio.sleep(0.2)

            await gate_ready()
            await wait_until("the command started", (root / "started").exists)
            await wait_until("the read began", read_began.exists)
            await asyncio.to_thread(s3.stop)
            down = time.monotonic()
            outage.touch()
            try:
                began = time.monotonic()
                decided = await asyncio.to_thread(
                    cli, env, "approve", waiting[0].id, "--workflow", handle.id
                )
                decided_in = time.monotonic() - began
                await asyncio.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - down)))
            finally:
                await asyncio.to_thread(s3.start)
            codes = {}
            for name, run in runs.items():
                try:
                    codes[name] = await asyncio.to_thread(run.finish, 120)
                except subprocess.TimeoutExpired:
                    from tests.scripting import workflow_task_failure

                    failed = await workflow_task_failure(
                        client.get_workflow_handle(f"dep-{name}-{suffix}"), tries=1
                    )
                    raise AssertionError(
                        f"{name} did not finish: {run.text()}\nworkflow task failure: {failed}"
                    ) from None
    finally:
        for run in runs.values():
            if run.proc.poll() is None:
                run.proc.kill()
        logs = [stop_worker(proc) for proc in workers]

    texts = {name: run.text() for name, run in runs.items()}
    assert decided.returncode == 0, decided.stdout + decided.stderr + texts["gate"]
    assert decided_in < 15, decided_in
    for name, code in codes.items():
        assert code == 0, f"{name}: {texts[name]}\n{logs}"
    exec_out = tool_results(tmp_path / "exec.transcript.json")["x1"]
    assert exec_out["status"] == "success", exec_out["content"][:500]
    assert f"X{EXEC_LINES:05d}" in exec_out["content"]
    assert (root / "runs.log").read_text() == "ran\n"  # the command ran once
    read_out = tool_results(tmp_path / "read.transcript.json")["r1"]
    assert read_out["status"] == "success", read_out["content"][:500]
    assert f"{READ_LINES - 1:06d} " in read_out["content"]
    assert len(read_out["content"]) > CODEC_THRESHOLD
    gate_out = tool_results(tmp_path / "gate.transcript.json")["w1"]
    assert gate_out["status"] == "success", gate_out["content"][:500]
    assert (root / "gated.txt").read_text() == content  # applied once
