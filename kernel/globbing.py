"""The glob contract shared by every backend (contract §1).

- A pattern with no ``/`` matches the *basename* at any depth (``*.py``),
  also inside dot-directories (``*.yml`` finds ``/.github/workflows/ci.yml``);
  grep's file filter keeps ripgrep's rule instead (no dot-directories).
- A pattern with ``/`` matches the path relative to the search root; ``**``
  crosses directories.
- A leading ``/`` anchors the pattern at the virtual root (the ``path``
  argument is then ignored).
- ``*`` and ``**`` neither enter dot-directories nor match dotfiles unless the
  pattern spells the dot (``.env``, ``.github/**``).
- ``{a,b}`` braces expand.
- A trailing ``/`` (``*.py/``, ``sub/``) asks for directories: it matches
  nothing, since only regular files are answers.

Matching itself is wcmatch (``GLOBSTAR | BRACE``, no ``DOTGLOB``) so that
permissions and globs agree on syntax. Walkers additionally ask
:meth:`GlobMatcher.may_enter` so they never descend into directories that
cannot hold a match (dot-dirs, or dirs that fail a literal segment).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache, lru_cache

import bracex
from wcmatch import fnmatch as wc_fnmatch
from wcmatch import glob as wc_glob

from filegate.kernel.paths import is_within, validate_path
from filegate.kernel.protocol import GrepResult
from filegate.kernel.textops import bad_max_count

GLOB_FLAGS = wc_glob.GLOBSTAR | wc_glob.BRACE
_SEGMENT_FLAGS = 0  # no DOTMATCH: a leading dot must be spelled
_MAX_EXPANSIONS = 256


def _expand(pattern: str) -> list[str]:
    """Brace-expand ``pattern``; a runaway expansion is a caller error."""
    try:
        expanded = bracex.expand(pattern, keep_escapes=True, limit=_MAX_EXPANSIONS)
    except Exception as exc:  # bracex raises its own error types on limits/syntax
        raise ValueError(f"invalid glob pattern {pattern!r}: {exc}") from exc
    return list(dict.fromkeys(expanded)) or [pattern]


def _path_form(alternative: str) -> list[str]:
    """Segments of one brace-free alternative, as a path pattern.

    A basename pattern ``P`` becomes ``**/P``; a leading ``/`` (anchoring) is
    dropped because the caller already re-rooted the search.
    """
    if "/" not in alternative:
        return ["**", alternative]
    return [seg for seg in alternative.strip("/").split("/") if seg not in ("", ".")]


class GlobMatcher:
    """Match paths relative to a search root against one glob pattern.

    ``rel_path`` / ``rel_dir`` have no leading ``/`` and use ``/`` separators.

    A basename alternative (no ``/``, no ``**``) tests the file name alone, at any depth
    and also inside dot-directories (contract §1, as in the reference):
    ``*.yml`` finds ``.github/workflows/ci.yml``, while ``**/*.yml`` does not
    enter ``.github``. ``dot_dirs=False`` makes a basename ``P`` mean ``**/P``
    instead, which grep's file filter needs (ripgrep's hidden-file rule).
    """

    __slots__ = ("_alternatives", "_anywhere", "_nothing", "_regex", "_walk_names", "pattern")

    def __init__(self, pattern: str, *, dot_dirs: bool = True) -> None:
        if not pattern:
            raise ValueError("glob pattern is empty")
        self.pattern = pattern
        every = _expand(pattern)
        # A trailing ``/`` asks for directories, and only regular files are
        # ever answers (contract §1), so such an alternative matches nothing,
        # as in the reference. Stripping the slash instead would make ``*.py/``
        # find ``a.py``.
        expanded = [alt for alt in every if not alt.endswith("/")]
        self._nothing = not expanded
        names = [alt for alt in expanded if dot_dirs and _is_name(alt)]
        self._alternatives = [
            segs for segs in (_path_form(alt) for alt in expanded if alt not in names) if segs
        ]
        if not self._alternatives and not names and not self._nothing:
            raise ValueError(f"glob pattern {pattern!r} matches nothing")
        try:
            # wcmatch's own translation, compiled once: the same semantics as
            # wcmatch.glob.globmatch without its per-call overhead (hot in walks).
            self._regex = _compile_paths(["/".join(segs) for segs in self._alternatives])
            self._anywhere = _compile_names(names)
            # ``**/P`` only, and pruning keeps walks out of dot-directories: a
            # walker then needs only the name tested.
            self._walk_names = None
            if self._anywhere is None and all(
                len(segs) == 2 and segs[0] == "**" and "**" not in segs[1]
                for segs in self._alternatives
            ):
                self._walk_names = _compile_names([segs[1] for segs in self._alternatives])
        except re.error as exc:
            raise ValueError(f"invalid glob pattern {pattern!r}: {exc}") from exc
        except Exception as exc:  # wcmatch raises its own types on bad patterns
            raise ValueError(f"invalid glob pattern {pattern!r}: {exc}") from exc

    @property
    def any_depth(self) -> bool:
        """True when some alternative matches a file name anywhere, dot-directories too."""
        return self._anywhere is not None

    def match(self, rel_path: str) -> bool:
        """True when the file at ``rel_path`` matches."""
        if not rel_path:
            return False
        if self._regex is not None and self._regex.match(rel_path) is not None:
            return True
        name = rel_path.rpartition("/")[2]
        return self._anywhere is not None and self._anywhere.match(name) is not None

    def match_in_walk(self, rel_dir_prefix: str, name: str) -> bool:
        """``match(rel_dir_prefix + name)`` for a walker that prunes with :meth:`may_enter`."""
        if self._anywhere is not None and self._anywhere.match(name) is not None:
            return True
        if self._walk_names is not None:
            return self._walk_names.match(name) is not None
        return self._regex is not None and self._regex.match(rel_dir_prefix + name) is not None

    def may_enter(self, rel_dir: str) -> bool:
        """False when no file below ``rel_dir`` can match (safe to prune)."""
        if self._nothing:
            return False
        comps = [c for c in rel_dir.split("/") if c]
        if not comps or self._anywhere is not None:
            return True
        return any(_prefix_ok(tuple(segs), tuple(comps)) for segs in self._alternatives)


def _is_name(alternative: str) -> bool:
    """A basename pattern: no ``/`` and no ``**`` (which always means directories)."""
    return "/" not in alternative and "**" not in alternative


def _compile_paths(patterns: list[str]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    included, _ = wc_glob.translate(patterns, flags=GLOB_FLAGS)
    return re.compile("|".join(f"(?:{rx})" for rx in included))


def _compile_names(names: list[str]) -> re.Pattern[str] | None:
    if not names:
        return None
    translated, _ = wc_fnmatch.translate(names, flags=_SEGMENT_FLAGS)
    return re.compile("|".join(f"(?:{rx})" for rx in translated))


@lru_cache(maxsize=4096)
def _segment_match(name: str, segment: str) -> bool:
    return bool(wc_fnmatch.fnmatch(name, segment, flags=_SEGMENT_FLAGS))


@lru_cache(maxsize=8192)
def _prefix_ok(segs: tuple[str, ...], comps: tuple[str, ...]) -> bool:
    """Can directory components ``comps`` be a proper prefix of a matching path?"""

    @cache
    def walk(i: int, j: int) -> bool:
        if j == len(comps):
            return i < len(segs)  # at least one segment left for the file itself
        if i == len(segs):
            return False
        seg = segs[i]
        if seg == "**":
            # '**' swallows non-dot directories, or matches nothing.
            if not comps[j].startswith(".") and walk(i, j + 1):
                return True
            return walk(i + 1, j)
        return _segment_match(comps[j], seg) and walk(i + 1, j + 1)

    return walk(0, 0)


def _check_pattern(pattern: str) -> None:
    if not pattern:
        raise ValueError("glob pattern is empty")
    if "\x00" in pattern:
        raise ValueError("glob pattern contains a NUL byte")
    if pattern.startswith("~"):
        raise ValueError("path traversal not allowed: '~' is not supported in patterns")
    for alternative in _expand(pattern):
        if ".." in alternative.split("/"):
            raise ValueError(f"path traversal not allowed in glob pattern: {pattern!r}")


def resolve_glob(pattern: str, path: str | None) -> tuple[str, str]:
    """Validate a glob call; return ``(search_root, pattern_for_GlobMatcher)``.

    A leading ``/`` re-roots the search at the virtual root; the returned
    pattern keeps that ``/`` so :class:`GlobMatcher` still treats it as a path
    pattern (``/*.py`` means top-level only, not "any depth"). Raises
    ValueError on ``..``, ``~``, NUL or an invalid search root.
    """
    _check_pattern(pattern)
    if pattern.startswith("/"):
        return "/", pattern
    root = validate_path(path)
    while pattern.startswith("./"):
        pattern = pattern[2:]
    if not pattern:
        raise ValueError("glob pattern is empty")
    return root, pattern


def relative_to(path: str, root: str) -> str | None:
    """``path`` relative to search root ``root`` (no leading ``/``), or None if outside."""
    if path == root or not is_within(path, root):
        return None
    return path[len(root.rstrip("/")) + 1 :]


def glob_paths(pattern: str, path: str | None, files: Iterable[str]) -> list[str]:
    """Sorted virtual paths among ``files`` that lie under the search root and match.

    For in-memory backends: ``files`` are validated absolute virtual paths of
    regular files. Raises ValueError for an invalid pattern or root.
    """
    root, rel_pattern = resolve_glob(pattern, path)
    matcher = GlobMatcher(rel_pattern)
    out: list[str] = []
    for file_path in files:
        rel = relative_to(file_path, root)
        if rel is not None and matcher.match(rel):
            out.append(file_path)
    out.sort()
    return out


class GrepFileFilter:
    """Which files a ``grep(path=..., glob=...)`` call searches, relative to its root.

    No glob means ``**``: every regular file except dotfiles and files in
    dot-directories (ripgrep's default hidden-file rule). A glob with a
    leading ``/`` is matched against the whole virtual path instead.
    """

    __slots__ = ("anchored", "matcher", "root")

    def __init__(self, root: str, glob: str | None) -> None:
        pattern = glob if glob else "**"
        _check_pattern(pattern)
        self.root = root
        self.anchored = pattern.startswith("/")
        self.matcher = GlobMatcher(pattern, dot_dirs=False)

    def wants(self, virtual_path: str) -> bool:
        """True for a file path under the root that the filter keeps."""
        if self.anchored:
            return is_within(virtual_path, self.root) and self.matcher.match(
                virtual_path.lstrip("/")
            )
        rel = relative_to(virtual_path, self.root)
        return rel is not None and self.matcher.match(rel)

    def may_enter(self, virtual_dir: str) -> bool:
        """Walker pruning for directory ``virtual_dir`` (at or under the root)."""
        if self.anchored:
            return self.matcher.may_enter(virtual_dir.lstrip("/"))
        rel = relative_to(virtual_dir, self.root)
        return rel is None or self.matcher.may_enter(rel)


def grep_paths(path: str | None, glob: str | None, files: Iterable[str]) -> list[str]:
    """Sorted files a grep searches, for in-memory backends.

    ``path`` naming a file searches just that file (the glob filter does not
    apply to an explicitly named file, as with ripgrep). Raises ValueError for
    an invalid path or glob.
    """
    root = validate_path(path)
    file_list = list(files)
    if root in file_list:
        return [root]
    flt = GrepFileFilter(root, glob)
    return sorted(f for f in file_list if flt.wants(f))


def spells_dot(glob: str) -> bool:
    """Does any segment of ``glob`` start with a literal dot (so walkers must see hidden files)?"""
    return any(seg.startswith(".") for seg in glob.replace("{", "/").replace(",", "/").split("/"))


def grep_root(path: str | None, max_count: int | None) -> str | GrepResult:
    """The validated grep root, or the error value for a bad ``path`` or ``max_count``."""
    try:
        root = validate_path(path)
    except ValueError as exc:
        return GrepResult(error=str(exc), code="invalid_path")
    refused = bad_max_count(max_count)
    return refused if refused is not None else root


def grep_scope(
    literal: str, path: str | None, glob: str | None, max_count: int | None
) -> tuple[str, GrepFileFilter] | GrepResult:
    """The validated root and file filter of a grep, or its whole answer when no
    search is needed (bad ``max_count``; a literal with a newline matches nothing).

    Raises ValueError for a bad path or glob (callers map it to their error value).
    """
    vroot = validate_path(path)
    flt = GrepFileFilter(vroot, glob)
    refused = bad_max_count(max_count)
    if refused is not None:
        return refused
    if "\n" in literal:
        return GrepResult()  # matching is per line: nothing can match
    return vroot, flt
