"""Filegate as a Deep Agents backend (``pip install 'filegate[deepagents]'``).

:class:`FilegateBackend` implements deepagents' ``SandboxBackendProtocol``
(with ``can_execute=False`` it is a :class:`FilegateFileBackend`, a plain
``BackendProtocol`` without ``execute``, which deepagents' own permission
rules accept). Every operation is a Filegate activity on a tools worker,
scheduled from the calling workflow or, outside one, started by the client
as a standalone activity (else through a one-operation workflow,
:class:`OperationWorkflow`; :mod:`filegate.operations`). Every Filegate tools
worker serves all of them (a plain ``filegate worker --role tools`` too);
:func:`tools_worker` is that worker on a sandbox that also runs Deep Agents
graphs. See ``docs/deepagents.md``.

Lazy (:mod:`filegate._lazy`): the workflow-side names (``Operation``,
``OperationWorkflow``, ``run_operation``) load without deepagents, so a workflow
sandbox never imports LangChain.
"""

from typing import TYPE_CHECKING

from filegate._lazy import attach

if TYPE_CHECKING:
    from filegate.activities.transfer import TransferActivities
    from filegate.kernel.operation_types import Operation, OperationResult
    from filegate.workflows.operation import OperationWorkflow, run_operation

    from .backend import FilegateBackend, FilegateFileBackend
    from .commands import execute_interrupt_on
    from .convert import Mount
    from .gate import ExecuteGateFailure
    from .worker import tools_worker

__getattr__, __dir__, __all__ = attach(__name__, __file__)
