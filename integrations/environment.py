"""What the adapters read from the environment: they are edges, the core is not.

The core takes typed values only (tests/repo/test_config_edges.py); an adapter
is built by a user's program, which has no CLI to read settings for it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from filegate.operations import OperationPath, operation_path_from


def operation_path_from_env(environ: Mapping[str, str] | None = None) -> OperationPath:
    """The :data:`~filegate.operations.OperationPath` ``FILEGATE_OPERATION_PATH`` names
    (unset: ``auto``): the default of both adapters, asked when a call is made outside
    a workflow (an adapter built inside one must not read the environment there)."""
    return operation_path_from(os.environ if environ is None else environ)


__all__ = ["operation_path_from_env"]
