"""``filegate worker``: one Temporal worker process per role and backend.

``--role agent`` serves the AgentWorkflow and the model activity;
``--role tools --backend filesystem --root DIR --task-queue Q`` serves the
file-tool activities of one backend on its own task queue (its configuration
and credentials never leave this process). ``--role agent --local-backend
--backend filesystem --root DIR`` also hosts that backend in the agent worker,
for ``kind="local"`` refs: its tools run as local activities there, with no
task-queue round trips. ``filegate --role ...`` is short for ``filegate worker --role ...``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filegate.backends.settings import Settings
from filegate.cli.connection import target_from
from filegate.cli.errors import CliError
from filegate.worker import (
    BACKEND_KINDS,
    agent_worker,
    configured_store,
    make_backend,
    run_until_stopped,
    tools_worker,
    with_payload_codec,
)

if TYPE_CHECKING:
    from filegate.kernel.protocol import BackendProtocol


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("worker", parents=[common], help="run a Temporal worker")
    parser.add_argument("--role", choices=("agent", "tools"), required=True)
    parser.add_argument("--backend", choices=BACKEND_KINDS, default="filesystem")
    parser.add_argument("--root", help="workspace directory of a filesystem/local-shell backend")
    parser.add_argument(
        "--store-namespace", help="store backend: S3 namespace such as users/alice (FILEGATE_S3_*)"
    )
    parser.add_argument("--task-queue", help="task queue (agent default: FILEGATE_TASK_QUEUE)")
    parser.add_argument("--name", help="backend name workflows use (default: the kind)")
    parser.add_argument(
        "--local-backend",
        action="store_true",
        help="agent role: also host the --backend/--root backend for kind=local refs "
        "(its tools run as local activities in this worker, skipping task-queue trips)",
    )
    parser.add_argument("--journal-dir", help="idempotency journal directory")
    parser.add_argument(
        "--max-activities-per-second",
        type=float,
        help="tools role: rate limit of the whole task queue, enforced by the Temporal server "
        "across all its workers (Worker max_task_queue_activities_per_second)",
    )
    parser.set_defaults(handler=worker_command)


async def worker_command(args: argparse.Namespace) -> int:
    target = target_from(args)
    settings = target.settings
    if args.role == "tools" and not args.task_queue:
        raise CliError("--task-queue is required for --role tools", 2)
    client = await target.connect(artifacts=None)
    # One store for the codec and the activities: transcripts / large results.
    artifacts = await configured_store(settings)
    client = with_payload_codec(client, artifacts)
    if args.role == "agent":
        queue = args.task_queue or os.environ.get("FILEGATE_TASK_QUEUE") or settings.task_queue
        hosted: dict[str, Any] = {}
        if args.local_backend:
            name, backend, journal = _backend_from_args(args, settings)
            hosted = {"backends": {name: backend}, "journal_dir": journal}
        worker = agent_worker(client, queue, artifacts=artifacts, **hosted)
    else:
        name, backend, journal = _backend_from_args(args, settings)
        options: dict[str, Any] = {}
        if args.max_activities_per_second is not None:
            options["max_task_queue_activities_per_second"] = args.max_activities_per_second
        worker = tools_worker(
            client, args.task_queue, {name: backend}, journal, artifacts=artifacts, **options
        )
    await run_until_stopped(worker)
    return 0


def _backend_from_args(
    args: argparse.Namespace, settings: Settings
) -> tuple[str, BackendProtocol, Path]:
    """The backend ``--backend/--root/--name`` describe, and its journal directory."""
    name = args.name or args.backend
    try:
        backend = make_backend(
            args.backend, args.root, namespace=args.store_namespace, settings=settings
        )
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    except RuntimeError as exc:  # e.g. the sandbox without a usable bwrap
        raise CliError(f"{args.backend} backend unavailable: {exc}") from None
    return name, backend, Path(args.journal_dir or settings.state_dir / "journal" / name)
