"""A tools worker that also serves the deepagents adapter (operations and transfers)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filegate.kernel.protocol import BackendProtocol
from filegate.worker import ACTIVITY_TASK_POLLERS, file_tools
from temporalio.client import Client
from temporalio.worker import Worker, WorkflowRunner

from .operations import OperationWorkflow
from .transfer import TransferActivities

if TYPE_CHECKING:
    from filegate.backends.artifacts import ArtifactStore
    from filegate.backends.policy import PolicyConfig


FRAMEWORK_PASSTHROUGH: tuple[str, ...] = (
    "filegate.integrations",
    "deepagents",
    "langchain",
    "langchain_core",
    "langchain_anthropic",
    "langchain_google_genai",
    "langgraph",
    "langsmith",
    "anthropic",
    "openai",
    "google",
    "httpx",
    "requests",
    "urllib3",
)
"""Modules a workflow running a Deep Agents graph shares with the host.

The frameworks build large class hierarchies at import and some (``requests``
via ``urllib3``) subclass ``http.client`` types the sandbox restricts, so
re-importing them per run is both slow and refused; none of them keeps
state a workflow depends on at import time. The adapter's own modules are
pure: :mod:`.operations` defines the models and the operation workflow."""


def sandbox_runner() -> WorkflowRunner:
    """The workflow sandbox for :class:`OperationWorkflow` and Deep Agents workflows.

    Filegate's own pass-through list (what ``AgentWorkflow`` shares) plus
    :data:`FRAMEWORK_PASSTHROUGH`, on the context-free runner (Filegate's
    converters read no serialization context).
    """
    from filegate.workflows.runner import SANDBOX_PASSTHROUGH, ContextFreeSandboxRunner
    from temporalio.worker.workflow_sandbox import SandboxRestrictions

    restrictions = SandboxRestrictions.default.with_passthrough_modules(
        *SANDBOX_PASSTHROUGH, *FRAMEWORK_PASSTHROUGH
    )
    return ContextFreeSandboxRunner(restrictions=restrictions)


def tools_worker(
    client: Client,
    task_queue: str,
    backends: Mapping[str, BackendProtocol],
    journal_dir: str | Path,
    *,
    artifacts: ArtifactStore | None = None,
    policies: PolicyConfig | None = None,
    workflows: Sequence[type] = (),
    **options: Any,
) -> Worker:
    """:func:`filegate.worker.tools_worker` plus what :class:`FilegateBackend` needs.

    The eight ``filegate.<tool>`` activities, the three ``filegate.transfer.*``
    activities over the same backends (same policies, journal and artifact
    store) and :class:`OperationWorkflow`, the one-operation workflow that
    callers outside a workflow go through. Hosting the workflow on the tools
    queue keeps each operation on one worker: a workflow task and one activity.
    ``workflows`` adds your own (a workflow running a Deep Agents graph, say) on
    the same sandbox settings, for a single-process setup.
    """
    from filegate.activities.contract import HEARTBEAT_THROTTLE

    options.setdefault("workflow_runner", sandbox_runner())
    options.setdefault("max_concurrent_activity_task_polls", ACTIVITY_TASK_POLLERS)
    options.setdefault("max_heartbeat_throttle_interval", HEARTBEAT_THROTTLE)
    tools = file_tools(dict(backends), journal_dir, artifacts, policies)
    activities = [*tools.activities(), *TransferActivities(tools).activities()]
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[OperationWorkflow, *workflows],
        activities=activities,
        **options,
    )
