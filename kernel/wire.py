"""Filegate's wire names: what the server, the CLI, the UI and other processes see.

Why one module: these strings are a contract with running workflows and with
clients of other releases (a renamed query breaks every open run's callers; a
renamed activity breaks replay). The decorators, the CLI, the UI and the tests
all import them from here, so a name is written once. Pure: no imports, so a
client command loads it without loading the workflow or worker code.
Never change a value; add a new name beside an old one instead.
"""

from __future__ import annotations

WORKFLOW_TYPE = "AgentWorkflow"
OPERATION_WORKFLOW_TYPE = "filegate.Operation"
"""One file operation as a workflow of its own (``filegate call``, the Deep Agents adapter)."""
SESSION_WORKFLOW_TYPE = "filegate.Session"
"""A long-lived tool session for a caller outside any workflow (``filegate mcp``): the
tools of one ``FileTools`` behind an update, with read-before-edit, grants and approvals."""
SESSION_CALL_UPDATE = "call"
"""Run one tool call in a session (its update id is the caller's call id: a retry attaches)."""
SESSION_SPECS_QUERY = "tool_specs"
"""A session's visible tools with their descriptions (what its caller offers)."""
SESSION_CLOSE_SIGNAL = "close"
"""End a session once its running calls finish."""
SESSION_REOPEN_SIGNAL = "reopen"
"""Take back a ``close`` (a caller serving the session again, ``filegate mcp --workflow-id``)."""
SESSION_CANCEL_CALL_SIGNAL = "cancel_call"
"""Stop one running call of a session (its caller cancelled it); the call id is the argument."""
SESSION_CALL_CANCELLED = (
    "Error: the call was cancelled by its caller before it finished; it may have run in "
    "part. Send it again to run it anew."
)
"""The answer of a session call its caller cancelled (also to the caller's retry of it)."""
SESSION_NOTED_SIGNAL = "noted"
"""A read the session's caller answered itself (``filegate mcp --root``), booked by the session."""
SESSION_RENEW_SIGNAL = "renew"
"""The serving process is alive: a session with a lease stays open while it renews."""

# Queries of AgentWorkflow (and, for the approval ones, of any FileTools host).
PENDING_QUERY = "pending_approvals"
DECIDED_QUERY = "decided_approvals"
STATUS_QUERY = "status"
TRANSCRIPT_QUERY = "transcript"
TRANSCRIPT_PAGE_QUERY = "transcript_page"
"""``(start, clip)``: the messages from ``start`` on, strings clipped, one bounded page
(what a follower such as ``filegate run`` needs; the whole transcript can outgrow
a query answer)."""
GRANTS_QUERY = "grants"
"""Remembered approvals (:mod:`filegate.workflows.approvals.grants`)."""

# Updates (``decide`` and ``add_message`` are also signals, for fire-and-forget callers).
DECIDE_UPDATE = "decide"
DECIDE_TURN_UPDATE = "decide_turn"
"""Every pending call of one model turn, all or nothing (update only)."""
DECIDED = {"approve": "approved", "edit": "edited", "reject": "rejected", "respond": "answered"}
"""Each decision (its wire value) and the word a line saying it was made uses."""
REVOKE_UPDATE = "revoke"
NETWORK_ASK_UPDATE = "ask_network"
"""A tools worker asks the run about a command's connection that an ``interrupt``
network rule holds (kernel.network_rules); answered once a human decides."""
CONNECT_TOOL = "connect"
"""The ``tool`` of such a question's pending approval (it is no tool the model calls)."""
ADD_MESSAGE_UPDATE = "add_message"

# Search attributes (Int) that make waiting runs listable by the server.
PENDING_ATTRIBUTE = "FilegatePendingApprovals"
DECIDED_ATTRIBUTE = "FilegateDecidedApprovals"

# Activities besides the eight tools (whose names the tool registry derives).
MODEL_ACTIVITY = "filegate.model"
TOOL_BATCH_ACTIVITY = "filegate.tool_batch"
PREVIEW_ACTIVITY = "filegate.preview"
# The transfer activities of one operation outside the tools (``filegate call``, the
# Deep Agents adapter): a read window as data, and files' bytes in and out.
TRANSFER_READ_ACTIVITY = "filegate.transfer.read"
TRANSFER_UPLOAD_ACTIVITY = "filegate.transfer.upload"
TRANSFER_DOWNLOAD_ACTIVITY = "filegate.transfer.download"

# Error types (``ApplicationError.type``): what a caller, a retry policy or a
# test matches on. The activities and workflows raise them by these names.
INVALID_CONFIGURATION_ERROR = "InvalidConfiguration"
"""A run's rules cannot hold on its backends (refused before any tool runs)."""
INVALID_REQUEST_ERROR = "InvalidToolRequest"
UNKNOWN_BACKEND_ERROR = "UnknownBackend"
UNKNOWN_POLICY_ERROR = "UnknownPolicy"
INVALID_RUN_IDENTITY_ERROR = "InvalidRunIdentity"
JOURNAL_UNAVAILABLE_ERROR = "JournalUnavailable"
ARTIFACT_STORE_UNAVAILABLE_ERROR = "ArtifactStoreUnavailable"
MODEL_REQUEST_ERROR = "ModelRequestError"
"""A model call no retry can fix (bad request, refused key): not retried."""
MODEL_RETRYABLE_ERROR = "ModelRetryable"
MODEL_PROFILE_ERROR = "ModelProfileError"
MODEL_TURN_TOO_LARGE_ERROR = "ModelTurnTooLarge"
FOREIGN_TRANSCRIPT_ERROR = "ForeignTranscript"
FOREIGN_SCRIPT_ERROR = "ForeignScript"
SCRIPT_UNAVAILABLE_ERROR = "ScriptUnavailable"
TRANSCRIPT_UNAVAILABLE_ERROR = "TranscriptUnavailable"
APPROVAL_ALREADY_DECIDED_ERROR = "ApprovalAlreadyDecided"
SESSION_CLOSED_ERROR = "SessionClosed"
"""A session call sent after ``close``: it did not run."""
SESSION_HANDOVER_ERROR = "SessionHandover"
"""A session call refused while the session continues as new: send it again."""

__all__ = [
    "ADD_MESSAGE_UPDATE",
    "APPROVAL_ALREADY_DECIDED_ERROR",
    "ARTIFACT_STORE_UNAVAILABLE_ERROR",
    "DECIDED_ATTRIBUTE",
    "DECIDED_QUERY",
    "DECIDE_TURN_UPDATE",
    "DECIDE_UPDATE",
    "FOREIGN_SCRIPT_ERROR",
    "FOREIGN_TRANSCRIPT_ERROR",
    "GRANTS_QUERY",
    "INVALID_CONFIGURATION_ERROR",
    "INVALID_REQUEST_ERROR",
    "INVALID_RUN_IDENTITY_ERROR",
    "JOURNAL_UNAVAILABLE_ERROR",
    "MODEL_ACTIVITY",
    "MODEL_PROFILE_ERROR",
    "MODEL_REQUEST_ERROR",
    "MODEL_RETRYABLE_ERROR",
    "MODEL_TURN_TOO_LARGE_ERROR",
    "OPERATION_WORKFLOW_TYPE",
    "PENDING_ATTRIBUTE",
    "PENDING_QUERY",
    "PREVIEW_ACTIVITY",
    "REVOKE_UPDATE",
    "SCRIPT_UNAVAILABLE_ERROR",
    "SESSION_CALL_CANCELLED",
    "SESSION_CALL_UPDATE",
    "SESSION_CANCEL_CALL_SIGNAL",
    "SESSION_CLOSED_ERROR",
    "SESSION_CLOSE_SIGNAL",
    "SESSION_HANDOVER_ERROR",
    "SESSION_NOTED_SIGNAL",
    "SESSION_RENEW_SIGNAL",
    "SESSION_REOPEN_SIGNAL",
    "SESSION_SPECS_QUERY",
    "SESSION_WORKFLOW_TYPE",
    "STATUS_QUERY",
    "TOOL_BATCH_ACTIVITY",
    "TRANSCRIPT_PAGE_QUERY",
    "TRANSCRIPT_QUERY",
    "TRANSCRIPT_UNAVAILABLE_ERROR",
    "TRANSFER_DOWNLOAD_ACTIVITY",
    "TRANSFER_READ_ACTIVITY",
    "TRANSFER_UPLOAD_ACTIVITY",
    "UNKNOWN_BACKEND_ERROR",
    "UNKNOWN_POLICY_ERROR",
    "WORKFLOW_TYPE",
]
