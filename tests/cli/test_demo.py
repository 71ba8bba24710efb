"""`filegate demo` on a "fresh machine": a real subprocess that starts its own servers.

Nothing is configured in its environment, so the demo must start the embedded
Temporal and S3 servers itself, show every tool, a denied write, an approval
sent by signal and a large result read back from S3, verify each outcome, exit
0, and stop what it started.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from filegate.devstack.servers import is_listening
from filegate.kernel.tool_types import TOOL_ORDER

pytestmark = [pytest.mark.services, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def fresh_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FILEGATE_", "TEMPORAL_"))}
    env["HOME"] = str(tmp_path)  # nothing from the user's config
    return env


def demo_command() -> list[str]:
    script = Path(sys.executable).parent / "filegate"
    return [str(script), "demo"] if script.is_file() else [sys.executable, "-m", "filegate", "demo"]


def test_demo_runs_clean_on_a_fresh_machine(tmp_path: Path) -> None:
    began = time.monotonic()
    proc = subprocess.run(
        demo_command(),
        env=fresh_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    elapsed = time.monotonic() - began
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert re.search(r"Temporal at 127\.0\.0\.1:\d+ \(embedded dev server, started\)", out)
    assert re.search(r"S3 at 127\.0\.0\.1:\d+ \(embedded SeaweedFS, started\)", out)
    assert "every local user of this machine can reach them" in out  # said, every time
    for tool in TOOL_ORDER:
        assert f"  -> {tool} " in out, tool
    assert "<- write_file [ERROR]" in out and "permission denied" in out
    assert re.search(r"\?\? approval \S+ pending: write_file .*/docs/report\.md", out)
    assert re.search(r"!! approved \S+ by signal", out)
    assert "hello, filegate!" in out
    assert re.search(r"-> read_file .*/large_tool_results/\d+:0:big1", out)
    assert "PASS  large execute output went to S3; history holds a short stub" in out
    assert "PASS  read_file pages the large result back from S3" in out
    assert "PASS  write to /vault was DENIED and nothing was written" in out
    assert "PASS  write to /docs waited for approval, approved by signal, then ran" in out
    assert "FAIL" not in out
    assert re.search(r"demo OK: \d+ checks passed", out)
    assert elapsed < 45, f"demo took {elapsed:.1f}s"
    # Everything it started is stopped: its ports are closed again.
    for name in ("Temporal", "S3"):
        port = int(re.search(rf"{name} at 127\.0\.0\.1:(\d+)", out).group(1))  # type: ignore[union-attr]
        assert not is_listening("127.0.0.1", port), f"{name} still listening on {port}"
    assert not list(tmp_path.glob(".filegate*")), "the demo keeps its state in a temp dir"


def test_demo_fails_clearly_when_temporal_is_unreachable(tmp_path: Path) -> None:
    env = fresh_env(tmp_path)
    # Both configured: the demo must start nothing and fail fast with a clear message.
    env["TEMPORAL_ADDRESS"] = "127.0.0.1:1"
    env["FILEGATE_S3_ENDPOINT"] = "127.0.0.1:1"
    proc = subprocess.run(
        demo_command(), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "cannot connect to Temporal at 127.0.0.1:1" in proc.stderr
    assert "Traceback" not in proc.stderr
