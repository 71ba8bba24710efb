"""``filegate worker``: one Temporal worker process per role and backend.

``--role agent`` serves the AgentWorkflow and the model activity;
``--role tools --backend filesystem --root DIR --task-queue Q`` serves the
file-tool activities of one backend on its own task queue (its configuration
and credentials never leave this process). ``--role agent --local-backend
--backend filesystem --root DIR`` also hosts that backend in the agent worker,
for ``kind="local"`` refs: its tools run as local activities there, with no
task-queue round trips. ``--role tools --serve-agents`` co-hosts the other way
round: the tools worker also runs the agent workflows started on its own task
queue, whose calls on its backend then skip the queue (contract §8).
``filegate --role ...`` is short for ``filegate worker --role ...``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ByteSize

from filegate.backends.policy import PolicyConfig
from filegate.backends.seccomp import filter_problem
from filegate.backends.settings import CommandSettings, Settings
from filegate.backends.startup import (
    ALLOW_EXECUTE_ENV,
    ALLOW_EXECUTE_FLAG,
    check_execute_policies,
    check_journal_outside,
    served_roots,
)
from filegate.cli.artifacts import install_artifact_expiry
from filegate.cli.connection import target_from
from filegate.cli.errors import CliError
from filegate.cli.services import state_dir_outside
from filegate.cli.telemetry import cli_telemetry, tracing_line, worker_service_name
from filegate.processes.cgroups import aggregate_bounds_in_place, aggregate_bounds_status
from filegate.processes.reaper import CommandBounds, parse_size, size_text
from filegate.wiring.connection import configured_store, with_payload_codec
from filegate.wiring.roles import profiles_from
from filegate.worker import (
    BACKEND_KINDS,
    agent_worker,
    make_backend,
    run_until_stopped,
    tools_worker,
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
    parser.add_argument(
        "--serve-agents",
        action="store_true",
        help="tools role: also run the agent workflows started on --task-queue (co-hosted: "
        "their calls on this backend skip the task queue; needs the model configuration)",
    )
    parser.add_argument("--journal-dir", help="idempotency journal directory")
    parser.add_argument(
        "--max-activities-per-second",
        type=float,
        help="tools role: rate limit of the whole task queue, enforced by the Temporal server "
        "across all its workers (Worker max_task_queue_activities_per_second)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics: Temporal's and "
        "Filegate's (docs/observability.md)",
    )
    parser.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="interface of --metrics-port (default 127.0.0.1; 0.0.0.0 for a scraper elsewhere)",
    )
    add_bound_flags(parser)
    parser.set_defaults(handler=_worker_command)


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_bound_flags(parser: argparse.ArgumentParser) -> None:
    """Bounds of every execute call (contract §11); defaults from ``FILEGATE_*`` settings.

    The help names each default as :class:`CommandSettings` holds it (not a copy)."""
    default = CommandSettings()  # the defaults only: the environment is read elsewhere

    def size(value: ByteSize) -> str:
        return f"(default {size_text(int(value))})"

    bounds = parser.add_argument_group("execute bounds (local-shell, sandbox; 0 = no limit)")
    bounds.add_argument(
        "--exec-memory", type=_size, help=f"memory per process, e.g. 2GiB {size(default.memory)}"
    )
    bounds.add_argument(
        "--exec-max-processes",
        type=int,
        help=f"live processes per command (default {default.max_processes})",
    )
    bounds.add_argument(
        "--exec-file-size",
        type=_size,
        help=f"largest file a command writes {size(default.file_size)}",
    )
    bounds.add_argument(
        "--exec-command-memory",
        type=_size,
        help="memory of all processes of one command together, where the worker can make "
        f"cgroups {size(default.command_memory)}",
    )
    bounds.add_argument(
        "--max-command-write-bytes",
        "--exec-write-size",
        dest="exec_write_size",
        type=_size,
        help=f"bytes one command may write to disk; killed above {size(default.write_size)}",
    )
    bounds.add_argument(
        "--sandbox-tmp-size",
        type=_size,
        help=f"sandbox /tmp and /dev/shm size {size(default.sandbox_tmp_size)}",
    )
    bounds.add_argument(
        "--exec-max-seconds",
        type=float,
        help=f"longest timeout this worker accepts (default {default.max_seconds:g} s)",
    )
    parser.add_argument(
        ALLOW_EXECUTE_FLAG,
        action="store_true",
        help="RISK: serve an executing backend (local-shell, sandbox) under path policies "
        "(deny_write, secret_scan) although a shell command bypasses them; without it such "
        f"a worker refuses to start unless execute is denied ({ALLOW_EXECUTE_ENV}=1 too)",
    )


BOUND_FLAGS = {
    "exec_memory": "memory",
    "exec_max_processes": "max_processes",
    "exec_file_size": "file_size",
    "exec_command_memory": "command_memory",
    "exec_write_size": "write_size",
    "sandbox_tmp_size": "sandbox_tmp_size",
    "exec_max_seconds": "max_seconds",
}
"""The bound flags' argparse names -> the :class:`CommandSettings` fields they set."""


def settings_with_flags(args: argparse.Namespace, settings: Settings) -> Settings:
    """``settings`` with the bound flags given on the command line (its ``commands``)."""
    update: dict[str, Any] = {}
    for flag, field in BOUND_FLAGS.items():
        value = getattr(args, flag, None)
        if value is not None:
            sized = CommandSettings.model_fields[field].annotation is ByteSize
            update[field] = ByteSize(value) if sized else value
    if getattr(args, "allow_execute_with_path_policies", False):
        update["allow_execute_with_policies"] = True
    if not update:
        return settings
    return settings.model_copy(update={"commands": settings.commands.model_copy(update=update)})


def env_policies() -> PolicyConfig:
    """The tools side's policies (``FILEGATE_POLICY_FILE`` / ``_JSON``); a bad one is
    one line, exit 2. Read here, at the CLI's edge, for every command that serves tools."""
    try:
        return PolicyConfig.from_env()
    except ValueError as exc:
        raise CliError(str(exc), 2) from None


async def _worker_command(args: argparse.Namespace) -> int:
    target = target_from(args)
    settings = settings_with_flags(args, target.settings)
    if args.role == "tools" and not args.task_queue:
        raise CliError("--task-queue is required for --role tools", 2)
    if args.serve_agents and args.role != "tools":
        raise CliError("--serve-agents is for --role tools (an agent worker serves agents)", 2)
    served: tuple[str, BackendProtocol, Path] | None = None
    if args.role == "tools" or args.local_backend:
        served = backend_from_args(args, settings)  # refuse a bad configuration before connecting
    policies = env_policies()
    profiles = profiles_from(settings.models) if args.role == "agent" or args.serve_agents else None
    queue = args.task_queue or settings.temporal.task_queue
    telemetry = cli_telemetry(
        args.metrics_port, args.metrics_host, service=worker_service_name(args.role)
    )
    client = await target.connect(artifacts=None, telemetry=telemetry)
    # One store for the codec and the activities: transcripts / large results.
    artifacts = await configured_store(settings.s3)
    client = with_payload_codec(client, artifacts)
    await install_artifact_expiry(client, artifacts, settings.s3)  # one log line
    # Every value the library needs, read here from the environment and the flags:
    tuned: dict[str, Any] = {
        "artifacts": artifacts,
        "policies": policies,
        "model_profiles": profiles,
        "allow_execute_with_policies": settings.commands.allow_execute_with_policies,
        "journal_fsync": settings.journal.fsync,
    }
    if args.role == "agent":
        hosted: dict[str, Any] = {}
        if served is not None:
            name, backend, journal = served
            hosted = {"backends": {name: backend}, "journal_dir": journal}
        worker = agent_worker(client, queue, **tuned, **hosted)
    else:
        assert served is not None
        name, backend, journal = served
        options: dict[str, Any] = {}
        if args.max_activities_per_second is not None:
            options["max_task_queue_activities_per_second"] = args.max_activities_per_second
        worker = tools_worker(
            client, args.task_queue, {name: backend}, journal,
            serve_agents=args.serve_agents, **tuned, **options,
        )  # fmt: skip
    print(serving_line(args.role, queue, served), file=sys.stderr, flush=True)
    if telemetry.metrics_address is not None:
        print(
            f"filegate worker: metrics at http://{telemetry.metrics_address}/metrics",
            file=sys.stderr,
            flush=True,
        )
    tracing = tracing_line(telemetry)
    if tracing is not None:
        print(f"filegate worker: {tracing}", file=sys.stderr, flush=True)
    await run_until_stopped(worker)
    return 0


def serving_line(role: str, queue: str, served: tuple[str, BackendProtocol, Path] | None) -> str:
    """The worker's startup line: what it serves and, for a shell, which per-command sums
    hold and which are missing and why (contract §11; one line, for logs)."""
    line = f"filegate worker: {role} on task queue {queue}"
    if served is None:
        return line
    name, backend, _ = served
    line += f", backend {name} ({type(backend).__name__})"
    bounds = getattr(backend, "bounds", None)
    if not isinstance(bounds, CommandBounds):
        return line
    values = {
        "memory": size_text(bounds.command_memory_bytes) if bounds.command_memory_bytes else "",
        "processes": str(bounds.max_processes) if bounds.max_processes else "",
        "writes": size_text(bounds.write_bytes) if bounds.write_bytes else "",
    }
    held = [
        f"{what} {values[what]} ({how})" if values[what] else f"{what} off (0)"
        for what, how in aggregate_bounds_in_place().items()
    ]
    line += f"; per-command sums bounded: {', '.join(held) or 'none'}"
    missing = aggregate_bounds_status()
    if getattr(backend, "compiles_rules", False) and filter_problem():
        missing.append(f"sandbox {filter_problem()}")
    if missing:
        line += f"; not bounded: {'; '.join(missing)} (per-process bounds still apply)"
    return line


def backend_from_args(
    args: argparse.Namespace, settings: Settings
) -> tuple[str, BackendProtocol, Path]:
    """The backend ``--backend/--root/--name`` describe, and its journal directory.

    The journal is ``--journal-dir``, else ``<state dir>/journal/<name>``, where
    the default state dir never lands inside the backend's root
    (:func:`~filegate.cli.services.state_dir_outside`); a journal that still does
    (chosen explicitly) and path policies an executing backend would bypass are
    refused here, before the worker connects (contract §11).
    """
    settings = settings_with_flags(args, settings)
    name = args.name or args.backend
    try:
        backend = make_backend(
            args.backend, args.root, namespace=args.store_namespace,
            s3=settings.s3, commands=settings.commands,
        )  # fmt: skip
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    except RuntimeError as exc:  # e.g. the sandbox without a usable bwrap
        raise CliError(f"{args.backend} backend unavailable: {exc}") from None
    roots = sorted(set(served_roots(backend)))
    state_dir = state_dir_outside(settings.journal, roots)
    journal = Path(args.journal_dir).resolve() if args.journal_dir else state_dir / "journal" / name
    try:
        check_journal_outside(journal, {name: backend})
        check_execute_policies(
            {name: backend},
            PolicyConfig.from_env(),
            allow=settings.commands.allow_execute_with_policies,
        )
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    return name, backend, journal
