"""Pydantic AI's workspace conformance suite against Filegate, through the adapter.

``WorkspaceBackendSuite`` (``pydantic_ai.workspaces.conformance``) is the
outside check of :class:`filegate.integrations.pydantic_ai.FilegateWorkspace`:
every call goes from the adapter through a Temporal client (a standalone
activity on the embedded dev server) to a real tools worker and into a real
bubblewrap sandbox, with payloads over the codec threshold through the
embedded S3 server (the suite round-trips an 8 MiB file).

Each difference is listed in :data:`DEVIATIONS` with its reason
(docs/pydantic-ai.md has the same list) and marked ``xfail(strict=True)``, so
a change of behaviour shows up as XPASS.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("pydantic_ai")

import pydantic_ai.workspaces.conformance as conformance
from minio import Minio
from pydantic_ai.workspaces import WorkspaceBackend, WorkspaceRef
from pydantic_ai.workspaces.conformance import WorkspaceBackendSuite
from temporalio.client import Client

from filegate.backends.artifacts import ArtifactStore
from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.devstack.servers import TemporalDevServer
from filegate.integrations.pydantic_ai import FilegateWorkspace
from filegate.kernel.protocol import BackendProtocol
from filegate.worker import tools_worker
from tests.threaded_worker import ThreadedWorker, xfail_deviations

pytestmark = [pytest.mark.slow, pytest.mark.services]

BACKEND = "sandbox"
MOUNT = "/workspace"

DEVIATIONS: dict[str, str] = {
    "test_cancellation_stops_foreground_work": (
        "a cancelled caller stops the command (tests/worker/test_operation_cancel.py), but each "
        "command has its own PID namespace: the suite's kill -0 of the PID the first command "
        "wrote, sent from a second command, names a process of that second sandbox"
    ),
    "test_symlink_loop_does_not_break_listing": (
        "deliberate: Filegate's ls lists regular files and directories it can reach inside "
        "the root; a link loop, a dangling link or a special file is left out"
    ),
    "test_a_backend_attached_by_ref_reaches_a_detached_process": (
        "deliberate: every command runs in a sandbox of its own, which ends with the command; "
        "nothing a command starts outlives it"
    ),
}
"""Suite tests that fail on purpose or because of a known difference, with the reason."""

HANG_GUARD = 15.0
"""Seconds, at most, that one of the suite's hang guards waits (it says 30 or 60).

Why: in three tests a guard is what ends the test here, not a hang: a detached
process or a background child that Filegate's per-command sandbox ended never
writes the file the suite waits for, and the cancellation probe's ``kill -0``
never sees its process die (see :data:`DEVIATIONS`). At the suite's own values
those waits were 150 s of the suite's run; every call that does finish here
finishes within a second or two, so a 15 s guard changes no verdict."""


def _capped(delay: float | None) -> float | None:
    return None if delay is None else min(delay, HANG_GUARD)


@pytest.fixture(autouse=True)
def _shorter_hang_guards(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite module's ``anyio``, with ``fail_after`` and ``move_on_after`` capped
    at :data:`HANG_GUARD`; everything else is anyio's own."""
    monkeypatch.setattr(conformance, "anyio", _CappedAnyio())


class _CappedAnyio:
    def __getattr__(self, name: str) -> Any:
        return getattr(anyio, name)

    @staticmethod
    def fail_after(delay: float | None, shield: bool = False) -> Any:
        return anyio.fail_after(_capped(delay), shield)

    @staticmethod
    def move_on_after(delay: float | None, shield: bool = False) -> Any:
        return anyio.move_on_after(_capped(delay), shield)


@contextmanager
def serving(
    temporal_server: TemporalDevServer,
    minio_client: Minio,
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    backend: Callable[[Path], BackendProtocol],
    backend_name: str = BACKEND,
) -> Iterator[ThreadedWorker]:
    """A tools worker on its own thread serving ``backend(root)`` as ``backend_name`` on a
    fresh root, with the embedded S3 server for the suite's large payloads."""
    store = ArtifactStore(minio_client, name, namespace=f"ns-{uuid.uuid4().hex[:8]}")
    root = tmp_path_factory.mktemp(f"{name}-root")
    journal = tmp_path_factory.mktemp("journal")

    def build(client: Client, queue: str) -> Any:
        served = {backend_name: backend(root)}
        return tools_worker(client, queue, served, journal, artifacts=store)

    running = ThreadedWorker(temporal_server, store, name, build)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def services(
    temporal_server: TemporalDevServer,
    minio_client: Minio,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ThreadedWorker]:
    BwrapSandboxBackend(tmp_path_factory.mktemp("probe"), check=True)  # skip-free probe
    with serving(
        temporal_server, minio_client, tmp_path_factory, "pai-suite", BwrapSandboxBackend
    ) as running:
        yield running


def _workspace(services: ThreadedWorker) -> FilegateWorkspace:
    assert services.client is not None
    return FilegateWorkspace(
        backend=BACKEND,
        task_queue=services.queue,
        client=services.client,
        mount=MOUNT,
        sandboxed=True,
    )


def conformance_suite(
    make: Callable[[ThreadedWorker], WorkspaceBackend], deviations: dict[str, str]
) -> type[WorkspaceBackendSuite]:
    """The published suite, unchanged but for ``deviations``, on the workspaces ``make``
    builds from a module's ``services`` (each adapter's test module names its own)."""

    @xfail_deviations(deviations)
    class Suite(WorkspaceBackendSuite):
        @pytest.fixture
        def anyio_backend(self) -> str:
            return "asyncio"

        @pytest.fixture
        def backend(self, services: ThreadedWorker) -> WorkspaceBackend:
            return make(services)

        @pytest.fixture
        def attach_backend(
            self, services: ThreadedWorker
        ) -> Callable[[WorkspaceRef], WorkspaceBackend]:
            def attach(ref: WorkspaceRef) -> WorkspaceBackend:
                built = make(services)
                assert built.ref == ref, "a ref names one backend, queue and mount"
                return built

            return attach

    return Suite


TestFilegateWorkspaceConformance = conformance_suite(_workspace, DEVIATIONS)
