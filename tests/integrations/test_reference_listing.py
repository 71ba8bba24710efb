"""ls, glob and grep next to Deep Agents 0.7.32: matched, or different on purpose (issue 27).

Each behaviour runs on Filegate's backends directly (Filesystem, the bwrap
sandbox, State where it applies) and through ``FilegateBackend`` on a real
tools worker, next to Deep Agents' own backend as the control in the same
test, so drift on either side shows. The controls are deepagents'
``FilesystemBackend`` and, where the adapter follows the sandbox protocol,
its ``BaseSandbox`` over a host shell (:class:`HostShellSandbox`).

Differences from Deep Agents 0.7.32 that these tests pin (item | Filegate |
Deep Agents 0.7.32 | reason):

- ls of a directory holding a symlink loop | the other entries, no error,
  the loop left out (as a dangling link) | ``FilesystemBackend``: the other
  entries plus ``error`` "child error: cannot resolve '<host path>': ...",
  which its own ls tool turns into an error-only answer; ``BaseSandbox``:
  the loop listed as a file, no error | the model keeps a usable listing and
  never sees a host path; an ls result is whole or an error (contract §1);
- glob ``*.py/``, ``**/*.py/``, ``sub/`` | nothing | nothing | matched: a
  trailing ``/`` asks for directories and glob returns regular files only;
- glob and grep without a path on a host-path backend (``virtual_mode=False``,
  whose root is ``/``) | search ``root_dir`` | search ``root_dir`` | matched; an
  explicit ``path="/"`` there is the host's ``/`` in Filegate (every path of
  such a backend is a host path) but ``root_dir`` in the reference;
- ls entries through ``FilegateBackend`` | directories without the trailing
  ``/`` | ``BaseSandbox`` the same; ``FilesystemBackend`` ends them with ``/``
  | the adapter is a sandbox protocol and the sandbox suite expects no slash;
  Filegate's own backends and its ls tool end directories with ``/``;
- relative paths | ``FilegateBackend`` refuses them (``invalid_path``);
  Filegate's backends make them absolute (``d`` is ``/d``) | made absolute
  in virtual mode | the adapter maps paths into a mount, where a relative
  path has no meaning;
- bad paths (``..``) | an error value (``code="invalid_path"``), directly and
  through the adapter | ``FilesystemBackend.ls``/``glob`` raise ``ValueError``
  | every call ends in something the model can read (contract §1).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client

pytest.importorskip("deepagents")

from deepagents.backends.filesystem import FilesystemBackend as ReferenceFilesystem
from deepagents.backends.protocol import (
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
)
from deepagents.backends.sandbox import BaseSandbox as ReferenceSandbox

from filegate.backends.audit import AuditRecord
from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.local_shell import LocalShellBackend
from filegate.backends.policy import PolicyBackend
from filegate.integrations.deepagents import FilegateBackend, tools_worker
from filegate.integrations.deepagents.backend import FilegateFileBackend
from filegate.kernel.protocol import BackendProtocol
from filegate.kernel.state import StateBackend
from tests.roots import made

SERVED = {"fs": "/", "sb": "/workspace"}
"""Backends the tools worker serves over one tree, and the adapter's mount for each."""


class HostShellSandbox(ReferenceSandbox):
    """deepagents' ``BaseSandbox`` with ``execute`` on a host shell: the control for
    what a Deep Agents sandbox answers (its file operations are scripts it runs)."""

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        done = subprocess.run(
            ["/bin/sh", "-c", command], capture_output=True, text=True, timeout=60, check=False
        )
        return ExecuteResponse(output=done.stdout + done.stderr, exit_code=done.returncode)

    @property
    def id(self) -> str:
        return "host-shell-control"

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        raise NotImplementedError

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        raise NotImplementedError


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tree for every backend here; each test works in its own directory."""
    root = tmp_path_factory.mktemp("ref-listing") / "root"
    root.mkdir()
    return root


@pytest_asyncio.fixture(scope="module")
async def queue(
    temporal_client: Client, tree: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """A tools worker serving the tree as Filesystem (``fs``) and bwrap sandbox (``sb``),
    and its ``/home`` directory as a Filesystem of its own (``home``)."""
    name = f"ref-{uuid.uuid4().hex[:8]}"
    backends: dict[str, BackendProtocol] = {
        "fs": FilesystemBackend(tree),
        "sb": BwrapSandboxBackend(tree, check=True),
        "home": FilesystemBackend(made(tree / "home")),  # rooted at one directory of the tree
    }
    async with tools_worker(temporal_client, name, backends, tmp_path_factory.mktemp("j")):
        yield name


def served(client: Client, queue: str, backend: str, mount: str | None = None) -> Any:
    """The adapter over ``backend`` on the tools worker (files only: no shell needed)."""
    adapter = FilegateBackend(
        backend=backend,
        task_queue=queue,
        client=client,
        can_execute=False,
        mount=SERVED.get(backend, "/") if mount is None else mount,
    )
    assert isinstance(adapter, FilegateFileBackend)
    return adapter


def unmounted(path: str, mount: str) -> str:
    """An adapter path as Filegate's virtual path (``/workspace/a`` -> ``/a``)."""
    if mount == "/":
        return path
    return path[len(mount) :] or "/"


def direct(tree: Path) -> dict[str, Any]:
    return {"fs": FilesystemBackend(tree), "sb": BwrapSandboxBackend(tree, check=False)}


def _dir(tree: Path, name: str) -> Path:
    path = tree / name
    path.mkdir()
    return path


# --------------------------------------------------------------------------- ls: symlink loop


@pytest.mark.services
async def test_ls_of_a_directory_holding_a_symlink_loop_lists_the_rest(
    tree: Path, queue: str, temporal_client: Client
) -> None:
    top = _dir(tree, "loopdir")
    (top / "a.txt").write_text("a")
    (top / "sub").mkdir()
    os.symlink("loop", top / "loop")  # a link to itself: resolving it loops
    os.symlink("missing", top / "dangling")
    rest = {"/loopdir/a.txt", "/loopdir/sub"}

    # The controls: Deep Agents' filesystem reports the loop and lists the rest;
    # its sandbox lists the loop as a file. Both skip the dangling link or list it.
    reference = ReferenceFilesystem(root_dir=str(tree), virtual_mode=True).ls("/loopdir")
    assert reference.error is not None and "loop" in reference.error
    assert {e["path"].rstrip("/") for e in reference.entries or []} == rest
    sandbox = HostShellSandbox().ls(str(top))
    assert sandbox.error is None
    assert {e["path"] for e in sandbox.entries or []} >= {str(top / "loop"), str(top / "a.txt")}

    # Filegate: the same rest, no error, no loop (kept on purpose, see the module doc).
    for name, backend in direct(tree).items():
        listing = backend.ls("/loopdir")
        assert listing.error is None, name
        assert {e.path.rstrip("/") for e in listing.entries} == rest, name
    for name, mount in SERVED.items():
        answer = await served(temporal_client, queue, name).als(f"{mount.rstrip('/')}/loopdir")
        assert answer.error is None, name
        assert {unmounted(e["path"], mount) for e in answer.entries or []} == rest, name


# --------------------------------------------------------------------------- glob: trailing slash

TRAILING = ["*.py/", "**/*.py/", "sub/", "pkg.py/", "*/", "{*.py,*.md}/"]


@pytest.mark.services
async def test_a_glob_with_a_trailing_slash_matches_nothing(
    tree: Path, queue: str, temporal_client: Client
) -> None:
    top = _dir(tree, "slash")
    (top / "a.py").write_text("a")
    (top / "r.md").write_text("r")
    (top / "sub").mkdir()
    (top / "sub" / "b.py").write_text("b")
    (top / "pkg.py").mkdir()  # a directory whose name a trailing-slash pattern names
    (top / "pkg.py" / "x.txt").write_text("x")
    state = StateBackend()
    for path in ("/slash/a.py", "/slash/r.md", "/slash/sub/b.py", "/slash/pkg.py/x.txt"):
        state.write(path, "x")
    reference = ReferenceFilesystem(root_dir=str(tree), virtual_mode=True)
    backends = {**direct(tree), "state": state}
    adapters = {name: served(temporal_client, queue, name) for name in SERVED}

    for pattern in TRAILING:
        assert reference.glob(pattern, path="/slash").matches == [], pattern
        for name, backend in backends.items():
            result = backend.glob(pattern, "/slash")
            assert (result.error, result.matches) == (None, []), (name, pattern)
        for name, mount in SERVED.items():
            answer = await adapters[name].aglob(pattern, f"{mount.rstrip('/')}/slash")
            assert (answer.error, answer.matches) == (None, []), (name, pattern)

    # Without the slash the same patterns find the files, on every side alike.
    found = {f["path"] for f in reference.glob("*.py", path="/slash").matches or []}
    assert found == {"/slash/a.py", "/slash/sub/b.py"}
    for name, backend in backends.items():
        assert set(backend.glob("*.py", "/slash").matches) == found, name
    for name, mount in SERVED.items():
        answer = await adapters[name].aglob("*.py", f"{mount.rstrip('/')}/slash")
        assert {unmounted(f["path"], mount) for f in answer.matches or []} == found, name


# --------------------------------------------------------------------------- glob: default root


@pytest.mark.services
async def test_a_glob_without_a_path_searches_the_backends_root(
    tree: Path, queue: str, temporal_client: Client
) -> None:
    """On a host-path backend (root ``/``) the default is ``root_dir``, not the host."""
    top = tree / "home"  # the served ``home`` backend's root (it made the directory)
    (top / "dir").mkdir()
    (top / "dir" / "inside.py").write_text("x")
    (tree / "outside.py").write_text("y")  # above root_dir: no answer
    inside = {str(top / "dir" / "inside.py")}

    reference = ReferenceFilesystem(root_dir=str(top), virtual_mode=False).glob("**/*.py")
    assert {f["path"] for f in reference.matches or []} == inside

    for backend in (
        FilesystemBackend(top, virtual_mode=False),
        LocalShellBackend(top, virtual_mode=False),
    ):
        assert backend.root == "/"  # every path is a host path
        result = backend.glob("**/*.py")
        assert (result.error, set(result.matches)) == (None, inside), type(backend).__name__

    # A host-path backend cannot be served (the worker's journal would lie under
    # its root); the adapter's equivalent is a mount at root_dir over the tree.
    adapter = served(temporal_client, queue, "home", mount=str(top))
    answer = await adapter.aglob("**/*.py")
    assert answer.error is None
    assert {f["path"] for f in answer.matches or []} == inside
    # Virtual backends: no path is their root, as in the reference.
    virtual = ReferenceFilesystem(root_dir=str(top), virtual_mode=True).glob("**/*.py")
    assert {f["path"] for f in virtual.matches or []} == {"/dir/inside.py"}
    assert FilesystemBackend(top).glob("**/*.py").matches == ["/dir/inside.py"]


def test_a_grep_without_a_path_searches_root_dir_not_the_host(tmp_path: Path) -> None:
    """As glob: a host-path backend's grep without a path stays below ``root_dir``.

    It searched the host from ``/`` before (every readable file on the machine,
    for as long as its time limit allowed).
    """
    top = tmp_path / "home"
    (top / "dir").mkdir(parents=True)
    (top / "dir" / "inside.txt").write_text("needle-4f1c\n")
    (tmp_path / "outside.txt").write_text("needle-4f1c\n")  # above root_dir: no answer
    inside = {str(top / "dir" / "inside.txt")}

    reference = ReferenceFilesystem(root_dir=str(top), virtual_mode=False).grep("needle-4f1c")
    assert {m["path"] for m in reference.matches or []} == inside
    for backend in (
        FilesystemBackend(top, virtual_mode=False, use_ripgrep=False),
        FilesystemBackend(top, virtual_mode=False),
        LocalShellBackend(top, virtual_mode=False),
    ):
        result = backend.grep("needle-4f1c")
        assert (result.error, {m.path for m in result.matches}) == (None, inside)
        explicit = backend.grep("needle-4f1c", str(tmp_path))  # an explicit path is the host's
        assert {m.path for m in explicit.matches} == inside | {str(tmp_path / "outside.txt")}
    virtual = FilesystemBackend(top).grep("needle-4f1c")
    assert [m.path for m in virtual.matches] == ["/dir/inside.txt"]

    # Behind policies, the rules and the audit see the root searched, for glob too.
    records: list[AuditRecord] = []
    guarded = PolicyBackend(FilesystemBackend(top, virtual_mode=False), audit=_Records(records))
    assert {m.path for m in guarded.grep("needle-4f1c").matches} == inside
    assert guarded.glob("**/*.txt").matches == sorted(inside)
    assert [(r.operation, r.path) for r in records] == [("grep", str(top)), ("glob", str(top))]


class _Records:
    def __init__(self, records: list[AuditRecord]) -> None:
        self.records = records

    def emit(self, record: AuditRecord) -> None:
        self.records.append(record)


# --------------------------------------------------------------------------- deliberate differences


@pytest.mark.services
async def test_directories_in_an_adapter_listing_have_no_trailing_slash(
    tree: Path, queue: str, temporal_client: Client
) -> None:
    top = _dir(tree, "slashes")
    (top / "d").mkdir()
    (top / "f.txt").write_text("f")

    reference = ReferenceFilesystem(root_dir=str(tree), virtual_mode=True).ls("/slashes")
    assert {e["path"] for e in reference.entries or []} == {"/slashes/d/", "/slashes/f.txt"}
    sandbox = HostShellSandbox().ls(str(top))
    assert {e["path"] for e in sandbox.entries or []} == {str(top / "d"), str(top / "f.txt")}

    for name, backend in direct(tree).items():  # Filegate's backends: as deepagents' filesystem
        entries = {(e.path, e.is_dir) for e in backend.ls("/slashes").entries}
        assert entries == {("/slashes/d/", True), ("/slashes/f.txt", False)}, name
    for name, mount in SERVED.items():  # the adapter: as deepagents' sandbox
        answer = await served(temporal_client, queue, name).als(f"{mount.rstrip('/')}/slashes")
        entries = {(unmounted(e["path"], mount), e["is_dir"]) for e in answer.entries or []}
        assert entries == {("/slashes/d", True), ("/slashes/f.txt", False)}, name


@pytest.mark.services
async def test_relative_paths_are_absolute_on_backends_and_refused_by_the_adapter(
    tree: Path, queue: str, temporal_client: Client
) -> None:
    top = _dir(tree, "rel")
    (top / "f.txt").write_text("f")

    reference = ReferenceFilesystem(root_dir=str(tree), virtual_mode=True)
    assert [e["path"] for e in reference.ls("rel").entries or []] == ["/rel/f.txt"]
    for name, backend in direct(tree).items():
        assert [e.path for e in backend.ls("rel").entries] == ["/rel/f.txt"], name
        assert backend.glob("*.txt", "rel").matches == ["/rel/f.txt"], name
    for name in SERVED:
        adapter = served(temporal_client, queue, name)
        listing = await adapter.als("rel")
        assert listing.entries is None and listing.error is not None, name
        assert "must be absolute" in listing.error, name
        found = await adapter.aglob("*.txt", "rel")
        assert found.matches is None and "must be absolute" in (found.error or ""), name


@pytest.mark.services
async def test_a_bad_path_is_an_error_value_where_the_reference_raises(
    tree: Path, queue: str, temporal_client: Client
) -> None:
    reference = ReferenceFilesystem(root_dir=str(tree), virtual_mode=True)
    with pytest.raises(ValueError, match="traversal"):
        reference.ls("/../etc")
    with pytest.raises(ValueError, match="traversal"):
        reference.glob("*", path="/../etc")

    for name, backend in direct(tree).items():
        listing = backend.ls("/../etc")
        assert (listing.code, listing.entries) == ("invalid_path", []), name
        found = backend.glob("*", "/../etc")
        assert (found.code, found.matches) == ("invalid_path", []), name
    for name, mount in SERVED.items():
        adapter = served(temporal_client, queue, name)
        listing = await adapter.als(f"{mount.rstrip('/')}/../etc")
        assert listing.entries is None and listing.error is not None, name
        found = await adapter.aglob("*", f"{mount.rstrip('/')}/../etc")
        assert found.matches is None and found.error is not None, name


def test_the_tool_call_without_a_path_searches_root_dir_not_the_host(tmp_path: Path) -> None:
    """Through the tool path every caller takes (``kernel.dispatch.run_tool``: the tools
    worker, the adapters), a glob or grep call without ``path`` on a host-path backend
    searches its ``root_dir``, behind policies too. The old dispatch sent ``/``: the
    whole host (the Deep Agents adapter's glob failed with 7.9 MB; issue 54)."""
    from filegate.kernel.dispatch import run_tool
    from filegate.kernel.tool_types import ToolRequest

    top = tmp_path / "home"
    (top / "dir").mkdir(parents=True)
    (top / "dir" / "inside.txt").write_text("needle-9c2e\n")
    (tmp_path / "outside.txt").write_text("needle-9c2e\n")
    for backend in (
        FilesystemBackend(top, virtual_mode=False),
        PolicyBackend(FilesystemBackend(top, virtual_mode=False)),
    ):
        for request in (
            ToolRequest(tool="glob", backend="h", args={"pattern": "**/*.txt"}, tool_call_id="c"),
            ToolRequest(
                tool="grep", backend="h", args={"pattern": "needle-9c2e"}, tool_call_id="c"
            ),
        ):
            tool = request.tool
            text = str(run_tool(backend, request).content)
            assert str(top / "dir" / "inside.txt") in text, (tool, text)
            assert str(tmp_path / "outside.txt") not in text, (tool, text)
