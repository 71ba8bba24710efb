"""An adapter's operation client: the core's, with what every adapter adds at its edge.

Each framework adapter maps its interface onto one
:class:`~filegate.operations.OperationClient`. What they all add is here, once:
the default path from ``FILEGATE_OPERATION_PATH`` (asked at call time), the
timeout as given (a ``timedelta`` or seconds, checked in one line), and the
refusal of network rules on an adapter that offers no commands.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from temporalio.client import Client

from filegate.integrations.environment import operation_path_from_env
from filegate.kernel.network_rules import NetworkPermission
from filegate.kernel.permissions import FilesystemPermission
from filegate.operations import OperationClient, OperationPath, checked_timeout
from filegate.workflows.adapter_gate import check_adapter_network


def adapter_calls(
    owner: str,
    can_execute: bool,
    backend: str,
    task_queue: str,
    client: Client | None,
    operation_task_queue: str | None,
    permissions: Sequence[FilesystemPermission],
    policies: Sequence[str] | None,
    network: Sequence[NetworkPermission],
    operation_timeout: timedelta | float,
    operation_path: OperationPath | None,
    search_timeout: float | None = None,
) -> OperationClient:
    """The operation client of adapter ``owner`` (named in its one-line errors), whose
    arguments are the adapter's own, in the order its constructor takes them."""
    calls = OperationClient(
        backend=backend,
        task_queue=task_queue,
        owner=owner,
        client=client,
        operation_task_queue=operation_task_queue,
        permissions=list(permissions),
        policies=None if policies is None else list(policies),
        network=list(network),
        operation_timeout=checked_timeout(operation_timeout),
        search_timeout=search_timeout,
        operation_path=operation_path,
        default_path=operation_path_from_env,
    )
    check_adapter_network(calls.network, backend=backend, can_execute=can_execute)
    return calls


__all__ = ["adapter_calls"]
