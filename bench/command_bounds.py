"""What the per-command cgroup adds to one ``execute`` (contract §11, issue 26 item 6).

Run: ``python bench/command_bounds.py [--trials N]`` (from the project root, as
root on a host with writable cgroups; elsewhere there is nothing to measure).
Three numbers, medians over N trials: the cgroup alone (make it with its
limits, then kill-check and remove it: :class:`CommandCgroup` ``create`` +
``close``), and ``execute("true")`` on the bubblewrap sandbox and on the local
shell with and without it (interleaved, so load drifts hit both; "without"
runs the same bounds with the cgroup switched off). Prints a table and a JSON
line.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from filegate.backends.bwrap import BwrapSandboxBackend  # noqa: E402
from filegate.backends.local_shell import LocalShellBackend  # noqa: E402
from filegate.processes import reaper  # noqa: E402
from filegate.processes.cgroups import CommandCgroup, aggregate_bounds_status  # noqa: E402
from filegate.processes.reaper import CommandBounds  # noqa: E402


def _ms(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def _cgroup_once(bounds: CommandBounds) -> None:
    made = CommandCgroup.create(bounds)
    assert made is not None
    made.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    args = parser.parse_args(argv)
    missing = aggregate_bounds_status()
    if any("per command" in line and "writes" not in line for line in missing):
        print(f"no per-command cgroup here: {'; '.join(missing)}")
        return 0
    bounds = CommandBounds()
    rows: dict[str, list[float]] = {"cgroup create+close": []}
    with tempfile.TemporaryDirectory(prefix="filegate-bounds-") as scratch:
        backends: dict[str, BwrapSandboxBackend | LocalShellBackend] = {
            "sandbox": BwrapSandboxBackend(Path(scratch) / "sb", bounds=bounds),
            "local shell": LocalShellBackend(scratch, bounds=bounds),
        }
        for _ in range(3):  # warm caches and the probe
            for backend in backends.values():
                backend.execute("true")
        for _ in range(args.trials):
            rows["cgroup create+close"].append(_ms(lambda: _cgroup_once(bounds)))
            for name, backend in backends.items():
                with_cg = _ms(functools.partial(backend.execute, "true"))
                with mock.patch.object(reaper.CommandCgroup, "create", return_value=None):
                    without = _ms(functools.partial(backend.execute, "true"))
                rows.setdefault(f"{name} execute, cgroup", []).append(with_cg)
                rows.setdefault(f"{name} execute, none", []).append(without)
                rows.setdefault(f"{name} difference", []).append(with_cg - without)
    medians = {name: round(statistics.median(values), 2) for name, values in rows.items()}
    width = max(len(name) for name in medians)
    for name, value in medians.items():
        print(f"{name:<{width}}  {value:8.2f} ms")
    print(json.dumps({"bench": "command_bounds", "trials": args.trials, "median_ms": medians}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
