"""The CLI's RPC budgets (contract §9, §10).

Client commands address the workflow by the names in :mod:`filegate.kernel.wire`
and import neither the workflow nor the worker code, so they start in about half
the time.
"""

from __future__ import annotations

from datetime import timedelta

QUERY_TIMEOUT = timedelta(seconds=5)
"""RPC budget of one query: a workflow whose worker is gone must not hang a CLI."""

DECIDE_TIMEOUT = 20.0
"""Seconds a decision waits for a worker to validate it (the update needs a live worker)."""
