"""Filegate command line: run the agent worker or a tools worker for one backend.

``filegate worker --role agent`` serves the AgentWorkflow and the model
activity; ``filegate worker --role tools --backend filesystem --root DIR
--task-queue Q`` serves the file-tool activities of one backend on its own
task queue (its configuration and credentials never leave this process).
``python worker.py --role ...`` is the same as ``filegate worker --role ...``.
Subcommands live behind argparse subparsers so more (run, demo, approvals)
can be added next to ``worker``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from activities.model import call_model
from backends.protocol import BackendProtocol
from backends.settings import Settings
from workflows import AgentWorkflow

log = logging.getLogger("filegate.worker")

BACKEND_KINDS = ("filesystem", "local-shell", "state")


async def connect(settings: Settings | None = None) -> Client:
    """A client with the pydantic converter every Filegate process must share."""
    settings = settings or Settings.from_env()
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=pydantic_data_converter,
    )


def agent_worker(client: Client, task_queue: str, **options: Any) -> Worker:
    """The worker that runs AgentWorkflow and the model activity."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentWorkflow],
        activities=[call_model],
        **options,
    )


def make_backend(kind: str, root: str | Path | None) -> BackendProtocol:
    """Build one backend from CLI-level settings (credentials stay in this process)."""
    if kind == "state":
        from backends.state import StateBackend

        return StateBackend()
    if root is None:
        raise ValueError(f"--root is required for the {kind} backend")
    Path(root).mkdir(parents=True, exist_ok=True)
    if kind == "filesystem":
        from backends.filesystem import FilesystemBackend

        return FilesystemBackend(str(root), virtual_mode=True)
    if kind == "local-shell":
        from backends.local_shell import LocalShellBackend

        return LocalShellBackend(str(root))
    raise ValueError(f"unknown backend kind {kind!r}; choose one of {', '.join(BACKEND_KINDS)}")


def tools_worker(
    client: Client,
    task_queue: str,
    backends: dict[str, BackendProtocol],
    journal_dir: str | Path,
    **options: Any,
) -> Worker:
    """A worker serving the ``filegate.<tool>`` activities for ``backends``."""
    from activities.tools import FileToolActivities

    tools = FileToolActivities(backends, Path(journal_dir))
    return Worker(
        client,
        task_queue=task_queue,
        activities=tools.activities(),
        **options,
    )


async def run_until_stopped(worker: Worker, stop: asyncio.Event | None = None) -> None:
    """Run ``worker`` until SIGTERM/SIGINT (or ``stop``), then shut down gracefully."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # not the main thread / platform
            pass
    try:
        async with worker:
            log.info("worker polling task queue %s", worker.task_queue)
            await stop.wait()
            log.info("stopping worker on %s", worker.task_queue)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def _worker_command(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    client = await connect(settings)
    if args.role == "agent":
        queue = args.task_queue or os.environ.get("FILEGATE_TASK_QUEUE") or settings.task_queue
        worker = agent_worker(client, queue)
    else:
        if not args.task_queue:
            raise SystemExit("--task-queue is required for --role tools")
        name = args.name or args.backend
        backend = make_backend(args.backend, args.root)
        journal = Path(args.journal_dir or settings.state_dir / "journal" / name)
        worker = tools_worker(client, args.task_queue, {name: backend}, journal)
    await run_until_stopped(worker)
    return 0


def _add_worker_parser(sub: Any) -> None:
    parser = sub.add_parser("worker", help="run a Temporal worker")
    parser.add_argument("--role", choices=("agent", "tools"), required=True)
    parser.add_argument("--backend", choices=BACKEND_KINDS, default="filesystem")
    parser.add_argument("--root", help="workspace directory of a filesystem/local-shell backend")
    parser.add_argument("--task-queue", help="task queue (agent default: FILEGATE_TASK_QUEUE)")
    parser.add_argument("--name", help="backend name workflows use (default: the kind)")
    parser.add_argument("--journal-dir", help="idempotency journal directory (tools role)")
    parser.set_defaults(handler=_worker_command)


COMMANDS: dict[str, Callable[[Any], None]] = {"worker": _add_worker_parser}
"""Subcommand name -> function adding its parser; extend to add commands."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="filegate", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS.values():
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # `python worker.py --role agent` is shorthand for `filegate worker --role agent`.
    if args_list and args_list[0].startswith("--role"):
        args_list.insert(0, "worker")
    args = build_parser().parse_args(args_list)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    code: int = asyncio.run(args.handler(args))
    return code


if __name__ == "__main__":
    sys.exit(main())
