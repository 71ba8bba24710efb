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
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from minio import Minio
from pydantic_ai.workspaces import WorkspaceBackend, WorkspaceRef
from pydantic_ai.workspaces.conformance import WorkspaceBackendSuite
from temporalio.client import Client

from filegate.backends.artifacts import ArtifactStore
from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.devstack.servers import TemporalDevServer
from filegate.integrations.pydantic_ai import FilegateWorkspace
from filegate.worker import tools_worker
from tests.threaded_worker import ThreadedWorker, xfail_deviations

pytestmark = [pytest.mark.slow, pytest.mark.services]

BACKEND = "sandbox"
MOUNT = "/workspace"

DEVIATIONS: dict[str, str] = {
    "test_cancellation_stops_foreground_work": (
        "a cancelled caller stops the command (tests/test_operation_cancel.py), but each "
        "command has its own PID namespace: the suite's kill -0 of the PID the first command "
        "wrote, sent from a second command, names a process of that second sandbox"
    ),
    "test_symlink_loop_does_not_break_listing": (
        "deliberate: Filegate's ls lists regular files and directories it can reach inside "
        "the root; a link loop, a dangling link or a special file is left out"
    ),
    "test_realpath_and_entries_follow_symlinks": (
        "an absolute link made by a sandboxed command names the sandbox's path (/workspace/...), "
        "which Filegate's file operations, on the host, refuse as leaving the root"
    ),
    "test_writes_go_through_a_symlink": (
        "an absolute link made by a sandboxed command names the sandbox's path (/workspace/...), "
        "which Filegate's file operations, on the host, refuse as leaving the root"
    ),
    "test_a_backend_attached_by_ref_reaches_a_detached_process": (
        "deliberate: every command runs in a sandbox of its own, which ends with the command; "
        "nothing a command starts outlives it"
    ),
}
"""Suite tests that fail on purpose or because of a known difference, with the reason."""


@pytest.fixture(scope="module")
def services(
    temporal_server: TemporalDevServer,
    minio_client: Minio,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ThreadedWorker]:
    BwrapSandboxBackend(tmp_path_factory.mktemp("probe"), check=True)  # skip-free probe
    store = ArtifactStore(minio_client, "pai-suite", namespace=f"ns-{uuid.uuid4().hex[:8]}")
    root = tmp_path_factory.mktemp("pai-root")
    journal = tmp_path_factory.mktemp("journal")

    def build(client: Client, queue: str) -> Any:
        backend = BwrapSandboxBackend(root)
        return tools_worker(client, queue, {BACKEND: backend}, journal, artifacts=store)

    running = ThreadedWorker(temporal_server, store, "pai", build)
    try:
        yield running
    finally:
        running.close()


def _workspace(services: ThreadedWorker) -> FilegateWorkspace:
    assert services.client is not None
    return FilegateWorkspace(
        backend=BACKEND,
        task_queue=services.queue,
        client=services.client,
        mount=MOUNT,
        sandboxed=True,
    )


@xfail_deviations(DEVIATIONS)
class TestFilegateWorkspaceConformance(WorkspaceBackendSuite):
    """The published suite, unchanged but for the deviations."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    def backend(self, services: ThreadedWorker) -> WorkspaceBackend:
        return _workspace(services)

    @pytest.fixture
    def attach_backend(
        self, services: ThreadedWorker
    ) -> Callable[[WorkspaceRef], WorkspaceBackend]:
        def attach(ref: WorkspaceRef) -> WorkspaceBackend:
            built = _workspace(services)
            assert built.ref == ref, "a ref names one backend, queue and mount"
            return built

        return attach
