"""``filegate grants --workflow WF [--json]`` and ``filegate revoke GRANT_ID --workflow WF``.

A grant is an approval a reviewer asked to remember (``filegate approve ID
--remember``, docs/approvals.md "Grants"). These commands are plain clients,
like the approval commands: the workflow's ``grants`` query lists them and its
``revoke`` update (with a validator: an unknown id is refused at once) ends one.
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from filegate.cli.approvals import os_user, refuse_closed
from filegate.cli.connection import target_from
from filegate.cli.contract import DECIDE_TIMEOUT, QUERY_TIMEOUT
from filegate.cli.errors import CliError, failure_text
from filegate.cli.grant_options import grant_line, shown_status
from filegate.cli.progress import say
from filegate.kernel.wire import GRANTS_QUERY, REVOKE_UPDATE

_ENDED = "its grants ended with it"


def _unanswered(workflow_id: str) -> CliError:
    return CliError(
        f"no worker answered for {workflow_id}: is the `filegate run` (or agent worker) "
        "serving it still running?"
    )


async def _grants_of(client: Client, workflow_id: str) -> list[dict[str, Any]]:
    """The workflow's grants, oldest first, each ``status`` as of now."""
    await refuse_closed(client, workflow_id, _ENDED)
    handle = client.get_workflow_handle(workflow_id)
    try:
        listed: list[dict[str, Any]] = await handle.query(
            GRANTS_QUERY, result_type=list[dict[str, Any]], rpc_timeout=QUERY_TIMEOUT
        )
    except WorkflowQueryFailedError as exc:
        text = str(exc).lower()
        if "not found" in text or "unknown query" in text:
            raise CliError(f"workflow {workflow_id} keeps no grants (no grants query)") from None
        raise CliError(f"grants query of {workflow_id} failed: {failure_text(exc)}") from None
    except RPCError as exc:
        if exc.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
            raise _unanswered(workflow_id) from None
        raise CliError(f"cannot reach workflow {workflow_id}: {exc.message}") from None
    return [{**g, "status": shown_status(g)} for g in listed]


def grant_row(grant: dict[str, Any]) -> str:
    """``g-1a2b3c4d  active  write_file /docs/** by ana via cli, for the rest of the run
    (used 2 times)`` and, when revoked, by whom."""
    line = f"{grant['id']}  {grant['status']:<7}  {grant_line(grant).split(': ', 1)[1]}"
    line += f"  (used {grant.get('uses', 0)} time{'' if grant.get('uses') == 1 else 's'})"
    if grant.get("revoked_by"):
        line += f"  revoked by {grant['revoked_by']}"
    return line


async def _grants_command(args: argparse.Namespace) -> int:
    client = await target_from(args).connect()
    listed = await _grants_of(client, args.workflow)
    if args.json:
        say(json.dumps(listed, indent=2, ensure_ascii=False))
        return 0
    if not listed:
        say(f"no grants in {args.workflow}")
    for grant in listed:
        say(grant_row(grant))
    return 0


async def _revoke_command(args: argparse.Namespace) -> int:
    reviewer = (args.reviewer or os_user()).strip()
    if not reviewer or len(reviewer) > 200:
        raise CliError("--reviewer must be 1 to 200 characters", 2)
    client = await target_from(args).connect()
    handle = client.get_workflow_handle(args.workflow)
    revocation = {"id": args.grant_id, "reviewer": reviewer, "via": "cli"}
    try:
        grant: dict[str, Any] = await handle.execute_update(
            REVOKE_UPDATE,
            revocation,
            result_type=dict[str, Any],
            rpc_timeout=timedelta(seconds=args.timeout),
        )
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        raise _unanswered(args.workflow) from None
    except WorkflowUpdateFailedError as exc:
        raise CliError(f"revoke refused by {args.workflow}: {failure_text(exc)}") from None
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            await refuse_closed(client, args.workflow, _ENDED)  # unknown or closed: say which
        raise CliError(f"cannot reach workflow {args.workflow}: {exc.message}") from None
    say(f"revoked: {grant_line(grant)} (in {args.workflow}, by {grant.get('revoked_by')})")
    return 0


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    listing = sub.add_parser(
        "grants", parents=[common], help="list a workflow's grants (remembered approvals)"
    )
    listing.add_argument("--workflow", required=True, help="workflow id")
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    listing.set_defaults(handler=_grants_command)

    revoke = sub.add_parser("revoke", parents=[common], help="end a grant: its calls ask again")
    revoke.add_argument("grant_id", help="grant id (see `filegate grants`)")
    revoke.add_argument("--workflow", required=True, help="workflow id")
    revoke.add_argument(
        "--timeout", type=float, default=DECIDE_TIMEOUT,
        help=f"seconds to wait for a worker to accept (default {DECIDE_TIMEOUT:g})",
    )  # fmt: skip
    revoke.add_argument("--reviewer", help="who revokes, recorded (default: the OS user)")
    revoke.set_defaults(handler=_revoke_command)
