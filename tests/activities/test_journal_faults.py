"""A failing journal disk (issue 34 items 2 and 3): told "applied" exactly when it is.

The idempotency journal lives on the tools worker's disk. Faults are real
where the machine allows mounts: the journal sits on a small tmpfs that is
filled (ENOSPC) or remounted read-only at the chosen step; where it does not,
the same ``OSError`` is raised at that step (a journal subclass, the only
seam: it picks *when*, the kernel decides *what* fails when mounted).

- An exhaustive table (80 cases) over the file mutations (write a new file,
  overwrite, a growing edit ``[x]`` -> ``[xx]`` that shows a double apply as
  ``[xxx]``, delete), each fault step (before the lock, before the intent,
  after the intent, after the change before its outcome, and the worker dying
  there), each fault (full, read-only) and the
  retry's disk (healed, still broken): every answer says "applied" exactly
  when the change is on disk, none names a host path, nothing is applied twice.
- Through a real Temporal server: a read-only journal answers at once in one
  sentence (was ~15 s of retries and the host path); the write that fills a
  disk the workspace shares with the journal is reported applied (was
  reported failed), and ``delete`` still works on that full disk.
- A worker refuses to start on a read-only or full journal, in one line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio import workflow
from temporalio.client import Client
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from filegate.activities.contract import outcome_for_activity_error, tool_activity_options
    from filegate.activities.idempotency import JournalEntry, ToolJournal
    from filegate.activities.tools import FileToolActivities
    from filegate.backends.filesystem import FilesystemBackend
    from filegate.kernel.tool_types import TOOL_ACTIVITY_NAMES, ToolOutcome, ToolRequest
    from filegate.wiring.connection import ConfigError
    from filegate.wiring.roles import file_tools

PAGE = 4096


# --------------------------------------------------------------------------- the journal's disk


def _mount(point: Path, size: str) -> bool:
    """Mount a tmpfs of ``size`` at ``point``; False where the machine forbids mounts."""
    point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(point)],
        capture_output=True,
    )
    return done.returncode == 0


def _umount(point: Path) -> None:
    subprocess.run(["umount", "-l", str(point)], capture_output=True)


class Disk:
    """The journal's disk: a real tmpfs made full or read-only, or injected errors."""

    def __init__(self, point: Path, mounted: bool) -> None:
        self.point = point
        self.mounted = mounted
        self.injected: int | None = None

    def fail(self, kind: str) -> None:
        if kind == "full":
            self.fill()
        else:
            self.read_only()

    def fill(self, leave: int = 0) -> None:
        """Fill the disk so that ``leave`` bytes (whole pages) stay free."""
        if not self.mounted:
            self.injected = errno.ENOSPC
            return
        fd = os.open(self.point / "ballast", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for chunk in (1 << 16, PAGE):
                with contextlib.suppress(OSError):
                    while self.free() - chunk >= leave:
                        os.write(fd, b"\0" * chunk)
        finally:
            os.close(fd)
        assert self.free() == leave, self.free()

    def free(self) -> int:
        stats = os.statvfs(self.point)
        return stats.f_bavail * stats.f_frsize

    def read_only(self) -> None:
        if not self.mounted:
            self.injected = errno.EROFS
            return
        for _ in range(50):  # "busy" while a just-closed file's release is still pending
            done = subprocess.run(
                ["mount", "-o", "remount,ro", str(self.point)], capture_output=True
            )
            if done.returncode == 0:
                return
            time.sleep(0.02)
        held = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                held.append(os.readlink(f"/proc/self/fd/{fd}"))
        raise AssertionError(done.stderr.decode() + repr(held))

    def heal(self) -> None:
        self.injected = None
        if self.mounted:
            subprocess.run(["mount", "-o", "remount,rw", str(self.point)], check=True)
            (self.point / "ballast").unlink(missing_ok=True)

    def check(self, *, creating: bool) -> None:
        """Raise the injected error (unmounted only); ``creating``: an empty file."""
        if self.injected == errno.EROFS or (self.injected is not None and not creating):
            raise OSError(self.injected, os.strerror(self.injected), str(self.point))


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    point = tmp_path / "journal-disk"
    mounted = _mount(point, "2m")
    try:
        yield Disk(point, mounted)
    finally:
        if mounted:
            _umount(point)


class _Crash(BaseException):
    """The worker process dying at this point (nothing after it runs)."""


class HookedJournal(ToolJournal):
    """Breaks ``disk`` at ``step``: before the ``lock``, before the ``intent`` is
    stored, right ``after_intent`` (before the change), before the ``outcome``
    (after the change), or ``crash``: broken there, then the worker dies."""

    def __init__(self, root: Path, disk: Disk, step: str | None = None, kind: str = "") -> None:
        super().__init__(root)
        self.disk, self.step, self.kind, self.stores = disk, step, kind, 0

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        if self.step == "lock":
            self.disk.fail(self.kind)
        if not path.with_suffix(".lock").exists():
            # Opening a lock file that exists (read-only, as _locked does) writes
            # nothing, so only a new one meets the fault, as on a real mount.
            self.disk.check(creating=True)
        with super()._locked(path):
            yield

    def store(self, path: Path, entry: JournalEntry) -> None:
        self.stores += 1
        at = "intent" if self.stores == 1 else "outcome"
        if self.step == at or (self.step == "crash" and at == "outcome"):
            self.disk.fail(self.kind)
        if self.step == "crash" and at == "outcome":
            raise _Crash
        self.disk.check(creating=False)
        super().store(path, entry)
        if self.step == "after_intent" and at == "intent":
            self.disk.fail(self.kind)


# --------------------------------------------------------------------------- the table


class Case(BaseModel):
    name: str
    tool: str
    args: dict[str, Any]
    before: str | None
    applied: str | None
    twice: str | None = None


CASES = [
    Case(
        name="write_new",
        tool="write_file",
        args={"file_path": "/t.txt", "content": "new\n"},
        before=None,
        applied="new\n",
    ),
    Case(
        name="write_over",
        tool="write_file",
        args={"file_path": "/t.txt", "content": "new\n"},
        before="old\n",
        applied="new\n",
    ),
    Case(
        name="edit",
        tool="edit_file",
        args={"file_path": "/t.txt", "old_string": "[x", "new_string": "[xx"},
        before="[x]\n",
        applied="[xx]\n",
        twice="[xxx]\n",
    ),
    Case(name="delete", tool="delete", args={"file_path": "/t.txt"}, before="bye\n", applied=None),
]
STEPS = ["lock", "intent", "after_intent", "outcome", "crash"]
KINDS = ["full", "read_only"]


async def _ask(tools: FileToolActivities, request: ToolRequest) -> tuple[bool, str] | None:
    """What the model is told: (told applied, text); None when the worker died."""
    try:
        out: ToolOutcome = await ActivityEnvironment().run(getattr(tools, request.tool), request)
    except _Crash:
        return None
    except ApplicationError as exc:
        assert exc.non_retryable, exc
        return False, str(exc)
    except Exception as exc:  # the workflow tells the model "the tool failed: ..."
        return False, f"{type(exc).__name__}: {exc}"
    return out.status == "success", str(out.content)


def _state(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


@pytest.mark.slow
async def test_told_applied_exactly_when_on_disk_across_journal_faults(
    tmp_path: Path, disk: Disk
) -> None:
    """Old code: an outcome that could not be stored failed the call (the change
    on disk), and every error text carried the journal's host path."""
    wrong: list[str] = []
    count = 0
    for case in CASES:
        for step in STEPS:
            for kind in KINDS:
                for retry_disk in ("healed", "broken"):
                    count += 1
                    label = f"{case.name}/{step}/{kind}/retry {retry_disk}"
                    disk.heal()
                    journal_dir = disk.point / "journal"
                    shutil.rmtree(journal_dir, ignore_errors=True)
                    ws = tmp_path / f"ws{count}"
                    ws.mkdir()
                    target = ws / "t.txt"
                    if case.before is not None:
                        target.write_text(case.before)
                    tools = FileToolActivities({"fs": FilesystemBackend(ws)}, journal_dir)
                    tools.journal = HookedJournal(journal_dir, disk, step, kind)
                    request = ToolRequest(
                        tool=case.tool,  # type: ignore[arg-type]
                        backend="fs",
                        args=case.args,
                        tool_call_id=f"call-{count}",
                        virtual_path="/t.txt",
                    )
                    answers = [await _ask(tools, request)]
                    states = [_state(target)]
                    if retry_disk == "healed":
                        disk.heal()
                    # The retry Temporal makes when the first answer was lost.
                    tools.journal = HookedJournal(journal_dir, disk)
                    answers.append(await _ask(tools, request))
                    states.append(_state(target))
                    for answer, state in zip(answers, states, strict=True):
                        if state == case.twice and case.twice is not None:
                            wrong.append(f"{label}: applied twice")
                        if answer is None:
                            continue
                        told, text = answer
                        if told != (state == case.applied):
                            wrong.append(f"{label}: told applied={told}, on disk {state!r}: {text}")
                        if str(tmp_path) in text or "Errno" in text:
                            wrong.append(f"{label}: host path or raw error: {text}")
                        unrecorded = not told and "cannot record" in text
                        if unrecorded and (
                            "nothing was changed" not in text or state != case.before
                        ):
                            wrong.append(f"{label}: {text!r} but on disk {state!r}")
                    if answers[1] is None:
                        wrong.append(f"{label}: the retry got no answer")
    disk.heal()
    assert count == len(CASES) * len(STEPS) * len(KINDS) * 2 == 80
    assert not wrong, "\n".join(wrong)


# --------------------------------------------------------------------------- a real worker


class OneCall(BaseModel):
    request: ToolRequest


@workflow.defn
class JournalFaultWorkflow:
    """Schedules one tool activity the way the agent workflow does."""

    @workflow.run
    async def run(self, params: OneCall) -> ToolOutcome:
        tool = params.request.tool
        try:
            return await workflow.execute_activity(
                TOOL_ACTIVITY_NAMES[tool],
                params.request,
                result_type=ToolOutcome,
                **tool_activity_options(tool),
            )
        except ActivityError as exc:
            return outcome_for_activity_error(tool, exc)


async def _call(
    client: Client, tools: FileToolActivities, tool: str, **args: Any
) -> tuple[ToolOutcome, float]:
    queue = f"journal-{uuid.uuid4()}"
    request = ToolRequest(
        tool=tool,  # type: ignore[arg-type]
        backend="fs",
        args=args,
        tool_call_id=f"call-{uuid.uuid4().hex[:8]}",
        virtual_path=str(args["file_path"]),
    )
    async with Worker(
        client, task_queue=queue, workflows=[JournalFaultWorkflow], activities=tools.activities()
    ):
        start = time.monotonic()
        out = await client.execute_workflow(
            JournalFaultWorkflow.run, OneCall(request=request), id=f"wf-{uuid.uuid4()}",
            task_queue=queue,
        )  # fmt: skip
        return out, time.monotonic() - start


def _needs_mount(disk: Disk) -> None:
    if not disk.mounted:
        pytest.skip("no tmpfs mount here (the table above covers the same faults by injection)")


@pytest.mark.services
async def test_read_only_journal_answers_at_once_in_one_sentence(
    temporal_client: Client, tmp_path: Path, disk: Disk
) -> None:
    """Old code: six attempts over ~15 s, then "[Errno 30] Read-only file system: '<host path>'"."""
    _needs_mount(disk)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    tools = FileToolActivities({"fs": FilesystemBackend(ws)}, disk.point / "journal")
    disk.read_only()
    out, seconds = await _call(
        temporal_client, tools, "write_file", file_path="/a.txt", content="2"
    )
    disk.heal()
    text = str(out.content)
    assert out.status == "error"
    assert (
        "the tools worker cannot record this call: its journal is on a read-only file system; "
        "nothing was changed"
    ) in text, text
    assert "\n" not in text.strip() and str(disk.point) not in text and "Errno" not in text
    assert seconds < 5, seconds
    assert (ws / "a.txt").read_text() == "one\n"


@pytest.mark.services
async def test_a_disk_shared_by_workspace_and_journal_filled_by_a_write(
    temporal_client: Client, disk: Disk
) -> None:
    """Default layout, one disk: the write that fills it is reported applied, and
    ``delete`` still works there, so the agent can free space itself.

    Old code: the write was on disk but reported failed (the outcome could not
    be stored) after ~15 s of retries, and the delete failed (no room for its intent).
    """
    _needs_mount(disk)
    ws = disk.point / "ws"
    ws.mkdir()
    tools = FileToolActivities({"fs": FilesystemBackend(ws)}, disk.point / "journal")
    pages = 3
    content = "y" * (pages * PAGE - 10)
    # Room for the intent (one page) and the file, none for the outcome.
    disk.fill(leave=(1 + pages) * PAGE)
    out, _ = await _call(
        temporal_client, tools, "write_file", file_path="/big.txt", content=content
    )
    assert (ws / "big.txt").read_text() == content
    assert out.status == "success", out.content
    assert disk.free() == 0

    out, _ = await _call(temporal_client, tools, "delete", file_path="/big.txt")
    assert out.status == "success", out.content
    assert not (ws / "big.txt").exists()
    # With the space freed, writes are journaled again.
    out, _ = await _call(temporal_client, tools, "write_file", file_path="/s.txt", content="s")
    assert out.status == "success" and (ws / "s.txt").read_text() == "s"
    disk.heal()


@pytest.mark.parametrize("fault", ["read_only", "full"])
def test_a_worker_refuses_to_start_on_a_journal_it_cannot_write(
    tmp_path: Path, disk: Disk, fault: str
) -> None:
    """Old code: the worker started without a word; every mutation failed later."""
    _needs_mount(disk)
    (disk.point / "journal").mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    make: Callable[[], object] = lambda: file_tools(  # noqa: E731
        {"fs": FilesystemBackend(ws)}, disk.point / "journal", None, None
    )
    disk.fail(fault)
    with pytest.raises(ConfigError) as refused:
        make()
    disk.heal()
    message = str(refused.value)
    assert "\n" not in message and message.startswith("the tools worker cannot start: its journal")
    wanted = "read-only file system" if fault == "read_only" else "its journal disk is full"
    assert wanted in message, message
    assert refused.value.code == 2
    assert make() is not None  # healed, it starts
