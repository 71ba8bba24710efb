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
    rules: Sequence[FilesystemPermission], *, backend: str, sandboxed: bool, remedies: str
) -> None:
    """The kit's one execute gate for an adapter's backend that runs commands.

    Raises :class:`ExecuteGateError` naming the first offending rule, with the
    adapter's ``remedies`` added; inside a workflow an :class:`ExecuteGateFailure`.
    """
    try:
        check_execute_gate(rules, backend=backend, can_execute=True, sandboxed=sandboxed)
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


__all__ = ["ExecuteGateFailure", "check_adapter_gate"]
