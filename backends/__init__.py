"""Filegate backends: plain Python (no Temporal imports).

The protocol, typed results, path validation, permission rules and the
backends themselves. Everything here may be imported inside a workflow
sandbox; the parts that do I/O are only *called* from activities.
"""

from backends.paths import validate_path
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

# -- backends (added as they land) --

# -- permissions --

__all__ = [
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
    "validate_path",
]
