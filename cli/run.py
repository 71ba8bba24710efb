"""``filegate run``: one agent task on a directory, with in-process workers (contract §10).

It starts for its own duration whatever is missing (embedded Temporal and S3
servers, an agent worker and a tools worker) and stops what it started.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client, WorkflowFailureError
from temporalio.common import (
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from filegate.activities.pages import full_transcript
from filegate.cli.connection import target_from
from filegate.cli.errors import CliError, failure_text
from filegate.cli.outage import Outage, resume_command
from filegate.cli.progress import (
    Approval,
    FailedAttempts,
    Progress,
    activity_failures_as_lines,
    approval_context,
    args_text,
    counted,
    follow,
    say,
)
from filegate.cli.run_inputs import (
    load_interrupt_on,
    load_permissions,
    load_prompt,
    load_rule_set,
    parse_model,
    workspace_root,
)
from filegate.cli.services import local_services, services_client, state_dir_outside
from filegate.cli.workers import env_policies
from filegate.worker import in_process_workers, make_backend

if TYPE_CHECKING:
    from filegate.backends.artifacts import ArtifactStore

__all__ = ["add_parser", "load_permissions", "parse_model", "run_command"]

ROOT_MEMO = "filegate_root"
"""Memo key of the workspace a ``run`` served, checked by ``--resume``."""


def _approval_hint(
    workflow_id: str, exports: str | None = None
) -> Callable[[Approval], Awaitable[None]]:
    """The lines of a new approval; the first one also gives ``exports``: what another
    terminal sets to reach this run's servers (its private S3 above all)."""
    shown: list[str] = []

    async def show(approval: Approval) -> None:
        say(
            f"  ?? approval {approval['id']} needed: {approval['tool']} "
            f"{args_text(approval['args'])}{approval_context(approval)}\n"
            f"     decide from another terminal: filegate approve {approval['id']} "
            f"--workflow {workflow_id}  (or reject / respond / edit)"
        )
        if exports and not shown:
            shown.append(exports)
            say(f"     that terminal first: {exports}")

    return show


def terminal_exports(target: Any, services: Any) -> str | None:
    """``export ...`` of the servers this command leased rather than found configured:
    another terminal needs them to list and decide (a large pending card, a stored
    result) and to read the run's S3. None when everything came from the environment."""
    from filegate.cli.services import DEFAULT_TEMPORAL_ADDRESS, s3_exports

    parts: list[str] = []
    if not target.configured and services.temporal_address != DEFAULT_TEMPORAL_ADDRESS:
        parts.append(f"TEMPORAL_ADDRESS={services.temporal_address}")
    s3, configured = services.s3, target.settings.s3
    if not configured.endpoint:  # a private S3 this command leased
        parts += s3_exports(s3)
    return "export " + " ".join(parts) if parts else None


def _build_input(args: argparse.Namespace, root: Path, tools_queue: str, name: str) -> Any:
    """The AgentInput the flags describe; bad flags exit 2 before anything starts."""
    return agent_input(args, served_ref(args, root, tools_queue, name), _local_profiles())


def served_ref(args: argparse.Namespace, root: Path, tools_queue: str, name: str) -> Any:
    """The BackendRef of a root this process serves, as ``--shell`` / ``--sandbox`` ask
    (``run`` and ``mcp`` take the same flags)."""
    from filegate.workflows import BackendRef

    sandbox = getattr(args, "sandbox", False)
    shell_path = "/workspace" if sandbox else str(root) if args.shell else None
    return BackendRef(
        kind="remote", name=name, task_queue=tools_queue,
        can_execute=args.shell or sandbox, sandboxed=sandbox, shell_path=shell_path,
    )  # fmt: skip


def served_kind(args: argparse.Namespace) -> str:
    """The backend kind ``--shell`` / ``--sandbox`` choose for the served root."""
    return "sandbox" if args.sandbox else "local-shell" if args.shell else "filesystem"


def _local_profiles() -> list[str]:
    """The model profiles of this process's environment, which its in-process agent
    worker uses (``FILEGATE_MODEL_PROFILES[_FILE]``); a bad definition exits 2."""
    from filegate.activities.providers.profiles import ModelProfiles
    from filegate.backends.settings import ModelSettings

    try:
        return list(ModelProfiles.from_settings(ModelSettings.from_env()).profiles)
    except Exception as exc:  # a profile definition the worker would refuse too
        raise CliError(f"model profiles: {failure_text(exc)}", 2) from None


def agent_input(args: argparse.Namespace, ref: Any, profiles: Any = None) -> Any:
    """The AgentInput of the task flags (:func:`add_task_arguments`) on backend ``ref``
    (a BackendRef); ``run`` and ``submit`` share it. ``profiles``: the agent worker's
    model profile names when this process hosts it (``run``). Bad flags exit 2."""
    from filegate.kernel.execute_gate import ExecuteGateError
    from filegate.workflows import AgentInput, BackendSpec, Limits

    model = parse_model(args.model, profiles)
    rules = load_rule_set(args.permissions)
    interrupt_on = load_interrupt_on(args.interrupt_on)
    if args.system_prompt is not None and args.extend_system_prompt is not None:
        raise CliError("give --system-prompt or --extend-system-prompt, not both", 2)
    prompt = load_prompt(args.system_prompt, "--system-prompt")
    extension = load_prompt(args.extend_system_prompt, "--extend-system-prompt")
    if args.max_steps is not None and args.max_steps < 1:
        raise CliError(f"--max-steps {args.max_steps}: must be at least 1", 2)
    limits = Limits() if args.max_steps is None else Limits(max_steps=args.max_steps)
    input = AgentInput(
        task=args.task, model=model, backend=BackendSpec(default=ref),
        permissions=rules.permissions, network=rules.network, reviewer=rules.reviewer,
        interrupt_on=interrupt_on, limits=limits,
        system_prompt=extension if extension is not None else prompt,
        system_prompt_mode="extend" if extension is not None else "replace",
    )  # fmt: skip
    try:
        input.check_execute_gate()
    except ExecuteGateError as exc:
        raise CliError(str(exc), 2) from None
    return input


async def check_workflow_id(
    client: Client, workflow_id: str, root: Path | None, args: argparse.Namespace
) -> bool:
    """Before any worker serves the id's queues: is this a new run (True) or ``--resume``?

    A workflow of that id still running is refused unless ``--resume`` (and
    then only on the root it was started on): the workers would otherwise serve
    the old run, its task and rules, on this command's root. A finished one is
    refused unless ``--new-run``. ``root`` None (``submit``: the deployment's
    workers serve it, nothing here does) skips the root check.
    """
    from temporalio.client import WorkflowExecutionStatus

    try:
        found = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            if args.resume:
                raise CliError(f"--resume: no workflow {workflow_id} to resume", 2) from None
            return True
        raise
    state = found.status.name.lower() if found.status else "unknown"
    if found.status == WorkflowExecutionStatus.RUNNING:
        if not args.resume:
            raise CliError(
                f"workflow {workflow_id} is still running (started "
                f"{found.start_time:%Y-%m-%d %H:%M:%S}); pass --resume to serve it again "
                "(its own task and rules), or choose another --workflow-id",
                2,
            )
        started_on = await found.memo_value(ROOT_MEMO, None)
        if root is not None and started_on != str(root):
            raise CliError(
                f"--resume: workflow {workflow_id} works on {started_on or 'another root'}, "
                f"not {root}",
                2,
            )
        return False
    if args.resume:
        raise CliError(f"--resume: workflow {workflow_id} already finished ({state})", 2)
    if not args.new_run:
        raise CliError(
            f"workflow {workflow_id} already finished ({state}); pass --new-run to start "
            "a new run under the same id, or choose another --workflow-id",
            2,
        )
    return True


def quiet_core_warnings() -> None:
    """The SDK core's warnings (a long local model call: "workflow task duration
    exceeded") are not progress; ``-v`` keeps them. Before any client exists."""
    from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

    quiet = LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))
    with contextlib.suppress(RuntimeError):  # a default runtime exists already
        Runtime.set_default(Runtime(telemetry=TelemetryConfig(logging=quiet)))


def tools_queue_for(workflow_id: str, root: Path) -> str:
    """The tools task queue of ``run``: unique per workflow id *and* backend root."""
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12]
    return f"{workflow_id}.tools.{digest}"


async def run_command(args: argparse.Namespace) -> int:
    if not getattr(args, "verbose", False):
        quiet_core_warnings()
    target = target_from(args)
    root = workspace_root(args.root)
    workflow_id = args.workflow_id or f"filegate-run-{uuid.uuid4().hex[:12]}"
    # Queues derive from the workflow id (--resume serves a still-running thread
    # again) and, for the tools, from the root: a call of a run on another root
    # can never reach this run's tools worker.
    agent_queue = f"{workflow_id}.agent"
    tools_queue = tools_queue_for(workflow_id, root)
    name = "workspace"
    input = _build_input(args, root, tools_queue, name)
    backend = make_backend(served_kind(args), root, commands=target.settings.commands)
    state_dir = state_dir_outside(target.settings.journal, [str(root)])
    say(f"workflow id: {workflow_id}")
    async with local_services(target, state_dir, reuse_default=True) as services:
        for line in services.notes:
            say(line)
        client, artifacts = await services_client(target, services)
        fresh = args.workflow_id is None or await check_workflow_id(client, workflow_id, root, args)
        if not fresh:
            say(f"resuming workflow {workflow_id}: its own task and rules, not this command's")
        elif args.new_run:
            say(f"starting a new run of workflow {workflow_id}")
        with _failure_lines(args):
            async with in_process_workers(
                client, agent_queue, tools_queue, {name: backend}, state_dir / "journal" / name,
                artifacts=artifacts, settings=target.settings, policies=env_policies(),
            ):  # fmt: skip
                # Co-hosted: the run's own queue is the tools queue (contract §8).
                result = await start_and_follow(
                    client, input, workflow_id, tools_queue, fresh=fresh,
                    memo={ROOT_MEMO: str(root)}, exports=terminal_exports(target, services),
                )  # fmt: skip
    return report_result(args, result, artifacts)


def report_result(args: argparse.Namespace, result: Any, store: ArtifactStore | None = None) -> int:
    """``--transcript`` and the closing lines of a finished run; its exit code (0).

    A very long thread's first messages are transcript pages in S3
    (``AgentResult.earlier_transcript``): read back through ``store`` when given.
    """
    if args.transcript:
        out = Path(args.transcript).expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        transcript = result.transcript
        earlier = result.earlier_transcript
        if earlier is not None and store is not None:
            transcript = full_transcript(store, earlier, transcript)
        elif earlier is not None:
            say(
                f"transcript: its first {earlier.end} messages are transcript pages in S3 "
                f"({earlier.artifact.key} and the pages before it); {out} holds the rest"
            )
        out.write_text(json.dumps(transcript, indent=2, ensure_ascii=False) + "\n")
    say(
        f"completed: {result.stop_reason} after {counted(result.steps, 'model call')}, "
        f"{counted(result.tool_calls, 'tool call')} ({counted(result.tool_errors, 'error')}), "
        f"{counted(result.approvals, 'approval')}"
    )
    say(f"final answer: {result.final_answer}")
    return 0


async def start_and_follow(
    client: Client, input: Any, workflow_id: str, agent_queue: str, *,
    fresh: bool, memo: dict[str, Any] | None = None, exports: str | None = None,
    remote: bool = False,
) -> Any:  # fmt: skip
    """Start the workflow on ``agent_queue`` (or take the running one, ``--resume``)
    and follow it to its end, printing progress and approval hints (``exports``:
    what another terminal sets to decide, :func:`terminal_exports`). A short
    Temporal outage is waited out (cli/outage.py). ``remote``: the workers are
    elsewhere (``submit``), so their failed attempts are read from the server."""
    address = client.service_client.config.target_host
    from filegate.workflows import AgentWorkflow

    if fresh:
        try:
            handle = await client.start_workflow(
                AgentWorkflow.run, input, id=workflow_id, task_queue=agent_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                memo=memo,
                search_attributes=await approval_counters(client),
            )  # fmt: skip
        except WorkflowAlreadyStartedError:
            raise CliError(f"workflow {workflow_id} was started meanwhile", 2) from None
    else:
        handle = client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
    outage = Outage(say, address, resume_command(workflow_id))
    try:
        hint = _approval_hint(workflow_id, exports)
        attempts = FailedAttempts(say) if remote else None
        return await follow(handle, Progress(say), hint, outage=outage, attempts=attempts)
    except WorkflowFailureError as exc:
        raise CliError(f"workflow {workflow_id} failed: {failure_text(exc)}") from None


async def approval_counters(client: Client) -> TypedSearchAttributes | None:
    """The approval counters to start a run with, when the server has them registered.

    Started with them, a run keeps ``FilegatePendingApprovals`` current, so the
    UI and ``filegate approvals`` find it with one visibility query; a server
    without them would refuse the start, so they are asked for first (one RPC).
    """
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

    from filegate.workflows.approvals.handlers import (
        DECIDED_APPROVALS,
        PENDING_APPROVALS,
        initial_search_attributes,
    )

    try:
        known = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace), retry=True
        )
    except RPCError:
        return None  # no operator access: run without the counters
    if {PENDING_APPROVALS.name, DECIDED_APPROVALS.name} <= set(known.custom_attributes):
        return initial_search_attributes()
    return None


def _failure_lines(args: argparse.Namespace) -> contextlib.AbstractContextManager[None]:
    """Failed attempts as one progress line each, unless ``-v`` asks for tracebacks."""
    if getattr(args, "verbose", False):
        return contextlib.nullcontext()
    return activity_failures_as_lines(say)


def add_task_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags describing one agent task: ``run`` and ``submit`` take the same."""
    parser.add_argument("task", help="the task for the agent")
    parser.add_argument(
        "--model", required=True, help="scripted:FILE | openai:NAME | anthropic:NAME"
    )
    parser.add_argument("--permissions", help="JSON file: list of {operations, paths, mode}")
    parser.add_argument(
        "--interrupt-on",
        metavar="FILE",
        help='JSON file: {tool: true | {"always": true} | {"when": ...}} approvals per tool '
        '(execute also {"allow_prefixes": ["git status", ...]})',
    )
    parser.add_argument(
        "--system-prompt", metavar="TEXT|@FILE", help="replace the default system prompt"
    )
    parser.add_argument(
        "--extend-system-prompt",
        metavar="TEXT|@FILE",
        help="add this after the default system prompt",
    )
    parser.add_argument("--max-steps", type=int, help="model calls before stopping (default 50)")
    parser.add_argument("--transcript", help="write the final transcript JSON here")
    parser.add_argument("--workflow-id", help="workflow id (default: generated and printed)")


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "run", parents=[common], help="run one agent task on a directory (contract §10)"
    )
    add_task_arguments(parser)
    parser.add_argument("--root", required=True, help="existing directory the agent works in")
    reuse = parser.add_mutually_exclusive_group()
    reuse.add_argument(
        "--resume",
        action="store_true",
        help="serve the still-running workflow --workflow-id again (same --root) and follow it",
    )
    reuse.add_argument(
        "--new-run",
        action="store_true",
        help="start a new run under a --workflow-id whose earlier run has finished",
    )
    shells = parser.add_mutually_exclusive_group()
    shells.add_argument(
        "--shell",
        action="store_true",
        help="LocalShell backend (adds execute on the host); with --permissions only when "
        "--interrupt-on gates execute with always: true",
    )
    shells.add_argument(
        "--sandbox",
        action="store_true",
        help="bubblewrap sandbox backend (adds execute; the workspace is /workspace in "
        "commands); --permissions compile into each command's view",
    )
    parser.set_defaults(handler=run_command)
