"""The tools worker for the deepagents adapter: the core one, on a sandbox that passes the
frameworks through (for a workflow running a Deep Agents graph beside it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.worker import Worker, WorkflowRunner

from filegate.kernel.protocol import BackendProtocol

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
pure (the operation models and workflow are the core's,
:mod:`filegate.workflows.operation`)."""


def sandbox_runner() -> WorkflowRunner:
    """The workflow sandbox for :class:`OperationWorkflow` and Deep Agents workflows.

    Filegate's own pass-through list (what ``AgentWorkflow`` shares) plus
    :data:`FRAMEWORK_PASSTHROUGH`, on the context-free runner (Filegate's
    converters read no serialization context).
    """
    from temporalio.worker.workflow_sandbox import SandboxRestrictions

    from filegate.workflows.runner import SANDBOX_PASSTHROUGH, ContextFreeSandboxRunner

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
    """:func:`filegate.worker.tools_worker` on :func:`sandbox_runner`'s sandbox.

    Every tools worker serves what :class:`FilegateBackend` needs (the eight
    ``filegate.<tool>`` activities, the three ``filegate.transfer.*`` activities
    and :class:`OperationWorkflow`), so a plain ``filegate worker --role tools``
    does too. This one only adds the sandbox settings a workflow running a Deep
    Agents graph needs: ``workflows`` adds your own on them, for a
    single-process setup.
    """
    from filegate.worker import tools_worker as core_tools_worker

    options.setdefault("workflow_runner", sandbox_runner())
    return core_tools_worker(
        client,
        task_queue,
        dict(backends),
        journal_dir,
        artifacts=artifacts,
        policies=policies,
        workflows=list(workflows),
        **options,
    )
