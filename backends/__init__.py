"""Filegate backends: plain Python (no Temporal imports).

The protocol, typed results, path validation, permission rules and the
backends themselves. Everything here may be imported inside a workflow
sandbox; the parts that do I/O are only *called* from filegate.activities.
"""

from typing import TYPE_CHECKING

from filegate._lazy import attach

if TYPE_CHECKING:
    from .artifacts import (
        ArtifactRef,
        ArtifactStore,
    )
    from .audit import (
        AuditRecord,
        AuditSink,
        FileAuditSink,
        audit_context,
    )
    from .bwrap import (
        BwrapSandboxBackend,
        SandboxUnavailableError,
    )
    from .composite import (
        CompositeBackend,
        RouteMatch,
        Router,
        SearchPlan,
        SearchTarget,
        normalize_prefix,
    )
    from .filesystem import (
        FilesystemBackend,
    )
    from .formatting import (
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
    from .local_shell import (
        LocalShellBackend,
    )
    from .media import (
        VIDEO_READ_NOTE,
        MediaOutcome,
        VideoLimits,
        describe_read_file,
        media_blocks,
        video_supported,
    )
    from .paths import (
        validate_path,
    )
    from .permissions import (
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
    from .policy import (
        Policy,
        PolicyBackend,
        PolicyConfig,
        build_policy_chain,
        register_policy_kind,
    )
    from .protocol import (
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
    from .sandbox import (
        BaseSandbox,
    )
    from .state import (
        StateBackend,
    )
    from .store import (
        StoreBackend,
    )

__getattr__, __dir__, __all__ = attach(
    __name__,
    {
        ".artifacts": [
            "ArtifactRef",
            "ArtifactStore",
        ],
        ".audit": [
            "AuditRecord",
            "AuditSink",
            "FileAuditSink",
            "audit_context",
        ],
        ".bwrap": [
            "BwrapSandboxBackend",
            "SandboxUnavailableError",
        ],
        ".composite": [
            "CompositeBackend",
            "RouteMatch",
            "Router",
            "SearchPlan",
            "SearchTarget",
            "normalize_prefix",
        ],
        ".filesystem": [
            "FilesystemBackend",
        ],
        ".formatting": [
            "ReadPlan",
            "Rendered",
            "format_delete",
            "format_edit",
            "format_error",
            "format_execute",
            "format_glob",
            "format_grep",
            "format_ls",
            "format_read",
            "format_write",
            "needs_offload",
            "offload_stub",
            "permission_denied",
            "plan_read",
        ],
        ".local_shell": [
            "LocalShellBackend",
        ],
        ".media": [
            "VIDEO_READ_NOTE",
            "MediaOutcome",
            "VideoLimits",
            "describe_read_file",
            "media_blocks",
            "video_supported",
        ],
        ".paths": [
            "validate_path",
        ],
        ".permissions": [
            "FilesystemPermission",
            "check_execute_config",
            "check_permission",
            "delete_blockers",
            "filter_grep_matches",
            "filter_ls_entries",
            "filter_paths",
            "first_matching_rule",
            "interrupt_fires",
            "matching_interrupt_rule",
        ],
        ".policy": [
            "Policy",
            "PolicyBackend",
            "PolicyConfig",
            "build_policy_chain",
            "register_policy_kind",
        ],
        ".protocol": [
            "BackendProtocol",
            "DeleteResult",
            "EditResult",
            "ExecuteResult",
            "FileDownloadResult",
            "FileInfo",
            "FileUploadResult",
            "GlobResult",
            "GrepMatch",
            "GrepResult",
            "LsResult",
            "ReadResult",
            "WriteResult",
        ],
        ".sandbox": [
            "BaseSandbox",
        ],
        ".state": [
            "StateBackend",
        ],
        ".store": [
            "StoreBackend",
        ],
    },
)
