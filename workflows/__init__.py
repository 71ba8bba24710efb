"""Temporal workflows: the durable agent loop, and the tool kit it is built on.

:class:`FileTools` gives any workflow Filegate's tools (specs, gated calls,
approvals); :class:`AgentWorkflow` is a thin model loop over it."""

from typing import TYPE_CHECKING

from filegate._lazy import attach

if TYPE_CHECKING:
    from filegate.kernel.messages import Message, ModelSpec, ToolCall

    from .agent import (
        AgentWorkflow,
    )
    from .approval_handlers import ApprovalHandlers, initial_search_attributes
    from .file_tools import FileTools, ToolResult, tool_messages
    from .grant_models import Grant, GrantRequest
    from .grants import GrantRevocation
    from .inputs import (
        AgentInput,
        AgentResult,
        AgentStatus,
        ApprovalConfig,
        BackendRef,
        BackendSpec,
        DecidedApproval,
        Decision,
        DecisionAck,
        FileToolsConfig,
        FileToolsState,
        Limits,
        PendingApproval,
        RouteSpec,
        UserMessage,
    )
    from .turn_decisions import TurnDecision, TurnDecisionAck

__getattr__, __dir__, __all__ = attach(
    __name__,
    {
        ".agent": [
            "AgentWorkflow",
        ],
        ".approval_handlers": ["ApprovalHandlers", "initial_search_attributes"],
        ".file_tools": ["FileTools", "ToolResult", "tool_messages"],
        ".grant_models": ["Grant", "GrantRequest"],
        ".grants": ["GrantRevocation"],
        ".inputs": [
            "AgentInput",
            "AgentResult",
            "AgentStatus",
            "ApprovalConfig",
            "BackendRef",
            "BackendSpec",
            "DecidedApproval",
            "Decision",
            "DecisionAck",
            "FileToolsConfig",
            "FileToolsState",
            "Limits",
            "PendingApproval",
            "RouteSpec",
            "UserMessage",
        ],
        ".turn_decisions": ["TurnDecision", "TurnDecisionAck"],
        # The model-facing messages a host workflow builds and reads.
        "filegate.kernel.messages": ["Message", "ModelSpec", "ToolCall"],
    },
)
