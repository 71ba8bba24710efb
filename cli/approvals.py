"""``filegate approvals / approve / reject / respond / edit / status``.

Plain clients of any Temporal address: they find pending approvals with a
visibility query and send decisions as the workflow's ``decide`` update, so a
bad id is refused immediately (contract §5, §10).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import logging
import sys
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowContinuedAsNewError,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from filegate.cli.connection import target_from
from filegate.cli.contract import DECIDE_TIMEOUT, QUERY_TIMEOUT
from filegate.cli.errors import NEEDS_S3, CliError, failure_text, undecodable
from filegate.cli.grant_options import add_remember_options, grant_line, remember_payload
from filegate.cli.progress import approval_context, args_text, counted, rule_text, say
from filegate.cli.ui.listing import LISTING_TIMEOUT, Listing, approval_listing, ask_refused_again
from filegate.kernel.wire import (
    DECIDE_UPDATE,
    DECIDED,
    PENDING_QUERY,
    STATUS_QUERY,
    WORKFLOW_TYPE,
)

log = logging.getLogger("filegate.approvals")

__all__ = ["LISTING_TIMEOUT", "Listing", "approval_listing", "pending_approvals"]

CONTRACT_FIELDS = ("workflow_id", "id", "tool", "args", "rule")
"""The keys of one approval in ``filegate approvals --json`` (contract §10); the
listing carries more (preview, task...), which the UI shows."""


def _contract_shape(approval: dict[str, Any]) -> dict[str, Any]:
    """One listed approval as ``--json`` prints it: the contract keys, and ``cwd``."""
    shaped = {key: approval.get(key) for key in CONTRACT_FIELDS}
    return {**shaped, **({"cwd": approval["cwd"]} if approval.get("cwd") else {})}


RESULT_FIELDS = ("stop_reason", "final_answer", "steps", "tool_calls", "tool_errors", "approvals")
"""What ``status`` prints of a finished run's AgentResult (not its transcript)."""


async def pending_approvals(client: Client, workflow_id: str | None = None) -> list[dict[str, Any]]:
    """Pending approvals of every running Filegate workflow (or of one), contract §10
    shape; unreachable workflows are noted on stderr (see :func:`approval_listing`)."""
    listing = await approval_listing(client, workflow_id)
    for line in _unreachable_lines(listing):
        print(f"filegate: {line}", file=sys.stderr)
    return [_contract_shape(a) for a in listing.approvals]


def _unreachable_lines(listing: Listing) -> list[str]:
    return [f"!! workflow {u['workflow_id']} {u['reason']}" for u in listing.unreachable]


def _unknown_workflow(client: Client, workflow_id: str) -> CliError:
    """The one message every command gives for a workflow id the server does not know."""
    return CliError(f"no workflow {workflow_id} in namespace {client.namespace}")


async def describe_agent(
    client: Client, workflow_id: str, *, agents_only: bool = True
) -> WorkflowExecutionDescription:
    """The workflow's description; an unknown id (or, with ``agents_only``, another
    type than ``AgentWorkflow``) is one line, exit 1. Approvals work for any workflow
    that hosts Filegate's approval handlers (``FileTools`` in one's own workflow)."""
    try:
        found = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise _unknown_workflow(client, workflow_id) from None
        raise CliError(f"cannot reach workflow {workflow_id}: {exc.message}") from None
    if agents_only and found.workflow_type != WORKFLOW_TYPE:
        raise CliError(
            f"workflow {workflow_id} is a {found.workflow_type}, not a Filegate {WORKFLOW_TYPE}"
        )
    return found


def state_name(found: WorkflowExecutionDescription) -> str:
    return found.status.name.lower() if found.status else "unknown"


UNANSWERED_EXIT = 3
"""``approvals`` exit code when some workflow did not answer (it may wait for a human)."""

RESTART_GRACE = 5.0
"""Seconds ``approvals`` asks again a workflow whose query the server refused at once,
before reporting it as unanswered.

A Temporal server keeps the pollers it has seen in memory: for the first seconds
after a restart it refuses every query with "no poller seen for task queue
recently, worker may be down", until each worker's next poll (the SDK's backoff
after the outage, 2 to 3 s after a short restart). ``approvals`` then exited 3
for live runs (issue 49). A worker that is really gone costs the command this
long, once, and is reported as before."""


async def _approvals_command(args: argparse.Namespace) -> int:
    client = await target_from(args).connect_reviewer()
    if args.workflow:
        found = await describe_agent(client, args.workflow, agents_only=False)
        if found.status != WorkflowExecutionStatus.RUNNING:
            raise CliError(
                f"workflow {args.workflow} is not running ({state_name(found)}): "
                "it has no pending approvals"
            )
    listing = await approval_listing(client, args.workflow)
    await ask_refused_again(client, listing, RESTART_GRACE)
    items = [_contract_shape(a) for a in listing.approvals]
    # A workflow that did not answer may be waiting for a human (its worker is
    # down): never "no pending approvals" and exit 0 then.
    code = UNANSWERED_EXIT if listing.unreachable else 0
    if args.json:  # a JSON list, as before: unreachable workflows go to stderr
        for line in _unreachable_lines(listing):
            print(line, file=sys.stderr, flush=True)
        say(json.dumps(items, indent=2, ensure_ascii=False))
        return code
    for line in _unreachable_lines(listing):
        say(line)
    unread = [u for u in listing.unreachable if u.get("undecodable")]
    silent = len(listing.unreachable) - len(unread)
    if unread:
        say(
            f"!! {counted(len(unread), 'workflow')} answered with pending approvals this "
            f"terminal cannot read: {NEEDS_S3}"
        )
    if silent:
        say(
            f"!! {counted(silent, 'workflow')} did not answer: their "
            "pending approvals are not listed (is their worker running? end an abandoned "
            "run with `filegate cancel WORKFLOW_ID`)"
        )
    if not listing.unreachable and not items:
        say("no pending approvals")
    for item in listing.approvals:
        why = item.get("description") or rule_text(item.get("rule"))
        say(
            f"{item['workflow_id']}  {item['id']}  {item['tool']} {args_text(item['args'])}"
            f"{approval_context(item)}  (rule: {why})"
        )
    return code


def unread(exc: KeyError) -> str:
    """The line for an answer this terminal cannot decode (re-raised when it is not
    one: a KeyError is otherwise a bug, and keeps its traceback)."""
    reason = undecodable(exc)
    if reason is None:
        raise exc
    return reason


def os_user() -> str:
    """The default ``--reviewer``: the user running the command."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (some containers)
        return "unknown"


def check_target(args: argparse.Namespace) -> None:
    """One approval id, or ``--all`` (every pending call of a turn), never both."""
    every = getattr(args, "all", False)
    if every and args.id:
        raise CliError("give an approval ID or --all, not both", 2)
    if not every and not args.id:
        raise CliError("give an approval ID, or --all for every pending call of a turn", 2)
    if not every and getattr(args, "turn", None) is not None:
        raise CliError("--turn goes with --all", 2)


def decision_payload(args: argparse.Namespace) -> dict[str, Any]:
    """The ``decide`` payload (the workflow's Decision model: id, decision,
    args/reason/message, and who decided: ``--reviewer`` or the OS user, via ``cli``)."""
    reviewer = (getattr(args, "reviewer", None) or os_user()).strip()
    if not reviewer or len(reviewer) > 200:
        raise CliError("--reviewer must be 1 to 200 characters", 2)
    payload: dict[str, Any] = {
        "id": args.id,
        "decision": args.decision,
        "reviewer": reviewer,
        "via": "cli",
    }
    for key in ("reason", "message"):
        if getattr(args, key, None) is not None:
            payload[key] = getattr(args, key)
    if args.decision == "edit":
        try:
            edited = json.loads(args.args)
        except json.JSONDecodeError as exc:
            raise CliError(f"--args is not valid JSON: {exc}", 2) from None
        if not isinstance(edited, dict):
            raise CliError("--args must be a JSON object of tool arguments", 2)
        payload["args"] = edited
    remember = remember_payload(args)  # approve --remember [PATTERN] [--for DURATION]
    if remember is not None:
        payload["remember"] = remember
    return payload


PREVIEW_WAIT_SECONDS = 30.0
"""How long ``approve``/``edit`` wait for an approval's preview to be shown."""


class _Unanswered(Exception):
    """No worker answered the approvals query in time."""


async def listed_now(handle: WorkflowHandle[Any, Any], rpc_timeout: float) -> list[dict[str, Any]]:
    """The workflow's pending approvals as its query answers them now."""
    try:
        listed: list[dict[str, Any]] = await handle.query(
            PENDING_QUERY,
            result_type=list[dict[str, Any]],
            rpc_timeout=timedelta(seconds=rpc_timeout),
        )
    except RPCError as exc:
        if exc.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
            raise _Unanswered from None
        raise
    return listed


def fingerprint_shown(approval: dict[str, Any]) -> str | None:
    """The fingerprint a decision on ``approval`` names: its preview's (``""`` for one
    without), None when it shows no preview."""
    preview = approval.get("preview")
    return None if preview is None else str(preview.get("fingerprint") or "")


async def shown_fingerprint(
    handle: WorkflowHandle[Any, Any],
    approval_id: str,
    wait: float = PREVIEW_WAIT_SECONDS,
    *,
    rpc_timeout: float = QUERY_TIMEOUT.total_seconds(),
) -> str | None:
    """The fingerprint of the preview an approval shows now (``""``: a preview without
    one), waiting while it is computed; None when the approval has no preview.

    An approve or edit names it, so the workflow takes the decision only for the
    preview it was made on (contract §5).
    """
    deadline = asyncio.get_running_loop().time() + wait
    while True:
        listed = await listed_now(handle, rpc_timeout)
        approval = next((a for a in listed if a.get("id") == approval_id), None)
        if approval is None or not approval.get("preview_pending"):
            return fingerprint_shown(approval or {})
        if asyncio.get_running_loop().time() > deadline:
            raise CliError(f"the preview of approval {approval_id} is not ready after {wait:g} s")
        await asyncio.sleep(0.1)


_NO_APPROVALS = "it has no pending approvals"


async def refuse_closed(client: Client, workflow_id: str, why: str) -> None:
    """One line, exit 1, when ``workflow_id`` is unknown or no longer running
    (``why``: what that means for the command)."""
    found = await describe_agent(client, workflow_id, agents_only=False)
    if found.status != WorkflowExecutionStatus.RUNNING:
        raise CliError(f"workflow {workflow_id} is not running ({state_name(found)}): {why}")


async def _decide_command(args: argparse.Namespace) -> int:
    check_target(args)
    decision = decision_payload(args)
    client = await target_from(args).connect_reviewer()
    handle = client.get_workflow_handle(args.workflow)
    try:
        if getattr(args, "all", False):
            from filegate.cli.turn_approvals import decide_turn  # it builds on this module

            say(await decide_turn(handle, decision, args))
            return 0
        if decision["decision"] in ("approve", "edit"):
            seen = await shown_fingerprint(handle, args.id, rpc_timeout=args.timeout)
            if seen is not None:
                decision["preview_fingerprint"] = seen
        ack: dict[str, Any] = await handle.execute_update(
            DECIDE_UPDATE, decision, rpc_timeout=timedelta(seconds=args.timeout)
        )
    except (WorkflowUpdateRPCTimeoutOrCancelledError, _Unanswered):
        # A closed run has no worker to answer either: say that it closed, not that
        # its worker may be down.
        await refuse_closed(client, args.workflow, _NO_APPROVALS)
        raise CliError(
            f"no worker answered for {args.workflow} within {args.timeout:g} s: is the "
            "`filegate run` (or agent worker) serving it still running? Check "
            "`filegate approvals` before deciding again."
        ) from None
    except WorkflowUpdateFailedError as exc:
        raise CliError(f"{args.decision} refused by {args.workflow}: {failure_text(exc)}") from None
    except WorkflowQueryFailedError as exc:
        raise CliError(f"cannot read the approvals of {args.workflow}: {exc}") from None
    except KeyError as exc:  # a card stored in S3 by reference (an older worker)
        raise CliError(f"cannot read the approvals of {args.workflow}: {unread(exc)}") from None
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:  # unknown, or no longer running
            await refuse_closed(client, args.workflow, _NO_APPROVALS)
        raise CliError(f"cannot reach workflow {args.workflow}: {exc.message}") from None
    if ack.get("changed_since_preview"):
        # Not applied: the call keeps waiting with a fresh preview (cli.md: exit 1).
        raise CliError(
            f"not {DECIDED.get(ack['decision'], ack['decision'])}: the target of approval "
            f"{ack['id']} changed since its preview; it keeps waiting with a fresh preview: "
            "look at it again (`filegate approvals`), then decide"
        )
    by = f"{ack.get('reviewer', decision['reviewer'])} via {ack.get('via', 'cli')}"
    say(f"{ack['decision']}: approval {ack['id']} of {args.workflow} (by {by})")
    if ack.get("grant"):
        say(f"remembered as {grant_line(ack['grant'])}")
    return 0


async def _status_command(args: argparse.Namespace) -> int:
    """A running workflow's ``status`` query; a closed one's final state, from its
    history (no worker needed). Unknown id, or a worker that does not answer: exit 1."""
    client = await target_from(args).connect_reviewer()
    found = await describe_agent(client, args.workflow_id)
    if found.status != WorkflowExecutionStatus.RUNNING:
        say(json.dumps(await _final_state(client, found), indent=2, ensure_ascii=False))
        return 0
    handle = client.get_workflow_handle(args.workflow_id)
    try:
        status = await handle.query(STATUS_QUERY, rpc_timeout=QUERY_TIMEOUT)
    except WorkflowQueryFailedError as exc:
        raise CliError(f"status query of {args.workflow_id} failed: {failure_text(exc)}") from None
    except KeyError as exc:  # an answer stored in S3 by reference (an older worker)
        raise CliError(f"status of {args.workflow_id}: {unread(exc)}") from None
    except RPCError:
        raise CliError(
            f"workflow {args.workflow_id} is running, but no worker answers for it "
            f"(task queue {found.task_queue}): is its agent worker up?"
        ) from None
    say(json.dumps(status, indent=2, ensure_ascii=False))
    return 0


async def _final_state(client: Client, found: WorkflowExecutionDescription) -> dict[str, Any]:
    """Status, close time and the result's summary (or the failure) of a closed run."""
    state: dict[str, Any] = {
        "workflow_id": found.id,
        "status": state_name(found),
        "closed": found.close_time.isoformat() if found.close_time else None,
    }
    handle = client.get_workflow_handle(found.id, run_id=found.run_id)
    try:
        result = await handle.result(follow_runs=False, rpc_timeout=QUERY_TIMEOUT)
    except WorkflowFailureError as exc:
        state["failure"] = failure_text(exc)
    except WorkflowContinuedAsNewError as exc:
        state["continued_as"] = exc.new_execution_run_id
    except RPCError as exc:
        state["result_unavailable"] = exc.message
    else:
        if isinstance(result, dict):
            state.update({key: result[key] for key in RESULT_FIELDS if key in result})
    return state


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    listing = sub.add_parser("approvals", parents=[common], help="list pending approvals")
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    listing.add_argument("--workflow", help="only this workflow")
    listing.set_defaults(handler=_approvals_command)

    helps = {
        "approve": "run the pending call as asked",
        "reject": "do not run the call; tell the model (optionally why)",
        "respond": "do not run the call; MESSAGE becomes the tool result",
        "edit": "run the call with reviewer-supplied arguments",
    }
    for kind, text in helps.items():
        parser = sub.add_parser(kind, parents=[common], help=text)
        every = kind in ("approve", "reject")  # also per turn: cli/turn_approvals.py
        parser.add_argument(
            "id", nargs="?" if every else None, help="approval id (see `filegate approvals`)"
        )
        parser.add_argument("--workflow", required=True, help="workflow id")
        if every:
            parser.add_argument(
                "--all", action="store_true",
                help=f"{kind} every pending call of one model turn, in one update",
            )  # fmt: skip
            parser.add_argument("--turn", help="with --all: the turn (when several are pending)")
        parser.add_argument(
            "--timeout", type=float, default=DECIDE_TIMEOUT,
            help=f"seconds to wait for a worker to accept (default {DECIDE_TIMEOUT:g})",
        )  # fmt: skip
        parser.add_argument(
            "--reviewer", help="who decides, recorded with the decision (default: the OS user)"
        )
        if kind == "reject":
            parser.add_argument("--reason", help="reason passed on to the model")
        elif kind == "respond":
            parser.add_argument("--message", required=True, help="text of the tool result")
        elif kind == "edit":
            parser.add_argument("--args", required=True, help="replacement tool arguments (JSON)")
        if kind == "approve":
            add_remember_options(parser)
        parser.set_defaults(handler=_decide_command, decision=kind)

    status = sub.add_parser(
        "status", parents=[common], help="a workflow's status (a finished one: its final state)"
    )
    status.add_argument("workflow_id")
    status.set_defaults(handler=_status_command)
