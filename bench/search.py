"""Search and streaming-read benchmark for FilesystemBackend.

Run: ``python bench/search.py`` (from the project root). Builds a
deterministic tree of 20 000 files (~2 KB each, 200 dirs, .py/.md/.txt) in a
temp dir, then compares best-of-3 wall times:

- literal grep (~50 hits) through the backend vs ``rg -F -l``;
- glob ``**/*.py`` through the backend vs ``fdfind -e py``;

and measures the extra memory of reading at line 5 000 000 of a large file
(in a fresh child process, so earlier work does not hide the peak).
Prints a table and one JSON line; exits 1 when a floor is missed
(grep <= 1.5x ripgrep, glob <= 2x fd, extra RSS < 50 MB).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from filegate.backends.filesystem import FilesystemBackend  # noqa: E402

FILES = 20_000
DIRS = 200
HITS = 50
NEEDLE = "zx_needle_q7"
BIG_LINES = 5_200_000
FLOORS = {"grep_ratio": 1.5, "glob_ratio": 2.0, "read_extra_rss_mb": 50.0}

_WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "return",
    "import",
    "class",
    "def",
    "value",
    "result",
    "config",
    "path",
    "token",
    "stream",
    "window",
    "buffer",
    "offset",
    "limit",
    "index",
    "match",
    "pattern",
]


def build_tree(root: Path, seed: int = 20240601) -> None:
    """20 000 files of ~2 KB in 200 dirs (some nested), ``HITS`` of them holding the needle."""
    rng = random.Random(seed)
    dirs = []
    for i in range(DIRS):
        parent = f"pkg{i % 20}" if i >= 20 else ""
        dirs.append(root / parent / f"pkg{i}" if parent else root / f"pkg{i}")
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    hit_ids = set(rng.sample(range(FILES), HITS))
    exts = [".py", ".md", ".txt"]
    for i in range(FILES):
        lines = []
        size = 0
        while size < 2000:
            line = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 12)))
            lines.append(line)
            size += len(line) + 1
        if i in hit_ids:
            lines[rng.randrange(len(lines))] += f" {NEEDLE}"
        (dirs[i % DIRS] / f"file{i}{exts[i % 3]}").write_text("\n".join(lines) + "\n")


def best_of(fn: Callable[[], object], runs: int = 3) -> tuple[float, object]:
    best = float("inf")
    out: object = None
    for _ in range(runs):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def run_cmd(cmd: list[str]) -> list[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return proc.stdout.splitlines()


_RSS_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[2])
from filegate.backends.filesystem import FilesystemBackend
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
fs = FilesystemBackend(sys.argv[1])
fs.read("/warm.txt")
before_hwm, before_rss = status("VmHWM:"), status("VmRSS:")
t = __import__("time").perf_counter()
r = fs.read("/big.txt", offset=5_000_000, limit=100)
elapsed = __import__("time").perf_counter() - t
print(json.dumps({"extra_kb": status("VmHWM:") - before_hwm, "rss_before_kb": before_rss,
                  "seconds": elapsed, "first": r.lines[0], "total": r.total_lines}))
"""


def measure_big_read(base: Path) -> dict[str, float]:
    big_dir = base / "big"
    big_dir.mkdir()
    (big_dir / "warm.txt").write_text("warm\n")
    with (big_dir / "big.txt").open("wb") as fh:
        block = b"".join(b"line %08d of the large file\n" % i for i in range(100_000))
        for _ in range(BIG_LINES // 100_000):
            fh.write(block)
    size_mb = (big_dir / "big.txt").stat().st_size / 1e6
    proc = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD, str(big_dir), str(PROJECT)],
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(proc.stdout)
    assert out["total"] == BIG_LINES, out
    assert out["first"] == "line 00000000 of the large file", out
    return {
        "file_mb": round(size_mb, 1),
        "extra_rss_mb": round(out["extra_kb"] / 1024, 2),
        "seconds": round(out["seconds"], 3),
    }


def main() -> int:
    rg, fd = shutil.which("rg"), shutil.which("fdfind") or shutil.which("fd")
    if rg is None or fd is None:
        print("needs rg and fdfind on PATH", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="filegate-bench-") as tmp:
        base = Path(tmp)
        root = base / "tree"
        t0 = time.perf_counter()
        build_tree(root)
        build_s = time.perf_counter() - t0
        fs = FilesystemBackend(root)

        def ours_grep() -> object:
            return fs.grep(NEEDLE)

        rg_s, rg_out = best_of(lambda: run_cmd([rg, "-F", "-l", NEEDLE, str(root)]))
        grep_s, grep_res = best_of(ours_grep)
        fd_s, fd_out = best_of(lambda: run_cmd([fd, "-e", "py", ".", str(root)]))
        glob_s, glob_res = best_of(lambda: fs.glob("**/*.py"))

        grep_files = sorted({m.path for m in grep_res.matches})  # type: ignore[attr-defined]
        rg_files = sorted("/" + os.path.relpath(p, root) for p in rg_out)  # type: ignore[attr-defined]
        assert grep_files == rg_files and len(grep_files) == HITS, (len(grep_files), len(rg_files))
        fd_files = sorted("/" + os.path.relpath(p, root) for p in fd_out)  # type: ignore[attr-defined]
        assert glob_res.matches == fd_files, "glob and fd disagree"  # type: ignore[attr-defined]

        big = measure_big_read(base)

    numbers = {
        "files": FILES,
        "build_s": round(build_s, 2),
        "grep_s": round(grep_s, 4),
        "rg_s": round(rg_s, 4),
        "grep_ratio": round(grep_s / rg_s, 2),
        "glob_s": round(glob_s, 4),
        "fd_s": round(fd_s, 4),
        "glob_ratio": round(glob_s / fd_s, 2),
        "glob_matches": len(fd_files),
        "read_file_mb": big["file_mb"],
        "read_seconds": big["seconds"],
        "read_extra_rss_mb": big["extra_rss_mb"],
    }
    ok = {
        "grep": numbers["grep_ratio"] <= FLOORS["grep_ratio"],
        "glob": numbers["glob_ratio"] <= FLOORS["glob_ratio"],
        "read": numbers["read_extra_rss_mb"] < FLOORS["read_extra_rss_mb"],
    }
    rows = [
        ("grep (literal, 50 hits)", grep_s, rg_s, "rg -F -l", numbers["grep_ratio"],
         f"<= {FLOORS['grep_ratio']}x", ok["grep"]),
        ("glob **/*.py", glob_s, fd_s, "fdfind -e py", numbers["glob_ratio"],
         f"<= {FLOORS['glob_ratio']}x", ok["glob"]),
    ]  # fmt: skip
    print(f"{'operation':<26}{'filegate':>11}{'baseline':>11}  {'tool':<14}{'ratio':>7}  floor")
    for name, ours, theirs, tool, ratio, floor, good in rows:
        mark = "ok" if good else "MISSED"
        print(
            f"{name:<26}{ours * 1000:>9.1f}ms{theirs * 1000:>9.1f}ms  {tool:<14}"
            f"{ratio:>6.2f}x  {floor} {mark}"
        )
    print(
        f"read at line 5,000,000 of a {big['file_mb']} MB file: {big['seconds']:.2f}s, "
        f"extra RSS {big['extra_rss_mb']:.1f} MB (< {FLOORS['read_extra_rss_mb']:.0f} MB) "
        f"{'ok' if ok['read'] else 'MISSED'}"
    )
    print(json.dumps({**numbers, "floors_met": all(ok.values())}))
    return 0 if all(ok.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
