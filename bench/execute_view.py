"""What compiling 20 permission rules adds to one sandboxed ``execute``.

Run: ``python bench/execute_view.py [--trials N]`` (from the project root).
Runs the same command (``cat src/ok.txt``) through the tools worker's
dispatcher (``run_tool``) on the bubblewrap sandbox, once with no rules and
once with 20 rules (10 read-deny subtrees, 5 write-deny literal files, 5
write-interrupt subtrees), interleaved so load drifts hit both. The floored
case has every protected path present; a second case has four of them
missing, so placeholders are made and removed around each command (reported,
not floored: its cost is the filesystem's mkdir/rmdir). Prints the medians and
the median of the per-pair differences, and a JSON line; exits 1 when the
floored difference is over 5 ms (issue 25).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from filegate.backends.bwrap import BwrapSandboxBackend  # noqa: E402
from filegate.kernel.dispatch import run_tool  # noqa: E402
from filegate.kernel.execute_gate import compile_view  # noqa: E402
from filegate.kernel.permissions import FilesystemPermission  # noqa: E402
from filegate.kernel.tool_types import ToolRequest  # noqa: E402

FLOOR_MS = 5.0
COMMAND = "cat src/ok.txt"


def twenty_rules() -> list[FilesystemPermission]:
    rules = [
        FilesystemPermission(operations=["read"], paths=[f"/secret{i}/**"], mode="deny")
        for i in range(10)
    ]
    rules += [
        FilesystemPermission(operations=["write"], paths=[f"/docs/d{i}.md"], mode="deny")
        for i in range(5)
    ]
    rules += [
        FilesystemPermission(operations=["write"], paths=[f"/frozen{i}/**"], mode="interrupt")
        for i in range(5)
    ]
    return rules


def plant(root: Path, *, missing: int = 0) -> None:
    """The workspace; ``missing`` of the write-protected paths left out."""
    (root / "src").mkdir()
    (root / "src" / "ok.txt").write_text("ok\n")
    for i in range(10):
        (root / f"secret{i}").mkdir()
        (root / f"secret{i}" / "key").write_text("k")
    (root / "docs").mkdir()
    for i in range(5 - missing // 2):
        (root / "docs" / f"d{i}.md").write_text("d")
    for i in range(5 - (missing - missing // 2)):
        (root / f"frozen{i}").mkdir()


def request(rules: list[FilesystemPermission]) -> ToolRequest:
    return ToolRequest(
        tool="execute",
        backend="box",
        args={"command": COMMAND},
        tool_call_id="1:0:b",
        permissions=rules,
    )


def timed(box: BwrapSandboxBackend, req: ToolRequest) -> float:
    start = time.perf_counter()
    outcome = run_tool(box, req)
    elapsed = (time.perf_counter() - start) * 1000
    if outcome.status != "success" or "ok" not in outcome.text:
        raise SystemExit(f"the command failed: {outcome.text}")
    return elapsed


def measure(missing: int, trials: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        plant(root, missing=missing)
        box = BwrapSandboxBackend(root)
        before = sorted(p.name for p in root.rglob("*"))
        plain, ruled = request([]), request(twenty_rules())
        for _ in range(5):  # warm the page cache and bwrap's probes
            timed(box, plain)
            timed(box, ruled)
        without, with_rules, deltas = [], [], []
        for _ in range(trials):
            a = timed(box, plain)
            b = timed(box, ruled)
            without.append(a)
            with_rules.append(b)
            deltas.append(b - a)
        if sorted(p.name for p in root.rglob("*")) != before:
            raise SystemExit("placeholders were left behind in the workspace")
    return {
        "without_ms": round(statistics.median(without), 2),
        "with_ms": round(statistics.median(with_rules), 2),
        "added_ms": round(statistics.median(deltas), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60)
    args = parser.parse_args()
    mounts = len(compile_view(twenty_rules()).protected)
    present = measure(0, args.trials)
    missing = measure(4, args.trials)
    print(f"one execute ({COMMAND!r}) on the bwrap sandbox, {args.trials} interleaved pairs")
    print(f"20 rules, {mounts} protected paths     no rules   20 rules   added")
    for name, row in (("all present (floored)", present), ("4 missing (placeholders)", missing)):
        print(
            f"  {name:27} {row['without_ms']:7.2f} ms {row['with_ms']:7.2f} ms "
            f"{row['added_ms']:6.2f} ms"
        )
    print(f"floor: at most {FLOOR_MS:g} ms added with every path present")
    print(
        json.dumps(
            {"bench": "execute_view", "present": present, "missing": missing, "floor_ms": FLOOR_MS}
        )
    )
    return 0 if present["added_ms"] <= FLOOR_MS else 1


if __name__ == "__main__":
    sys.exit(main())
