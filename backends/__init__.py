"""Filegate backends: plain Python (no Temporal imports).

The protocol, typed results, path validation, permission rules and the
backends themselves. Everything here may be imported inside a workflow
sandbox; the parts that do I/O are only *called* from filegate.activities.
"""

from typing import TYPE_CHECKING

from filegate._lazy import attach

if TYPE_CHECKING:
    from filegate.kernel.artifacts import (
        ArtifactRef,
    )
    from filegate.kernel.formatting import (
        Rendered,
        format_delete,
        format_edit,
        format_error,
        format_execute,
        format_glob,
        format_grep,
        format_ls,
        format_write,
        needs_offload,
        offload_stub,
        permission_denied,
    )
    from filegate.kernel.media import (
        MediaOutcome,
    )
    from filegate.kernel.media_types import VIDEO_READ_NOTE, describe_read_file, video_supported
    from filegate.kernel.paths import (
        validate_path,
    )
    from filegate.kernel.permissions import (
        FilesystemPermission,
        check_permission,
        delete_blockers,
        filter_grep_matches,
        filter_ls_entries,
        filter_paths,
        first_matching_rule,
        interrupt_fires,
        matching_interrupt_rule,
    )
    from filegate.kernel.protocol import (
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
    from filegate.kernel.read_format import ReadPlan, format_read, plan_read
    from filegate.kernel.routing import (
        RouteMatch,
        Router,
        SearchPlan,
        SearchTarget,
        normalize_prefix,
    )
    from filegate.kernel.state import (
        StateBackend,
    )

    from .artifacts import (
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
    )
    from .filesystem import (
        FilesystemBackend,
    )
    from .local_shell import (
        LocalShellBackend,
    )
    from .media import (
        VideoLimits,
        media_blocks,
    )
    from .policy import (
        Policy,
        PolicyBackend,
        PolicyConfig,
        build_policy_chain,
        register_policy_kind,
    )
    from .sandbox import (
        BaseSandbox,
    )
    from .settings import (
        CommandSettings,
        JournalSettings,
        ModelSettings,
        S3Settings,
        Settings,
        TemporalSettings,
    )
    from .store import (
        StoreBackend,
    )

__getattr__, __dir__, __all__ = attach(__name__, __file__)
