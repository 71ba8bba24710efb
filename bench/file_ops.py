"""What a file tool call costs where the rules are judged at the object reached.

Run: ``python bench/file_ops.py [--calls N]``. Times ``run_tool`` (the
activity's whole pipeline: gate, backend, filter, format) for read_file,
write_file, edit_file, ls and grep, under two permission rules, on the
Filesystem backend and on the bubblewrap sandbox, through an in-root link
and directly. Prints the median and p90 per call in milliseconds.

Run it against another checkout to compare (``PYTHONPATH`` pointing at a
directory whose ``filegate`` is that checkout): the script imports only the
public modules. Before the one-filesystem change the sandbox's file tools
ran a helper inside a fresh sandbox per call; now they run on the host.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.backends.filesystem import FilesystemBackend
from filegate.kernel.dispatch import run_tool
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.tool_types import ToolRequest

RULES = [
    FilesystemPermission(operations=["read", "write"], paths=["/secrets/**"], mode="deny"),
    FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="deny"),
]


def _tree(root: Path) -> None:
    for name in ("secrets", "docs", "pub/src"):
        (root / name).mkdir(parents=True, exist_ok=True)
    (root / "secrets" / "key.txt").write_text("k\n")
    for i in range(50):
        (root / "pub" / "src" / f"m{i}.py").write_text("def f():\n    return 1\n" * 100)
    (root / "pub" / "alias").symlink_to("src")


def _call(backend: Any, tool: str, **args: Any) -> None:
    out = run_tool(
        backend,
        ToolRequest(
            tool=tool,  # type: ignore[arg-type]
            backend="b",
            args=args,
            tool_call_id="c",
            permissions=RULES,
        ),
    )
    assert out.status != "error", (tool, args, out.content)


_EDITS = [
    {"file_path": "/pub/e.txt", "old_string": "a", "new_string": "b"},
    {"file_path": "/pub/e.txt", "old_string": "b", "new_string": "a"},
]
CASES: list[tuple[str, str, dict[str, Any] | list[dict[str, Any]]]] = [
    ("read_file", "direct", {"file_path": "/pub/src/m1.py", "limit": 50}),
    ("read_file", "link", {"file_path": "/pub/alias/m1.py", "limit": 50}),
    ("write_file", "direct", {"file_path": "/pub/out/w.txt", "content": "x" * 2000}),
    ("write_file", "link", {"file_path": "/pub/alias/w.txt", "content": "x" * 2000}),
    ("edit_file", "direct", _EDITS),  # alternating, so each call changes the file
    ("ls", "direct", {"path": "/pub/src"}),
    ("grep", "direct", {"pattern": "return", "path": "/pub/src", "output_mode": "count"}),
]


def _time(
    backend: Any, tool: str, args: dict[str, Any] | list[dict[str, Any]], calls: int
) -> tuple[float, float]:
    cycle = args if isinstance(args, list) else [args]
    samples: list[float] = []
    for n in range(calls):
        start = time.perf_counter()
        _call(backend, tool, **cycle[n % len(cycle)])
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.9) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--sandbox-calls", type=int, default=40)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        backends: list[tuple[str, Any, int]] = []
        fs_root = Path(tmp) / "fs"
        fs_root.mkdir()
        _tree(fs_root)
        backends.append(("filesystem", FilesystemBackend(fs_root), opts.calls))
        sb_root = Path(tmp) / "sb"
        sb_root.mkdir()
        _tree(sb_root)
        backends.append(("sandbox", BwrapSandboxBackend(sb_root), opts.sandbox_calls))
        print(f"{'backend':<11} {'tool':<11} {'path':<7} {'median ms':>10} {'p90 ms':>8}")
        for name, backend, calls in backends:
            (Path(backend.root) / "pub" / "e.txt").write_text("a\n")
            for tool, how, args in CASES:
                median, p90 = _time(backend, tool, args, calls)
                print(f"{name:<11} {tool:<11} {how:<7} {median:>10.3f} {p90:>8.3f}")


if __name__ == "__main__":
    main()
