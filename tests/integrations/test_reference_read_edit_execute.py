"""read, edit and execute next to Deep Agents' own backends (issue 27, items 1-6, 10, 11).

Every test runs the same call on a Filegate backend and on a deepagents
0.7.x backend (``deepagents.backends``: FilesystemBackend, LocalShellBackend,
StateBackend), the control, in the same test, so a change on either side
shows. Filegate is checked twice: its backends directly (FilesystemBackend,
LocalShellBackend, StateBackend, the bwrap sandbox; their results are
Filegate's own types), and through ``FilegateBackend`` served on the embedded
Temporal server by a real tools worker (its results are deepagents' types,
so they are compared with the control as they are). The deliberate
differences are in docs/contract.md, §12 "Differences from Deep Agents 0.7.32".
"""

from __future__ import annotations

import base64
import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client

pytest.importorskip("deepagents")

from deepagents.backends import FilesystemBackend as RefFilesystem
from deepagents.backends import LocalShellBackend as RefLocalShell
from deepagents.backends import StateBackend as RefState
from deepagents.backends.protocol import BackendProtocol as RefProtocol
from deepagents.backends.protocol import ReadResult as RefRead
from deepagents.backends.utils import EMPTY_CONTENT_WARNING
from deepagents.middleware.filesystem import FilesystemMiddleware
from langchain.tools import ToolRuntime

from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.local_shell import TIMEOUT_EXIT_CODE, LocalShellBackend
from filegate.integrations.deepagents import FilegateBackend, convert, tools_worker
from filegate.kernel import protocol as fg
from filegate.kernel.formatting import permission_denied
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.state import StateBackend
from filegate.kernel.textops import EOF_NEWLINE_HINT
from tests.outcomes import ran_as_activity

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(32))


# --------------------------------------------------------------------------- controls


class _RefStateOnADict(RefState):
    """deepagents' StateBackend over a plain dict instead of a running LangGraph graph."""

    def __init__(self) -> None:
        super().__init__()
        self.files: dict[str, Any] = {}

    def _read_files(self) -> dict[str, Any]:
        return self.files

    def _send_files_update(self, update: dict[str, Any]) -> None:
        for path, data in update.items():
            if data is None:
                self.files.pop(path, None)
            else:
                self.files[path] = data


@dataclass
class Side:
    """One backend under test with a way to plant and inspect files by their raw bytes."""

    backend: Any
    seed: Callable[[str, bytes], None]
    raw: Callable[[str], bytes]


def _on_disk(backend: Any, root: Path) -> Side:
    def seed(path: str, data: bytes) -> None:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    return Side(backend, seed, lambda path: (root / path.lstrip("/")).read_bytes())


def _reference(kind: str, root: Path) -> Side:
    """The control for ``kind``: deepagents' backend of that kind, on its own root."""
    if kind == "state":
        state = _RefStateOnADict()

        def seed(path: str, data: bytes) -> None:
            try:
                state.files[path] = {"content": data.decode("utf-8"), "encoding": "utf-8"}
            except UnicodeDecodeError:
                encoded = base64.b64encode(data).decode("ascii")
                state.files[path] = {"content": encoded, "encoding": "base64"}

        def raw(path: str) -> bytes:
            data = state.files[path]
            if data["encoding"] == "base64":
                return base64.b64decode(data["content"])
            return str(data["content"]).encode("utf-8")

        return Side(state, seed, raw)
    root.mkdir(parents=True, exist_ok=True)
    if kind == "local_shell":
        return _on_disk(RefLocalShell(root_dir=str(root), virtual_mode=True), root)
    return _on_disk(RefFilesystem(root_dir=str(root), virtual_mode=True), root)


_BWRAP: list[bool] = []


def _bwrap_available(tmp: Path) -> bool:
    if not _BWRAP:
        tmp.mkdir(exist_ok=True)  # a missing root is refused before bwrap is tried
        try:
            BwrapSandboxBackend(tmp, check=True)
            _BWRAP.append(True)
        except Exception:
            _BWRAP.append(False)
    return _BWRAP[0]


OURS = ("filesystem", "local_shell", "state", "bwrap")
CONTROL_OF = {"filesystem": "filesystem", "local_shell": "local_shell", "state": "state"}
"""The deepagents backend each of ours is compared with. The bwrap sandbox and the
adapter (which serves a LocalShell here) stand in for deepagents' shell backend:
its BaseSandbox needs a sandbox provider to run at all."""


def _ours(kind: str, root: Path) -> Side:
    root.mkdir(parents=True, exist_ok=True)
    if kind == "state":
        state = StateBackend()

        def seed(path: str, data: bytes) -> None:
            assert state.upload([(path, data)])[0].error is None

        def raw(path: str) -> bytes:
            content = state.download([path])[0].content
            assert content is not None
            return content

        return Side(state, seed, raw)
    if kind == "bwrap":
        if not _bwrap_available(root.parent / "probe"):
            pytest.skip("bubblewrap cannot sandbox on this host")
        return _on_disk(BwrapSandboxBackend(root, check=False), root)
    if kind == "local_shell":
        return _on_disk(LocalShellBackend(root), root)
    return _on_disk(FilesystemBackend(root), root)


@pytest.fixture(params=OURS)
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Side, Side]:
    """(one of Filegate's backends, its deepagents control)."""
    kind: str = request.param
    return _ours(kind, tmp_path / "ours"), _reference(
        CONTROL_OF.get(kind, "local_shell"), tmp_path / "ref"
    )


def _window(result: fg.ReadResult | RefRead) -> tuple[Any, ...]:
    """The pagination of a read (the same four names on both sides)."""
    return (result.total_lines, result.start_line, result.end_line, result.next_offset)


# --------------------------------------------------------------------------- the adapter


@dataclass
class Served:
    """FilegateBackend on a tools worker: its LocalShell's root, and the sandbox's."""

    client: Client
    queue: str
    root: Path
    sandbox_root: Path | None

    def backend(self, **options: Any) -> Any:
        return FilegateBackend(backend="ws", task_queue=self.queue, client=self.client, **options)


@pytest_asyncio.fixture(scope="module")
async def served(
    temporal_client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    base = tmp_path_factory.mktemp("served")
    root, sandbox_root = base / "ws", base / "sb"
    root.mkdir()
    sandbox_root.mkdir()
    backends: dict[str, fg.BackendProtocol] = {"ws": LocalShellBackend(root)}
    if _bwrap_available(base / "probe"):
        backends["sb"] = BwrapSandboxBackend(sandbox_root, check=False)
    queue = f"ref-{uuid.uuid4().hex[:8]}"
    async with tools_worker(temporal_client, queue, backends, base / "journal"):
        yield Served(temporal_client, queue, root, sandbox_root if "sb" in backends else None)


@dataclass
class Case:
    """A fresh folder on the served workspace, and a root for the control's files.

    Paths are ``folder + name`` on both sides, so even messages that name the
    path compare equal.
    """

    served: Served
    folder: str
    control_root: Path

    @property
    def ours(self) -> Side:
        return _on_disk(self.served.backend(), self.served.root)

    def control(self, kind: str = "local_shell") -> Side:
        return _reference(kind, self.control_root / kind)

    def path(self, name: str) -> str:
        return f"{self.folder}/{name}"


@pytest.fixture
def case(served: Served, tmp_path: Path) -> Case:
    return Case(served, f"/t{uuid.uuid4().hex[:10]}", tmp_path)


def _seed_both(name: str, data: bytes, *sides: Side) -> None:
    for side in sides:
        side.seed(name, data)


# --------------------------------------------------------------------------- 1. trailing newline

READS = [
    pytest.param(b"foo\nbar\n", 0, 2000, id="newline"),
    pytest.param(b"foo\nbar", 0, 2000, id="no-newline"),
    pytest.param(b"foo\nbar\n", -3, 2000, id="negative-offset"),
    pytest.param(b"foo\nbar\n", 0, 1, id="first-line"),
    pytest.param(b"foo\nbar", 1, 1, id="last-line-unterminated"),
    pytest.param(b"a\r\nb\r\n", 0, 2000, id="crlf"),
]


@pytest.mark.parametrize(("data", "offset", "limit"), READS)
def test_read_window_says_whether_the_file_ends_with_a_newline(
    pair: tuple[Side, Side], data: bytes, offset: int, limit: int
) -> None:
    """Filegate's window is lines without terminators plus ``ends_with_newline``; the
    reference's is text. Same lines, same pagination, and the final newline known."""
    ours, ref = pair
    _seed_both("/a.txt", data, ours, ref)
    expected = ref.backend.read("/a.txt", offset=offset, limit=limit)
    got = ours.backend.read("/a.txt", offset, limit)
    assert expected.file_data is not None and got.ok
    content = expected.file_data["content"]
    assert got.lines == content.splitlines()
    assert _window(got) == _window(expected)
    assert got.ends_with_newline is data.endswith(b"\n")
    if got.next_offset is None:  # the window holds the file's last line
        assert got.ends_with_newline is content.endswith("\n")


@pytest.mark.parametrize(("data", "offset", "limit"), READS)
async def test_adapter_read_window_is_the_references(
    case: Case, data: bytes, offset: int, limit: int
) -> None:
    """Equal, except that a window ending before the file's end has no newline after its
    last line: joined with LF as deepagents' sandbox backends and langchain-tests'
    sandbox suite want it (its Filesystem and State backends keep it)."""
    ours, ref, path = case.ours, case.control(), case.path("a.txt")
    _seed_both(path, data, ours, ref)
    expected = ref.backend.read(path, offset, limit)
    assert expected.file_data is not None
    if expected.next_offset is not None:
        content = expected.file_data["content"].removesuffix("\n")
        expected = dataclasses.replace(
            expected, file_data={**expected.file_data, "content": content}
        )
    assert await ours.backend.aread(path, offset, limit) == expected


EOF_EDITS = [
    pytest.param(b"# Role:\nyou are", "you are\n", id="unique"),
    pytest.param(b"xy z\nxy", "xy\n", id="ambiguous"),
]


@pytest.mark.parametrize(("data", "old"), EOF_EDITS)
def test_edit_explains_a_trailing_newline_the_file_lacks(
    pair: tuple[Side, Side], data: bytes, old: str
) -> None:
    ours, ref = pair
    _seed_both("/m.md", data, ours, ref)
    expected = ref.backend.edit("/m.md", old, "new\n")
    got = ours.backend.edit("/m.md", old, "new\n")
    assert expected.error is not None and "old_string ends with a newline" in expected.error
    assert got.code == "no_match" and EOF_NEWLINE_HINT in (got.error or "")
    assert ("2 times" in (got.error or "")) is ("2 times" in expected.error)
    assert ours.raw("/m.md") == ref.raw("/m.md") == data


@pytest.mark.parametrize(("data", "old"), EOF_EDITS)
async def test_adapter_edit_hint_is_the_references(case: Case, data: bytes, old: str) -> None:
    """What read returned, plus the newline a model tends to add, gets the reference's hint."""
    ours, ref, path = case.ours, case.control(), case.path("m.md")
    _seed_both(path, data, ours, ref)
    read = await ours.backend.aread(path)
    assert read.file_data is not None and not read.file_data["content"].endswith("\n")
    assert await ours.backend.aedit(path, old, "new\n") == ref.backend.edit(path, old, "new\n")
    assert ours.raw(path) == data


# --------------------------------------------------------------------------- 2. CRLF in edits

CRLF_EDITS = [
    pytest.param(b"l1\nl2\nl3\n", "l1\r\nl2\r\n", "replaced\n", False, id="lf-file-crlf-old"),
    pytest.param(b"hello world\n", "hello", "goodbye\r\n", False, id="lf-file-crlf-new"),
    pytest.param(b"foo\nbar\nfoo\n", "foo\r\n", "baz\n", True, id="lf-file-crlf-old-replace-all"),
    pytest.param(b"l1\r\nl2\r\nl3\r\n", "l1\nl2\n", "x\ny\n", False, id="crlf-file-lf-old"),
    pytest.param(b"l1\r\nl2\r\nl3\r\n", "l1\r\nl2\r\n", "x\r\ny\r\n", False, id="crlf-crlf-old"),
    pytest.param(b"l1\r\nl2\r\nl3\r\n", "l2", "z\nw", False, id="crlf-file-lf-new"),
]  # fmt: skip


def _after_edit(control: bytes, original: bytes) -> bytes:
    """What Filegate's file holds where the reference's holds ``control``.

    The same text; a CRLF file keeps CRLF, where deepagents' FilesystemBackend
    rewrites every line ending of an edited file as LF (a deliberate difference).
    """
    return control.replace(b"\n", b"\r\n") if b"\r\n" in original else control


@pytest.mark.parametrize(("data", "old", "new", "replace_all"), CRLF_EDITS)
@pytest.mark.parametrize("kind", OURS)
def test_edit_matches_across_line_endings(
    kind: str, tmp_path: Path, data: bytes, old: str, new: str, replace_all: bool
) -> None:
    """The control is deepagents' FilesystemBackend for every kind: it is the one that
    normalises (its StateBackend matches exactly; Filegate has one rule everywhere)."""
    ours, ref = _ours(kind, tmp_path / "ours"), _reference("filesystem", tmp_path / "ref")
    _seed_both("/e.txt", data, ours, ref)
    expected = ref.backend.edit("/e.txt", old, new, replace_all=replace_all)
    got = ours.backend.edit("/e.txt", old, new, replace_all)
    assert expected.error is None and got.ok, got.error
    assert got.occurrences == expected.occurrences
    assert ours.raw("/e.txt") == _after_edit(ref.raw("/e.txt"), data)


@pytest.mark.parametrize(("data", "old", "new", "replace_all"), CRLF_EDITS)
async def test_adapter_edit_matches_across_line_endings(
    case: Case, data: bytes, old: str, new: str, replace_all: bool
) -> None:
    ours, ref, path = case.ours, case.control("filesystem"), case.path("e.txt")
    _seed_both(path, data, ours, ref)
    expected = ref.backend.edit(path, old, new, replace_all=replace_all)
    assert await ours.backend.aedit(path, old, new, replace_all) == expected
    assert ours.raw(path) == _after_edit(ref.raw(path), data)


# --------------------------------------------------------------------------- 3, 4. execute

SHELLS = ("local_shell", "bwrap")


@pytest.mark.slow
@pytest.mark.parametrize("kind", SHELLS)
def test_execute_timeout_and_empty_command_exit_codes(kind: str, tmp_path: Path) -> None:
    ours, ref = _ours(kind, tmp_path / "ours"), _reference("local_shell", tmp_path / "ref")
    expected = ref.backend.execute("sleep 5", timeout=1)
    got = ours.backend.execute("sleep 5", timeout=1)
    assert got.exit_code == expected.exit_code == TIMEOUT_EXIT_CODE
    assert got.code == "timeout"
    empty_expected, empty = ref.backend.execute(""), ours.backend.execute("")
    assert empty.exit_code == empty_expected.exit_code == fg.EMPTY_COMMAND_EXIT_CODE
    assert (empty.code, empty.error) == ("invalid_argument", fg.EMPTY_COMMAND)


def _adapters(served: Served) -> list[tuple[str, Any]]:
    """The adapter over the host shell, and over the sandbox with rules compiled into
    the command's view (the dispatcher's own path, which skips the backend's execute)."""
    found = [("local_shell", served.backend())]
    if served.sandbox_root is not None:
        rule = FilesystemPermission(operations=["read"], paths=["/secrets/**"], mode="deny")
        sandbox = FilegateBackend(
            backend="sb",
            task_queue=served.queue,
            client=served.client,
            sandboxed=True,
            permissions=[rule],
        )
        found.append(("bwrap", sandbox))
    return found


async def test_adapter_execute_exit_codes_are_the_references(
    served: Served, tmp_path: Path
) -> None:
    ref = _reference("local_shell", tmp_path / "ref").backend
    expected_timeout, expected_empty = ref.execute("sleep 5", timeout=1), ref.execute("")
    for name, backend in _adapters(served):
        timed_out = await backend.aexecute("sleep 5", timeout=1)
        assert timed_out.exit_code == expected_timeout.exit_code == TIMEOUT_EXIT_CODE, name
        assert "timed out" in timed_out.output and "timed out" in expected_timeout.output
        empty = await backend.aexecute("")
        assert empty.exit_code == expected_empty.exit_code == 1, name
        assert empty.output.startswith("Error") and expected_empty.output.startswith("Error")
        assert empty.truncated is expected_empty.truncated is False
        backend.close()


# ------------------------------------------------------------------ 5, 6. empty, limit <= 0


@pytest.mark.parametrize("limit", [2000, 0, -1])
def test_empty_file_reads_as_empty_whatever_the_limit(pair: tuple[Side, Side], limit: int) -> None:
    """The reference's content is its reminder (filesystem, shell) or "" (state, whose
    read_file adds the reminder); ours is an empty window, rendered as a reminder by
    read_file (kernel.read_format)."""
    ours, ref = pair
    _seed_both("/e.txt", b"", ours, ref)
    expected = ref.backend.read("/e.txt", limit=limit)
    got = ours.backend.read("/e.txt", 0, limit)
    assert expected.file_data is not None and expected.start_line is None
    assert expected.file_data["content"] in ("", EMPTY_CONTENT_WARNING)
    assert got.ok and (got.lines, got.total_lines, got.is_binary) == ([], 0, False)


@pytest.mark.parametrize("limit", [0, -1, 5])
def test_binary_file_comes_back_whole_whatever_the_limit(
    pair: tuple[Side, Side], limit: int
) -> None:
    ours, ref = pair
    _seed_both("/p.png", PNG, ours, ref)
    expected = ref.backend.read("/p.png", limit=limit)
    got = ours.backend.read("/p.png", 0, limit)
    assert expected.file_data is not None and expected.file_data["encoding"] == "base64"
    assert base64.b64decode(expected.file_data["content"]) == got.data == PNG


def test_text_with_no_lines_requested_is_refused_not_empty(pair: tuple[Side, Side]) -> None:
    """Kept on purpose: Filegate's results have no "nothing was requested" flag, so an
    empty window would read as an empty file; the reference flags one instead."""
    ours, ref = pair
    _seed_both("/a.txt", b"foo\n", ours, ref)
    expected = ref.backend.read("/a.txt", limit=0)
    assert expected.file_data == {"content": "", "encoding": "utf-8"}
    assert expected.no_lines_requested
    assert ours.backend.read("/a.txt", 0, 0).code == "invalid_argument"


LIMITLESS = [
    pytest.param("p.png", PNG, 0, 0, id="png-limit-0"),
    pytest.param("p.png", PNG, 3, -1, id="png-negative-limit"),
    pytest.param("a.txt", b"foo\nbar\n", 0, 0, id="text-limit-0"),
    pytest.param("a.txt", b"foo\nbar\n", 7, 0, id="text-limit-0-offset-past-end"),
    pytest.param("a.txt", b"foo\nbar\n", 0, -2, id="text-negative-limit"),
    pytest.param("e.txt", b"", 0, 2000, id="empty"),
    pytest.param("e.txt", b"", 0, 0, id="empty-limit-0"),
]


@pytest.mark.parametrize(("name", "data", "offset", "limit"), LIMITLESS)
async def test_adapter_empty_and_zero_limit_reads_are_the_references(
    case: Case, name: str, data: bytes, offset: int, limit: int
) -> None:
    ours, ref, path = case.ours, case.control(), case.path(name)
    _seed_both(path, data, ours, ref)
    assert await ours.backend.aread(path, offset, limit) == ref.backend.read(path, offset, limit)


# --------------------------------------------------------------------------- 10, 11. read errors


def _read_tool(backend: RefProtocol | Any) -> Any:
    tool = next(t for t in FilesystemMiddleware(backend=backend).tools if t.name == "read_file")
    return tool


def _runtime() -> ToolRuntime[Any, Any]:
    return ToolRuntime(
        state={}, context=None, config={}, stream_writer=lambda _: None, tool_call_id="c1",
        store=None,
    )  # fmt: skip


TOOL_READS = [
    pytest.param("a.txt", b"foo\nbar\n", {}, id="text"),
    pytest.param("a.txt", b"foo\nbar\n", {"limit": 1}, id="first-line"),
    pytest.param("n.txt", b"foo\nbar", {}, id="no-newline"),
    pytest.param("c.txt", b"a\r\nb\r\n", {"offset": -2}, id="crlf-negative-offset"),
    pytest.param("e.txt", b"", {}, id="empty"),
    pytest.param("a.txt", b"foo\nbar\n", {"limit": 0}, id="text-limit-0"),
    pytest.param("p.png", PNG, {"limit": 0}, id="png-limit-0"),
    pytest.param("none.txt", None, {}, id="missing"),
]


@pytest.mark.parametrize(("name", "data", "args"), TOOL_READS)
async def test_deepagents_read_file_tool_says_the_same_on_both(
    case: Case, name: str, data: bytes | None, args: dict[str, int]
) -> None:
    """What the model reads from Deep Agents' own read_file tool, word for word."""
    ours, ref, path = case.ours, case.control(), case.path(name)
    if data is not None:
        _seed_both(path, data, ours, ref)
    expected = _read_tool(ref.backend).func(file_path=path, runtime=_runtime(), **args)
    got = await _read_tool(ours.backend).coroutine(file_path=path, runtime=_runtime(), **args)
    assert (got.content, got.status) == (expected.content, expected.status)


async def test_read_errors_through_deepagents_name_the_path_once_in_its_own_space(
    case: Case,
) -> None:
    """One ``Error:``, one path space: under a mount, no Filegate-side path leaks in."""
    rule = FilesystemPermission(operations=["read"], paths=["/**/secrets/**"], mode="deny")
    backend = case.served.backend(mount="/workspace", can_execute=False, permissions=[rule])
    tool, local = _read_tool(backend), case.path("")
    (case.served.root / local.strip("/") / "secrets").mkdir(parents=True)
    (case.served.root / local.strip("/") / "secrets" / "key.txt").write_text("k")
    (case.served.root / local.strip("/") / "a.txt").write_text("foo\nbar\n")
    shown = f"/workspace{local}"
    expected = {
        f"{shown}none.txt": ({}, f"Error: File '{shown}none.txt' not found"),
        f"{shown}secrets/key.txt": ({}, permission_denied("read", f"{shown}secrets/key.txt").text),
        f"{shown}secrets": ({}, f"Error: File '{shown}secrets': is a directory, not a file"),
        f"{shown}a.txt": (
            {"offset": 5},
            f"Error: File '{shown}a.txt': offset 5 is past the end of the file (2 lines); "
            "use an offset below 2",
        ),
        "/etc/passwd": ({}, "Error: Invalid path '/etc/passwd': outside the mount /workspace"),
    }
    try:
        for path, (args, text) in expected.items():
            message = await tool.coroutine(file_path=path, runtime=_runtime(), **args)
            assert (message.content, message.status) == (text, "error")
            assert message.content.replace(shown, "/workspace/").count(local) == 0
    finally:
        backend.close()


def test_offset_past_the_end_names_the_path_once(pair: tuple[Side, Side]) -> None:
    ours, ref = pair
    _seed_both("/a.txt", b"foo\nbar\n", ours, ref)
    expected = ref.backend.read("/a.txt", offset=5)
    got = ours.backend.read("/a.txt", 5, 10)
    assert expected.error is not None and "(2 lines)" in expected.error
    assert got.code == "invalid_argument" and "(2 lines)" in (got.error or "")
    assert "/a.txt" not in (got.error or "") and (got.error_text or "").count("/a.txt") == 1


async def test_adapter_offset_past_the_end_names_the_path_once(case: Case) -> None:
    ours, ref, path = case.ours, case.control(), case.path("a.txt")
    _seed_both(path, b"foo\nbar\n", ours, ref)
    expected = ref.backend.read(path, offset=5)
    got = await ours.backend.aread(path, 5)
    assert expected.error is not None and "(2 lines)" in expected.error
    assert got.error is not None and "(2 lines)" in got.error and got.error.count(path) == 1
    assert not got.error.startswith("Error")


@pytest.mark.parametrize(
    ("result", "exit_code"),
    [
        (fg.ExecuteResult(output="part", error="timed out", code="timeout", exit_code=124), 124),
        (fg.refuse_empty_command(""), 1),
        (fg.ExecuteResult(error="execute is not supported", code="unsupported"), None),
    ],
)
def test_adapter_takes_a_failed_commands_exit_code_from_the_outcome(
    result: fg.ExecuteResult | None, exit_code: int | None
) -> None:
    """The decoder on its own (no server): an error result keeps its text as output."""
    assert result is not None
    response = convert.execute_response(ran_as_activity(result))
    assert response.exit_code == exit_code
    assert response.output.endswith(f"Error: {result.error}")
