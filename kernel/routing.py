"""Routing: one virtual tree served by several backends (pure, no I/O).

Two layers, so routing has exactly one implementation:

- :class:`Router` is pure (no backend objects, no I/O). It maps a virtual path
  to ``(route prefix | None, backend-local path)``, plans the fan-out of
  ``glob``/``grep`` over route mounts, and merges the per-backend results back
  into one virtual answer. The agent workflow uses it directly: there a route
  is only a name and a task queue, and each planned target becomes an activity.
- :class:`~filegate.backends.composite.CompositeBackend` holds real backends and
  runs the Router's plans synchronously; it satisfies
  :class:`~filegate.kernel.protocol.BackendProtocol`.

Routing is longest-prefix on *whole path components*: ``/memories/`` captures
``/memories`` and ``/memories/x`` but never ``/memories2/x``. A path owned by
a route is shadowed in every other backend: if the default backend happens to
hold ``/memories/x`` too, that copy is invisible (never listed or searched),
because reads and writes of ``/memories/x`` would go to the route.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeVar

import bracex
from wcmatch import fnmatch as wc_fnmatch

from filegate.kernel.globbing import GlobMatcher, relative_to, resolve_glob
from filegate.kernel.paths import below, is_within, mount_of, validate_path
from filegate.kernel.protocol import (
    BackendResult,
    DeleteResult,
    EditResult,
    FileDownloadResult,
    FileInfo,
    FileUploadResult,
    GlobResult,
    GrepMatch,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
)
from filegate.kernel.textops import merge_grep_budget

_MAX_REBASED = 256
"""Cap on route-local patterns derived from one glob (brace/``**`` blow-up guard)."""

# Errors of a search root that is simply absent in one backend of a fan-out;
# other targets may still hold the answer, so these do not fail the merge.
_ABSENT_CODES = frozenset({"file_not_found", "not_a_directory"})


def normalize_prefix(prefix: str) -> str:
    """Canonical form of a route prefix: validated, absolute, one trailing ``/``.

    ``"/memories"``, ``"memories/"`` and ``"/memories//"`` all give
    ``"/memories/"``. ``"/"`` is refused: the root belongs to the default.
    """
    base = validate_path(prefix)
    if base == "/":
        raise ValueError("a route prefix cannot be '/': the root belongs to the default backend")
    return base + "/"


@dataclass(frozen=True)
class RouteMatch:
    """Where a virtual path lives: ``prefix`` None means the default backend."""

    prefix: str | None
    local_path: str


@dataclass(frozen=True)
class SearchTarget:
    """One backend call of a fan-out: search ``local_path`` in route ``prefix``.

    ``pattern`` is the backend-local glob (for ``glob``) or glob filter (for
    ``grep``); None means no filter.
    """

    prefix: str | None
    local_path: str
    pattern: str | None


@dataclass(frozen=True)
class SearchPlan:
    """A planned ``glob``/``grep`` fan-out plus what the merge needs to check.

    ``pattern_root``/``pattern`` are the *virtual* pattern and the root it is
    relative to; merged results are re-checked against them so a route-local
    rewrite of the pattern can never widen the answer.
    """

    root: str
    pattern_root: str
    pattern: str | None
    targets: tuple[SearchTarget, ...]


_R = TypeVar("_R", GlobResult, GrepResult, LsResult)
_E = TypeVar("_E", bound=BackendResult)


class Router:
    """Pure longest-prefix router over route prefixes (names only, no backends)."""

    def __init__(self, prefixes: Iterable[str]) -> None:
        canonical: list[str] = []
        for raw in prefixes:
            prefix = normalize_prefix(raw)
            if prefix in canonical:
                raise ValueError(f"route prefix {raw!r} is given twice")
            canonical.append(prefix)
        self.prefixes: tuple[str, ...] = tuple(sorted(canonical))
        # Longest first: the first containing prefix is the longest match.
        self._longest_first = sorted(canonical, key=len, reverse=True)

    def __repr__(self) -> str:
        return f"Router({list(self.prefixes)!r})"

    # -- single paths ------------------------------------------------------

    def resolve(self, path: str) -> RouteMatch:
        """Route a virtual path (validated here; raises ValueError when refused)."""
        virtual = validate_path(path)
        for prefix in self._longest_first:
            mount = mount_of(prefix, virtual)
            if mount is not None:
                return RouteMatch(prefix, below(virtual, mount))
        return RouteMatch(None, virtual)

    def to_virtual(self, prefix: str | None, local_path: str) -> str:
        """Map a backend-local path of route ``prefix`` back into the virtual tree.

        A trailing ``/`` (directory entry) is kept: ``("/m/", "/d/") -> "/m/d/"``.
        """
        if not local_path.startswith("/"):
            local_path = "/" + local_path
        if prefix is None:
            return local_path
        canonical = normalize_prefix(prefix)
        if canonical not in self.prefixes:
            raise ValueError(f"unknown route prefix {prefix!r}")
        return canonical[:-1] + local_path

    def owner(self, virtual_path: str) -> str | None:
        """The route prefix that owns ``virtual_path`` (None = default)."""
        return self.resolve(virtual_path).prefix

    def prefixes_under(self, path: str) -> list[str]:
        """Route prefixes strictly inside search root ``path`` (fan-out targets)."""
        root = validate_path(path)
        return [p for p in self.prefixes if p[:-1] != root and is_within(p[:-1], root)]

    def mount_entries(self, path: str) -> list[str]:
        """Directory entries that route mounts add to ``ls(path)``.

        A route ``/a/b/`` shows as ``/a/b/`` in ``ls("/a")`` and as ``/a/`` in
        ``ls("/")`` (its parent must be visible even if no backend holds it).
        """
        root = validate_path(path)
        base = root.rstrip("/")
        entries: set[str] = set()
        for prefix in self.prefixes_under(root):
            child = prefix[len(base) + 1 :].split("/", 1)[0]
            entries.add(f"{base}/{child}/")
        return sorted(entries)

    # -- fan-out planning --------------------------------------------------

    def glob_plan(self, pattern: str, path: str | None = "/") -> SearchPlan:
        """Targets for ``glob(pattern, path)``; raises ValueError on a bad pattern/root."""
        root, rel_pattern = resolve_glob(pattern, path)
        GlobMatcher(rel_pattern)  # fail early on syntax, before any backend call
        return SearchPlan(root, root, rel_pattern, self._targets(root, root, rel_pattern))

    def grep_plan(self, path: str | None = None, glob: str | None = None) -> SearchPlan:
        """Targets for ``grep(..., path, glob)``; the filter is a glob relative to ``path``."""
        root = validate_path(path)
        if not glob:
            return SearchPlan(root, root, None, self._targets(root, root, None))
        pattern_root, rel_pattern = resolve_glob(glob, root)
        GlobMatcher(rel_pattern)
        return SearchPlan(
            root, pattern_root, rel_pattern, self._targets(root, pattern_root, rel_pattern)
        )

    def _targets(
        self, root: str, pattern_root: str, pattern: str | None
    ) -> tuple[SearchTarget, ...]:
        """The owner of ``root`` plus every route mounted below it.

        A route's files are seen relative to its own root, so a pattern written
        against ``pattern_root`` is rebased onto the mount (possibly into
        several patterns, or none: then the route cannot match and is skipped).
        """
        owner = self.resolve(root)
        targets: list[SearchTarget] = []
        for prefix, local_root in [(owner.prefix, owner.local_path)] + [
            (p, "/") for p in self.prefixes_under(root)
        ]:
            mount = None if prefix is None else prefix[:-1]
            if (
                pattern is None
                and mount is not None
                and prefix != owner.prefix
                and any(c.startswith(".") for c in _components(mount, root))
            ):
                continue  # no filter means ripgrep's rule: dot-directories are not entered
            if pattern is None or mount is None or is_within(pattern_root, mount):
                # Default (virtual == local) or a search rooted inside the mount:
                # the pattern reads the same locally. An anchored pattern inside a
                # mount cannot happen: anchoring re-roots at '/', owned by default.
                targets.append(SearchTarget(prefix, local_root, pattern))
                continue
            for local_pattern in rebase_pattern(pattern, _components(mount, pattern_root)):
                targets.append(SearchTarget(prefix, local_root, local_pattern))
        return tuple(targets)

    # -- merging -----------------------------------------------------------

    def merge_ls(self, path: str, prefix: str | None, result: LsResult) -> LsResult:
        """Map the owner's ``ls`` result to virtual paths and add the mount entries."""
        root = validate_path(path)
        mounts = self.mount_entries(root)
        if result.error is not None:
            if mounts and result.code in _ABSENT_CODES:
                result = LsResult()  # nothing here but mount points
            else:
                return self.virtual_error(result, prefix)
        by_path: dict[str, FileInfo] = {}
        for entry in result.entries:
            virtual = self.to_virtual(prefix, entry.path)
            if self.owner(virtual) != prefix:
                continue  # shadowed by a route mounted here
            by_path[virtual] = entry.model_copy(update={"path": virtual})
        for mount in mounts:
            # Keep the backend's own entry for a parent dir of a deeper mount.
            by_path.setdefault(mount, FileInfo(path=mount, is_dir=True))
        return LsResult(entries=[by_path[p] for p in sorted(by_path)])

    def merge_glob(
        self, plan: SearchPlan, parts: Iterable[tuple[SearchTarget, GlobResult]]
    ) -> GlobResult:
        """Union of per-target glob results: virtual paths, sorted, ``truncated`` OR-ed
        (``stopped_after``: the longest time limit that cut a target)."""
        parts = list(parts)
        failed = self._fatal_error(plan, parts)
        if failed is not None:
            return failed
        checker = _PlanChecker(self, plan)
        found: set[str] = set()
        truncated = False
        for target, result in parts:
            truncated = truncated or result.truncated
            for local in result.matches:
                virtual = self.to_virtual(target.prefix, local)
                if checker.keep(target.prefix, virtual):
                    found.add(virtual)
        stopped = _stopped_after(result for _, result in parts)
        return GlobResult(matches=sorted(found), truncated=truncated, stopped_after=stopped)

    def merge_grep(
        self,
        plan: SearchPlan,
        parts: Iterable[tuple[SearchTarget, GrepResult]],
        max_count: int | None = None,
    ) -> GrepResult:
        """Merge per-target grep results under one shared ``max_count`` budget.

        Every target is asked for up to ``max_count`` matches; the merge keeps
        the first ``max_count`` in (path, line) order, so the answer is the same
        whatever order the backends ran in. ``truncated`` when any backend
        stopped early or the merge cut matches.
        """
        parts = list(parts)
        failed = self._fatal_error(plan, parts)
        if failed is not None:
            return failed
        checker = _PlanChecker(self, plan)
        seen: dict[tuple[str, int], GrepMatch] = {}
        truncated = False
        for target, result in parts:
            truncated = truncated or result.truncated
            for match in result.matches:
                virtual = self.to_virtual(target.prefix, match.path)
                if (virtual, match.line) not in seen and checker.keep(target.prefix, virtual):
                    seen[(virtual, match.line)] = match.model_copy(update={"path": virtual})
        kept, cut = merge_grep_budget(list(seen.values()), max_count)
        stopped = _stopped_after(result for _, result in parts)
        return GrepResult(matches=kept, truncated=truncated or cut, stopped_after=stopped)

    def _fatal_error(self, plan: SearchPlan, parts: list[tuple[SearchTarget, _R]]) -> _R | None:
        """The error that fails a whole fan-out, if any.

        A search root missing from one backend is not fatal while another
        target answered; any other failure is, so a broken route never looks
        like "no matches".
        """
        answered = any(result.error is None for _, result in parts)
        for target, result in parts:
            if result.error is None:
                continue
            if answered and result.code in _ABSENT_CODES:
                continue
            return self.virtual_error(result, target.prefix)
        return None

    def virtual_error(self, result: _E, prefix: str | None) -> _E:
        """``result`` with its ``error_path`` mapped from route ``prefix`` into the virtual tree.

        Structured, like every other path field: the message text is never
        touched (kernel.protocol). The route root itself shows as the mount
        (``/memories``).
        """
        local = result.error_path
        if prefix is None or local is None or result.error is None:
            return result
        virtual = self.to_virtual(prefix, local)
        if local == "/":
            virtual = virtual.rstrip("/")
        return result.model_copy(update={"error_path": virtual})


class _PlanChecker:
    """Keep a merged path only if its own backend owns it and the pattern matches.

    The pattern is re-checked only for mounts below the search root, whose
    pattern was rebased; the owner of the root got the caller's own pattern
    (and a grep naming one file ignores its filter, as ripgrep does).
    """

    def __init__(self, router: Router, plan: SearchPlan) -> None:
        self._router = router
        self._root = plan.root
        self._owner = plan.targets[0].prefix if plan.targets else None
        self._pattern_root = plan.pattern_root
        self._matcher = GlobMatcher(plan.pattern) if plan.pattern is not None else None
        self._cache: dict[tuple[str | None, str], bool] = {}

    def keep(self, prefix: str | None, virtual: str) -> bool:
        key = (prefix, virtual)
        if key not in self._cache:
            self._cache[key] = self._check(prefix, virtual)
        return self._cache[key]

    def _check(self, prefix: str | None, virtual: str) -> bool:
        if self._router.owner(virtual) != prefix or not is_within(virtual, self._root):
            return False
        if self._matcher is None or prefix == self._owner:
            return True
        rel = relative_to(virtual, self._pattern_root)
        return rel is not None and self._matcher.match(rel)


def _stopped_after(results: Iterable[GlobResult | GrepResult]) -> float | None:
    """The longest time limit that cut one of ``results``, None when none was cut."""
    return max((r.stopped_after for r in results if r.stopped_after is not None), default=None)


def _components(path: str, root: str) -> tuple[str, ...]:
    """Components of ``path`` below ``root`` (``path`` strictly inside ``root``)."""
    rel = relative_to(path, root)
    return tuple(rel.split("/")) if rel else ()


def rebase_pattern(pattern: str, mount: tuple[str, ...]) -> list[str]:
    """Patterns that, evaluated at a mount's root, match what ``pattern`` matches there.

    ``pattern`` is relative to a search root; ``mount`` is the mount point's
    components below that root. ``memories/**/*.md`` rebased onto
    ``("memories",)`` gives ``["/**/*.md"]``; a basename pattern (no ``/``)
    matches at any depth, so it applies unchanged. The results carry a
    leading ``/`` so a single remaining component stays anchored at the mount
    root instead of becoming a basename pattern. Empty list: nothing under the
    mount can match.
    """
    if "/" not in pattern:
        return [pattern]
    out: list[str] = []
    try:
        alternatives = bracex.expand(pattern, keep_escapes=True, limit=_MAX_REBASED)
    except Exception as exc:  # bracex has its own error types for limits and syntax
        raise ValueError(f"invalid glob pattern {pattern!r}: {exc}") from exc
    for alternative in alternatives:
        if "/" not in alternative:
            out.append(alternative)  # a brace alternative can be a basename pattern
            continue
        segments = tuple(s for s in alternative.strip("/").split("/") if s not in ("", "."))
        for rest in _consume(segments, mount):
            local = "/" + rest
            if local not in out:
                out.append(local)
        if len(out) > _MAX_REBASED:
            raise ValueError(f"glob pattern {pattern!r} expands too far across route mounts")
    return out


def _consume(segments: tuple[str, ...], mount: tuple[str, ...]) -> list[str]:
    """Ways ``segments`` can match ``mount`` as a leading directory path; the remainders."""
    results: list[str] = []

    def walk(i: int, j: int) -> None:
        if j == len(mount):
            if i < len(segments):  # something must be left to match the file itself
                rest = "/".join(segments[i:])
                if rest not in results:
                    results.append(rest)
            return
        if i == len(segments):
            return
        segment = segments[i]
        if segment == "**":
            walk(i + 1, j)  # '**' matches no directory here
            if not mount[j].startswith("."):
                walk(i, j + 1)  # or swallows this one (never a dot-directory)
            return
        if _segment_match(mount[j], segment):
            walk(i + 1, j + 1)

    walk(0, 0)
    return results


@lru_cache(maxsize=1024)
def _segment_match(name: str, segment: str) -> bool:
    """One path component against one glob segment (a leading dot must be spelled)."""
    return bool(wc_fnmatch.fnmatch(name, segment, flags=0))


SingleResult = TypeVar(
    "SingleResult",
    ReadResult,
    WriteResult,
    EditResult,
    DeleteResult,
    FileUploadResult,
    FileDownloadResult,
)
