"""Property tests for the permission rules on real temporary trees.

Every example builds a small random tree on disk (dot names included) and a
random rule list, then checks one safety property against an *independent*
oracle: which paths a rule pattern matches is read from wcmatch's filesystem
walker (``wcmatch.glob.glob`` over the real tree), not from the in-memory
matcher the permission module uses.

1. No path denied for read survives a result filter (and nothing else is dropped).
2. A recursive delete that ``delete_blockers`` allows never removes a path
   whose deciding write rule is a deny (run on the real FilesystemBackend,
   trees compared before/after).
3. The interrupt predicate fires for every call that could touch a path whose
   deciding rule is an interrupt (a call the gate refuses touches nothing).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from wcmatch import glob as wc_glob

from filegate.backends import (
    FilesystemPermission,
    delete_blockers,
    filter_grep_matches,
    filter_ls_entries,
    filter_paths,
    interrupt_fires,
    validate_path,
)
from filegate.backends.filesystem import FilesystemBackend
from filegate.kernel.paths import is_within
from filegate.workflows.gate import CheckedCall, deny_gate

NAMES = ["a", "b", "s", "x.log", ".env", ".d", "k.key"]
WILDCARDS = ["*", "**", "?", "*.log", "{a,s}", ".*", "[ab]", "*.{log,key}", "{b,.d}"]
CONTENT = "needle\n"

PROPERTY_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

Parts = tuple[str, ...]


@dataclass
class Tree:
    """A real directory tree under ``root`` plus its virtual paths."""

    root: str
    files: set[str]
    dirs: set[str]

    @property
    def paths(self) -> set[str]:
        return self.files | self.dirs

    def subtree(self, top: str) -> set[str]:
        return {p for p in self.paths if is_within(p, top)} | {top}

    def snapshot(self) -> set[str]:
        found: set[str] = set()
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            base = "/" if rel == "." else "/" + rel
            for name in dirnames + filenames:
                found.add(base.rstrip("/") + "/" + name)
        return found


def _vpath(parts: Parts) -> str:
    return "/" + "/".join(parts)


@st.composite
def tree_specs(draw: st.DrawFn) -> tuple[set[Parts], set[Parts]]:
    """(files, empty dirs) as component tuples, free of file/dir conflicts."""
    comps = st.lists(st.sampled_from(NAMES), min_size=1, max_size=5).map(tuple)
    wanted: set[Parts] = set(draw(st.lists(comps, min_size=1, max_size=12)))
    dirs = {t[:i] for t in wanted for i in range(1, len(t))}
    files = wanted - dirs
    empty: set[Parts] = set()
    for t in draw(st.lists(comps, max_size=2)):
        if any(t[:i] in files for i in range(1, len(t) + 1)) or t in dirs:
            continue
        empty.add(t)
    return files, empty


@contextmanager
def real_tree(spec: tuple[set[Parts], set[Parts]]) -> Iterator[Tree]:
    files, empty = spec
    with tempfile.TemporaryDirectory(prefix="perm-prop-") as root:
        dirs: set[str] = set()
        for parts in empty:
            os.makedirs(os.path.join(root, *parts), exist_ok=True)
        for parts in files:
            host = os.path.join(root, *parts)
            os.makedirs(os.path.dirname(host), exist_ok=True)
            with open(host, "w") as fh:
                fh.write(CONTENT)
        for parts in files | empty:
            dirs.update(_vpath(parts[:i]) for i in range(1, len(parts)))
        dirs.update(_vpath(parts) for parts in empty)
        yield Tree(root=root, files={_vpath(p) for p in files}, dirs=dirs)


free_patterns = st.tuples(
    st.sampled_from(NAMES), st.lists(st.sampled_from(NAMES + WILDCARDS), max_size=2)
).map(lambda parts: "/" + "/".join([parts[0], *parts[1]]))
"""Patterns not derived from the tree (literal first component: an anchor of
``/`` would block every delete and hide the interesting cases)."""


@st.composite
def tree_patterns(draw: st.DrawFn, tree: Tree, near: str | None) -> str:
    """A pattern built from a real path: one or two components swapped for
    wildcards, maybe cut short, maybe ending in ``**`` -- so rules hit the tree.

    With ``near`` (a subtree under test) the base is often a path below it and
    the wildcard often *straddles* it: placed at or above ``near``'s own level
    (``/a/*/s`` against ``/a/b``), the case where a pattern matches inside the
    subtree without matching ``near``, an ancestor, or having its anchor inside.
    """
    bases = sorted(tree.paths)
    below = sorted(tree.subtree(near) - {"/", near}) if near is not None else []
    if len(below) > 0 and draw(st.booleans()):
        comps = draw(st.sampled_from(below)).strip("/").split("/")
        depth = near.count("/") if near else 0
        if depth >= 2 and draw(st.booleans()):
            comps[draw(st.integers(1, depth - 1))] = draw(st.sampled_from(WILDCARDS))
            if draw(st.integers(0, 2)) == 0:
                comps.append("**")
            return "/" + "/".join(comps)
    else:
        comps = draw(st.sampled_from(bases)).strip("/").split("/")
    if draw(st.integers(0, 2)) == 0:
        comps = comps[: draw(st.integers(1, len(comps)))]
    # Wildcards in the first component give anchor '/', which blocks every
    # delete and masks the interesting cases: keep that rare.
    first = 0 if len(comps) == 1 or draw(st.integers(0, 7)) == 0 else 1
    for i in draw(st.sets(st.integers(first, len(comps) - 1), max_size=2)):
        comps[i] = draw(st.sampled_from(WILDCARDS))
    if draw(st.integers(0, 2)) == 0:
        comps.append("**")
    return "/" + "/".join(comps)


def rule_lists(
    tree: Tree, op: str, focus: str, near: str | None = None
) -> st.SearchStrategy[list[FilesystemPermission]]:
    """1-4 rules, weighted towards operation ``op``, mode ``focus`` and the
    subtree at ``near``."""
    other = "write" if op == "read" else "read"
    rule = st.builds(
        FilesystemPermission,
        operations=st.sampled_from([[op], [op], ["read", "write"], [other]]),
        paths=st.lists(
            st.one_of(tree_patterns(tree, near), tree_patterns(tree, near), free_patterns),
            min_size=1,
            max_size=2,
        ),
        mode=st.sampled_from([focus, focus, "allow", "deny", "interrupt"]),
    )
    return st.lists(rule, min_size=1, max_size=4)


# --------------------------------------------------------------------------- #
# The oracle: first match, with pattern matches taken from the disk walker
# --------------------------------------------------------------------------- #


def disk_matches(tree: Tree, pattern: str) -> set[str]:
    """Tree paths ``pattern`` matches, found by walking the real tree.

    The walker reports a ``dir/**`` match of the directory itself as ``dir/``
    (globstar matching zero components); rule semantics exclude that, so
    entries with a trailing slash are dropped.
    """
    flags = wc_glob.GLOBSTAR | wc_glob.BRACE | wc_glob.DOTGLOB
    found = wc_glob.glob(pattern.lstrip("/"), root_dir=tree.root, flags=flags)
    return {"/" + rel for rel in found if not rel.endswith("/")}


def oracle_modes(tree: Tree, rules: list[FilesystemPermission], op: str) -> dict[str, str]:
    """Deciding mode of every tree path for ``op`` (absent = no rule = allow)."""
    modes: dict[str, str] = {}
    for rule in rules:
        if op not in rule.operations:
            continue
        for pattern in rule.paths:
            for path in disk_matches(tree, pattern):
                modes.setdefault(path, rule.mode)
    return modes


# --------------------------------------------------------------------------- #
# (1) result filters
# --------------------------------------------------------------------------- #


@pytest.mark.slow
@settings(PROPERTY_SETTINGS, max_examples=100)  # the heaviest: ls/glob/grep per example
@given(spec=tree_specs(), data=st.data())
def test_no_read_denied_path_survives_a_result_filter(
    spec: tuple[set[Parts], set[Parts]], data: st.DataObject
) -> None:
    with real_tree(spec) as tree:
        rules = data.draw(rule_lists(tree, "read", "deny"), label="rules")
        backend = FilesystemBackend(tree.root)
        modes = oracle_modes(tree, rules, "read")

        def allowed(path: str) -> bool:
            return modes.get(validate_path(path), "allow") != "deny"

        everything = sorted(tree.paths)
        assert filter_paths(rules, everything) == [p for p in everything if allowed(p)]

        for directory in ["/", *sorted(tree.dirs)]:
            listing = backend.ls(directory)
            assert listing.ok, listing.error
            kept = filter_ls_entries(rules, listing.entries)
            assert kept == [e for e in listing.entries if allowed(e.path)]

        for pattern in ["**", "**/.*", "**/.*/**", "*.log"]:
            globbed = backend.glob(pattern, "/")
            assert globbed.ok, globbed.error
            assert filter_paths(rules, globbed.matches) == [
                p for p in globbed.matches if allowed(p)
            ]

        grepped = backend.grep("needle", "/")
        assert grepped.ok, grepped.error
        kept_matches, removed = filter_grep_matches(rules, grepped.matches)
        expected = [m for m in grepped.matches if allowed(m.path)]
        assert kept_matches == expected
        assert removed == len(grepped.matches) - len(expected)
        hidden = len(everything) - len(filter_paths(rules, everything))
        event(f"hidden paths: {min(hidden, 3)}{'+' if hidden >= 3 else ''}")


# --------------------------------------------------------------------------- #
# (2) recursive delete
# --------------------------------------------------------------------------- #


@pytest.mark.slow
@PROPERTY_SETTINGS
@given(spec=tree_specs(), data=st.data())
def test_allowed_delete_never_removes_a_write_denied_path(
    spec: tuple[set[Parts], set[Parts]], data: st.DataObject
) -> None:
    with real_tree(spec) as tree:
        # Directories with grandchildren are the hard case: a pattern can match
        # below the target without matching the target or any ancestor.
        candidates = sorted(
            d
            for d in tree.dirs
            if d.count("/") >= 2
            and any(p.count("/") >= d.count("/") + 2 and is_within(p, d) for p in tree.paths)
        ) or sorted(tree.paths)
        target = data.draw(
            st.one_of(st.sampled_from(candidates), st.sampled_from(sorted(tree.paths))),
            label="target",
        )
        rules = data.draw(rule_lists(tree, "write", "deny", near=target), label="rules")
        has_descendants = any(is_within(p, target) and p != target for p in tree.paths)
        blockers = delete_blockers(rules, target, has_descendants=has_descendants)
        if blockers:
            event("delete blocked")
            return
        event("delete allowed (directory)" if has_descendants else "delete allowed (leaf)")
        modes = oracle_modes(tree, rules, "write")
        before = tree.snapshot()
        assert before == tree.paths
        result = FilesystemBackend(tree.root).delete(target)
        assert result.ok, result.error
        removed = before - tree.snapshot()
        assert target in removed
        assert removed == tree.subtree(target)
        denied = sorted(p for p in removed if modes.get(p) == "deny")
        assert not denied, f"delete {target} removed write-denied {denied}"


# --------------------------------------------------------------------------- #
# (3) interrupt predicates
# --------------------------------------------------------------------------- #

GLOB_PATTERNS = [
    "*.log",
    "**/*",
    "**/.*",
    "a/*",
    "s/**",
    "/s/**",
    "/{a,s}/*",
    "/**/k.key",
    "../s/*",
    "a/../../s/**",
]


@st.composite
def tool_calls(draw: st.DrawFn, tree: Tree) -> tuple[str, dict[str, Any]]:
    tool = draw(
        st.sampled_from(["ls", "glob", "grep", "delete", "read_file", "write_file", "edit_file"])
    )
    real = sorted(tree.paths)
    path = draw(
        st.one_of(
            st.sampled_from(real),
            st.sampled_from(real).map(lambda p: p.lstrip("/") + "/"),  # relative, trailing /
            st.sampled_from(real).map(lambda p: "/." + p),
            st.sampled_from([None, ".", "", "/", "/nowhere/new.txt"]),
        )
    )
    if tool in ("read_file", "write_file", "edit_file", "delete"):
        return tool, {"file_path": path}
    if tool == "glob":
        return tool, {"pattern": draw(st.sampled_from(GLOB_PATTERNS)), "path": path}
    if tool == "grep":
        return tool, {"pattern": "needle", "path": path, "glob": None}
    return tool, {"path": path}


def could_touch(tree: Tree, tool: str, args: dict[str, Any]) -> set[str]:
    """Every existing path (or the named path) a call could read or change."""
    raw = args.get("file_path", args.get("path"))
    if "file_path" in args and (raw is None or raw.strip() in ("", ".")):
        return set()  # the gate refuses a file tool without a path: nothing is touched
    if tool in ("read_file", "write_file", "edit_file"):
        return {validate_path(raw)}
    root = validate_path(raw)
    if tool == "ls" and root in tree.files:
        # ls of a file answers "not a directory" and lists nothing: what a deny
        # covering everything below it settles unasked (contract §4).
        return set()
    if tool == "glob":
        # A glob shows its matches only, never the rest of the subtree it walks
        # (``a/*`` from / shows nothing of /b/a): what the real backend matches.
        found = FilesystemBackend(tree.root).glob(args["pattern"], "/" if raw is None else raw)
        touched = {p.rstrip("/") or "/" for p in found.matches}
        if ".." in args["pattern"].split("/"):
            touched |= tree.subtree("/")  # a climbing pattern could land anywhere
        return touched
    return tree.subtree(root)


def deny_gate_refuses(rules: list[FilesystemPermission], tool: str, args: dict[str, Any]) -> bool:
    """The workflow's deny gate refuses the call: it touches nothing, so no one is asked."""
    field = "file_path" if "file_path" in args else "path"
    try:
        path = validate_path(args.get(field))
    except ValueError:
        return True  # the path check refuses it before the deny gate
    call = CheckedCall(tool, {**args, field: path}, path, None, path)  # type: ignore[arg-type]
    return deny_gate(rules, call) is not None


@pytest.mark.slow
@PROPERTY_SETTINGS
@given(spec=tree_specs(), data=st.data())
def test_interrupt_fires_for_every_call_that_could_touch_an_interrupt_path(
    spec: tuple[set[Parts], set[Parts]], data: st.DataObject
) -> None:
    with real_tree(spec) as tree:
        tool, args = data.draw(tool_calls(tree), label="call")
        op = "read" if tool in ("ls", "glob", "grep", "read_file") else "write"
        rules = data.draw(rule_lists(tree, op, "interrupt"), label="rules")
        modes = oracle_modes(tree, rules, op)
        fires = interrupt_fires(rules, tool, args)
        event(f"{tool} fires={fires}")
        touched = set() if deny_gate_refuses(rules, tool, args) else could_touch(tree, tool, args)
        for path in touched:
            mode = modes.get(path)
            if path not in tree.paths:  # a new path (write_file): ask the matcher itself
                rule = next(
                    (
                        r
                        for r in rules
                        if op in r.operations
                        and any(
                            wc_glob.globmatch(
                                path, p, flags=wc_glob.GLOBSTAR | wc_glob.BRACE | wc_glob.DOTGLOB
                            )
                            for p in r.paths
                        )
                    ),
                    None,
                )
                mode = rule.mode if rule else None
            if mode == "interrupt":
                assert fires, f"{tool}({args}) touches {path} (interrupt) but did not fire"


def test_ls_of_a_file_under_a_deny_below_it_runs_unasked_and_lists_nothing(
    tmp_path: Path,
) -> None:
    """The case the property above once drew: ``deny read /a/**`` before ``interrupt
    read /a`` with /a a file. ``ls /a`` is not asked (the deny settles everything
    below /a) and answers "not a directory" with no entry, so /a's interrupt
    guards nothing the call could show."""
    (tmp_path / "a").write_text("guarded\n")
    rules = [
        FilesystemPermission(operations=["read"], paths=["/a/**"], mode="deny"),
        FilesystemPermission(operations=["read"], paths=["/a"], mode="interrupt"),
    ]
    assert not interrupt_fires(rules, "ls", {"path": "/a"})
    listed = FilesystemBackend(str(tmp_path)).ls("/a")
    assert listed.code == "not_a_directory" and not listed.entries
