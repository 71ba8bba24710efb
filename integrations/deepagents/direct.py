"""Moved to the core (:mod:`filegate.operations`); these names stay importable from here.

Except :func:`operation_path_from_env`, the adapter's default path: the adapter is an
edge that may read the environment, the core is not (tests/repo/test_config_edges.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

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
    operation_path_from,
    run_outside,
    standalone_known,
    standalone_refused,
)


def operation_path_from_env(environ: Mapping[str, str] | None = None) -> OperationPath:
    """The :data:`OperationPath` of ``FILEGATE_OPERATION_PATH`` (unset: ``auto``)."""
    return operation_path_from(os.environ if environ is None else environ)


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
