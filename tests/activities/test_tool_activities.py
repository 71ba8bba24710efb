"""The file tool activities on real backends: ActivityEnvironment and a real worker.

Covers each tool on a FilesystemBackend / LocalShellBackend in a tmp dir,
result-side permission filtering (denied names never leave the activity),
idempotent retries and crash-window recovery (with a real ``os._exit`` in a
child process), really-cancelled searches and commands, and contract errors.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from filegate.activities.contract import (
        S3_OUTAGE_ROOM,
        outcome_for_activity_error,
        tool_activity_options,
    )
    from filegate.activities.idempotency import CRASH_AFTER_APPLY_ENV, ToolJournal
    from filegate.activities.tools import FileToolActivities
    from filegate.backends.filesystem import FilesystemBackend
    from filegate.backends.local_shell import LocalShellBackend
    from filegate.kernel.dispatch import run_tool
    from filegate.kernel.permissions import FilesystemPermission
    from filegate.kernel.tool_types import (
        TOOL_ACTIVITY_NAMES,
        ToolOutcome,
        ToolRequest,
        activity_call_id,
    )


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "app.py").write_text("import os\nprint('hello')\n")
    (workspace / "notes.md").write_text("hello notes\n")
    (workspace / "secret").mkdir()
    (workspace / "secret" / "password-hint.txt").write_text("hello secret\n")
    return workspace


@pytest.fixture
def tools(root: Path, tmp_path: Path) -> FileToolActivities:
    # An explicit search budget: the one derived from ActivityEnvironment's 1 s
    # start_to_close (0.5 s) was too tight for a 2-core machine under suite load.
    return FileToolActivities(
        {"fs": FilesystemBackend(root), "shell": LocalShellBackend(root)},
        tmp_path / "journal",
        search_timeout=10.0,
    )


_calls = iter(range(1_000_000))


def req(tool: str, backend: str = "fs", *, call_id: str | None = None, **args: Any) -> ToolRequest:
    return ToolRequest(
        tool=tool,  # type: ignore[arg-type]
        backend=backend,
        args=args,
        tool_call_id=call_id or f"call-{next(_calls)}",
    )


SCOPE = "test@test-run"
"""The run chain ActivityEnvironment's default info gives (workflow "test", run "test-run")."""


async def run(tools: FileToolActivities, request: ToolRequest) -> ToolOutcome:
    method = getattr(tools, request.tool)
    return await ActivityEnvironment().run(method, request)


def tool_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "filegate-tool" and t.is_alive()]


def child_pids() -> list[int]:
    """Live (non-zombie) children of any thread of this process."""
    pids: list[int] = []
    for task in os.listdir("/proc/self/task"):
        try:
            text = Path(f"/proc/self/task/{task}/children").read_text()
        except OSError:
            continue
        for pid in map(int, text.split()):
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                pids.append(pid)
    return pids


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# --------------------------------------------------------------------------- each tool


async def test_each_tool_on_filesystem(tools: FileToolActivities, root: Path) -> None:
    out = await run(tools, req("write_file", file_path="/new/dir/a.txt", content="one\ntwo\n"))
    assert out.status == "success"
    assert (root / "new/dir/a.txt").read_text() == "one\ntwo\n"

    out = await run(tools, req("read_file", file_path="/new/dir/a.txt"))
    assert out.content == "1  one\n2  two" and out.status == "success"

    out = await run(
        tools, req("edit_file", file_path="/new/dir/a.txt", old_string="two", new_string="2")
    )
    assert out.status == "success" and "1 occurrence" in str(out.content)
    assert (root / "new/dir/a.txt").read_text() == "one\n2\n"

    out = await run(tools, req("ls", path="/"))
    assert str(out.content).splitlines() == ["/new/", "/notes.md", "/secret/", "/src/"]

    out = await run(tools, req("glob", pattern="*.py"))
    assert out.content == "/src/app.py"

    out = await run(tools, req("grep", pattern="hello", output_mode="content"))
    assert out.content == (
        "/notes.md:\n  1: hello notes\n/secret/password-hint.txt:\n  1: hello secret\n"
        "/src/app.py:\n  2: print('hello')"
    )
    out = await run(tools, req("grep", pattern="hello", output_mode="count", path="/src"))
    assert out.content == "/src/app.py: 1"

    out = await run(tools, req("delete", file_path="/new"))
    assert out.status == "success" and not (root / "new").exists()

    out = await run(tools, req("execute", "shell", command="echo hi; echo oops >&2; exit 3"))
    assert out.content == "hi\n[stderr] oops\n[Command failed with exit code 3]"
    assert out.status == "success"


async def test_errors_are_outcomes_not_exceptions(tools: FileToolActivities) -> None:
    out = await run(tools, req("read_file", file_path="/missing.txt"))
    assert out.status == "error" and "/missing.txt" in str(out.content)
    out = await run(tools, req("execute", "fs", command="true"))
    assert out.status == "error" and "not supported" in str(out.content)
    for bad in (-1, 0):  # one rule (kernel.limits.execute_timeout_problem), as the gate says
        out = await run(tools, req("execute", "shell", command="true", timeout=bad))
        assert out.status == "error" and "between 0 and 3600" in str(out.content)
    out = await run(tools, req("grep", pattern="a|b.*"))
    assert out.status == "success" and "literal" in str(out.content)


async def test_image_read_becomes_media_block(tools: FileToolActivities, root: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    (root / "pic.png").write_bytes(png)
    out = await run(tools, req("read_file", file_path="/pic.png"))
    assert isinstance(out.content, list) and len(out.content) == 1
    block = out.content[0]
    assert block.type == "image" and block.mime_type == "image/png"  # type: ignore[union-attr]
    assert base64.b64decode(block.base64) == png  # type: ignore[union-attr]


async def test_route_prefix_shows_virtual_paths(tools: FileToolActivities) -> None:
    def routed(tool: str, **args: Any) -> ToolRequest:
        return req(tool, **args).model_copy(update={"route_prefix": "/workspace"})

    out = await run(tools, routed("glob", pattern="**/*.py"))
    assert out.content == "/workspace/src/app.py"
    out = await run(tools, routed("read_file", file_path="/nope.txt"))
    assert "/workspace/nope.txt" in str(out.content)
    out = await run(tools, routed("read_file", file_path="/notes.md"))
    assert out.status == "success" and out.content == "1  hello notes"
    out = await run(tools, routed("write_file", file_path="/w.txt", content="x"))
    assert out.content == "Successfully wrote /workspace/w.txt."


# --------------------------------------------------------------------------- permissions

DENY_SECRET = [FilesystemPermission(operations=["read"], paths=["/secret/**"], mode="deny")]


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("ls", {"path": "/secret"}),
        ("glob", {"pattern": "**/*.txt"}),
        ("grep", {"pattern": "hello", "output_mode": "content"}),
        ("grep", {"pattern": "hello", "output_mode": "files_with_matches"}),
        ("grep", {"pattern": "hello", "output_mode": "count"}),
    ],
)
async def test_denied_names_never_leave_the_activity(
    tools: FileToolActivities, tool: str, args: dict[str, Any]
) -> None:
    unfiltered = await run(tools, req(tool, **args))
    assert "password-hint" in unfiltered.model_dump_json()  # the name exists on disk
    request = req(tool, **args).model_copy(update={"permissions": DENY_SECRET})
    out = await run(tools, request)
    assert "password-hint" not in out.model_dump_json()


async def test_permission_filter_keeps_allowed_and_hides_every_trace(
    tools: FileToolActivities, root: Path
) -> None:
    request = req("grep", pattern="a|b").model_copy(update={"permissions": DENY_SECRET})
    before = await run(tools, request)
    (root / "secret" / "a|b.txt").write_text("a|b\n")
    out = await run(tools, request)
    # The denied match changes nothing, not even the "literal" hint (no oracle).
    assert out.content == before.content and "literal" in str(out.content)
    request = req("grep", pattern="hello").model_copy(update={"permissions": DENY_SECRET})
    out = await run(tools, request)
    assert out.content == "/notes.md\n/src/app.py"


async def test_entry_gate_in_the_activity(tools: FileToolActivities, root: Path) -> None:
    request = req("read_file", file_path="/secret/password-hint.txt").model_copy(
        update={"permissions": DENY_SECRET}
    )
    out = await run(tools, request)
    assert out.status == "error" and "hello secret" not in str(out.content)
    write_deny = [FilesystemPermission(operations=["write"], paths=["/src/*.py"], mode="deny")]
    request = req("delete", file_path="/src").model_copy(update={"permissions": write_deny})
    out = await run(tools, request)
    assert out.status == "error" and "/src/*.py" in str(out.content)
    assert (root / "src" / "app.py").exists()


# --------------------------------------------------------------------------- structured results


def _raw(tool: str, **args: Any) -> ToolRequest:
    """A fan-out part on route ``/mnt`` with ``/mnt/secret/**`` denied for read."""
    deny = [FilesystemPermission(operations=["read"], paths=["/mnt/secret/**"], mode="deny")]
    return req(tool, **args).model_copy(
        update={"want_raw": True, "route_prefix": "/mnt", "permissions": deny}
    )


async def test_want_raw_returns_filtered_local_results(tools: FileToolActivities) -> None:
    out = await run(tools, _raw("glob", pattern="**/*.*"))
    assert out.raw is not None and out.raw.glob is not None
    assert out.raw.ls is None and out.raw.grep is None
    # Local paths (the Router maps them under the route), denied ones already gone.
    assert out.raw.glob.matches == ["/notes.md", "/src/app.py"]
    assert out.status == "success" and out.content == "2 paths (structured result)"

    out = await run(tools, _raw("grep", pattern="hello", output_mode="count"))
    assert out.raw is not None and out.raw.grep is not None
    assert [(m.path, m.line, m.text) for m in out.raw.grep.matches] == [
        ("/notes.md", 1, "hello notes"),
        ("/src/app.py", 2, "print('hello')"),
    ]
    assert "removed" not in out.raw.model_dump()  # no count of hidden matches travels
    assert "password-hint" not in out.model_dump_json()

    out = await run(tools, _raw("ls", path="/secret"))
    assert out.raw is not None and out.raw.ls is not None and out.raw.ls.entries == []
    out = await run(tools, _raw("ls", path="/"))
    assert out.raw is not None and out.raw.ls is not None
    assert [e.path for e in out.raw.ls.entries] == ["/notes.md", "/secret/", "/src/"]


async def test_want_raw_keeps_backend_errors_and_is_off_by_default(
    tools: FileToolActivities,
) -> None:
    out = await run(tools, _raw("glob", pattern="*", path="/absent"))
    # The error code lets the Router tell "root absent in this route" from a failure;
    # the message stays local so the Router maps it to the virtual path exactly once.
    assert out.status == "error" and out.raw is not None and out.raw.glob is not None
    assert out.raw.glob.code == "file_not_found" and "/mnt" not in str(out.raw.glob.error)
    assert "/mnt/absent" in str(out.content)
    # The entry gate answers before any backend call: no structured result.
    out = await run(tools, _raw("grep", pattern="x", path="/secret/password-hint.txt"))
    assert out.status == "error" and out.raw is None
    for tool, args in (("ls", {"path": "/"}), ("glob", {"pattern": "*"})):
        plain = await run(tools, req(tool, **args))
        assert plain.raw is None and "/notes.md" in str(plain.content)


async def test_execute_timeout_cap_comes_from_the_request(tools: FileToolActivities) -> None:
    capped = req("execute", "shell", command="true", timeout=10).model_copy(
        update={"max_execute_timeout": 5}
    )
    out = await run(tools, capped)
    assert out.status == "error" and "between 0 and 5 seconds" in str(out.content)
    out = await run(tools, req("execute", "shell", command="true", timeout=10))
    assert out.status == "success" and "exit code 0" in str(out.content)
    out = await run(tools, req("execute", "shell", command="true", timeout=3601))
    assert out.status == "error" and "between 0 and 3600 seconds" in str(out.content)


def test_activity_call_ids_are_unique_per_workflow() -> None:
    # Models reuse their ids across turns; step and position keep the calls apart.
    ids = {activity_call_id(step, index, "call_0") for step in (1, 2) for index in (0, 1)}
    assert len(ids) == 4 and activity_call_id(2, 0, "e1") == "2:0:e1"


def test_package_exports_the_activities() -> None:
    from filegate import activities

    tools = activities.FileToolActivities({}, tempfile.mkdtemp())
    names = {activity._Definition.must_from_callable(fn).name for fn in tools.activities()}
    tool_names = {f"filegate.{tool}" for tool in activities.TOOL_ORDER}
    assert tool_names == set(activities.TOOL_ACTIVITY_NAMES.values())
    assert names == tool_names | {"filegate.tool_batch"}
    model = activity._Definition.must_from_callable(activities.call_model)
    assert model.name == "filegate.model"
    assert activities.run_tool is run_tool
    heavy = ("openai", "anthropic", "av", "PIL")  # optional extras, loaded on use only
    code = f"import sys, filegate.activities; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


# --------------------------------------------------------------------------- contract errors


@pytest.mark.parametrize(
    ("request_", "error_type"),
    [
        (req("read_file", path="/x"), "InvalidToolRequest"),  # wrong arg name
        (req("read_file", file_path="/../etc/passwd"), "InvalidToolRequest"),
        (req("write_file", file_path="/x"), "InvalidToolRequest"),  # content missing
        (req("ls", "no-such-backend", path="/"), "UnknownBackend"),
    ],
)
async def test_invalid_requests_are_non_retryable(
    tools: FileToolActivities, request_: ToolRequest, error_type: str
) -> None:
    with pytest.raises(ApplicationError) as info:
        await run(tools, request_)
    assert info.value.type == error_type and info.value.non_retryable


async def test_request_sent_to_the_wrong_activity(tools: FileToolActivities) -> None:
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(tools.write_file, req("ls", path="/"))
    assert info.value.type == "InvalidToolRequest" and info.value.non_retryable


# --------------------------------------------------------------------------- idempotency


async def test_retried_edit_applies_once(tools: FileToolActivities, root: Path) -> None:
    (root / "grow.txt").write_text("a\n")
    edit = req(
        "edit_file", call_id="c-edit", file_path="/grow.txt", old_string="a\n", new_string="aa\n"
    )
    first = await run(tools, edit)
    second = await run(tools, edit)
    assert first == second and first.status == "success"
    assert (root / "grow.txt").read_text() == "aa\n"
    # A different call id is a different call: it applies again.
    other = edit.model_copy(update={"tool_call_id": "c-edit-2"})
    await run(tools, other)
    assert (root / "grow.txt").read_text() == "aaa\n"


async def test_retried_execute_runs_once(tools: FileToolActivities, root: Path) -> None:
    call = req("execute", "shell", call_id="c-exec", command="echo x >> log.txt; wc -l < log.txt")
    first = await run(tools, call)
    second = await run(tools, call)
    assert first == second and str(first.content).startswith("1\n")
    assert (root / "log.txt").read_text() == "x\n"


def _crash_child(journal: Path, root: Path, request: ToolRequest) -> int:
    """Run one journaled call in a child process that dies in the crash window."""
    script = textwrap.dedent(
        """
        import sys
        from filegate.activities.idempotency import ToolJournal
        from filegate.kernel.dispatch import parse_args, run_tool
        from filegate.kernel.tool_types import ToolRequest
        from filegate.backends.local_shell import LocalShellBackend
        journal, root, raw = sys.argv[1:4]
        backend = LocalShellBackend(root)
        request = ToolRequest.model_validate_json(raw)
        ToolJournal(journal).run(
            request.backend, backend, request, parse_args(request),
            lambda: run_tool(backend, request), scope="test@test-run",
        )
        print("not reached")
        """
    )
    env = {
        **os.environ,
        CRASH_AFTER_APPLY_ENV: request.tool_call_id,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", script, str(journal), str(root), request.model_dump_json()],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert b"not reached" not in proc.stdout
    return proc.returncode


@pytest.mark.slow
async def test_crash_after_apply_recovers_original_result(tmp_path: Path, root: Path) -> None:
    journal = tmp_path / "journal"
    (root / "f.txt").write_text("x y x\n")
    edit = req(
        "edit_file",
        "fs",
        call_id="c-crash",
        file_path="/f.txt",
        old_string="x",
        new_string="xx",
        replace_all=True,
    )
    assert _crash_child(journal, root, edit) == 137
    assert (root / "f.txt").read_text() == "xx y xx\n"  # applied, but never journaled
    [entry_file] = (journal / "fs").glob("*.json")
    assert json.loads(entry_file.read_text())["outcome"] is None

    tools = FileToolActivities({"fs": FilesystemBackend(root)}, journal)
    out = await run(tools, edit)
    assert out.status == "success" and "2 occurrences" in str(out.content)
    assert (root / "f.txt").read_text() == "xx y xx\n"  # not applied a second time
    # The entry's outcome leaves out fields at their defaults (status "success" too).
    outcome = json.loads(entry_file.read_text())["outcome"]
    assert ToolOutcome.model_validate(outcome).status == "success"

    write = req("write_file", "fs", call_id="c-crash-w", file_path="/w.txt", content="W")
    assert _crash_child(journal, root, write) == 137
    out = await run(tools, write)
    assert out.content == "Successfully wrote /w.txt." and (root / "w.txt").read_text() == "W"


@pytest.mark.slow
async def test_crashed_execute_is_not_rerun(tmp_path: Path, root: Path) -> None:
    journal = tmp_path / "journal"
    call = req("execute", "shell", call_id="c-crash-x", command="echo run >> runs.txt")
    assert _crash_child(journal, root, call) == 137
    tools = FileToolActivities({"shell": LocalShellBackend(root)}, journal)
    out = await run(tools, call)
    assert out.status == "error" and "may or may not have run" in str(out.content)
    assert (root / "runs.txt").read_text() == "run\n"


async def test_intent_before_apply_then_retry_applies(tmp_path: Path, root: Path) -> None:
    """Crash between recording the intent and applying: the retry applies (once)."""
    backend = FilesystemBackend(root)
    journal = ToolJournal(tmp_path / "journal")
    (root / "g.txt").write_text("old\n")
    edit = req(
        "edit_file", call_id="c-intent", file_path="/g.txt", old_string="old", new_string="new"
    )

    class Crash(Exception):
        pass

    def crash() -> ToolOutcome:
        raise Crash

    from filegate.kernel.dispatch import parse_args

    with pytest.raises(Crash):
        journal.run("fs", backend, edit, parse_args(edit), crash, scope=SCOPE)
    assert (root / "g.txt").read_text() == "old\n"
    out = journal.run(
        "fs", backend, edit, parse_args(edit), lambda: run_tool(backend, edit), scope=SCOPE
    )
    assert out.status == "success" and (root / "g.txt").read_text() == "new\n"

    # Intent recorded, then someone else changed the file: refuse instead of guessing.
    edit2 = req(
        "edit_file", call_id="c-intent-2", file_path="/g.txt", old_string="new", new_string="N"
    )
    with pytest.raises(Crash):
        journal.run("fs", backend, edit2, parse_args(edit2), crash, scope=SCOPE)
    (root / "g.txt").write_text("new and changed\n")
    out = journal.run(
        "fs", backend, edit2, parse_args(edit2), lambda: run_tool(backend, edit2), scope=SCOPE
    )
    assert out.status == "error" and "changed" in str(out.content)
    assert (root / "g.txt").read_text() == "new and changed\n"


# --------------------------------------------------------------------------- cancellation


@pytest.fixture(scope="module")
def big_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """~12 000 files of 2 KB: big enough that a full glob/grep takes a while.

    Built on tmpfs when there is one: creating 12 000 files on a loaded disk
    can take 20 s, on tmpfs about one.
    """
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        top = Path(tempfile.mkdtemp(prefix="filegate-big-", dir=shm))
    else:
        top = tmp_path_factory.mktemp("big")
    content = b"nothing to see here\n" * 100
    for i in range(300):
        folder = top / f"d{i % 30}" / f"s{i}"
        folder.mkdir(parents=True)
        for j in range(40):
            fd = os.open(folder / f"f{j}.txt", os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, content)
            os.close(fd)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def _natural_seconds(backend: FilesystemBackend, tool: str) -> float:
    start = time.monotonic()
    if tool == "glob":
        backend.glob("**/*.zzz", "/")
    else:
        backend.grep("needle", "/", None, 1000)
    return time.monotonic() - start


@pytest.mark.timing
@pytest.mark.slow
@pytest.mark.parametrize(("tool", "use_rg"), [("glob", False), ("grep", True), ("grep", False)])
async def test_search_timeout_really_stops_the_search(
    big_tree: Path, tmp_path: Path, tool: str, use_rg: bool
) -> None:
    backend = FilesystemBackend(big_tree, use_ripgrep=use_rg)
    natural = _natural_seconds(backend, tool)
    budget = natural / 10
    print(f"{tool} rg={use_rg}: natural {natural:.3f}s, budget {budget:.3f}s")
    tools = FileToolActivities({"fs": backend}, tmp_path / "j", search_timeout=budget)
    before = set(child_pids())  # session servers (Temporal, S3) are children too
    args = {"pattern": "**/*.zzz"} if tool == "glob" else {"pattern": "needle"}
    start = time.monotonic()
    out = await run(tools, req(tool, **args))
    elapsed = time.monotonic() - start
    print(f"stopped after {elapsed:.3f}s")
    # The backend stops itself before the hard stop and answers with partial
    # results (contract §1); the hard stop's "narrow" error is the fallback.
    assert "Search stopped after" in str(out.content) or (
        out.status == "error" and "narrow" in str(out.content)
    ), out
    # Stopped well before the search could have finished on its own, and nothing is
    # left. A fast walk (tens of ms) is dominated by scheduling jitter, so the
    # bound never drops below 0.1 s; the note or error already proves the cut.
    assert elapsed < budget + max(natural / 2, 0.1), (elapsed, natural)
    assert tool_threads() == []
    assert set(child_pids()) <= before


async def test_cancelled_execute_kills_its_process_group(
    tools: FileToolActivities, root: Path
) -> None:
    env = ActivityEnvironment()
    before = set(child_pids())  # session servers (Temporal, S3) are children too
    call = req("execute", "shell", command="sleep 60 & echo $! > bg.pid; sleep 60")
    task = asyncio.create_task(env.run(tools.execute, call))
    pid_file = root / "bg.pid"
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        await asyncio.sleep(0.02)
    background = int(pid_file.read_text())
    assert pid_alive(background)
    start = time.monotonic()
    env.cancel()
    with pytest.raises((CancelledError, asyncio.CancelledError)):
        await task
    assert time.monotonic() - start < 3
    assert not pid_alive(background)
    assert tool_threads() == [] and set(child_pids()) <= before


# --------------------------------------------------------------------------- real worker


class ToolCallInput(BaseModel):
    request: ToolRequest
    search_timeout: float = 20.0


@workflow.defn
class ToolCallWorkflow:
    """Schedules one tool activity the way the agent workflow does."""

    @workflow.run
    async def run(self, params: ToolCallInput) -> ToolOutcome:
        tool = params.request.tool
        options = tool_activity_options(tool, search_timeout=params.search_timeout)
        try:
            return await workflow.execute_activity(
                TOOL_ACTIVITY_NAMES[tool], params.request, result_type=ToolOutcome, **options
            )
        except Exception as exc:  # ActivityError: the model gets an error result
            from temporalio.exceptions import ActivityError

            if isinstance(exc, ActivityError):
                return outcome_for_activity_error(tool, exc)
            raise


@pytest.fixture
def worker_tools(big_tree: Path, tmp_path: Path) -> Iterator[FileToolActivities]:
    yield FileToolActivities(
        {"big": FilesystemBackend(big_tree, use_ripgrep=False)}, tmp_path / "journal"
    )


@pytest.mark.slow
@pytest.mark.services
async def test_real_worker_search_timeout_and_responsiveness(
    temporal_client: Client, worker_tools: FileToolActivities
) -> None:
    queue = f"tools-{uuid.uuid4()}"
    async with Worker(
        temporal_client,
        task_queue=queue,
        workflows=[ToolCallWorkflow],
        activities=worker_tools.activities(),
    ):
        # search budget 0.05 s (derived from start_to_close by the activity)
        slow = ToolCallInput(request=req("grep", "big", pattern="needle"), search_timeout=0.05)
        start = time.monotonic()
        out = await temporal_client.execute_workflow(
            ToolCallWorkflow.run, slow, id=f"wf-{uuid.uuid4()}", task_queue=queue
        )
        # Partial results at 3/4 of the budget, or the hard stop's error.
        assert "Search stopped after" in str(out.content) or (
            out.status == "error" and "narrow" in str(out.content)
        ), out
        assert time.monotonic() - start < 5
        assert tool_threads() == []

        quick = ToolCallInput(request=req("ls", "big", path="/d0/s0"))
        start = time.monotonic()
        out = await temporal_client.execute_workflow(
            ToolCallWorkflow.run, quick, id=f"wf-{uuid.uuid4()}", task_queue=queue
        )
        assert out.status == "success" and "/d0/s0/f0.txt" in str(out.content)
        assert time.monotonic() - start < 5

        bad = ToolCallInput(request=req("ls", "nope", path="/"))
        out = await temporal_client.execute_workflow(
            ToolCallWorkflow.run, bad, id=f"wf-{uuid.uuid4()}", task_queue=queue
        )
        assert out.status == "error" and "nope" in str(out.content)


def test_activity_options_shape() -> None:
    glob = tool_activity_options("glob", search_timeout=5)
    assert glob["start_to_close_timeout"].total_seconds() == 15
    assert glob["heartbeat_timeout"] is not None
    execute = tool_activity_options("execute", execute_timeout=100)
    # command + margin + room to wait out an S3 outage while storing a large output
    assert execute["start_to_close_timeout"] == timedelta(seconds=130) + S3_OUTAGE_ROOM
    assert "InvalidToolRequest" in execute["retry_policy"].non_retryable_error_types
    assert set(TOOL_ACTIVITY_NAMES.values()) == {
        f"filegate.{name}"
        for name in (
            "ls",
            "read_file",
            "write_file",
            "edit_file",
            "delete",
            "glob",
            "grep",
            "execute",
        )
    }
