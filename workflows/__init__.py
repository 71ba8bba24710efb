"""Temporal workflows: the durable agent loop around the file tools."""

from typing import TYPE_CHECKING

from filegate._lazy import attach

if TYPE_CHECKING:
    from .agent import (
        AgentWorkflow,
    )
    from .inputs import (
        AgentInput,
        AgentResult,
        AgentStatus,
        ApprovalConfig,
        BackendRef,
        BackendSpec,
        Decision,
        Limits,
        PendingApproval,
        RouteSpec,
        UserMessage,
    )

__getattr__, __dir__, __all__ = attach(
    __name__,
    {
        ".agent": [
            "AgentWorkflow",
        ],
        ".inputs": [
            "AgentInput",
            "AgentResult",
            "AgentStatus",
            "ApprovalConfig",
            "BackendRef",
            "BackendSpec",
            "Decision",
            "Limits",
            "PendingApproval",
            "RouteSpec",
            "UserMessage",
        ],
    },
)
