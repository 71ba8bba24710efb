"""``filegate cancel RUN``: end a run, including one whose workers are gone.

Why a command of its own: a run whose workers have died keeps waiting (for a
model reply, for a human, for a tool) and keeps ``filegate approvals`` at exit
3 indefinitely; the only way out was ``temporal workflow terminate``, which no
page mentioned. ``cancel`` first asks the run to cancel (a live worker ends it
cleanly: the canceled state, its history whole), and when no worker has ended
it within ``--grace`` seconds, terminates it on the server with the reason and
who ended it, which needs no worker at all.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from filegate.cli.approvals import describe_agent, os_user, state_name
from filegate.cli.connection import target_from
from filegate.cli.errors import CliError
from filegate.cli.progress import say

GRACE_SECONDS = 5.0
"""How long a live worker gets to end a canceled run before it is terminated."""


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "cancel", parents=[common], help="end a run (terminated when no worker answers)"
    )
    parser.add_argument("workflow_id", help="the run's workflow id")
    parser.add_argument("--reason", help="why, recorded with the run's end")
    parser.add_argument(
        "--grace", type=float, default=GRACE_SECONDS,
        help=f"seconds a live worker gets to cancel the run cleanly (default {GRACE_SECONDS:g})",
    )  # fmt: skip
    parser.add_argument("--reviewer", help="who ends it, recorded (default: the OS user)")
    parser.set_defaults(handler=_cancel_command)


async def _cancel_command(args: argparse.Namespace) -> int:
    if args.grace < 0:
        raise CliError("--grace must be 0 or more seconds", 2)
    client = await target_from(args).connect_reviewer()
    found = await describe_agent(client, args.workflow_id, agents_only=False)
    if found.status != WorkflowExecutionStatus.RUNNING:
        raise CliError(f"workflow {args.workflow_id} is not running ({state_name(found)})")
    who = args.reviewer or os_user()
    reason = f"filegate cancel by {who}" + (f": {args.reason}" if args.reason else "")
    handle = client.get_workflow_handle(args.workflow_id, run_id=found.run_id)
    await handle.cancel(reason=reason)  # in the run's history: who and why
    deadline = time.monotonic() + args.grace
    while time.monotonic() < deadline:
        status = (await handle.describe()).status
        if status != WorkflowExecutionStatus.RUNNING:
            ended = status.name.lower() if status else "closed"
            say(f"workflow {args.workflow_id} ended ({ended}; {reason})")
            return 0
        await asyncio.sleep(0.2)
    try:
        await handle.terminate(reason=reason)
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:  # it ended on its own meanwhile
            raise
    say(
        f"workflow {args.workflow_id} terminated: no worker ended it within {args.grace:g} s "
        f"({reason})"
    )
    return 0
