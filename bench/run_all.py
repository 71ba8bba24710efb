"""Run every benchmark: ``python bench/run_all.py [NAME ...]``.

Each bench runs in its own subprocess (it starts its own embedded Temporal
dev server / S3 and in-process workers) and prints its table followed by one
JSON line. This script passes the tables through, then prints a summary
table and one combined JSON object ``{"benches": {name: numbers}, "floors_met": bool}``.
Benches whose file is absent are skipped (listed as such); exit code 1 when
any bench failed or missed a floor.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
BENCHES = (
    "roundtrip",
    "agent_step",
    "throughput",
    "co_hosted_scale",
    "local_batch",
    "history",
    "search",
    "ui_listing",
)
"""Run order: the Temporal benches first, then the optional ones if present."""
TIMEOUT = 1200.0


def run_one(name: str) -> dict[str, Any]:
    """Run ``bench/<name>.py``; its last JSON stdout line is its numbers."""
    script = BENCH_DIR / f"{name}.py"
    print(f"=== {name} ===", flush=True)
    began = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, str(script)],
            cwd=BENCH_DIR.parent,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "seconds": round(time.monotonic() - began, 1)}
    numbers: dict[str, Any] | None = None
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            try:
                numbers = json.loads(line)
            except json.JSONDecodeError:
                print(line)
                continue
        else:
            print(line)
    seconds = round(time.monotonic() - began, 1)
    if numbers is None:
        tail = "\n".join(proc.stderr.splitlines()[-15:])
        print(f"{name} produced no numbers (exit {proc.returncode}):\n{tail}")
        return {"status": "error", "exit_code": proc.returncode, "seconds": seconds}
    numbers.pop("bench", None)
    met = bool(numbers.get("floors_met", proc.returncode == 0))
    return {**numbers, "status": "ok" if met else "floor missed", "seconds": seconds}


def headline(name: str, numbers: dict[str, Any]) -> str:
    """The one or two numbers that matter per bench, for the summary table."""
    keys = {
        "roundtrip": ("activity_rt_p50_ms", "activity_rt_p95_ms", "activity_vs_direct_ratio"),
        "agent_step": ("per_step_ms", "remote-process_ms"),
        "throughput": ("tool_calls_per_s", "co_hosted_ratio", "remote_ratio", "failures"),
        "search": ("grep_ratio", "glob_ratio", "read_extra_rss_mb"),
    }.get(name)
    if keys is None:
        keys = tuple(k for k, v in numbers.items() if isinstance(v, int | float))[:3]
    return ", ".join(f"{k}={numbers[k]}" for k in keys if k in numbers)


def main(argv: list[str]) -> int:
    chosen = argv or list(BENCHES)
    results: dict[str, dict[str, Any]] = {}
    for name in chosen:
        if not (BENCH_DIR / f"{name}.py").is_file():
            results[name] = {"status": "absent"}
            continue
        results[name] = run_one(name)
    print()
    width = max(len(n) for n in results)
    print(f"{'bench':<{width}}  {'status':<13}{'seconds':>8}  headline")
    print("-" * (width + 60))
    for name, numbers in results.items():
        print(
            f"{name:<{width}}  {numbers['status']:<13}{numbers.get('seconds', ''):>8}  "
            f"{headline(name, numbers)}"
        )
    ok = all(r["status"] in ("ok", "absent") for r in results.values())
    print(json.dumps({"benches": results, "floors_met": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
