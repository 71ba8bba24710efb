"""Moved to the core (:mod:`filegate.operations`); these names stay importable from here."""

from __future__ import annotations

from filegate.operations import (
    DEFAULT_OPERATION_PATH,
    DEFAULT_OPERATION_TIMEOUT,
    OPERATION_PATH_ENV,
    OPERATION_PATHS,
    OperationPath,
    OperationTimedOut,
    Ran,
    StandaloneUnavailable,
    Via,
    checked_path,
    operation_kind,
    operation_path_from_env,
    run_outside,
    standalone_known,
    standalone_refused,
)

__all__ = [
    "DEFAULT_OPERATION_PATH",
    "DEFAULT_OPERATION_TIMEOUT",
    "OPERATION_PATHS",
    "OPERATION_PATH_ENV",
    "OperationPath",
    "OperationTimedOut",
    "Ran",
    "StandaloneUnavailable",
    "Via",
    "checked_path",
    "operation_kind",
    "operation_path_from_env",
    "run_outside",
    "standalone_known",
    "standalone_refused",
]
