"""The kit's execute gate at the adapter's construction, inside or outside a workflow.

:class:`~.backend.FilegateBackend` runs :func:`check_gate` when it is built,
so a configuration whose ``execute`` could bypass the permission rules fails
before any tool runs, the way ``FileTools`` and ``AgentWorkflow`` refuse it.
The gate itself is the core's (:mod:`filegate.workflows.adapter_gate`, shared
with the Pydantic AI adapter); this module adds the Deep Agents remedies.
Pure: no deepagents import, so a workflow can load it.
"""

from __future__ import annotations

from collections.abc import Sequence

from filegate.kernel.network_rules import NetworkPermission
from filegate.kernel.permissions import FilesystemPermission
from filegate.workflows.adapter_gate import ExecuteGateFailure, check_adapter_gate

ADAPTER_REMEDIES = (
    "Through the Deep Agents adapter: FilegateBackend(sandboxed=True) on a tools worker "
    "serving the bubblewrap sandbox, or can_execute=False to offer no execute (deepagents' "
    "interrupt_on does not approve commands for the tools worker)."
)
"""The kernel's remedies name ``BackendRef`` and ``interrupt_on``; these are the adapter's."""


def check_gate(
    rules: Sequence[FilesystemPermission],
    *,
    backend: str,
    sandboxed: bool,
    network: Sequence[NetworkPermission] = (),
) -> None:
    """The kit's one execute gate for this backend, with the Deep Agents remedies.

    Raises ``ExecuteGateError`` naming the first offending rule; inside a
    workflow an :class:`ExecuteGateFailure`.
    """
    check_adapter_gate(
        rules, backend=backend, sandboxed=sandboxed, remedies=ADAPTER_REMEDIES, network=network
    )


__all__ = ["ADAPTER_REMEDIES", "ExecuteGateFailure", "check_gate"]
