"""The tools worker for the deepagents adapter: the plugin's, on a sandbox that passes the
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
    """A tools worker built by :class:`~filegate.plugin.FilegatePlugin`, on
    :func:`sandbox_runner`'s sandbox.

    Every tools worker serves what :class:`FilegateBackend` needs (the eight
    ``filegate.<tool>`` activities, the three ``filegate.transfer.*`` activities
    and :class:`OperationWorkflow`), so a plain ``filegate worker --role tools``
    does too. This one only adds the sandbox settings a workflow running a Deep
    Agents graph needs: ``workflows`` adds your own on them, for a
    single-process setup. Every value is explicit, as for any worker of the
    core: ``artifacts`` None keeps results inline, ``policies`` None runs none,
    and nothing is read from the environment. ``options`` go to ``Worker``.
    """
    from temporalio.plugin import SimplePlugin

    from filegate.backends.policy import PolicyConfig
    from filegate.backends.settings import Settings
    from filegate.plugin import FilegatePlugin

    filegate = FilegatePlugin(
        backends=dict(backends),
        journal_dir=journal_dir,
        artifacts=artifacts,
        settings=Settings(),
        policies=policies or PolicyConfig(),
        tracer_provider=None,
        check_codec=False,  # the caller's client and codec, as the core's tools_worker
    )
    # Listed after the plugin, so the runner is used as it is (the plugin would wrap it).
    runner = SimplePlugin(
        "filegate.deepagents.runner",
        workflow_runner=options.pop("workflow_runner", None) or sandbox_runner(),
    )
    plugins = [filegate, runner, *options.pop("plugins", ())]
    return Worker(
        client, task_queue=task_queue, workflows=list(workflows), plugins=plugins, **options
    )
