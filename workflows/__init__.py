"""Temporal workflows: the durable agent loop, and the tool kit it is built on.

:class:`FileTools` gives any workflow Filegate's tools (specs, gated calls,
approvals); :class:`AgentWorkflow` is a thin model loop over it."""

from typing import TYPE_CHECKING

from filegate._lazy import attach

if TYPE_CHECKING:
    from filegate.kernel.messages import Message, ModelSpec, ToolCall
    from filegate.kernel.tool_types import ToolResult

    from .agent import (
        AgentWorkflow,
    )
    from .approvals.grant_models import Grant, GrantRequest
    from .approvals.grants import GrantRevocation
    from .approvals.handlers import ApprovalHandlers, initial_search_attributes
    from .approvals.turn_decisions import TurnDecision, TurnDecisionAck
    from .file_tools import FileTools, tool_messages
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

__getattr__, __dir__, __all__ = attach(__name__, __file__)
