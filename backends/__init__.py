"""Filegate backends: plain Python (no Temporal imports).

The protocol, typed results, path validation, permission rules and the
backends themselves. Everything here may be imported inside a workflow
sandbox; the parts that do I/O are only *called* from activities.
"""

from backends.artifacts import ArtifactRef, ArtifactStore
from backends.audit import AuditRecord, AuditSink, FileAuditSink, audit_context
from backends.bwrap import BwrapSandboxBackend, SandboxUnavailableError
from backends.composite import (
    CompositeBackend,
    RouteMatch,
    Router,
    SearchPlan,
    SearchTarget,
    normalize_prefix,
)
from backends.filesystem import FilesystemBackend
from backends.formatting import (
    ReadPlan,
    Rendered,
    format_delete,
    format_edit,
    format_error,
    format_execute,
    format_glob,
    format_grep,
    format_ls,
    format_read,
    format_write,
    needs_offload,
    offload_stub,
    permission_denied,
    plan_read,
)
from backends.local_shell import LocalShellBackend
from backends.media import (
    VIDEO_READ_NOTE,
    MediaOutcome,
    VideoLimits,
    describe_read_file,
    media_blocks,
    video_supported,
)
from backends.paths import validate_path

# -- backends (added as they land) --
# -- permissions --
from backends.permissions import (
    FilesystemPermission,
    check_execute_config,
    check_permission,
    delete_blockers,
    filter_grep_matches,
    filter_ls_entries,
    filter_paths,
    first_matching_rule,
    interrupt_fires,
    matching_interrupt_rule,
)
from backends.policy import (
    Policy,
    PolicyBackend,
    PolicyConfig,
    build_policy_chain,
    register_policy_kind,
)
from backends.protocol import (
    BackendProtocol,
    DeleteResult,
    EditResult,
    ExecuteResult,
    FileDownloadResult,
    FileInfo,
    FileUploadResult,
    GlobResult,
    GrepMatch,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
)
from backends.sandbox import BaseSandbox
from backends.state import StateBackend
from backends.store import StoreBackend

__all__ = [
    "VIDEO_READ_NOTE",
    "ArtifactRef",
    "ArtifactStore",
    "AuditRecord",
    "AuditSink",
    "BackendProtocol",
    "BaseSandbox",
    "BwrapSandboxBackend",
    "CompositeBackend",
    "DeleteResult",
    "EditResult",
    "ExecuteResult",
    "FileAuditSink",
    "FileDownloadResult",
    "FileInfo",
    "FileUploadResult",
    "FilesystemBackend",
    "FilesystemPermission",
    "GlobResult",
    "GrepMatch",
    "GrepResult",
    "LocalShellBackend",
    "LsResult",
    "MediaOutcome",
    "Policy",
    "PolicyBackend",
    "PolicyConfig",
    "ReadPlan",
    "ReadResult",
    "Rendered",
    "RouteMatch",
    "Router",
    "SandboxUnavailableError",
    "SearchPlan",
    "SearchTarget",
    "StateBackend",
    "StoreBackend",
    "VideoLimits",
    "WriteResult",
    "audit_context",
    "build_policy_chain",
    "check_execute_config",
    "check_permission",
    "delete_blockers",
    "describe_read_file",
    "filter_grep_matches",
    "filter_ls_entries",
    "filter_paths",
    "first_matching_rule",
    "format_delete",
    "format_edit",
    "format_error",
    "format_execute",
    "format_glob",
    "format_grep",
    "format_ls",
    "format_read",
    "format_write",
    "interrupt_fires",
    "matching_interrupt_rule",
    "media_blocks",
    "needs_offload",
    "normalize_prefix",
    "offload_stub",
    "permission_denied",
    "plan_read",
    "register_policy_kind",
    "validate_path",
    "video_supported",
]
