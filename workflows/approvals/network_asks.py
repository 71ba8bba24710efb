"""A command's connection that an ``interrupt`` network rule holds: asked like a call.

The tools worker's egress proxy holds the connection and sends the run one
``ask_network`` update (``wire.NETWORK_ASK_UPDATE``) per host and port, with
an id made from the ``execute`` call and the host and port: a worker that
crashed and runs the command again sends the same id, and Temporal hands it
the same answer (or attaches it to the same wait), so a human is asked at
most once per call, host and port.

The run judges the host again by its own rules (the worker's word decides
nothing), answers at once where they allow or deny, lets a live grant for
that host and port answer, and otherwise opens a pending approval (``tool``
``connect``, ``args`` ``{host, port, command}``) that reviewers decide like
any other, from the CLI, the UI or MCP: ``approve`` (optionally remembered
as a grant for exactly that host and port), ``reject``. An ``edit`` has
nothing to edit and is refused; a ``respond`` answers the command no.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow

from filegate.kernel import wire
from filegate.kernel.network_rules import NetworkAnswer, NetworkAsk, NetworkRules, judge
from filegate.kernel.review_scope import ReviewerConfig
from filegate.workflows import telemetry
from filegate.workflows.approvals.grants import GrantBook
from filegate.workflows.approvals.handlers import ApprovalHandlers
from filegate.workflows.approvals.pending import clip
from filegate.workflows.approvals.reviews import first_pass
from filegate.workflows.approvals.turn_decisions import turn_of


class NetworkDesk:
    """Answers a tools worker's network questions for one run (module docstring)."""

    def __init__(
        self,
        rules: NetworkRules,
        handlers: ApprovalHandlers,
        grants: GrantBook,
        now: Callable[[], str],
        cwd: str,
        reviewer: ReviewerConfig | None = None,
    ) -> None:
        """``cwd``: where the run's commands run (its default backend's shell), for cards."""
        self._cwd = cwd
        self._reviewer = reviewer
        self._rules = list(rules)
        self._running: dict[str, str] = {}
        """Activity id of each ``execute`` running now -> the model's id of that call."""
        self._approvals = handlers
        self._book = handlers.book
        self._grants = grants
        self._now = now

    def register(self) -> None:
        """Register the update on the current workflow (hosts that declare their own
        handlers, ``AgentWorkflow``, delegate to :meth:`ask` and :meth:`validate`)."""
        workflow.set_update_handler(wire.NETWORK_ASK_UPDATE, self.ask, validator=self.validate)

    def validate(self, asked: NetworkAsk) -> None:
        """Only a question the run's own rules put to a human opens a card."""
        if asked.tool_call_id not in self._running:
            raise ValueError(f"no command of this run is running as {asked.tool_call_id!r}")
        judged = judge(self._rules, asked.host, asked.port)
        if judged.mode != "interrupt":
            raise ValueError(f"no interrupt network rule asks about {asked.host}:{asked.port}")

    def started(self, tool_call_id: str, model_call_id: str) -> None:
        """The ``execute`` call ``tool_call_id`` (its activity id) is about to run: its
        command may ask, and its cards name the model's call (as every card does)."""
        self._running[tool_call_id] = model_call_id

    def withdraw(self, tool_call_id: str) -> None:
        """The ``execute`` call ``tool_call_id`` ended: its questions still open have
        nobody waiting (a worker that died mid-wait reports the command as
        interrupted and does not run it again), so they close as refused instead
        of staying on every reviewer's list."""
        model_call_id = self._running.pop(tool_call_id, None)
        for approval in self._book.waiting():
            if approval.tool != wire.CONNECT_TOOL or approval.turn != turn_of(tool_call_id):
                continue
            if approval.tool_call_id == model_call_id:
                self._approvals.reject_unanswered(
                    approval.id,
                    reason="the command ended before a decision",
                    reviewer="nobody (the command ended)",
                )

    async def ask(self, asked: NetworkAsk) -> NetworkAnswer:
        judged = judge(self._rules, asked.host, asked.port)
        if judged.mode != "interrupt":  # the rules changed their answer: theirs stands
            return NetworkAnswer(allowed=judged.mode == "allow", reason=judged.reason)
        args = {"host": asked.host, "port": asked.port, "command": clip(asked.command, 2000)}
        rule = {"source": "network", "index": judged.rule, "description": judged.reason}
        used = self._grants.use(wire.CONNECT_TOOL, args, rule, workflow.now())
        if used is not None:
            telemetry.grant_used(wire.CONNECT_TOOL)
            return NetworkAnswer(
                allowed=True, reason=f"grant {used.grant.id}", decided_by=used.grant.created_by
            )
        approval = self._book.open(
            tool=wire.CONNECT_TOOL,
            args=args,
            rule=rule,
            tool_call_id=self._running.get(asked.tool_call_id, asked.tool_call_id),
            turn=turn_of(asked.tool_call_id),
            now=self._now(),
            cwd=self._cwd,
            description=f"{judged.reason}: a command connects to {asked.host}:{asked.port}",
        )
        self._approvals.publish()
        await first_pass(self._approvals, self._reviewer, approval.id)
        opened = workflow.now()
        await workflow.wait_condition(lambda: self._book.is_decided(approval.id))
        decision = self._approvals.close(
            approval.id, tool=wire.CONNECT_TOOL, call_id=asked.tool_call_id, opened=opened
        )
        self._approvals.publish()
        by = decision.by()
        if decision.decision == "approve":
            return NetworkAnswer(allowed=True, reason=f"approved by {by}", decided_by=by)
        why = f": {decision.reason}" if decision.reason else ""
        if decision.decision == "respond" and decision.message:
            why = f": {decision.message}"
        return NetworkAnswer(allowed=False, reason=f"rejected by {by}{why}", decided_by=by)


__all__ = ["NetworkDesk"]
