"""The workflow runner agent workers use: the SDK sandbox, minus one costly detour.

For every payload in every activation and completion, the SDK (1.35) asks the
workflow instance for a *serialization context* (which workflow, which
activity), and the sandboxed instance answers by ``exec``-ing code inside the
sandbox with its import hooks applied: about a fifth of an agent worker's
event-loop time under load (``bench/throughput.py``). Filegate's converters,
pydantic JSON plus the S3 payload codec, never read that context, so this
runner answers "no context" directly and delegates everything else, activation
included, to the stock sandboxed instance: the determinism guards stay.

Use it only with context-free converters, such as those ``filegate.plugin.connect``
builds: :func:`filegate_runner`, the one builder every Filegate worker's runner
comes from, picks the plain sandbox for a converter that needs the context.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import CodeType, ModuleType
from typing import ClassVar

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.converter import (
    DataConverter,
    SerializationContext,
    StorageDriverStoreContext,
    WorkflowSerializationContext,
)
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.workflow import Info

SANDBOX_PASSTHROUGH: tuple[str, ...] = (
    "bracex",
    "filegate._lazy",
    "filegate.activities",
    "filegate.backends",
    "filegate.kernel",
    "filegate.workflows.approvals",
    "filegate.workflows.calls",
    "filegate.workflows.context",
    "filegate.workflows.fanout",
    "filegate.workflows.file_tools",
    "filegate.workflows.gate",
    "filegate.workflows.inputs",
    "filegate.workflows.batching",
    "filegate.workflows.runner",
    "filegate.workflows.telemetry",
    "filegate.workflows.tool_descriptions",
    "filegate.workflows.turns",
    "filegate.workflows.unserved",
    "wcmatch",
)
"""Modules the agent workflow may share with the host: pure and deterministic.

Only ``filegate``, ``filegate.workflows`` and ``filegate.workflows.agent`` (the
workflow class) are re-imported per workflow run (from code compiled once, see
:class:`CompiledOnceFinder`); the helpers hold no state and define the pydantic
models, which are slow to build (re-importing them cost about a third of a
throughput run's workflow CPU)."""


class _ContextFreeInstance(WorkflowInstance):
    """A sandboxed instance that answers the per-payload context questions itself."""

    def __init__(self, inner: WorkflowInstance) -> None:
        self._inner = inner

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        return self._inner.activate(act)

    def get_serialization_context(self, command_info: object) -> SerializationContext | None:
        return None

    def get_external_store_context(self, command_info: object) -> StorageDriverStoreContext:
        return StorageDriverStoreContext(target=None)

    def get_info(self) -> Info:
        return self._inner.get_info()

    def get_thread_id(self) -> int | None:
        return self._inner.get_thread_id()


class ContextFreeSandboxRunner(SandboxedWorkflowRunner):
    """:class:`SandboxedWorkflowRunner` whose instances skip the context round trip."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _ContextFreeInstance(super().create_instance(det))


class _CompiledOnceLoader(importlib.machinery.SourceFileLoader):
    """A source loader that compiles each file once per process.

    The sandbox re-imports the workflow module on every workflow run. Python
    reads a cached ``.pyc`` when one exists, but with ``PYTHONDONTWRITEBYTECODE``
    (or a read-only install) there is none, and every run compiled the source
    again: half of the sandbox's start-up cost. Keyed by path, mtime and size,
    so an edited file is compiled afresh.
    """

    codes: ClassVar[dict[tuple[str, int, int], CodeType]] = {}

    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        stat = os.stat(path)
        key = (path, stat.st_mtime_ns, stat.st_size)
        code = self.codes.get(key)
        if code is None:
            code = super().get_code(fullname)
            assert code is not None, f"no code for {fullname}"
            self.codes[key] = code
        return code


class CompiledOnceFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of ``packages`` as usual; loads them with :class:`_CompiledOnceLoader`."""

    def __init__(self, packages: Sequence[str]) -> None:
        self.packages = frozenset(packages)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not any(fullname == p or fullname.startswith(p + ".") for p in self.packages):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        loader = spec.loader if spec is not None else None
        if spec is not None and type(loader) is importlib.machinery.SourceFileLoader:
            spec.loader = _CompiledOnceLoader(loader.name, loader.path)
        return spec


def _compile_workflows_once() -> None:
    """Install :class:`CompiledOnceFinder` for ``filegate.workflows`` (idempotent)."""
    if not any(isinstance(f, CompiledOnceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, CompiledOnceFinder(["filegate.workflows"]))


def filegate_runner(
    existing: WorkflowRunner | None, converter: DataConverter | None = None
) -> WorkflowRunner:
    """``existing`` (default: the SDK sandbox) with Filegate's pure modules passed through.

    The stock sandbox becomes :class:`ContextFreeSandboxRunner` when ``converter``
    never reads the serialization context (None, Filegate's, the SDK's and the
    OpenAI plugin's do not), which saves a fifth of an agent worker's event
    loop; a runner class of your own keeps its class, an unsandboxed one is left.
    """
    runner = existing or SandboxedWorkflowRunner()
    if not isinstance(runner, SandboxedWorkflowRunner):
        return runner
    _compile_workflows_once()
    restrictions = runner.restrictions.with_passthrough_modules(*SANDBOX_PASSTHROUGH)
    if type(runner) not in (SandboxedWorkflowRunner, ContextFreeSandboxRunner):
        return dataclasses.replace(runner, restrictions=restrictions)
    probe = WorkflowSerializationContext(namespace="filegate", workflow_id="probe")
    free = converter is None or converter.with_context(probe) is converter
    cls = ContextFreeSandboxRunner if free else SandboxedWorkflowRunner
    return cls(restrictions=restrictions, runner_class=runner.runner_class)


def sandboxed_runner() -> SandboxedWorkflowRunner:
    """The stock sandbox with :data:`SANDBOX_PASSTHROUGH` passed through, for a
    converter that reads the serialization context."""
    _compile_workflows_once()
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*SANDBOX_PASSTHROUGH)
    return SandboxedWorkflowRunner(restrictions=restrictions)


def agent_runner() -> WorkflowRunner:
    """What agent workers run on: :func:`filegate_runner` for a context-free converter."""
    return filegate_runner(None)
