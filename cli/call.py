"""``filegate call``: one file tool call, with no agent and no workflow where the server allows.

``filegate call read_file --args '{"file_path": "/notes.md"}' --root ./ws``
runs the ``filegate.read_file`` activity itself as a standalone activity
(:mod:`filegate.operations`), or one short ``OperationWorkflow`` on a server
without standalone activities. Either way the call takes an agent's path
through a tools worker: its policies, the ``--permissions`` rules (checked by
the worker, as for every call), the idempotency journal and the audit log.

With ``--root`` it works like ``run``: it starts for its own duration whatever
is missing (embedded Temporal and S3) and a tools worker on that directory.
Without ``--root`` it works like ``submit``: the call goes to a deployment's
tools worker (``--backend`` / ``--tools-queue`` / ``--name``), which also hosts
the fallback workflow (every tools worker does; ``--operation-queue`` names
another worker for it).

``--timeout`` bounds the call (default 60 s; an ``execute`` gets its command's
timeout on top), on the server too, so a call that timed out never runs
later; a queue no worker polls is then one line naming it.

Prints the tool's text (``--json``: the structured result); exit 0 when the
tool succeeded, 1 when it answered with an error (a missing file, a denied
path), failed or got no answer in time, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from filegate.cli.errors import CliError, failure_text
from filegate.cli.run_inputs import (
    first_error,
    load_prompt,
    load_rule_set,
    workspace_root,
)
from filegate.kernel.limits import DEFAULT_EXECUTE_TIMEOUT
from filegate.kernel.registry import TOOLS
from filegate.kernel.tool_types import TOOL_ORDER, ToolRequest

if TYPE_CHECKING:
    from temporalio.client import Client

    from filegate.cli.connection import Target
    from filegate.operations import OperationPath, Ran

__all__ = ["add_parser", "call_command", "parse_request"]

LOCAL_BACKEND_NAME = "workspace"
"""The backend name of ``--root`` (as ``filegate run`` names its backend)."""
LOCAL_KINDS = ("filesystem", "local-shell", "sandbox")
"""``--backend`` kinds ``--root`` can serve (``filegate worker --backend`` minus store)."""
DEFAULT_CALL_TIMEOUT = 60.0
"""``--timeout``'s default, in seconds (an ``execute`` gets its command's timeout on top)."""


def parse_request(args: argparse.Namespace, backend: str) -> ToolRequest:
    """The ToolRequest of ``TOOL --args``; bad arguments or a bad path exit 2 here.

    The arguments are checked as the tools worker checks them (the tool's
    schema, then its path), so a typo is one line before anything connects.
    """
    from filegate.activities.stubs import tool_request
    from filegate.kernel.dispatch import InvalidToolRequest, parse_args

    text = load_prompt(args.args, "--args") if args.args is not None else "{}"
    assert text is not None
    try:
        values = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"--args is not valid JSON: {exc}", 2) from None
    if not isinstance(values, dict):
        raise CliError("--args must be a JSON object of the tool's arguments", 2)
    rules = load_rule_set(args.permissions)
    try:
        request = tool_request(
            args.tool, values, backend=backend, tool_call_id="",
            permissions=rules.permissions, network=rules.network,
        )  # fmt: skip
        parse_args(request)
    except ValidationError as exc:
        raise CliError(f"--args for {args.tool}: {first_error(exc)}", 2) from None
    except InvalidToolRequest as exc:
        raise CliError(str(exc), 2) from None
    return request


async def call_command(args: argparse.Namespace) -> int:
    from filegate.cli.connection import target_from
    from filegate.cli.run import quiet_core_warnings
    from filegate.operations import checked_path, operation_path_from

    if not getattr(args, "verbose", False):
        quiet_core_warnings()
    try:
        path = checked_path(args.via, "--via") if args.via else operation_path_from(os.environ)
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    if args.timeout is not None and not args.timeout > 0:
        raise CliError("--timeout must be a positive number of seconds", 2)
    target = target_from(args)
    if args.root is not None:
        if args.tools_queue or args.name or args.operation_queue:
            raise CliError("--root serves its own tools worker: drop --tools-queue/--name", 2)
        root = workspace_root(args.root)
        request = parse_request(args, LOCAL_BACKEND_NAME)
        ran = await _call_on_root(args, target, root, request, path)
    else:
        request = parse_request(args, args.name or args.backend)
        ran = await _call_deployed(args, target, request, path)
    return _report(args, request, ran)


def _call_timeout(args: argparse.Namespace, request: ToolRequest) -> timedelta:
    """The call's deadline: ``--timeout``, else 60 s (plus an ``execute``'s own timeout)."""
    if args.timeout is not None:
        return timedelta(seconds=args.timeout)
    seconds = DEFAULT_CALL_TIMEOUT
    if request.tool in TOOLS.running:
        command = request.args.get("timeout") or DEFAULT_EXECUTE_TIMEOUT
        seconds += float(command)
    return timedelta(seconds=seconds)


async def _call_on_root(
    args: argparse.Namespace, target: Target, root: Path, request: ToolRequest, path: OperationPath
) -> Ran:
    """The call on a tools worker of this process serving ``root`` (servers as ``run``)."""
    from filegate.backends.policy import PolicyConfig
    from filegate.cli.services import local_services, services_client, state_dir_outside
    from filegate.worker import make_backend, tools_worker

    if args.backend not in LOCAL_KINDS:
        raise CliError(f"--root serves --backend {' | '.join(LOCAL_KINDS)}", 2)
    settings = target.settings
    try:
        backend = make_backend(args.backend, root, s3=settings.s3, commands=settings.commands)
        policies = PolicyConfig.from_env()  # as `filegate worker` and `run` read them
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    except RuntimeError as exc:  # the sandbox without a usable bwrap
        raise CliError(f"{args.backend} backend unavailable: {exc}") from None
    state_dir = state_dir_outside(settings.journal, [str(root)])
    # One queue per call: no other process's call can reach this worker.
    queue = f"filegate-call-{uuid.uuid4().hex[:12]}"
    journal = state_dir / "journal" / LOCAL_BACKEND_NAME
    async with local_services(target, state_dir, reuse_default=True) as services:
        client, artifacts = await services_client(target, services)
        served = {LOCAL_BACKEND_NAME: backend}
        async with tools_worker(
            client, queue, served, journal, artifacts=artifacts, policies=policies,
            allow_execute_with_policies=settings.commands.allow_execute_with_policies,
            journal_fsync=settings.journal.fsync,
        ):  # fmt: skip
            return await _run(client, request, queue, queue, path, _call_timeout(args, request))


async def _call_deployed(
    args: argparse.Namespace, target: Target, request: ToolRequest, path: OperationPath
) -> Ran:
    """The call on a deployment's tools worker (queues as ``submit`` names them)."""
    from temporalio.service import RPCError

    from filegate.cli.submit import has_pollers, tools_queue

    queue = tools_queue(args)
    timeout = _call_timeout(args, request)
    client = await target.connect()
    try:
        if not await has_pollers(client, queue, workflow=False):
            print(
                f"  !! no tools worker polls task queue {queue} yet: waiting up to "
                f"{timeout.total_seconds():g} s for one",
                file=sys.stderr,
            )
    except RPCError:  # a server that does not describe queues: just call
        pass
    return await _run(client, request, queue, args.operation_queue or queue, path, timeout)


async def _run(
    client: Client,
    request: ToolRequest,
    queue: str,
    op_queue: str,
    path: OperationPath,
    timeout: timedelta,
) -> Ran:
    from temporalio.client import WorkflowFailureError

    from filegate.kernel.operation_types import Operation
    from filegate.operations import OperationTimedOut, StandaloneUnavailable, run_outside

    op = Operation(task_queue=queue, tool=request)
    try:
        return await run_outside(
            client, op, operation_task_queue=op_queue, operation_timeout=timeout, path=path
        )
    except (StandaloneUnavailable, OperationTimedOut) as exc:
        raise CliError(str(exc)) from None
    except WorkflowFailureError as exc:
        raise CliError(f"the {request.tool} operation failed: {failure_text(exc)}") from None


def _report(args: argparse.Namespace, request: ToolRequest, ran: Ran) -> int:
    """Print the result (text, or ``--json``); 0 when the tool succeeded, else 1."""
    from filegate.activities.stubs import tool_result

    outcome = ran.result.outcome
    if outcome is None:
        raise CliError(f"the {request.tool} operation returned no outcome")
    result = tool_result(request, outcome)
    if args.json:
        # The call id is the worker's (the activity id), not the request's empty one.
        dumped = result.model_dump(mode="json", exclude_none=True, exclude={"tool_call_id", "name"})
        shown = {"via": ran.via, "tool": result.name, **dumped}
        print(json.dumps(shown, ensure_ascii=False, indent=2))
    else:
        text = result.text
        print(text, end="" if text.endswith("\n") else "\n")
    return 1 if result.is_error else 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    from filegate.cli.submit import DEPLOYED_BACKENDS

    parser = sub.add_parser(
        "call",
        parents=[common],
        help="one file tool call, as a standalone activity where the server runs those",
    )
    parser.add_argument("tool", choices=TOOL_ORDER, help="the tool to call")
    parser.add_argument(
        "--args",
        metavar="JSON|@FILE",
        help='the tool\'s arguments as a JSON object, e.g. \'{"file_path": "/notes.md"}\'',
    )
    parser.add_argument("--permissions", help="JSON file: list of {operations, paths, mode}")
    parser.add_argument(
        "--root", help="serve this directory with a tools worker of this command (as run)"
    )
    parser.add_argument(
        "--backend",
        choices=sorted({*LOCAL_KINDS, *DEPLOYED_BACKENDS}),
        default="filesystem",
        help="with --root: the backend kind serving it; without: the deployment's tools "
        "worker (queues as for submit)",
    )
    parser.add_argument("--tools-queue", help="without --root: the tools worker's --task-queue")
    parser.add_argument("--name", help="without --root: the tools worker's --name")
    parser.add_argument(
        "--operation-queue",
        help="without --root: the queue of a worker hosting OperationWorkflow, for the "
        "fallback (default: the tools queue, whose tools workers host it)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help=f"give up after this long, on the server too (default {DEFAULT_CALL_TIMEOUT:g}; "
        "execute: plus its command's timeout); a queue no worker polls is then named",
    )
    parser.add_argument(
        "--via",
        choices=("auto", "standalone", "workflow"),
        help="standalone activity, the one-operation workflow, or auto: standalone where "
        "the server runs those (default: FILEGATE_OPERATION_PATH or auto)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the structured result as JSON (and the path)"
    )
    parser.set_defaults(handler=call_command)
