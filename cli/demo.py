"""``filegate demo``: a self-checking run of every tool, a deny and an approval.

It starts a private Temporal server and an S3 server (unless configured),
in-process workers on temporary directories, runs a scripted agent, approves
its one approval by signal, and checks every step's outcome on disk and in S3.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client, WorkflowFailureError

from filegate.cli.approvals import shown_fingerprint
from filegate.cli.connection import target_from
from filegate.cli.errors import CliError, failure_text, logs_kept
from filegate.cli.progress import Approval, Progress, args_text, content_text, follow, one_line, say
from filegate.cli.run import approval_counters
from filegate.cli.services import local_services, services_client, state_dir_for
from filegate.worker import in_process_workers

if TYPE_CHECKING:
    from filegate.backends.artifacts import ArtifactStore
    from filegate.kernel.protocol import BackendProtocol
    from filegate.workflows import AgentResult

DEMO_TASK = "Fix greet() in src/app.py, note a plan, write a report, and keep out of the vault."

DEMO_APP = '''"""A tiny app the demo agent fixes."""


def greet(name):
    return None  # TODO: say hello


if __name__ == "__main__":
    print(greet("filegate"))
'''
DEMO_FIX = ("return None  # TODO: say hello", 'return f"hello, {name}!"')
DEMO_REPORT = "# Report\n\ngreet() now says hello.\n"
DEMO_KEYS = "vault keys: do not touch\n"
DEMO_FINAL = "greet() is fixed, the report is written (approved), and the vault is untouched."

DEMO_RULES = [
    {"operations": ["write"], "paths": ["/vault/**"], "mode": "deny"},
    {"operations": ["write"], "paths": ["/docs/**"], "mode": "interrupt"},
]


def _call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": args}


DEMO_BIG_LINES = 2000
"""Lines of 100 chars the large command prints: over the offload threshold even
after the shell's 100 000-byte cap."""


def _demo_script(python: str) -> dict[str, Any]:
    """The scripted agent: every tool, one denied write, one write awaiting approval,
    one result too large for history that is read back from S3."""
    from filegate.kernel.tool_types import LARGE_RESULTS_DIR, activity_call_id

    big = f"for i in range({DEMO_BIG_LINES}): print(f'L{{i:05d}}' + '.' * 93)"
    turns: list[dict[str, Any]] = [
            {"tool_calls": [
                _call("ls1", "ls", path="/"),
                _call("glob1", "glob", pattern="**/*.py"),
                _call("grep1", "grep", pattern="TODO", output_mode="content"),
            ]},
            {"tool_calls": [_call("read1", "read_file", file_path="/src/app.py")]},
            {"tool_calls": [
                _call("edit1", "edit_file", file_path="/src/app.py",
                      old_string=DEMO_FIX[0], new_string=DEMO_FIX[1]),
                _call("write1", "write_file", file_path="/notes/plan.md",
                      content="1. fix greet()\n2. write the report\n"),
            ]},
            {"tool_calls": [
                _call("denied1", "write_file", file_path="/vault/leaked.txt", content="oops"),
                _call("approved1", "write_file", file_path="/docs/report.md", content=DEMO_REPORT),
            ]},
            {"tool_calls": [
                _call("exec1", "execute", command=f"{shlex.quote(python)} src/app.py"),
                _call("read2", "read_file", file_path="/docs/report.md"),
            ]},
            {"tool_calls": [
                _call("big1", "execute", command=f"{shlex.quote(python)} -c {shlex.quote(big)}"),
            ]},
    ]  # fmt: skip
    # The stub names the result by its activity call id: model step (1-based), position.
    stub = LARGE_RESULTS_DIR + activity_call_id(len(turns), 0, "big1")
    turns += [
        {"tool_calls": [
            _call("bigread1", "read_file", file_path=stub, offset=500, limit=2),
            _call("delete1", "delete", file_path="/notes"),
        ]},
        # Calls of one turn may run concurrently: look only after the delete.
        {"tool_calls": [_call("glob2", "glob", pattern="**/*.md")]},
        {"content": DEMO_FINAL},
    ]  # fmt: skip
    return {"turns": turns}


@dataclass
class DemoDirs:
    """The demo's three backend roots: a shell workspace and two routed directories."""

    workspace: Path
    docs: Path
    vault: Path

    @classmethod
    def create(cls, base: Path) -> DemoDirs:
        dirs = cls(base / "workspace", base / "docs", base / "vault")
        (dirs.workspace / "src").mkdir(parents=True)
        (dirs.workspace / "src" / "app.py").write_text(DEMO_APP)
        dirs.docs.mkdir()
        dirs.vault.mkdir()
        (dirs.vault / "keys.txt").write_text(DEMO_KEYS)
        return dirs


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _demo_checks(
    result: AgentResult, dirs: DemoDirs, approved: list[str], stored: list[str]
) -> list[Check]:
    """Every step's expected outcome, from the transcript and the real directories."""
    from filegate.kernel.tool_types import TOOL_ORDER

    out = {m["tool_call_id"]: m for m in result.transcript if m["role"] == "tool"}
    # Keys are <namespace>/<workflow id>/<name>: a large result's name is its tool
    # call id (one component); transcripts live under transcript/ (contract §8).
    names = [key.split("/", 2)[-1] for key in stored]
    large = [name for name in names if "/" not in name]
    transcripts = [name for name in names if name.startswith("transcript/")]

    def text(call_id: str) -> str:
        return content_text(out.get(call_id, {}).get("content", ""))

    def ok(call_id: str) -> bool:
        return out.get(call_id, {}).get("status") == "success"

    used = {
        call["name"]
        for m in result.transcript
        if m["role"] == "assistant"
        for call in m.get("tool_calls") or []
    }
    app = _read(dirs.workspace / "src" / "app.py") or ""
    listing = set(text("ls1").splitlines())
    return [
        Check("ls shows the workspace and both routes",
              ok("ls1") and {"/src/", "/docs/", "/vault/"} <= listing, text("ls1")),
        Check("glob finds the Python file", text("glob1") == "/src/app.py", text("glob1")),
        Check("grep finds the TODO", "/src/app.py" in text("grep1") and "TODO" in text("grep1")),
        Check("read_file shows the bug", ok("read1") and "return None" in text("read1")),
        Check("edit_file fixed the file on disk",
              ok("edit1") and DEMO_FIX[1] in app and "TODO" not in app),
        Check("write_file wrote the plan", ok("write1")),
        Check("write to /vault was DENIED and nothing was written",
              not ok("denied1") and "denied" in text("denied1").lower()
              and not (dirs.vault / "leaked.txt").exists()
              and _read(dirs.vault / "keys.txt") == DEMO_KEYS, one_line(text("denied1"))),
        Check("write to /docs waited for approval, approved by signal, then ran",
              len(approved) == 1 and result.approvals == 1 and ok("approved1")
              and _read(dirs.docs / "report.md") == DEMO_REPORT
              and f"approved by {DEMO_REVIEWER}" in text("approved1"), text("approved1")),
        Check("execute ran the fixed app",
              "hello, filegate!" in text("exec1") and "exit code 0" in text("exec1"),
              one_line(text("exec1"))),
        Check("read_file reads the approved report", ok("read2") and "greet()" in text("read2")),
        Check("large execute output went to S3; history holds a short stub",
              ok("big1") and "/large_tool_results/" in text("big1")
              and len(text("big1")) < 5000 and len(large) == 1,
              f"stub {len(text('big1'))} chars; S3 objects: {stored}"),
        Check("the model got the conversation by reference (transcripts in S3)",
              len(transcripts) == result.steps, f"{len(transcripts)} transcript objects, "
              f"{result.steps} model calls"),
        Check("read_file pages the large result back from S3",
              ok("bigread1") and "L00500" in text("bigread1") and "L00499" not in text("bigread1"),
              one_line(text("bigread1"))),
        Check("delete removed /notes", ok("delete1") and not (dirs.workspace / "notes").exists()),
        Check("glob sees the report and not the deleted plan",
              "/docs/report.md" in text("glob2") and "plan.md" not in text("glob2")),
        Check("every tool was used", used == set(TOOL_ORDER), ", ".join(sorted(used))),
        Check("the agent finished with its answer",
              result.stop_reason == "final_answer" and result.final_answer == DEMO_FINAL),
    ]  # fmt: skip


async def _take_stored_results(store: ArtifactStore | None, scope: str) -> list[str]:
    """Keys of what the run left in S3 (large results, transcripts), which are then
    deleted: a demo against a configured S3 must not leave objects behind."""
    if store is None:
        return []
    keys = await asyncio.to_thread(store.list_thread, scope)
    await asyncio.to_thread(store.delete_thread, scope)
    return keys


DEMO_REVIEWER = "filegate demo"
"""Who the demo's decision is recorded as (the tour decides, not a person)."""


async def _run_demo(
    client: Client, dirs: DemoDirs, journal: Path, artifacts: ArtifactStore | None
) -> tuple[AgentResult, list[str], list[str]]:
    """Run the scripted agent with in-process workers; approve its approval by signal.

    Returns the result, the approval ids approved, and the S3 keys of offloaded results.
    """
    suffix = uuid.uuid4().hex[:8]
    agent_queue, tools_queue = f"filegate-demo-{suffix}", f"filegate-demo-{suffix}-tools"
    from filegate.backends.filesystem import FilesystemBackend
    from filegate.backends.local_shell import LocalShellBackend
    from filegate.kernel.artifacts import chain_scope
    from filegate.kernel.messages import ModelSpec
    from filegate.kernel.permissions import FilesystemPermission
    from filegate.workflows import (
        AgentInput,
        AgentWorkflow,
        BackendRef,
        BackendSpec,
        Decision,
        RouteSpec,
    )

    backends: dict[str, BackendProtocol] = {
        "workspace": LocalShellBackend(dirs.workspace),
        "docs": FilesystemBackend(dirs.docs),
        "vault": FilesystemBackend(dirs.vault),
    }

    def ref(name: str, shell: bool = False) -> BackendRef:
        return BackendRef(
            kind="remote", name=name, task_queue=tools_queue, can_execute=shell,
            shell_path=str(dirs.workspace) if shell else None,
        )  # fmt: skip

    input = AgentInput(
        task=DEMO_TASK,
        model=ModelSpec(provider="scripted", options={"script": _demo_script(sys.executable)}),
        backend=BackendSpec(
            default=ref("workspace", shell=True),
            routes=[RouteSpec(prefix="/docs/", backend=ref("docs")),
                    RouteSpec(prefix="/vault/", backend=ref("vault"))],
        ),
        permissions=[FilesystemPermission.model_validate(rule) for rule in DEMO_RULES],
    )  # fmt: skip
    approved: list[str] = []
    workflow_id = f"filegate-demo-{suffix}"
    async with in_process_workers(
        client, agent_queue, tools_queue, backends, journal, artifacts=artifacts
    ):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            input,
            id=workflow_id,
            task_queue=agent_queue,
            search_attributes=await approval_counters(client),
        )
        say(f"[demo] workflow {workflow_id} started")

        async def approve(approval: Approval) -> None:
            approval_id = approval["id"]
            args = args_text(approval["args"])
            say(f"  ?? approval {approval_id} pending: {approval['tool']} {args}")
            seen = await shown_fingerprint(handle, approval_id)
            await handle.signal(
                AgentWorkflow.decide_signal,
                Decision(
                    id=approval_id, decision="approve", preview_fingerprint=seen,
                    reviewer=DEMO_REVIEWER,
                ),
            )  # fmt: skip
            approved.append(approval_id)
            say(f"  !! approved {approval_id} by signal, as {DEMO_REVIEWER!r}")

        result = await asyncio.wait_for(follow(handle, Progress(say), approve), 60)
    # Stored results live under the run chain (contract §11), not the bare workflow id.
    scope = chain_scope(workflow_id, handle.first_execution_run_id or "")
    return result, approved, await _take_stored_results(artifacts, scope)


async def demo_command(args: argparse.Namespace) -> int:
    target = target_from(args)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="filegate-demo-") as scratch:
        base = Path(scratch)
        dirs = DemoDirs.create(base)
        state_dir = state_dir_for(target.settings.journal, base / "state")
        say("[demo] starting services (what is not already configured)...")
        # A server's log in the scratch dir would go with it: a failed start keeps it.
        async with (
            logs_kept(base),
            local_services(target, state_dir, reuse_default=False) as services,
        ):
            for line in services.notes:
                say(f"[demo] {line}")
            client, artifacts = await services_client(target, services)
            say(f"[demo] workspace {dirs.workspace}; /docs and /vault are routed directories")
            say("[demo] rules: write /vault/** -> deny; write /docs/** -> interrupt (approval)")
            try:
                result, approved, stored = await _run_demo(
                    client, dirs, base / "journal", artifacts
                )
            except (TimeoutError, WorkflowFailureError) as exc:
                raise CliError(
                    f"demo run did not complete: {failure_text(exc) or 'timeout'}"
                ) from None
            checks = _demo_checks(result, dirs, approved, stored)
            say("[demo] stopping what the demo started...")
    say("")
    say("Summary")
    for check in checks:
        detail = f"  ({one_line(check.detail, 70)})" if check.detail and not check.ok else ""
        say(f"  {'PASS' if check.ok else 'FAIL'}  {check.name}{detail}")
    failed = [c for c in checks if not c.ok]
    elapsed = time.monotonic() - began
    if failed:
        say(f"demo FAILED: {len(failed)} of {len(checks)} checks failed ({elapsed:.1f} s)")
        return 1
    say(f"demo OK: {len(checks)} checks passed in {elapsed:.1f} s")
    return 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "demo", parents=[common], help="self-checking demo: every tool, a deny, an approval"
    )
    parser.set_defaults(handler=demo_command)
