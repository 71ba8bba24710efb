"""Security fuzz through the full path: workflow gate + tool activity + Filesystem backend.

Hypothesis generates a permission rule set and a batch of hostile tool calls;
each example is ONE scripted AgentWorkflow turn carrying ``BATCH`` calls (so
1 000+ calls stay affordable), on a fresh root planted with marked files and
with symlinks that lead outside to a sentinel holding a secret. After the run
the transcript and the disk are checked against an oracle written here, not
the product's matcher (rules use three simple pattern shapes whose meaning
is unambiguous):

- zero reads outside the root: the sentinel's secret is in no result;
- zero writes outside the root: the sentinel is byte-identical and nothing
  appeared next to the root;
- zero denied paths in any result: names and contents of read-denied files
  appear in no ls/glob/grep result, and no read of them succeeds;
- zero permission bypasses: files whose write verdict is deny or interrupt
  (interrupts time out as rejections) are unchanged, and nothing new appears
  in a directory whose whole subtree is write-protected.

CI size: ``FILEGATE_FUZZ_CALLS`` (default 1 050 calls = 21 workflows of 50).
Full run::

    FILEGATE_FUZZ_CALLS=10000 .venv/bin/python -m pytest tests/workflows/test_security_fuzz.py -q

The agent and tools workers live on a background event loop for the whole
test, so each Hypothesis example only starts one workflow.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from filegate.activities.tools import FileToolActivities
from filegate.backends.filesystem import FilesystemBackend
from filegate.devstack.servers import TemporalDevServer
from filegate.kernel.messages import ModelSpec
from filegate.kernel.paths import validate_path
from filegate.kernel.permissions import FilesystemPermission
from filegate.worker import agent_worker
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec
from filegate.workflows.inputs import ApprovalConfig, Limits

pytestmark = [pytest.mark.services, pytest.mark.slow]

BATCH = 50
TOTAL_CALLS = int(os.environ.get("FILEGATE_FUZZ_CALLS", "1050"))
EXAMPLES = math.ceil(TOTAL_CALLS / BATCH)
SECRET = "OUTSIDE-SECRET-5b1e0d"
DIRS = ("d0", "d1", "d2", "d3")
LEAVES = ("f0.txt", "f1.md", ".hid.txt", "sub/f2.txt")

T = TypeVar("T")


def marker(virtual: str) -> str:
    """The unique content planted in ``virtual`` (greppable, never in a path)."""
    return "MARK" + hashlib.sha256(virtual.encode()).hexdigest()[:12]


PLANTED = {f"/{d}/{leaf}": marker(f"/{d}/{leaf}") for d in DIRS for leaf in LEAVES}

# --------------------------------------------------------------------------- oracle

Shape = str  # "tree" (/d/**), "txt" (/d/*.txt), "leaf" (/d/f0.txt)


@dataclass(frozen=True)
class Rule:
    ops: tuple[str, ...]
    directory: str
    shape: Shape
    mode: str

    def pattern(self) -> str:
        return {
            "tree": f"/{self.directory}/**",
            "txt": f"/{self.directory}/*.txt",
            "leaf": f"/{self.directory}/f0.txt",
        }[self.shape]

    def matches(self, path: str) -> bool:
        prefix = f"/{self.directory}/"
        if not path.startswith(prefix):
            return False
        rest = path[len(prefix) :]
        if self.shape == "tree":
            return True
        if self.shape == "txt":
            return "/" not in rest and rest.endswith(".txt")
        return rest == "f0.txt"

    def model(self) -> FilesystemPermission:
        return FilesystemPermission(
            operations=list(self.ops),  # type: ignore[arg-type]
            paths=[self.pattern()],
            mode=self.mode,  # type: ignore[arg-type]
        )


def verdict(rules: list[Rule], op: str, path: str) -> str:
    for rule in rules:
        if op in rule.ops and rule.matches(path):
            return rule.mode
    return "allow"


def subtree_protected(rules: list[Rule], directory: str) -> bool:
    """True when the first write rule reaching into ``directory`` covers all of it."""
    for rule in rules:
        if "write" in rule.ops and rule.directory == directory:
            return rule.shape == "tree" and rule.mode != "allow"
    return False


# --------------------------------------------------------------------------- strategies

rules_st = st.lists(
    st.builds(
        Rule,
        ops=st.sampled_from([("read",), ("write",), ("read", "write")]),
        directory=st.sampled_from(DIRS),
        shape=st.sampled_from(["tree", "txt", "leaf"]),
        mode=st.sampled_from(["deny", "deny", "allow", "interrupt"]),
    ),
    max_size=6,
)

PART = st.one_of(
    st.sampled_from(
        [
            *DIRS,
            "f0.txt",
            "f1.md",
            ".hid.txt",
            "sub",
            "f2.txt",
            "esc_dir",
            "esc_file",
            "rel_up",
            "..",
            ".",
            "",
            "~",
            "...",
            "a..b",
            "*",
            "**",
            "{d0,d1}",
            "\\",
            "C:",
            "\x00",
            "new.txt",
        ]
    ),
    st.text(alphabet="ab.~é/\u202e", min_size=1, max_size=6),
)
PATH = st.builds(
    lambda lead, parts: lead + "/".join(parts),
    st.sampled_from(["/", "/", "", "//", "./", "~/"]),
    st.lists(PART, min_size=0, max_size=4),
)
GLOB = st.one_of(
    st.sampled_from(
        [
            "**/*",
            "*",
            "**/.*",
            "../*",
            "/**/*.txt",
            "/../**",
            "{d0,d1}/**",
            "esc_dir/**",
            "rel_up/*",
            "**/f2.txt",
            "/d0/**",
            "[df]*/**",
        ]
    ),
    PATH,
)
GREP = st.sampled_from(["MARK", SECRET, "OUTSIDE", ".", "MARK[0-9a-f]+", "f0"])


@st.composite
def calls_st(draw: st.DrawFn) -> list[dict[str, Any]]:
    """``BATCH`` tool calls; an edit comes right after a read of the same path."""
    out: list[dict[str, Any]] = []
    while len(out) < BATCH:
        tool = draw(
            st.sampled_from(
                ["ls", "read_file", "write_file", "edit", "delete", "glob", "grep", "planted"]
            )
        )
        path = draw(PATH)
        if tool == "planted":  # a direct hit on a planted file, hostile or not
            path = draw(st.sampled_from(sorted(PLANTED)))
            tool = draw(st.sampled_from(["read_file", "edit", "write_file", "delete"]))
        if tool == "ls":
            out.append({"name": "ls", "args": {"path": path}})
        elif tool == "read_file":
            out.append({"name": "read_file", "args": {"file_path": path}})
        elif tool == "write_file":
            out.append({"name": "write_file", "args": {"file_path": path, "content": "PWNED\n"}})
        elif tool == "edit" and len(out) <= BATCH - 2:
            out.append({"name": "read_file", "args": {"file_path": path}})
            out.append(
                {
                    "name": "edit_file",
                    "args": {"file_path": path, "old_string": "MARK", "new_string": "PWNED"},
                }
            )
        elif tool == "delete":
            out.append({"name": "delete", "args": {"file_path": path}})
        elif tool == "glob":
            out.append({"name": "glob", "args": {"pattern": draw(GLOB), "path": path}})
        elif tool == "grep":
            out.append({"name": "grep", "args": {"pattern": draw(GREP), "path": path}})
    return out[:BATCH]


# --------------------------------------------------------------------------- harness


class LoopThread:
    """An event loop on a background thread: workers keep polling between examples."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@dataclass
class Harness:
    runner: LoopThread
    client: Client
    tools: FileToolActivities
    agent_q: str
    tools_q: str
    base: Path
    stop: asyncio.Event
    serving: Any = None
    ids: Iterator[int] = field(default_factory=count)
    calls_run: int = 0


@pytest.fixture(scope="module")
def harness(temporal_server: TemporalDevServer) -> Iterator[Harness]:
    runner = LoopThread()
    base = Path(tempfile.mkdtemp(prefix="filegate-fuzz-"))
    suffix = uuid.uuid4().hex[:8]

    async def setup() -> Harness:
        client = await Client.connect(
            temporal_server.address,
            namespace=temporal_server.namespace,
            data_converter=pydantic_data_converter,
        )
        tools = FileToolActivities({}, base / "journal")
        h = Harness(
            runner, client, tools, f"fz-agent-{suffix}", f"fz-tools-{suffix}", base, asyncio.Event()
        )

        async def serve() -> None:
            async with (
                agent_worker(client, h.agent_q),
                Worker(client, task_queue=h.tools_q, activities=tools.activities()),
            ):
                await h.stop.wait()

        h.serving = asyncio.create_task(serve())
        return h

    h = runner.run(setup())
    try:
        yield h
    finally:
        runner.loop.call_soon_threadsafe(h.stop.set)
        runner.run(asyncio.wait_for(h.serving, 60))
        runner.close()
        shutil.rmtree(base, ignore_errors=True)
    print(f"security fuzz: {h.calls_run} tool calls through the full path")
    assert h.calls_run >= TOTAL_CALLS


def plant(case: Path) -> tuple[Path, Path]:
    """A root with marked files and escaping symlinks; a sentinel outside it."""
    root, sentinel = case / "root", case / "sentinel"
    (sentinel / "inner").mkdir(parents=True)
    (sentinel / "secret.txt").write_text(SECRET + "\n")
    (sentinel / "inner" / "secret2.txt").write_text(SECRET + " MARK\n")
    for virtual, mark in PLANTED.items():
        target = root / virtual.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"{mark}\nline two\n")
    os.symlink(sentinel, root / "esc_dir")
    os.symlink(sentinel / "secret.txt", root / "esc_file")
    os.symlink("../sentinel", root / "rel_up")
    os.symlink(sentinel, root / "d1" / "esc_dir")
    return root, sentinel


def snapshot(top: Path) -> dict[str, bytes | str]:
    """Every entry under ``top`` (symlinks as their target text, not followed)."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            rel = str(full.relative_to(top))
            if full.is_symlink():
                out[rel] = "link:" + os.readlink(full)
            elif full.is_file():
                out[rel] = full.read_bytes()
            else:
                out[rel] = "dir"
    return out


LISTING = ("ls", "glob", "grep")


def without_echo(text: str, spec: dict[str, Any], status: str, denied: str) -> str:
    """``text`` minus an error's quote of the path the call asked for, when that
    path itself spells ``denied``: the caller's own words, not a listing."""
    asked = str(spec["args"].get("path") or "")
    if status != "error" or not asked:
        return text
    echoes = {asked}
    with contextlib.suppress(ValueError):
        echoes.add(validate_path(asked))
    for echo in sorted(echoes, key=len, reverse=True):
        if denied in echo:
            text = text.replace(echo, "")
    return text


def check(
    rules: list[Rule],
    calls: list[dict[str, Any]],
    transcript: list[dict[str, Any]],
    case: Path,
    root: Path,
    before_root: dict[str, bytes | str],
    before_sentinel: dict[str, bytes | str],
) -> None:
    results = {m["tool_call_id"]: m for m in transcript if m["role"] == "tool"}
    assert len(results) == len(calls), "every call got exactly one result"
    denied_read = {p for p in PLANTED if verdict(rules, "read", p) == "deny"}
    for n, spec in enumerate(calls):
        result = results[f"c{n}"]
        text = str(result["content"])
        where = f"call {spec} -> {text[:300]!r}"
        assert SECRET not in text, f"read outside the root: {where}"
        for path in denied_read:
            assert PLANTED[path] not in text, f"denied content {path} leaked: {where}"
            if spec["name"] in LISTING:
                # Listings name files by absolute virtual path (grep content rows
                # as "path:"), so the denied path itself must not appear. An error
                # may quote the path the call asked for: the caller's own words
                # (say "/*/d3/f0.txt/x: no such file"), not a listing.
                listed = without_echo(text, spec, result["status"], path)
                assert path not in listed, f"denied path {path} listed: {where}"
        if spec["name"] == "read_file" and result["status"] == "success":
            for path in denied_read:
                assert PLANTED[path] not in text, f"denied read succeeded: {where}"
    # Disk: nothing outside the root changed or appeared.
    assert snapshot(case / "sentinel") == before_sentinel, "sentinel changed: write outside root"
    assert sorted(p.name for p in case.iterdir()) == ["root", "sentinel"], "entry next to root"
    after = snapshot(root)
    for virtual in PLANTED:
        rel = virtual.lstrip("/")
        if verdict(rules, "write", virtual) in ("deny", "interrupt"):
            assert after.get(rel) == before_root[rel], f"write-protected {virtual} changed"
    for directory in DIRS:
        if subtree_protected(rules, directory):
            new = {k for k in after if k.startswith(directory + "/")} - set(before_root)
            assert not new, f"created inside write-protected /{directory}: {sorted(new)}"


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
    database=None,
    phases=(Phase.explicit, Phase.generate),  # no shrinking: an example is a 50-call run
)
@given(rules=rules_st, calls=calls_st())
@pytest.mark.slow(seconds=35)
def test_hostile_tool_calls_never_escape_or_bypass(
    harness: Harness, rules: list[Rule], calls: list[dict[str, Any]]
) -> None:
    n = next(harness.ids)
    case = harness.base / f"case{n}"
    root, _ = plant(case)
    backend_name = f"ex{n}"
    harness.tools.backends[backend_name] = FilesystemBackend(str(root), virtual_mode=True)
    before_root, before_sentinel = snapshot(root), snapshot(case / "sentinel")
    turn = {"tool_calls": [{"id": f"c{i}", **c} for i, c in enumerate(calls)]}
    input = AgentInput(
        task="fuzz",
        model=ModelSpec(
            provider="scripted", options={"script": {"turns": [turn, {"content": "done"}]}}
        ),
        backend=BackendSpec(
            default=BackendRef(kind="remote", name=backend_name, task_queue=harness.tools_q)
        ),
        permissions=[rule.model() for rule in rules],
        approvals=ApprovalConfig(timeout_seconds=0.2, on_timeout="reject"),
        limits=Limits(max_steps=4, tool_heartbeat_timeout_seconds=5),
    )

    async def run() -> list[dict[str, Any]]:
        result = await harness.client.execute_workflow(
            AgentWorkflow.run,
            input,
            id=f"fuzz-{uuid.uuid4().hex[:10]}",
            task_queue=harness.agent_q,
        )
        return result.transcript

    try:
        transcript = harness.runner.run(run())
        check(rules, calls, transcript, case, root, before_root, before_sentinel)
    finally:
        del harness.tools.backends[backend_name]
    harness.calls_run += len(calls)
    shutil.rmtree(case, ignore_errors=True)


def test_the_oracle_ignores_only_an_errors_quote_of_the_asked_path() -> None:
    denied = "/d3/f0.txt"
    quoting = {"name": "grep", "args": {"path": "/*/d3/f0.txt/x"}}
    error = "Error: /*/d3/f0.txt/x: no such file or directory"
    assert denied not in without_echo(error, quoting, "error", denied)
    assert denied in without_echo(f"{denied}:1:MARK", quoting, "success", denied)
    listing = {"name": "ls", "args": {"path": "/d3"}}
    assert denied in without_echo(f"{denied}\n", listing, "success", denied)
    assert denied in without_echo(f"Error: {denied} vanished", listing, "error", denied)
