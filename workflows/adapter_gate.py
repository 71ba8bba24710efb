"""The kit's execute gate for a framework adapter, checked when the adapter is built.

An adapter that offers another framework a shell over a Filegate backend (the
Deep Agents backend, the Pydantic AI workspace) must refuse a configuration
whose ``execute`` could bypass the permission rules before any tool runs, the
way ``FileTools`` and ``AgentWorkflow`` do (:mod:`filegate.kernel.execute_gate`).
Adapters are built inside a workflow or outside one, so the refusal takes two
forms: a plain :class:`~filegate.kernel.execute_gate.ExecuteGateError` outside,
and inside a workflow an :class:`ExecuteGateFailure`, which also fails that
workflow. Each adapter adds its own remedies to the kernel's message (the
kernel's name ``BackendRef`` and ``interrupt_on``, which an adapter's user
does not write). Workflow-safe: the kernel and Temporal's exception types only.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from filegate.kernel import wire
from filegate.kernel.execute_gate import ExecuteGateError, check_execute_gate
from filegate.kernel.network_rules import NetworkPermission, enforcement_problem
from filegate.kernel.permissions import FilesystemPermission


class ExecuteGateFailure(ExecuteGateError, ApplicationError):
    """:class:`ExecuteGateError` raised inside a workflow: it also fails that workflow.

    A plain ``ValueError`` from workflow code fails only the workflow task,
    which Temporal retries until someone fixes the code; a configuration that
    can never run should fail the workflow at once, as ``FileTools`` does
    (non-retryable ``InvalidConfiguration``). Still an ``ExecuteGateError``,
    so one ``except`` catches it inside and outside a workflow.
    """

    def __init__(self, refused: ExecuteGateError, message: str | None = None) -> None:
        message = str(refused) if message is None else message
        ExecuteGateError.__init__(
            self,
            message,
            rule_number=refused.rule_number,
            pattern=refused.pattern,
            backend=refused.backend,
        )
        ApplicationError.__init__(
            self, message, type=wire.INVALID_CONFIGURATION_ERROR, non_retryable=True
        )


def check_adapter_gate(
    rules: Sequence[FilesystemPermission],
    *,
    backend: str,
    sandboxed: bool,
    remedies: str,
    network: Sequence[NetworkPermission] = (),
) -> None:
    """The kit's one execute gate for an adapter's backend that runs commands.

    Raises :class:`ExecuteGateError` naming the first offending rule, with the
    adapter's ``remedies`` added; inside a workflow an :class:`ExecuteGateFailure`.
    ``network``: the adapter's network rules, refused where they cannot hold
    (kernel.network_rules).
    """
    try:
        check_execute_gate(rules, backend=backend, can_execute=True, sandboxed=sandboxed)
        problem = enforcement_problem(network, sandboxed=sandboxed)
        if problem is not None:
            raise ExecuteGateError(problem, rule_number=0, pattern="", backend=backend)
    except ExecuteGateError as refused:
        message = f"{refused} {remedies}"
        if workflow.in_workflow():
            raise ExecuteGateFailure(refused, message) from None
        raise ExecuteGateError(
            message,
            rule_number=refused.rule_number,
            pattern=refused.pattern,
            backend=refused.backend,
        ) from None


def check_adapter_network(
    network: Sequence[NetworkPermission], *, backend: str, can_execute: bool
) -> None:
    """Network rules on an adapter's backend without a shell would do nothing:
    refused like any rule that cannot hold (inside a workflow, failing it)."""
    problem = enforcement_problem(network, runs_commands=can_execute)
    if problem is None:
        return
    refused = ExecuteGateError(problem, rule_number=0, pattern="", backend=backend)
    if workflow.in_workflow():
        raise ExecuteGateFailure(refused)
    raise refused


__all__ = ["ExecuteGateFailure", "check_adapter_gate", "check_adapter_network"]
