"""A long S3 outage under running agents (issue 34, item 1): every run completes.

Run: ``python bench/s3_outage.py [--outage 300]`` from the project root. Starts
an embedded Temporal dev server and a private S3 (SeaweedFS) in a temp dir, an
agent worker and a local-shell tools worker (in process, default outage
budget) on a client with the plugin's converter (payloads over 8 KiB travel
through S3), then three scripted runs, and stops S3 for ``--outage`` seconds
(SIGTERM, relaunched on the same ports and data directory):

* ``offload``: its command is running when S3 stops; its 90 000-character output
  must be stored (contract §7) while S3 is down;
* ``model``: started while S3 is down; its first model call must store the
  transcript;
* ``approval``: an edit of /docs/plan.md adding 20 KB waits for a reviewer (a
  card over the codec's threshold). While S3 is down a reviewer lists it --
  ``filegate approvals`` from a terminal with the run's S3 exports and from one
  without, and the ``pending_approvals`` query through the plugin's converter --
  and approves it with ``filegate approve``; the edit and the next model call
  then need S3.

Prints, per run, whether it completed, how long it took and how long after S3
came back, whether each change was applied once (the command ran once, the
edit's text is there once) and the reviewer's answers during the outage, then
exits 1 when a floor is missed: a run did not complete, something was applied
twice, or the reviewer could not list or decide during the outage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from filegate.backends.local_shell import LocalShellBackend
from filegate.backends.settings import Settings
from filegate.devstack.s3 import S3DevServer
from filegate.devstack.servers import TemporalDevServer
from filegate.kernel.messages import ModelSpec
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.protocol import BackendProtocol
from filegate.plugin import connect
from filegate.wiring.connection import configured_store
from filegate.worker import agent_worker, tools_worker
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec, Decision
from filegate.workflows.inputs import Limits

LINES = 900
BIG = f"echo ran >> runs.log; for i in $(seq 1 {LINES}); do printf 'R%05d%093d\\n' $i 0; done"
"""90 000 characters of output: over the offload threshold, under the shell's cap."""
ADDED = "".join(f"step {n:04d} of the plan, added once\n" for n in range(600))
"""About 20 KB the approved edit adds: the card and the edit's input exceed the codec's
8 KiB threshold. Applied twice, the text would be there twice."""
CLI = [sys.executable, "-m", "filegate"]
CLI_TIMEOUT = 120.0
"""A reviewer's command that takes longer than this counts as hanging."""


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


EDIT = {"file_path": "/docs/plan.md", "old_string": "# plan\n", "new_string": "# plan\n" + ADDED}
APPROVAL_TURNS = [
    {"tool_calls": [call("r0", "read_file", file_path="/docs/plan.md")]},
    {"tool_calls": [call("e1", "edit_file", **EDIT)]},
    {"tool_calls": [call("r1", "read_file", file_path="/docs/plan.md", limit=3)]},
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


@dataclass
class Answer:
    """One reviewer action during the outage."""

    what: str
    ok: bool
    seconds: float
    line: str

    def __str__(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        return f"{self.what:34s} {verdict:6s} in {self.seconds:5.1f} s: {self.line}"


def first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


async def run_cli(what: str, env: dict[str, str], *args: str, expect: str) -> Answer:
    began = time.monotonic()
    try:
        done = await asyncio.to_thread(
            subprocess.run, [*CLI, *args], env=env, capture_output=True, text=True,
            timeout=CLI_TIMEOUT, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return Answer(what, False, time.monotonic() - began, f"no answer in {CLI_TIMEOUT:.0f} s")
    took = time.monotonic() - began
    ok = done.returncode == 0 and expect in done.stdout
    shown = first_line(done.stdout) if ok else first_line(done.stderr or done.stdout)
    return Answer(what, ok, took, f"exit {done.returncode}: {shown}")


async def wait_pending(handle: WorkflowHandle[Any, Any], deadline: float) -> list[Any]:
    """The approval run's cards once its preview is ready; a clear error, never a hang."""
    while True:
        pending = await handle.query(AgentWorkflow.pending_approvals)
        if pending and not pending[0].preview_pending:
            return list(pending)
        if time.monotonic() > deadline:
            described = await handle.describe()
            status = described.status.name if described.status else "unknown"
            raise RuntimeError(f"the approval run {handle.id} asked nothing ({status})")
        await asyncio.sleep(0.2)


async def decide_until_accepted(handle: WorkflowHandle[Any, Any], card: str) -> None:
    """Approve through the client, retrying while the run's workflow task is failing
    (it could not encode a large payload while S3 was down) for up to 5 minutes."""
    deadline = time.monotonic() + 300
    while True:
        try:
            await handle.execute_update(
                AgentWorkflow.decide_update, Decision(id=card, decision="approve")
            )
            return
        except RPCError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(2)


async def bench(outage: float, base: Path) -> int:
    temporal = TemporalDevServer(base / "temporal").start()
    s3 = S3DevServer(base / "s3").start()
    try:
        settings = Settings.model_validate({
            "temporal": {"address": temporal.address, "namespace": temporal.namespace},
            "s3": {"endpoint": s3.endpoint, "access_key": s3.access_key,
                   "secret_key": s3.secret_key},
        })  # fmt: skip
        client: Client = await connect(settings)  # the plugin's converter: S3 codec
        store = await configured_store(settings.s3)
        root = base / "shell"
        (root / "docs").mkdir(parents=True)
        (root / "docs" / "plan.md").write_text("# plan\nend\n")
        shell: dict[str, BackendProtocol] = {"shell": LocalShellBackend(str(root))}
        agent_q, tools_q = f"b-a-{uuid.uuid4().hex[:6]}", f"b-t-{uuid.uuid4().hex[:6]}"
        ref = BackendRef(kind="remote", name="shell", task_queue=tools_q, can_execute=True)
        # A protecting rule next to a host shell needs execute gated or not offered
        # (kernel.execute_gate): the approval run's backend offers no execute.
        files = ref.model_copy(update={"can_execute": False})
        ask = FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="interrupt")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FILEGATE_", "TEMPORAL_"))}
        env.update(
            TEMPORAL_ADDRESS=temporal.address,
            TEMPORAL_NAMESPACE=temporal.namespace,
            FILEGATE_STATE_DIR=str(base / "reviewer"),
        )
        with_s3 = {
            **env, "FILEGATE_S3_ENDPOINT": s3.endpoint,
            "FILEGATE_S3_ACCESS_KEY": s3.access_key, "FILEGATE_S3_SECRET_KEY": s3.secret_key,
        }  # fmt: skip
        began: dict[str, float] = {}
        answers: list[Answer] = []

        async def start(name: str, input: AgentInput) -> WorkflowHandle[Any, Any]:
            began[name] = time.monotonic()
            return await client.start_workflow(
                AgentWorkflow.run, input, id=f"bench-{name}-{uuid.uuid4().hex[:8]}",
                task_queue=agent_q,
            )  # fmt: skip

        async with (
            agent_worker(client, agent_q, artifacts=store),
            tools_worker(client, tools_q, shell, base / "journal", artifacts=store),
        ):
            approval = await start(
                "approval", agent_input(APPROVAL_TURNS, files, permissions=[ask])
            )
            offload = await start("offload", agent_input(command_turns("offload"), ref))
            deadline = time.monotonic() + 120
            pending = await wait_pending(approval, deadline)
            card = pending[0].id
            print(f"approval {card} pending; waiting for the offload command", flush=True)
            while not (root / "offload" / "started").exists():
                if time.monotonic() > deadline:
                    raise RuntimeError("the offload run's command never started")
                await asyncio.sleep(0.1)
            await asyncio.to_thread(s3.stop)
            down = time.monotonic()
            print(f"S3 stopped; outage of {outage:.0f} s", flush=True)
            model = await start("model", agent_input(command_turns("model"), ref))
            await asyncio.sleep(min(10.0, outage / 4))
            wid = approval.id
            answers.append(await run_cli(
                "approvals (terminal with S3 exports)", with_s3,
                "approvals", "--json", "--workflow", wid, expect=card,
            ))  # fmt: skip
            answers.append(await run_cli(
                "approvals (terminal without S3)", env,
                "approvals", "--json", "--workflow", wid, expect=card,
            ))  # fmt: skip
            answers.append(
                await run_cli(
                    "status (terminal with S3 exports)", with_s3, "status", wid, expect=card
                )
            )
            t0 = time.monotonic()
            try:
                listed = await asyncio.wait_for(approval.query(AgentWorkflow.pending_approvals), 60)
                ok = [p.id for p in listed] == [card] and ADDED in listed[0].args["new_string"]
                answers.append(Answer("pending_approvals query (plugin)", ok,
                                      time.monotonic() - t0, f"{len(listed)} card(s)"))  # fmt: skip
            except Exception as exc:  # reported as a missed floor
                answers.append(Answer("pending_approvals query (plugin)", False,
                                      time.monotonic() - t0, first_line(str(exc))))  # fmt: skip
            await asyncio.sleep(max(0.0, outage / 2 - (time.monotonic() - down)))
            # The decision may not be acknowledged before S3 returns (see the docstring):
            # it runs beside the outage, which ends on time whatever it does.
            decided_at = time.monotonic() - down
            deciding = asyncio.create_task(run_cli(
                "approve (terminal with S3 exports)", with_s3,
                "approve", card, "--workflow", wid, expect=card,
            ))  # fmt: skip
            print(f"approve sent at {decided_at:.0f} s into the outage", flush=True)
            await asyncio.sleep(max(0.0, outage - (time.monotonic() - down)))
            await asyncio.to_thread(s3.start)
            back = time.monotonic()
            print(f"S3 back after {back - down:.0f} s", flush=True)
            decided = await deciding
            decided.line += f" (answered {decided_at + decided.seconds:.0f} s into the outage)"
            answers.append(decided)
            if not decided.ok:  # a missed floor; decide through the client so the run can end
                print("the CLI could not approve; deciding through the client", flush=True)
                await decide_until_accepted(approval, card)
            handles = {"offload": offload, "model": model, "approval": approval}
            ended: dict[str, float] = {}

            async def result(name: str, handle: WorkflowHandle[Any, Any]) -> Any:
                try:
                    return await asyncio.wait_for(handle.result(), 900)
                finally:
                    ended[name] = time.monotonic()

            outcomes = await asyncio.gather(
                *(result(n, h) for n, h in handles.items()), return_exceptions=True
            )
        missed = 0
        print(f"\noutage of {outage:.0f} s; reviewer during the outage:")
        for answer in answers:
            print(f"  {answer}")
            missed += 0 if answer.ok else 1
        print("runs:")
        for name, outcome in zip(handles, outcomes, strict=True):
            took, after = ended[name] - began[name], ended[name] - back
            if isinstance(outcome, BaseException):
                print(f"  {name:9s} FAILED after {took:.0f} s: {first_line(str(outcome))}")
                missed += 1
                continue
            ok = outcome.stop_reason == "final_answer"
            if name == "approval":
                count = (root / "docs" / "plan.md").read_text().count(ADDED)
                applied = f"edit applied {count}x"
            else:
                count = (root / name / "runs.log").read_text().count("ran")
                out = {m["tool_call_id"]: m for m in outcome.transcript if m["role"] == "tool"}
                ok = ok and "R00601" in out["x2"]["content"]
                applied = f"command ran {count}x, stored output read back: {ok}"
            ok = ok and count == 1
            print(
                f"  {name:9s} {'completed' if ok else 'WRONG':9s} in {took:4.0f} s "
                f"({after:4.0f} s after S3 came back; {applied})"
            )
            missed += 0 if ok else 1
        print(f"floors missed: {missed}")
        print(json.dumps({"outage_seconds": outage, "missed": missed}))
        return 1 if missed else 0
    finally:
        s3.stop()
        temporal.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--outage", type=float, default=300.0, help="seconds S3 is down")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)  # one line per retry
    with tempfile.TemporaryDirectory(prefix="filegate-s3-outage-") as base:
        return asyncio.run(bench(args.outage, Path(base)))


if __name__ == "__main__":
    sys.exit(main())
