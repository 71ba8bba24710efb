"""The kit's execute gate at the adapter's construction, inside or outside a workflow.

:class:`~.backend.FilegateBackend` runs :func:`check_gate` when it is built,
so a configuration whose ``execute`` could bypass the permission rules fails
before any tool runs, the way ``FileTools`` and ``AgentWorkflow`` refuse it
(:mod:`filegate.kernel.execute_gate`). Pure: no deepagents import, so a
workflow can load it.
"""

from __future__ import annotations

from collections.abc import Sequence

from filegate.kernel import wire
from filegate.kernel.execute_gate import ExecuteGateError, check_execute_gate
from filegate.kernel.permissions import FilesystemPermission
from temporalio import workflow
from temporalio.exceptions import ApplicationError

ADAPTER_REMEDIES = (
    "Through the Deep Agents adapter: FilegateBackend(sandboxed=True) on a tools worker "
    "serving the bubblewrap sandbox, or can_execute=False to offer no execute (deepagents' "
    "interrupt_on does not approve commands for the tools worker)."
)
"""The kernel's remedies name ``BackendRef`` and ``interrupt_on``; these are the adapter's."""


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


def check_gate(rules: Sequence[FilesystemPermission], *, backend: str, sandboxed: bool) -> None:
    """The kit's one execute gate (:mod:`filegate.kernel.execute_gate`) for this backend.

    Raises :class:`ExecuteGateError` naming the first offending rule, with the
    adapter's remedies added; inside a workflow an :class:`ExecuteGateFailure`.
    """
    try:
        check_execute_gate(rules, backend=backend, can_execute=True, sandboxed=sandboxed)
    except ExecuteGateError as refused:
        message = f"{refused} {ADAPTER_REMEDIES}"
        if workflow.in_workflow():
            raise ExecuteGateFailure(refused, message) from None
        raise ExecuteGateError(
            message,
            rule_number=refused.rule_number,
            pattern=refused.pattern,
            backend=refused.backend,
        ) from None
