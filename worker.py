"""The workers the command line runs: one per role and backend type.

:func:`agent_worker` serves the AgentWorkflow and the model activity (plus,
optionally, local backends); :func:`tools_worker` serves one backend's file
tools on its own task queue (its credentials never leave that process). Both
build a ``Worker`` from the roles of :mod:`filegate.wiring.roles` with explicit
values, the roles :class:`~filegate.plugin.FilegatePlugin` composes too, so
workflows, activities, runner and tuning are applied in one place. The client
is :func:`filegate.plugin.connect`'s; the command line is :mod:`filegate.cli`.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.worker import Worker

from filegate.backends.settings import CommandSettings, S3Settings, Settings
from filegate.wiring.roles import agent_role, profiles_from, tools_role
from filegate.wiring.tuning import NO_TUNING

if TYPE_CHECKING:
    from filegate.activities.providers.profiles import ModelProfiles
    from filegate.backends.artifacts import ArtifactStore
    from filegate.backends.policy import PolicyConfig
    from filegate.kernel.protocol import BackendProtocol

log = logging.getLogger("filegate.worker")

BACKEND_KINDS = ("filesystem", "local-shell", "sandbox", "state", "store")


def agent_worker(
    client: Client,
    task_queue: str,
    *,
    artifacts: ArtifactStore | None = None,
    backends: dict[str, BackendProtocol] | None = None,
    journal_dir: str | Path | None = None,
    policies: PolicyConfig | None = None,
    model_profiles: ModelProfiles | None = None,
    allow_execute_with_policies: bool = False,
    journal_fsync: bool = False,
    **options: Any,
) -> Worker:
    """The worker that runs AgentWorkflow, the model activity and local backends.

    It also runs ``SessionWorkflow`` (``filegate mcp``'s tool sessions), which
    hosts the same ``FileTools`` as an agent's run and makes no model calls.

    With ``artifacts`` the model activity keeps the transcript in S3 and the
    workflow sends it by reference plus the new messages (contract §8); it also
    archives evicted messages under ``/conversation_history/``. Without one,
    conversations travel by value. ``client`` should carry the same store's
    payload codec (:func:`connect` / :func:`with_payload_codec`).

    ``backends`` (with ``journal_dir``) are served to ``kind="local"`` backend
    refs: their file tools run as local activities in this worker.

    ``model_profiles`` are the models this worker serves (endpoints, key
    variables, allowed names; contract §11); None: the built-in defaults
    (:func:`profiles_from` reads them from settings). ``policies``,
    ``allow_execute_with_policies`` and ``journal_fsync``: as for :func:`file_tools`.
    Its tuning is an agent's alone, local backends or not.
    """
    return _plugin_worker(
        client, task_queue, options, tools=False, policies=policies, journal_fsync=journal_fsync,
        agent=True, backends=backends, journal_dir=journal_dir, artifacts=artifacts,
        model_profiles=model_profiles, allow_execute_with_policies=allow_execute_with_policies,
    )  # fmt: skip


def _plugin_worker(
    client: Client, task_queue: str, options: dict[str, Any], *, tools: bool, agent: bool,
    backends: dict[str, BackendProtocol] | None, journal_dir: str | Path | None,
    artifacts: ArtifactStore | None, model_profiles: ModelProfiles | None,
    policies: PolicyConfig | None, allow_execute_with_policies: bool, journal_fsync: bool,
) -> Worker:  # fmt: skip
    """A ``Worker`` configured by the roles it serves (:func:`agent_role`,
    :func:`tools_role`), every value explicit (nothing read from the environment),
    ``options`` as given: a ``workflow_runner`` among them is used as it is, and
    the client's codec is the caller's. ``tools``: tuned as a tools worker.
    """
    from temporalio.plugin import SimplePlugin

    from filegate.backends.policy import PolicyConfig

    if backends and journal_dir is None:
        raise ValueError("backends need a journal_dir for their idempotency journal")
    plugins: list[Any] = []
    if agent:
        plugins.append(agent_role(model_profiles=model_profiles, artifacts=artifacts))
    if backends:
        assert journal_dir is not None
        plugins.append(
            tools_role(
                backends, journal_dir, artifacts=artifacts, policies=policies or PolicyConfig(),
                allow_execute_with_policies=allow_execute_with_policies,
                journal_fsync=journal_fsync, tuning=None if tools else NO_TUNING,
            )
        )  # fmt: skip
    if "workflow_runner" in options:
        runner = options.pop("workflow_runner")
        plugins.append(SimplePlugin("filegate.workflow_runner", workflow_runner=runner))
    plugins += options.pop("plugins", ())
    return Worker(client, task_queue=task_queue, plugins=plugins, **options)


def make_backend(
    kind: str,
    root: str | Path | None,
    *,
    namespace: str | None = None,
    s3: S3Settings | None = None,
    commands: CommandSettings | None = None,
) -> BackendProtocol:
    """Build one backend from CLI-level settings (credentials stay in this process).

    ``store`` keeps files in the ``s3`` bucket under ``namespace``
    (``users/alice`` -> components ``("users", "alice")``), so they outlive a
    thread and are shared by every worker on the same bucket. A shell
    (local-shell, sandbox) runs each command within the ``commands`` bounds.
    None: the defaults (no S3; the default bounds).
    """
    if kind == "state":
        from filegate.kernel.state import StateBackend

        return StateBackend()
    if kind == "store":
        from filegate.backends.store import StoreBackend

        if not namespace:
            raise ValueError(
                "--store-namespace is required for the store backend, e.g. users/alice"
            )
        parts = tuple(part for part in namespace.split("/") if part)
        return StoreBackend.from_settings(s3 or S3Settings(), parts)
    if root is None:
        raise ValueError(f"--root is required for the {kind} backend")
    if not Path(root).is_dir():
        # Never created here: a typo would serve an empty directory of that name.
        what = "is not a directory" if Path(root).exists() else "does not exist"
        raise ValueError(f"--root {root} {what}: create the workspace first, or fix the path")
    if kind == "filesystem":
        from filegate.backends.filesystem import FilesystemBackend

        return FilesystemBackend(str(root), virtual_mode=True)
    if kind == "local-shell":
        from filegate.backends.local_shell import LocalShellBackend

        return LocalShellBackend(str(root), bounds=(commands or CommandSettings()).bounds())
    if kind == "sandbox":
        from filegate.backends.bwrap import BwrapSandboxBackend

        return BwrapSandboxBackend(str(root), bounds=(commands or CommandSettings()).bounds())
    raise ValueError(f"unknown backend kind {kind!r}; choose one of {', '.join(BACKEND_KINDS)}")


def tools_worker(
    client: Client,
    task_queue: str,
    backends: dict[str, BackendProtocol],
    journal_dir: str | Path,
    *,
    artifacts: ArtifactStore | None = None,
    policies: PolicyConfig | None = None,
    allow_execute_with_policies: bool = False,
    journal_fsync: bool = False,
    serve_agents: bool = False,
    model_profiles: ModelProfiles | None = None,
    workflows: list[type] | tuple[type, ...] = (),
    **options: Any,
) -> Worker:
    """A worker serving the ``filegate.<tool>`` activities for ``backends``.

    Also what a caller outside any workflow needs (``filegate call``, the Deep
    Agents adapter's client mode): the ``filegate.transfer.*`` activities over
    the same backends (:func:`with_preview`) and ``OperationWorkflow``, the
    one-operation workflow they fall back to where the server runs no standalone
    activities (:mod:`filegate.operations`). ``workflows`` adds your own.

    ``serve_agents`` makes it also run the agent workflows started on
    ``task_queue`` (co-hosting, contract §8): their calls on a backend of this
    queue then run as local activities in this process, with no trip through
    the server (``execute`` stays a regular activity on the same queue), while
    their other routes stay remote. It then makes model calls too, so it needs
    the model configuration (``model_profiles``, as :func:`agent_worker`).

    ``artifacts`` turns on large-result offload (contract §7). ``policies`` (None:
    none), ``allow_execute_with_policies`` and ``journal_fsync`` are as for
    :func:`file_tools`; workflows only name policies.
    A per-queue rate limit is ``max_task_queue_activities_per_second=...`` in
    ``options`` (enforced by the server across all workers of the queue). It
    counts activities, so such a worker runs no batches (contract §8): each of
    its calls is an activity the limit counts.
    """
    return _plugin_worker(
        client, task_queue, {"workflows": list(workflows), **options}, tools=True,
        policies=policies, journal_fsync=journal_fsync, agent=serve_agents, backends=backends,
        journal_dir=journal_dir, artifacts=artifacts, model_profiles=model_profiles,
        allow_execute_with_policies=allow_execute_with_policies,
    )  # fmt: skip


async def run_until_stopped(worker: Worker, stop: asyncio.Event | None = None) -> None:
    """Run ``worker`` until SIGTERM/SIGINT (or ``stop``), then shut down gracefully."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # not the main thread / platform
            pass
    try:
        async with worker:
            log.info("worker polling task queue %s", worker.task_queue)
            await stop.wait()
            log.info("stopping worker on %s", worker.task_queue)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


@asynccontextmanager
async def in_process_workers(
    client: Client,
    agent_queue: str,
    tools_queue: str,
    backends: dict[str, BackendProtocol],
    journal_dir: Path,
    artifacts: ArtifactStore | None = None,
    *,
    settings: Settings | None = None,
    policies: PolicyConfig | None = None,
) -> AsyncIterator[None]:
    """An agent worker and one tools worker, polling for the duration of the block.

    The tools worker co-hosts (``serve_agents``): a run started on ``tools_queue``
    calls its backends without a trip through the server, while ``agent_queue``
    still serves runs started there (an earlier version's, resumed).
    ``artifacts`` goes to both: transcripts by reference on the agent side,
    large-result offload and ``/large_tool_results/`` / ``/conversation_history/``
    reads on the tools side. ``settings`` (None: the defaults) give the model
    profiles, the journal's fsync and the execute-with-policies consent;
    ``policies`` the tools worker's policies (None: none).
    """
    settings = settings or Settings()
    profiles = profiles_from(settings.models)
    tuned: dict[str, Any] = {
        "artifacts": artifacts,
        "policies": policies,
        "allow_execute_with_policies": settings.commands.allow_execute_with_policies,
        "journal_fsync": settings.journal.fsync,
    }
    async with (
        agent_worker(client, agent_queue, model_profiles=profiles, **tuned),
        tools_worker(
            client,
            tools_queue,
            backends,
            journal_dir,
            serve_agents=True,
            model_profiles=profiles,
            **tuned,
        ),  # fmt: skip
    ):
        yield
