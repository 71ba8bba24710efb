"""``filegate submit``: one agent task for a deployment's workers, followed like ``run``.

``run`` starts its own servers and workers; ``submit`` starts nothing. It
connects to the configured Temporal (``TEMPORAL_ADDRESS``, the client profile,
``--address`` ...), names the backend the way the deployment's tools workers
serve it (their ``--task-queue`` and ``--name``; the defaults are the queues
of ``docker-compose.yml``), starts the workflow on the agent workers' queue and
follows it to its end with the same progress output and exit codes as ``run``.
"""

from __future__ import annotations

import argparse
import uuid
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from filegate.cli.connection import target_from
from filegate.cli.errors import CliError
from filegate.cli.progress import say
from filegate.cli.run import (
    add_task_arguments,
    agent_input,
    check_workflow_id,
    quiet_core_warnings,
    report_result,
    start_and_follow,
)

__all__ = ["DEPLOYED_BACKENDS", "DeployedBackend", "add_parser", "submit_command"]


@dataclass(frozen=True)
class DeployedBackend:
    """How a deployment's tools worker serves one backend kind."""

    task_queue: str | None
    """The worker's ``--task-queue`` in docker-compose.yml (None: not deployed there)."""
    can_execute: bool
    shell_path: str | None
    """Where ``execute`` runs: the sandbox mounts the root at ``/workspace``."""
    sandboxed: bool = False
    """Commands run in the bubblewrap sandbox, which compiles the permission rules."""


DEPLOYED_BACKENDS: dict[str, DeployedBackend] = {
    "filesystem": DeployedBackend("filegate-fs", can_execute=False, shell_path=None),
    "sandbox": DeployedBackend(
        "filegate-sandbox", can_execute=True, shell_path="/workspace", sandboxed=True
    ),
    "local-shell": DeployedBackend(None, can_execute=True, shell_path=None),
}
"""``--backend`` -> its compose queue (tests/repo/test_compose.py keeps the two in step)."""


def tools_queue(args: argparse.Namespace) -> str:
    """``--tools-queue``, else the compose queue of ``--backend``."""
    queue = args.tools_queue or DEPLOYED_BACKENDS[args.backend].task_queue
    if not queue:
        raise CliError(f"--backend {args.backend} needs --tools-queue (no default queue)", 2)
    return str(queue)


def backend_ref(args: argparse.Namespace) -> Any:
    """The BackendRef of ``--backend`` / ``--tools-queue`` / ``--name``."""
    from filegate.workflows import BackendRef

    deployed = DEPLOYED_BACKENDS[args.backend]
    queue = tools_queue(args)
    return BackendRef(
        kind="remote", name=args.name or args.backend, task_queue=queue,
        can_execute=deployed.can_execute, shell_path=deployed.shell_path,
        sandboxed=deployed.sandboxed,
    )  # fmt: skip


async def has_pollers(client: Client, task_queue: str, *, workflow: bool) -> bool:
    """Whether a worker polled ``task_queue`` lately (:func:`filegate.operations.has_pollers`)."""
    from filegate.operations import has_pollers as polled

    return await polled(client, task_queue, workflow=workflow)


async def warn_unserved(client: Client, agent_queue: str, tools_queue: str) -> None:
    """One ``!!`` line per queue no worker polls: the task would wait for one."""
    for queue, workflow, who in (
        (agent_queue, True, "agent worker"),
        (tools_queue, False, "tools worker"),
    ):
        try:
            served = await has_pollers(client, queue, workflow=workflow)
        except RPCError:  # a server that does not describe queues: just follow
            continue
        if not served:
            say(
                f"  !! no {who} polls task queue {queue}: the task waits until one "
                "does (is the deployment up? `docker compose ps`)"
            )


async def submit_command(args: argparse.Namespace) -> int:
    if not getattr(args, "verbose", False):
        quiet_core_warnings()
    target = target_from(args)
    ref = backend_ref(args)
    input = agent_input(args, ref)  # bad flags exit 2 before connecting
    agent_queue = args.agent_queue or target.settings.temporal.task_queue
    if args.co_hosted:
        assert ref.task_queue is not None
        agent_queue = ref.task_queue  # the tools worker runs the workflow (--serve-agents)
    workflow_id = args.workflow_id or f"filegate-submit-{uuid.uuid4().hex[:12]}"
    client = await target.connect()
    say(f"workflow id: {workflow_id}")
    say(
        f"Temporal at {target.settings.temporal.address}; agent queue {agent_queue}, "
        f"backend {ref.name} on {ref.task_queue}"
    )
    fresh = args.workflow_id is None or await check_workflow_id(client, workflow_id, None, args)
    if not fresh:
        say(f"following workflow {workflow_id}: its own task and rules, not this command's")
    elif args.new_run:
        say(f"starting a new run of workflow {workflow_id}")
    await warn_unserved(client, agent_queue, ref.task_queue)
    result = await start_and_follow(
        client, input, workflow_id, agent_queue, fresh=fresh, remote=True
    )
    return report_result(args, result)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "submit",
        parents=[common],
        help="send one agent task to a deployment's workers and follow it (starts nothing)",
    )
    add_task_arguments(parser)
    parser.add_argument(
        "--backend",
        choices=sorted(DEPLOYED_BACKENDS),
        default="filesystem",
        help="backend kind of the tools worker (default filesystem; compose queues: "
        + ", ".join(f"{k} -> {v.task_queue}" for k, v in DEPLOYED_BACKENDS.items() if v.task_queue)
        + ")",
    )
    parser.add_argument("--tools-queue", help="the tools worker's --task-queue (default: above)")

    parser.add_argument("--name", help="the tools worker's --name (default: the backend kind)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--agent-queue", help="the agent workers' task queue (default: FILEGATE_TASK_QUEUE)"
    )
    where.add_argument(
        "--co-hosted",
        action="store_true",
        help="start the run on the tools worker's own queue (a worker started with "
        "--serve-agents): its calls on that backend then skip the task queue",
    )
    reuse = parser.add_mutually_exclusive_group()
    reuse.add_argument(
        "--resume", action="store_true", help="follow the still-running workflow --workflow-id"
    )
    reuse.add_argument(
        "--new-run",
        action="store_true",
        help="start a new run under a --workflow-id whose earlier run has finished",
    )
    parser.set_defaults(handler=submit_command)
