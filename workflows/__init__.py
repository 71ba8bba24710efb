"""Temporal workflows: the durable agent loop around the file tools."""

from workflows.agent import AgentWorkflow
from workflows.inputs import (
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

__all__ = [
    "AgentInput",
    "AgentResult",
    "AgentStatus",
    "AgentWorkflow",
    "ApprovalConfig",
    "BackendRef",
    "BackendSpec",
    "Decision",
    "Limits",
    "PendingApproval",
    "RouteSpec",
    "UserMessage",
]
