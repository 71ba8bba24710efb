"""The AgentWorkflow's handler names and the CLI's RPC budgets (contract §9, §10).

Client commands address the workflow by these names and import neither the
workflow nor the worker code, so they start in about half the time.
"""

from __future__ import annotations

from datetime import timedelta

WORKFLOW_TYPE = "AgentWorkflow"
PENDING_QUERY = "pending_approvals"
STATUS_QUERY = "status"
TRANSCRIPT_QUERY = "transcript"
DECIDE_UPDATE = "decide"  # also the signal's name
GRANTS_QUERY = "grants"  # remembered approvals (workflows.grants)
REVOKE_UPDATE = "revoke"
DECIDE_TURN_UPDATE = "decide_turn"  # every pending call of one turn (update only)

RUNNING_AGENTS = f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'"
"""Visibility query of the agents that may have pending approvals."""

QUERY_TIMEOUT = timedelta(seconds=5)
"""RPC budget of one query: a workflow whose worker is gone must not hang a CLI."""

DECIDE_TIMEOUT = 20.0
"""Seconds a decision waits for a worker to validate it (the update needs a live worker)."""
