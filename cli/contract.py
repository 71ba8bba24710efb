"""The AgentWorkflow's handler names (from :mod:`filegate.kernel.wire`) and the CLI's
RPC budgets (contract §9, §10).

Client commands address the workflow by these names and import neither the
workflow nor the worker code, so they start in about half the time.
"""

from __future__ import annotations

from datetime import timedelta

from filegate.kernel.wire import (  # the names live in the kernel's wire module
    WORKFLOW_TYPE,
)

RUNNING_AGENTS = f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'"
"""Visibility query of the agents that may have pending approvals."""

QUERY_TIMEOUT = timedelta(seconds=5)
"""RPC budget of one query: a workflow whose worker is gone must not hang a CLI."""

DECIDE_TIMEOUT = 20.0
"""Seconds a decision waits for a worker to validate it (the update needs a live worker)."""
