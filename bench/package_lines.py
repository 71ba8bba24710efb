"""Lines of the shipped package at git revisions: code, docstrings, comments, blank.

Issue 35's floor is "the shipped package does not grow". The package is every
``.py`` file the wheel ships: everything tracked outside ``tests/``, ``bench/``
and ``docs/`` (tests/repo/test_packaging.py checks the wheel holds exactly the
package). Read from git objects, so no checkout is touched::

    python bench/package_lines.py 141414a HEAD

Each revision's row splits its lines by kind, so a change that only moved
docstrings or blank lines shows as such. ``--commits A..B`` lists what each
commit on the first-parent line from A to B added to or removed from the
package, so the growth can be put down to the change that made it::

    python bench/package_lines.py --commits 141414a..HEAD
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOT_SHIPPED = ("tests/", "bench/", "docs/")
KINDS = ("code", "doc", "comment", "blank")


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def shipped_files(rev: str) -> list[str]:
    """The package's ``.py`` files at ``rev``."""
    names = _git("ls-tree", "-r", "--name-only", rev).splitlines()
    return [n for n in names if n.endswith(".py") and not n.startswith(NOT_SHIPPED)]


def docstring_lines(source: str) -> set[int]:
    """Line numbers of module, class and function docstrings."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                assert first is not None and first.end_lineno is not None
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def count(source: str) -> dict[str, int]:
    """``source``'s lines by kind (a docstring line is ``doc`` even if it looks like code)."""
    docs = docstring_lines(source)
    totals = dict.fromkeys(KINDS, 0)
    for number, line in enumerate(source.splitlines(), 1):
        text = line.strip()
        kind = "blank" if not text else "doc" if number in docs else "code"
        kind = "comment" if kind == "code" and text.startswith("#") else kind
        totals[kind] += 1
    return totals


def package_lines(rev: str) -> dict[str, int]:
    totals = dict.fromkeys(KINDS, 0)
    for name in shipped_files(rev):
        for kind, n in count(_git("show", f"{rev}:{name}")).items():
            totals[kind] += n
    return totals


_BLOB_LINES: dict[str, int] = {}


def _total(rev: str) -> int:
    """The package's line count at ``rev``, each file counted once per content (fast)."""
    total = 0
    for entry in _git("ls-tree", "-r", rev).splitlines():
        meta, name = entry.split("\t", 1)
        blob = meta.split()[2]
        if name.endswith(".py") and not name.startswith(NOT_SHIPPED):
            if blob not in _BLOB_LINES:
                _BLOB_LINES[blob] = len(_git("cat-file", "blob", blob).splitlines())
            total += _BLOB_LINES[blob]
    return total


def commit_changes(span: str) -> list[tuple[str, int, str]]:
    """(commit, package lines added minus removed, subject) for each first-parent
    commit in ``span`` (``A..B``) that changed the package's line count."""
    rows = []
    for line in _git("log", "--first-parent", "--reverse", "--format=%H %s", span).splitlines():
        commit, subject = line.split(" ", 1)
        parents = _git("rev-list", "--parents", "-n", "1", commit).split()[1:]
        change = _total(commit) - (_total(parents[0]) if parents else 0)
        if change:
            rows.append((commit, change, subject))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revs", nargs="*", default=["HEAD"], help="git revisions (default HEAD)")
    parser.add_argument("--commits", metavar="A..B", help="each commit's change instead")
    args = parser.parse_args(argv)
    if args.commits:
        rows = commit_changes(args.commits)
        for commit, lines, subject in rows:
            print(f"{lines:+6d} {commit[:9]} {subject[:100]}")
        print(f"{sum(row[1] for row in rows):+6d} in {len(rows)} commits")
        return 0
    print(f"{'revision':<12} {'total':>7} " + " ".join(f"{k:>8}" for k in KINDS))
    first: int | None = None
    for rev in args.revs:
        totals = package_lines(rev)
        total = sum(totals.values())
        change = "" if first is None else f"  ({total - first:+d})"
        first = total if first is None else first
        cells = " ".join(f"{totals[k]:>8}" for k in KINDS)
        print(f"{rev[:12]:<12} {total:>7} {cells}{change}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
