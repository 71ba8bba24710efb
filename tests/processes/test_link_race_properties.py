"""Property test: links a sandboxed command keeps re-pointing carry no file tool past the rules.

Issue 33, item 2. Random rule sets (``deny`` or ``interrupt``, on read, write
or both, over ``/secrets/**``, ``/docs/**``, ``/pub/keep/**`` and a literal
file) protect a planted workspace. A real command runs in the bubblewrap
sandbox, in the view those rules compile to, and keeps creating, re-pointing
and removing links in ``/pub``: absolute ones (``/workspace/secrets``),
relative ones, ones climbing past the root (``../../../../workspace/...``),
chains of links, dangling links, links to files and to directories. Meanwhile
every file tool (read_file, write_file, edit_file, delete, ls, glob, grep)
runs through those links via :func:`~filegate.kernel.dispatch.run_tool` with
the same rules, from two threads (the same turn), and again once the command
has ended and left its links in place (later turns). After each example:

- no result holds a byte of a read-protected file (each file's content is a
  unique token) nor a protected name (names planted only under protected
  directories and never written in a call);
- nothing under a write-protected path changed (existence, kind, content,
  link target, mode);
- ``/pub`` stayed readable and writable (control writes and reads succeed).

An ``interrupt`` rule protects only calls no human approved: an example may
mark its calls approved, and then only the ``deny`` rules must hold (the
approval covers what the gate showed, and the backend still refuses any
other path it reaches).
"""

from __future__ import annotations

import os
import shlex
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.backends.filesystem import FilesystemBackend
from filegate.kernel.dispatch import run_tool
from filegate.kernel.execute_gate import compile_view
from filegate.kernel.permissions import FilesystemPermission, first_match
from filegate.kernel.tool_types import ToolOutcome, ToolRequest
from tests.processes.test_sandbox_view_properties import snapshot
from tests.roots import made

pytestmark = pytest.mark.slow

PROTECTED_DIRS = ("secrets", "docs", "pub/keep")
PLAIN_DIRS = ("decoy", "decoy/inner", "secrets/inner", "docs/inner", "pub/keep/inner")
FIXED_FILES = (
    "secrets/key.txt",
    "secrets/a.md",
    "secrets/inner/deep.txt",
    "docs/a.md",
    "docs/b.md",
    "docs/key.txt",
    "docs/inner/deep.txt",
    "pub/keep/a.md",
    "pub/keep/b.md",
    "pub/keep/k.md",
    "pub/keep/inner/deep.txt",
    "decoy/key.txt",
    "decoy/a.md",
    "decoy/b.md",
    "decoy/inner/deep.txt",
    "pub/ok.md",
)
"""Files the calls name (through the links): every one holds a unique token."""

LINKS = ("L0", "L1", "F0", "CH")
"""Link names in ``/pub`` the command keeps re-pointing (any link may get any target)."""

TARGETS = (
    # absolute (inside the sandbox the workspace is /workspace), relative, climbing
    "/workspace/secrets",
    "../secrets",
    "../../../../workspace/secrets",
    "../secrets/inner",
    "/workspace/docs",
    "../docs",
    "../../../../workspace/docs",
    "keep",
    "/workspace/pub/keep",
    "./keep/inner/..",
    # files
    "../secrets/key.txt",
    "/workspace/secrets/key.txt",
    "../../../../workspace/secrets/key.txt",
    "../docs/a.md",
    "keep/k.md",
    # allowed places
    "../decoy",
    "/workspace/decoy",
    "../decoy/inner",
    "../decoy/key.txt",
    # chains (a link to a link, one of which flips too)
    "L0",
    "L1",
    "F0",
    "/workspace/pub/L1",
    "../pub/L0",
    "L0/inner",
    # dangling, or no link at all for a moment
    "../nowhere",
    "/workspace/nowhere",
    "",
)
RULE_PATHS = (
    "/secrets/**",
    "/docs/**",
    "/pub/keep/**",
    "/secrets/key.txt",
    "/{docs,pub/keep}/**",
)
PATTERN = "TOKEN"
"""Every token starts with it, so a grep for it shows any readable file's line."""

rules_strategy = st.lists(
    st.builds(
        FilesystemPermission,
        operations=st.sampled_from([["read"], ["write"], ["read", "write"]]),
        paths=st.lists(st.sampled_from(RULE_PATHS), min_size=1, max_size=2, unique=True),
        mode=st.sampled_from(["deny", "interrupt"]),
    ),
    min_size=1,
    max_size=4,
)
flips_strategy = st.fixed_dictionaries(
    {name: st.lists(st.sampled_from(TARGETS), min_size=1, max_size=3) for name in LINKS}
)


def _calls(link: str) -> list[tuple[str, dict[str, Any]]]:
    """Every tool, through the link ``/pub/<link>`` (and around it)."""
    p = f"/pub/{link}"
    return [
        ("read_file", {"file_path": f"{p}/key.txt"}),
        ("read_file", {"file_path": p}),
        ("read_file", {"file_path": f"{p}/inner/deep.txt"}),
        ("write_file", {"file_path": f"{p}/w.md", "content": "EVIL"}),
        ("write_file", {"file_path": f"{p}/a.md", "content": "EVIL"}),
        ("write_file", {"file_path": p, "content": "EVIL"}),
        ("write_file", {"file_path": f"{p}/new/deep/x.md", "content": "EVIL"}),
        ("edit_file", {"file_path": f"{p}/a.md", "old_string": PATTERN, "new_string": "EVIL"}),
        ("edit_file", {"file_path": p, "old_string": PATTERN, "new_string": "EVIL"}),
        ("delete", {"file_path": f"{p}/b.md"}),
        ("delete", {"file_path": f"{p}/inner"}),
        ("delete", {"file_path": p}),
        ("ls", {"path": p}),
        ("ls", {"path": f"{p}/inner"}),
        ("glob", {"pattern": "**", "path": p}),
        ("glob", {"pattern": "*", "path": p}),
        ("glob", {"pattern": f"{link}/**", "path": "/pub"}),
        ("glob", {"pattern": f"{p}/*"}),
        ("grep", {"pattern": PATTERN, "path": p, "output_mode": "content"}),
        ("grep", {"pattern": PATTERN, "path": f"{p}/key.txt", "output_mode": "content"}),
        ("grep", {"pattern": PATTERN, "path": p, "glob": "*.md", "output_mode": "content"}),
    ]


AROUND: list[tuple[str, dict[str, Any]]] = [
    ("ls", {"path": "/pub"}),
    ("glob", {"pattern": "**", "path": "/pub"}),
    ("glob", {"pattern": "**/*.txt", "path": "/"}),
    ("grep", {"pattern": PATTERN, "path": "/pub", "output_mode": "content"}),
    ("grep", {"pattern": PATTERN, "path": "/", "output_mode": "content"}),
]
CALLS = [call for link in LINKS for call in _calls(link)] + AROUND
calls_strategy = st.lists(st.sampled_from(CALLS), min_size=3, max_size=8)


@dataclass
class Planted:
    tokens: dict[str, str]
    """Relative path -> the file's content (a unique token)."""
    names: dict[str, str]
    """Relative path -> a unique name planted there (only under protected dirs)."""


def _token() -> str:
    return f"{PATTERN}-{uuid.uuid4().hex}"


def plant(root: Path, flips: dict[str, list[str]]) -> Planted:
    """The workspace of one example, links at their first targets."""
    for child in root.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    for rel in ("ctl", "pub", *PROTECTED_DIRS, *PLAIN_DIRS):
        (root / rel).mkdir(parents=True, exist_ok=True)
    tokens: dict[str, str] = {}
    names: dict[str, str] = {}
    for rel in FIXED_FILES:
        tokens[rel] = _token()
        (root / rel).write_text(tokens[rel] + "\n")
    for base in PROTECTED_DIRS:
        secret_dir = f"{base}/d{uuid.uuid4().hex[:12]}"  # a protected directory name
        secret_file = f"{secret_dir}/n{uuid.uuid4().hex[:12]}.txt"  # and a file name
        (root / secret_dir).mkdir()
        tokens[secret_file] = _token()
        (root / secret_file).write_text(tokens[secret_file] + "\n")
        names[secret_dir] = secret_dir.rsplit("/", 1)[1]
        names[secret_file] = secret_file.rsplit("/", 1)[1]
    for name, targets in flips.items():
        if targets[0]:
            os.symlink(targets[0], root / "pub" / name)
    return Planted(tokens, names)


def protected(rules: list[FilesystemPermission], op: str, rel: str, approved: bool) -> bool:
    """Whether ``op`` on ``rel`` must be refused: any ``deny``, an unapproved ``interrupt``."""
    rule = first_match(rules, op, "/" + rel)  # type: ignore[arg-type]
    if rule is None or rule.mode == "allow":
        return False
    return rule.mode == "deny" or not approved


def flipper_script(flips: dict[str, list[str]], python: bool) -> str:
    """A command re-pointing every link through its targets until ``ctl/stop`` appears.

    It ends with each link at its last target (what later turns see). ``python``:
    atomic re-points (a link always exists); else ``ln -sfn`` (unlink, then link).
    """
    if python:
        program = (
            "import os, shutil\n"
            f"plan = {sorted(flips.items())!r}\n"
            "def point(name, target):\n"
            "    path = 'pub/' + name\n"
            "    if not target:\n"
            "        try: os.unlink(path)\n"
            "        except OSError: pass\n"
            "        return\n"
            "    try: os.unlink(path + '.tmp')\n"
            "    except OSError: pass\n"
            "    os.symlink(target, path + '.tmp')\n"
            "    for _ in range(20):\n"
            "        try: return os.replace(path + '.tmp', path)\n"
            "        except OSError:  # a call made a directory there: take it away\n"
            "            shutil.rmtree(path, ignore_errors=True)\n"
            "open('ctl/started', 'w').close()\n"
            "i = 0\n"
            "while not os.path.exists('ctl/stop'):\n"
            "    for name, targets in plan:\n"
            "        point(name, targets[i % len(targets)])\n"
            "    i += 1\n"
            "for name, targets in plan:\n"
            "    point(name, targets[-1])\n"
        )
        return "exec python3 -c " + shlex.quote(program)

    def point(name: str, target: str) -> str:
        path = f"pub/{name}"
        if not target:
            return f"rm -f {path}"
        # -T: a directory a call made there is not entered; it goes, and the next round links
        return f"{{ ln -sfnT {shlex.quote(target)} {path} || rm -rf {path}; }}"

    def last(name: str, target: str) -> str:
        path = f"pub/{name}"
        return f"rm -rf {path}" + (f" && ln -s {shlex.quote(target)} {path}" if target else "")

    rounds = max(len(targets) for targets in flips.values())
    body = "; ".join(
        point(name, targets[k % len(targets)])
        for k in range(rounds)
        for name, targets in sorted(flips.items())
    )
    final = " && ".join(last(name, targets[-1]) for name, targets in sorted(flips.items()))
    return f"touch ctl/started; while [ ! -e ctl/stop ]; do {body}; done; {final}"


def call(
    box: BwrapSandboxBackend,
    rules: list[FilesystemPermission],
    approved: bool,
    tool: str,
    args: dict[str, Any],
) -> ToolOutcome:
    request = ToolRequest(
        tool=tool,  # type: ignore[arg-type]
        backend="box",
        args=args,
        tool_call_id="c",
        permissions=rules,
        approved=approved,
    )
    return run_tool(box, request)


def shown(outcome: ToolOutcome) -> str:
    """All of a result: what the model reads and every structured field."""
    return outcome.text + "\n" + outcome.model_dump_json()


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BwrapSandboxBackend]:
    """One sandbox root for the module; each example plants it afresh."""
    BwrapSandboxBackend(tmp_path_factory.mktemp("probe"), check=True)
    yield BwrapSandboxBackend(made(tmp_path_factory.mktemp("races") / "root"), check=False)


FLIP_SECONDS = 0.12
"""How long the calls race the command, per example (the budget: 200 examples in ~60 s)."""


@settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rules=rules_strategy,
    flips=flips_strategy,
    calls=calls_strategy,
    python=st.booleans(),
    approved=st.booleans(),
)
@pytest.mark.slow(seconds=60)
def test_links_re_pointed_during_a_turn_carry_no_call_past_the_rules(
    box: BwrapSandboxBackend,
    rules: list[FilesystemPermission],
    flips: dict[str, list[str]],
    calls: list[tuple[str, dict[str, Any]]],
    python: bool,
    approved: bool,
) -> None:
    root = Path(box.root)
    planted = plant(root, flips)
    view = compile_view(rules, backend="box", lenient=False)
    before = snapshot(root)

    flipped: list[Any] = []
    command = threading.Thread(
        target=lambda: flipped.append(box.execute_in_view(flipper_script(flips, python), 30, view)),
        daemon=True,
    )
    command.start()
    results: list[tuple[str, dict[str, Any], ToolOutcome]] = []
    controls: list[tuple[str, str, ToolOutcome, ToolOutcome]] = []
    lock = threading.Lock()

    def race(worker: int) -> None:
        """Run the calls round after round until the time is up (one thread of the turn)."""
        rounds = 0
        deadline = time.monotonic() + FLIP_SECONDS
        while rounds == 0 or time.monotonic() < deadline:
            for tool, args in calls:
                outcome = call(box, rules, approved, tool, args)
                with lock:
                    results.append((tool, args, outcome))
            path, text = f"/pub/ctl-{worker}-{rounds}.md", f"control {worker} {rounds}"
            wrote = call(box, rules, approved, "write_file", {"file_path": path, "content": text})
            read = call(box, rules, approved, "read_file", {"file_path": path})
            with lock:
                controls.append((path, text, wrote, read))
            rounds += 1

    try:
        started = time.monotonic()
        while not (root / "ctl" / "started").exists() and command.is_alive():
            if time.monotonic() - started > 20:
                break
            time.sleep(0.002)
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(race, range(2)))
    finally:
        (root / "ctl" / "stop").touch()
        command.join(30)
    assert not command.is_alive(), "the link-flipping command did not stop"
    assert flipped and flipped[0].exit_code == 0, flipped

    # Later turns: the command has ended and left its last links in place.
    for tool, args in calls:
        results.append((tool, args, call(box, rules, approved, tool, args)))
    after = snapshot(root)
    wrote = call(box, rules, approved, "write_file", {"file_path": "/pub/ok.md", "content": "ok"})
    read = call(box, rules, approved, "read_file", {"file_path": "/pub/ok.md"})
    controls.append(("/pub/ok.md", "ok", wrote, read))

    note(f"command output: {flipped[0].output[-2000:]}")
    for tool, args, outcome in results:
        text = shown(outcome)
        for rel, token in planted.tokens.items():
            if protected(rules, "read", rel, approved):
                assert token not in text, (tool, args, rel, outcome.text)
        for rel, name in planted.names.items():
            if protected(rules, "read", rel, approved):
                assert name not in text, (tool, args, rel, outcome.text)
    for rel in sorted(set(before) | set(after)):
        if protected(rules, "write", rel, approved):
            assert before.get(rel) == after.get(rel), (rel, before.get(rel), after.get(rel))
    for path, text, wrote, read in controls:
        assert wrote.status == "success", (path, wrote.text)
        assert read.status == "success" and text in read.text, (path, read.text)


# Two cases the property found, made deterministic: the link changes at the one
# moment that matters (as in tests/processes/test_one_filesystem.py).


class _FlipAfterCheck(FilesystemBackend):
    """Re-points ``/pub/sw`` to ``../secrets`` right after the gate resolved it."""

    def resolve_path(self, path: str) -> str | None:
        answer = super().resolve_path(path)
        link = Path(self.root) / "pub" / "sw"
        link.unlink(missing_ok=True)
        link.symlink_to("../secrets")
        return answer


SEARCHES: list[tuple[str, dict[str, Any]]] = [
    ("ls", {"path": "/pub/sw"}),
    ("glob", {"pattern": "**", "path": "/pub/sw"}),
    ("grep", {"pattern": "hunter2", "path": "/pub/sw", "output_mode": "content"}),
]


@pytest.mark.parametrize(("tool", "args"), SEARCHES)
def test_a_search_whose_link_flips_under_an_interrupt_rule_shows_nothing_unasked(
    tmp_path: Path, tool: str, args: dict[str, Any]
) -> None:
    """An interrupt rule below the reached root needs a human, whatever the gate saw."""
    root = tmp_path / "ws"
    for name in ("secrets", "decoy", "pub"):
        (root / name).mkdir(parents=True)
    (root / "secrets" / "key-name-only-here.txt").write_text("hunter2\n")
    (root / "decoy" / "key.txt").write_text("nothing\n")
    (root / "pub" / "sw").symlink_to("../decoy")
    rules = [FilesystemPermission(operations=["read"], paths=["/secrets/**"], mode="interrupt")]
    request = ToolRequest(
        tool=tool,  # type: ignore[arg-type]
        backend="b",
        args=args,
        tool_call_id="c",
        permissions=rules,
    )
    outcome = run_tool(_FlipAfterCheck(root), request)
    assert "key-name-only-here" not in shown(outcome), outcome.text
    assert "hunter2" not in shown(outcome), outcome.text


def test_a_link_removed_while_the_gate_resolves_it_is_an_answer_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """realpath lstats a link, then reads it: a link removed between the two is no crash."""
    root = tmp_path / "ws"
    (root / "pub").mkdir(parents=True)
    (root / "decoy").mkdir()
    link = root / "pub" / "L0"
    link.symlink_to("../decoy")
    real_readlink = os.readlink

    def removed_first(path: Any, *args: Any, **kwargs: Any) -> Any:
        if os.fspath(path) == str(link) and os.path.islink(link):
            link.unlink()  # the command removes it just now
        return real_readlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "readlink", removed_first)
    request = ToolRequest(
        tool="write_file",
        backend="b",
        args={"file_path": "/pub/L0/w.md", "content": "x"},
        tool_call_id="c",
        permissions=[FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="deny")],
    )
    outcome = run_tool(FilesystemBackend(root), request)
    assert outcome.status in ("success", "error"), outcome.text
