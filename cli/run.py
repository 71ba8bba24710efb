"""``filegate run``: one agent task on a directory, with in-process workers (contract §10).

It starts for its own duration whatever is missing (embedded Temporal and S3
servers, an agent worker and a tools worker) and stops what it started.
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filegate.cli.connection import read_file, target_from
from filegate.cli.errors import CliError, failure_text
from filegate.cli.progress import Approval, Progress, approval_context, args_text, follow, say
from filegate.cli.services import local_services, services_client
from filegate.worker import in_process_workers, make_backend
from temporalio.client import WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy

if TYPE_CHECKING:
    from filegate.kernel.messages import ModelSpec
    from filegate.kernel.permissions import FilesystemPermission


def parse_model(text: str) -> ModelSpec:
    """``scripted:FILE`` | ``openai:NAME`` | ``anthropic:NAME`` -> a ModelSpec."""
    from filegate.activities.providers.scripted import load_script
    from filegate.kernel.messages import ModelSpec

    provider, sep, name = text.partition(":")
    if not sep or not name or provider not in ("scripted", "openai", "anthropic"):
        raise CliError(f"--model {text!r}: use scripted:FILE, openai:NAME or anthropic:NAME", 2)
    if provider != "scripted":
        return ModelSpec(provider=provider, name=name)  # type: ignore[arg-type]
    path = Path(name).expanduser().resolve()
    try:
        load_script(path.read_text(encoding="utf-8"), f"file {path}")
    except OSError as exc:
        raise CliError(f"cannot read script {path}: {exc.strerror or exc}", 2) from None
    except Exception as exc:  # load_script raises a non-retryable ApplicationError
        raise CliError(failure_text(exc), 2) from None
    return ModelSpec(provider="scripted", name=str(path))


def load_permissions(path: str | None) -> list[FilesystemPermission]:
    """``--permissions FILE``: a JSON list of ``{operations, paths, mode}``."""
    from filegate.kernel.permissions import FilesystemPermission

    if not path:
        return []
    try:
        data = json.loads(read_file(path, "permissions file"))
    except json.JSONDecodeError as exc:
        raise CliError(f"permissions file {path} is not valid JSON: {exc}", 2) from None
    if not isinstance(data, list):
        raise CliError(f"permissions file {path} must hold a JSON list of rules", 2)
    try:
        return [FilesystemPermission.model_validate(rule) for rule in data]
    except ValueError as exc:
        raise CliError(f"invalid rule in {path}: {exc}", 2) from None


def _approval_hint(workflow_id: str) -> Callable[[Approval], Awaitable[None]]:
    async def show(approval: Approval) -> None:
        say(
            f"  ?? approval {approval['id']} needed: {approval['tool']} "
            f"{args_text(approval['args'])}{approval_context(approval)}\n"
            f"     decide from another terminal: filegate approve {approval['id']} "
            f"--workflow {workflow_id}  (or reject / respond / edit)"
        )

    return show


async def run_command(args: argparse.Namespace) -> int:
    from filegate.kernel.permissions import check_execute_config
    from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec

    target = target_from(args)
    model = parse_model(args.model)
    rules = load_permissions(args.permissions)
    root = Path(args.root).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    if args.shell:
        try:
            check_execute_config(rules, can_execute=True)
        except ValueError as exc:
            raise CliError(str(exc), 2) from None
    workflow_id = args.workflow_id or f"filegate-run-{uuid.uuid4().hex[:12]}"
    # Queues derive from the workflow id: re-running with the same --workflow-id
    # attaches to a still-running thread and serves it again.
    agent_queue = f"{workflow_id}.agent"
    tools_queue = f"{workflow_id}.tools"
    name = "workspace"
    backend = make_backend("local-shell" if args.shell else "filesystem", root)
    ref = BackendRef(
        kind="remote", name=name, task_queue=tools_queue,
        can_execute=args.shell, shell_path=str(root) if args.shell else None,
    )  # fmt: skip
    input = AgentInput(
        task=args.task, model=model, backend=BackendSpec(default=ref), permissions=rules
    )
    state_dir = target.settings.state_dir.resolve()
    say(f"workflow id: {workflow_id}")
    async with local_services(target, state_dir, reuse_default=True) as services:
        for line in services.notes:
            say(line)
        client, artifacts = await services_client(target, services)
        async with in_process_workers(
            client, agent_queue, tools_queue, {name: backend}, state_dir / "journal" / name,
            artifacts=artifacts,
        ):  # fmt: skip
            handle = await client.start_workflow(
                AgentWorkflow.run, input, id=workflow_id, task_queue=agent_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            )  # fmt: skip
            try:
                result = await follow(handle, Progress(say), _approval_hint(workflow_id))
            except WorkflowFailureError as exc:
                raise CliError(f"workflow {workflow_id} failed: {failure_text(exc)}") from None
    if args.transcript:
        out = Path(args.transcript).expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result.transcript, indent=2, ensure_ascii=False) + "\n")
    say(
        f"completed: {result.stop_reason} after {result.steps} model calls, "
        f"{result.tool_calls} tool calls ({result.tool_errors} errors), "
        f"{result.approvals} approvals"
    )
    say(f"final answer: {result.final_answer}")
    return 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "run", parents=[common], help="run one agent task on a directory (contract §10)"
    )
    parser.add_argument("task", help="the task for the agent")
    parser.add_argument(
        "--model", required=True, help="scripted:FILE | openai:NAME | anthropic:NAME"
    )
    parser.add_argument("--root", required=True, help="directory the agent works in")
    parser.add_argument("--permissions", help="JSON file: list of {operations, paths, mode}")
    parser.add_argument("--transcript", help="write the final transcript JSON here")
    parser.add_argument("--workflow-id", help="workflow id (default: generated and printed)")
    parser.add_argument("--shell", action="store_true", help="LocalShell backend (adds execute)")
    parser.set_defaults(handler=run_command)
