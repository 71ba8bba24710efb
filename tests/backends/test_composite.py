"""CompositeBackend and the pure Router, on real backends.

Every scenario runs twice: routes backed by StateBackend, and routes backed by
FilesystemBackend on real tmp dirs (the default stays a StateBackend unless a
test needs a real disk or shell).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from filegate.backends import (
    BackendProtocol,
    CompositeBackend,
    GlobResult,
    GrepMatch,
    GrepResult,
    RouteMatch,
    Router,
    SearchTarget,
    StateBackend,
)
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.local_shell import LocalShellBackend
from filegate.kernel.routing import rebase_pattern

Factory = Callable[[], BackendProtocol]


@pytest.fixture(params=["state", "filesystem"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    """Build fresh route backends of one kind (each filesystem one in its own dir)."""
    counter = iter(range(1000))

    def factory() -> BackendProtocol:
        if request.param == "state":
            return StateBackend()
        root = tmp_path / f"fs{next(counter)}"
        root.mkdir()
        return FilesystemBackend(root, virtual_mode=True)

    return factory


def _composite(make: Factory, *prefixes: str) -> tuple[CompositeBackend, list[BackendProtocol]]:
    routes = {prefix: make() for prefix in prefixes}
    return CompositeBackend(StateBackend(), routes), list(routes.values())


# -- routing -------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["/memories/", "/memories", "memories", "/memories//"])
def test_route_spelling_does_not_matter(make: Factory, prefix: str) -> None:
    composite, (memories,) = _composite(make, prefix)
    assert composite.write("/memories/a.txt", "in route\n").path == "/memories/a.txt"
    assert composite.write("/memories2/x.txt", "in default\n").ok
    assert composite.write("/memoriesx", "in default too\n").ok
    # The route backend sees local paths; whole components only.
    assert memories.read("/a.txt").lines == ["in route"]
    assert memories.read("/x.txt").code == "file_not_found"
    assert isinstance(composite.default, StateBackend)
    assert composite.default.paths() == ["/memories2/x.txt", "/memoriesx"]
    assert composite.read("/memories/a.txt").lines == ["in route"]
    assert composite.read("/memories2/x.txt").lines == ["in default"]
    assert composite.router.prefixes == ("/memories/",)


def test_longest_prefix_wins_for_nested_routes(make: Factory) -> None:
    composite, (outer, inner) = _composite(make, "/a", "/a/b/")
    composite.write("/a/x.txt", "outer")
    composite.write("/a/b/y.txt", "inner")
    composite.write("/a/bb/z.txt", "outer again")
    assert outer.download(["/x.txt", "/bb/z.txt"])[1].content == b"outer again"
    assert inner.download(["/y.txt"])[0].content == b"inner"
    assert [e.path for e in composite.ls("/a").entries] == ["/a/b/", "/a/bb/", "/a/x.txt"]
    assert [e.path for e in composite.ls("/a/b").entries] == ["/a/b/y.txt"]


def test_single_path_results_and_errors_name_virtual_paths(make: Factory) -> None:
    composite, _ = _composite(make, "/memories/")
    composite.write("/memories/notes.md", "alpha\nbeta\n")
    read = composite.read("/memories//notes.md", offset=1)
    assert (read.path, read.lines, read.start_line) == ("/memories/notes.md", ["beta"], 2)
    missing = composite.read("/memories/nope.md")
    assert missing.code == "file_not_found"
    assert "/memories/nope.md" in (missing.error_text or "")
    edit = composite.edit("/memories/notes.md", "beta", "gamma")
    assert (edit.path, edit.occurrences) == ("/memories/notes.md", 1)
    assert composite.edit("/memories/notes.md", "zzz", "y").code == "no_match"
    assert composite.read("../etc/passwd").code == "invalid_path"
    assert composite.write("~/x", "y").code == "invalid_path"


# -- ls --------------------------------------------------------------------------


def test_ls_root_merges_default_and_one_entry_per_route(make: Factory) -> None:
    composite, (memories, _deep) = _composite(make, "/memories/", "/x/y/z")
    default = composite.default
    default.write("/top.txt", "t")
    default.write("/memories/shadowed.txt", "default's own copy, hidden by the route")
    default.write("/x/other.txt", "o")
    memories.write("/m.txt", "m")
    listing = composite.ls("/")
    assert listing.ok
    assert [(e.path, e.is_dir) for e in listing.entries] == [
        ("/memories/", True),
        ("/top.txt", False),
        ("/x/", True),
    ]
    assert [e.path for e in composite.ls("/x").entries] == ["/x/other.txt", "/x/y/"]
    default.write("/x/y/real.txt", "the default also has /x/y/, outside the mount /x/y/z/")
    x_entries = {e.path: e for e in composite.ls("/x").entries}
    assert x_entries["/x/y/"].is_dir and len(x_entries) == 2
    assert [e.path for e in composite.ls("/x/y").entries] == ["/x/y/real.txt", "/x/y/z/"]
    default.delete("/x/y/real.txt")
    assert [e.path for e in composite.ls("/x/y").entries] == ["/x/y/z/"]
    assert composite.ls("/x/y/z").entries == []
    assert [e.path for e in composite.ls("/memories").entries] == ["/memories/m.txt"]
    assert composite.ls("/nowhere").code == "file_not_found"
    assert composite.ls("/../x").code == "invalid_path"


# -- glob / grep fan-out ----------------------------------------------------------


def _search_fixture(make: Factory) -> CompositeBackend:
    composite, (memories, nested) = _composite(make, "/memories/", "/a/b/")
    composite.write("/notes.md", "needle in default\n")
    composite.write("/src/app.py", "needle = 1\nneedle = 2\n")
    composite.default.write("/memories/ghost.md", "needle shadowed\n")
    memories.write("/prefs.md", "needle pref\n")
    memories.write("/deep/more.md", "needle deep\n")
    memories.write("/.hidden/secret.md", "needle hidden\n")
    nested.write("/b.txt", "needle nested\n")
    return composite


def test_glob_fans_out_and_keeps_prefixes(make: Factory) -> None:
    composite = _search_fixture(make)
    everything = composite.glob("**/*.md")
    assert everything.matches == ["/memories/deep/more.md", "/memories/prefs.md", "/notes.md"]
    assert not everything.truncated
    # A basename pattern matches at any depth, also inside dot-directories.
    assert composite.glob("*.md").matches == [
        "/memories/.hidden/secret.md",
        *everything.matches[:2],
        "/notes.md",
    ]
    assert composite.glob("memories/*.md").matches == ["/memories/prefs.md"]
    assert composite.glob("/memories/**/*.md", "/src").matches == [
        "/memories/deep/more.md",
        "/memories/prefs.md",
    ]
    assert composite.glob("memories/.hidden/*.md").matches == ["/memories/.hidden/secret.md"]
    assert composite.glob("*/*.txt").matches == []  # /a/b/b.txt has three components
    assert composite.glob("*/b/*.txt").matches == ["/a/b/b.txt"]
    assert composite.glob("**/b/*.txt").matches == ["/a/b/b.txt"]
    assert composite.glob("a/{b,c}/*.txt").matches == ["/a/b/b.txt"]
    assert composite.glob("*.txt", "/a").matches == ["/a/b/b.txt"]
    assert composite.glob("*.md", "/memories/deep").matches == ["/memories/deep/more.md"]
    assert composite.glob("../x").code == "invalid_path"


def test_grep_fans_out_sorted_with_shared_budget(make: Factory) -> None:
    composite = _search_fixture(make)
    full = composite.grep("needle")
    assert [(m.path, m.line) for m in full.matches] == [
        ("/a/b/b.txt", 1),
        ("/memories/deep/more.md", 1),
        ("/memories/prefs.md", 1),
        ("/notes.md", 1),
        ("/src/app.py", 1),
        ("/src/app.py", 2),
    ]
    assert not full.truncated
    assert full.matches[0].text == "needle nested"
    capped = composite.grep("needle", max_count=3)
    assert capped.matches == full.matches[:3]
    assert capped.truncated
    exact = composite.grep("needle", max_count=len(full.matches))
    assert exact.matches == full.matches and not exact.truncated
    filtered = composite.grep("needle", glob="*.md")
    assert [m.path for m in filtered.matches] == [
        "/memories/deep/more.md",
        "/memories/prefs.md",
        "/notes.md",
    ]
    assert [m.path for m in composite.grep("needle", glob="memories/*.md").matches] == [
        "/memories/prefs.md"
    ]
    assert [m.path for m in composite.grep("needle", path="/memories/deep").matches] == [
        "/memories/deep/more.md"
    ]
    assert [m.path for m in composite.grep("needle", path="/a").matches] == ["/a/b/b.txt"]
    assert composite.grep("needle", path="/missing").code == "file_not_found"
    hidden = composite.grep("needle", glob="memories/.hidden/*")
    assert [m.path for m in hidden.matches] == ["/memories/.hidden/secret.md"]
    # Naming a file searches it whatever the filter says (as ripgrep does).
    named = composite.grep("needle", path="/memories/prefs.md", glob="*.py")
    assert [m.path for m in named.matches] == ["/memories/prefs.md"]


def test_grep_without_filter_skips_dot_mounts_like_ripgrep(make: Factory) -> None:
    composite, (cfg,) = _composite(make, "/.cfg/")
    cfg.write("/settings.txt", "token\n")
    composite.write("/plain.txt", "token\n")
    assert [m.path for m in composite.grep("token").matches] == ["/plain.txt"]
    assert [m.path for m in composite.grep("token", glob=".cfg/*").matches] == [
        "/.cfg/settings.txt"
    ]
    assert [m.path for m in composite.grep("token", path="/.cfg").matches] == ["/.cfg/settings.txt"]
    assert composite.glob("**/*.txt").matches == ["/plain.txt"]
    assert composite.glob(".cfg/*.txt").matches == ["/.cfg/settings.txt"]


def test_grep_truncated_is_or_ed_across_backends(make: Factory) -> None:
    composite, (memories,) = _composite(make, "/memories/")
    memories.write("/many.txt", "hit\n" * 5)
    composite.write("/one.txt", "hit\n")
    # The route alone stops early (5 > 4) although the merge keeps all it got.
    result = composite.grep("hit", path="/memories", max_count=4)
    assert len(result.matches) == 4 and result.truncated
    merged = composite.grep("hit", max_count=4)
    assert [m.path for m in merged.matches] == ["/memories/many.txt"] * 4
    assert merged.truncated
    assert not composite.grep("hit", max_count=6).truncated


# -- delete / execute / capabilities ----------------------------------------------


def test_delete_routes_and_refuses_mount_points(make: Factory) -> None:
    composite, (memories, _) = _composite(make, "/memories/", "/a/b/")
    composite.write("/memories/d/x.txt", "x")
    composite.write("/a/keep.txt", "k")
    assert composite.delete("/memories/d").path == "/memories/d"
    assert memories.download(["/d/x.txt"])[0].code == "file_not_found"
    assert composite.delete("/memories").code == "invalid_argument"
    refused = composite.delete("/a")
    assert refused.code == "invalid_argument" and "/a/b/" in (refused.error or "")
    assert composite.read("/a/keep.txt").ok
    assert composite.delete("/memories/none").code == "file_not_found"
    assert composite.can_delete is True


def test_execute_goes_to_default_and_capabilities_follow_it(make: Factory, tmp_path: Path) -> None:
    composite, _ = _composite(make, "/memories/")
    assert composite.can_execute is False
    assert composite.execute("echo hi").code == "unsupported"
    # A shell mounted on a route does not make the composite executable.
    shell_route = CompositeBackend(StateBackend(), {"/sh/": LocalShellBackend(tmp_path)})
    assert shell_route.can_execute is False
    assert shell_route.execute("echo hi").code == "unsupported"


def test_execute_runs_in_local_shell_default(tmp_path: Path) -> None:
    (tmp_path / "shell").mkdir()
    shell = LocalShellBackend(tmp_path / "shell", env={"PATH": "/usr/bin:/bin"})
    composite = CompositeBackend(shell, {"/memories/": StateBackend()})
    composite.write("/here.txt", "from the default\n")
    composite.write("/memories/there.txt", "not on disk\n")
    assert composite.can_execute is True
    result = composite.execute("cat here.txt; ls")
    assert result.exit_code == 0
    assert "from the default" in result.output
    assert "there.txt" not in result.output


# -- batches ----------------------------------------------------------------------


class _CountingState(StateBackend):
    """A real StateBackend that records how many batch calls it served."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def upload(self, files: list[tuple[str, bytes]]):  # type: ignore[no-untyped-def]
        self.batches.append(len(files))
        return super().upload(files)

    def download(self, paths: list[str]):  # type: ignore[no-untyped-def]
        self.batches.append(len(paths))
        return super().download(paths)


def test_upload_download_route_per_file_in_order(make: Factory) -> None:
    memories = _CountingState()
    composite = CompositeBackend(_CountingState(), {"/memories/": memories, "/blobs": make()})
    blob = bytes(range(256)) * 3
    uploads = composite.upload(
        [
            ("/memories/a.txt", b"A"),
            ("/top.bin", blob),
            ("../escape", b"no"),
            ("/blobs/z.bin", blob[::-1]),
            ("/memories/b.txt", b"B"),
        ]
    )
    assert [u.path for u in uploads] == [
        "/memories/a.txt",
        "/top.bin",
        "../escape",
        "/blobs/z.bin",
        "/memories/b.txt",
    ]
    assert [u.code for u in uploads] == [None, None, "invalid_path", None, None]
    assert memories.batches == [2]  # one batch per backend, not one call per file
    downloads = composite.download(
        ["/blobs/z.bin", "/memories/b.txt", "/nope", "/top.bin", "/memories/a.txt"]
    )
    assert [d.path for d in downloads] == [
        "/blobs/z.bin",
        "/memories/b.txt",
        "/nope",
        "/top.bin",
        "/memories/a.txt",
    ]
    assert [d.content for d in downloads] == [blob[::-1], b"B", None, blob, b"A"]
    assert downloads[2].code == "file_not_found"
    assert composite.read("/blobs/z.bin").data == blob[::-1]


# -- the pure Router -------------------------------------------------------------


def test_router_resolve_and_back() -> None:
    router = Router(["/memories", "/a/b/", "/a/"])
    assert router.prefixes == ("/a/", "/a/b/", "/memories/")
    assert router.resolve("/") == RouteMatch(None, "/")
    assert router.resolve("/memories") == RouteMatch("/memories/", "/")
    assert router.resolve("/memories/") == RouteMatch("/memories/", "/")
    assert router.resolve("/memories/x/y.txt") == RouteMatch("/memories/", "/x/y.txt")
    assert router.resolve("/memories2/x") == RouteMatch(None, "/memories2/x")
    assert router.resolve("memories/./x") == RouteMatch("/memories/", "/x")
    assert router.resolve("/a/b/c") == RouteMatch("/a/b/", "/c")
    assert router.resolve("/a/bc") == RouteMatch("/a/", "/bc")
    for path in ["/memories/x/y.txt", "/a/b/c", "/a/bc", "/other", "/a"]:
        match = router.resolve(path)
        assert router.to_virtual(match.prefix, match.local_path) == path or (
            match.local_path == "/"
            and router.to_virtual(match.prefix, match.local_path) == path + "/"
        )
    assert router.to_virtual("/memories", "/d/") == "/memories/d/"
    assert router.to_virtual(None, "x") == "/x"
    with pytest.raises(ValueError):
        router.to_virtual("/unknown/", "/x")
    with pytest.raises(ValueError):
        router.resolve("/a/../etc")


@pytest.mark.parametrize("prefixes", [["/"], [""], ["/x", "/x/"], ["/a/../b"], ["~/m"]])
def test_router_refuses_bad_prefixes(prefixes: list[str]) -> None:
    with pytest.raises(ValueError):
        Router(prefixes)


def test_router_fan_out_helpers() -> None:
    router = Router(["/memories/", "/a/b/", "/a/b/c/", "/z/"])
    assert router.prefixes_under("/") == ["/a/b/", "/a/b/c/", "/memories/", "/z/"]
    assert router.prefixes_under("/a") == ["/a/b/", "/a/b/c/"]
    assert router.prefixes_under("/a/b") == ["/a/b/c/"]
    assert router.prefixes_under("/memories/x") == []
    assert router.prefixes_under("/mem") == []
    assert router.mount_entries("/") == ["/a/", "/memories/", "/z/"]
    assert router.mount_entries("/a/b") == ["/a/b/c/"]
    plan = router.grep_plan("/a", None)
    assert plan.targets == (
        SearchTarget(None, "/a", None),
        SearchTarget("/a/b/", "/", None),
        SearchTarget("/a/b/c/", "/", None),
    )
    glob_plan = router.glob_plan("memories/**/*.md", "/")
    assert glob_plan.targets == (
        SearchTarget(None, "/", "memories/**/*.md"),
        SearchTarget("/memories/", "/", "/**/*.md"),
    )  # /a/b/, /a/b/c/, /z/ cannot match: no call at all
    inside = router.glob_plan("*.md", "/memories/x")
    assert inside.targets == (SearchTarget("/memories/", "/x", "*.md"),)


def test_rebase_pattern() -> None:
    assert rebase_pattern("*.md", ("m",)) == ["*.md"]
    assert rebase_pattern("m/*.md", ("m",)) == ["/*.md"]
    assert rebase_pattern("x/*.md", ("m",)) == []
    assert rebase_pattern("**/x/*.py", ("a", "x")) == ["/*.py", "/**/x/*.py"]
    assert rebase_pattern("**/*.py", (".cfg",)) == []  # '**' never enters a dot-dir
    assert rebase_pattern(".cfg/*.py", (".cfg",)) == ["/*.py"]
    assert rebase_pattern("{m,n}/*.md", ("n",)) == ["/*.md"]
    assert rebase_pattern("{*.md,m/x/*}", ("m",)) == ["*.md", "/x/*"]
    assert rebase_pattern("m", ("m",)) == ["m"]  # basename: any depth, unchanged
    assert rebase_pattern("/m", ("m",)) == []  # anchored: the mount itself is no file


def test_merge_policy_on_constructed_results() -> None:
    """The workflow merges activity results with the same Router code."""
    router = Router(["/memories/"])
    plan = router.grep_plan("/", None)
    default_target, route_target = plan.targets
    ok = GrepResult(matches=[GrepMatch(path="/x", line=1, text="t")])
    broken = GrepResult(error="store unreachable", code="io_error")
    failed = router.merge_grep(plan, [(default_target, ok), (route_target, broken)])
    assert failed.code == "io_error" and failed.matches == []
    absent = GrepResult(error="path not found: /", code="file_not_found")
    merged = router.merge_grep(plan, [(default_target, ok), (route_target, absent)])
    assert merged.ok and [m.path for m in merged.matches] == ["/x"]
    glob_plan = router.glob_plan("**", "/")
    globbed = router.merge_glob(
        glob_plan,
        [
            (glob_plan.targets[0], GlobResult(matches=["/b", "/memories/ghost"])),
            (glob_plan.targets[1], GlobResult(matches=["/a"], truncated=True)),
        ],
    )
    assert globbed.matches == ["/b", "/memories/a"] and globbed.truncated


_segment = st.sampled_from(["m", "mm", "m2", "a", "b", ".h"])
_vpath = st.lists(_segment, max_size=4).map(lambda parts: "/" + "/".join(parts))


@settings(max_examples=200, deadline=None)
@given(st.lists(_vpath.filter(lambda p: p != "/"), min_size=1, max_size=4, unique=True), _vpath)
def test_property_router_round_trip_and_whole_components(prefixes: list[str], path: str) -> None:
    router = Router(prefixes)
    match = router.resolve(path)
    back = router.to_virtual(match.prefix, match.local_path)
    assert back.rstrip("/") == path.rstrip("/") or (back == "/" and path == "/")
    containing = [p for p in prefixes if path == p or path.startswith(p + "/")]
    if not containing:
        assert match.prefix is None and match.local_path == path
    else:
        longest = max(containing, key=len)
        assert match.prefix == longest + "/"
    for under in router.prefixes_under(path):
        assert under.startswith(path.rstrip("/") + "/")
