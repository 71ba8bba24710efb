"""The operator's path (issue 28): what got in the way of a new user, each fixed.

Subprocess tests run the CLI as users do (``python -m filegate``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "filegate"]


def test_a_worker_refuses_a_root_that_does_not_exist(tmp_path: Path) -> None:
    typo = tmp_path / "typo"
    proc = subprocess.run(
        [*CLI, "worker", "--role", "tools", "--backend", "filesystem", "--root", str(typo),
         "--task-queue", "q"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "does not exist" in proc.stderr
    assert not typo.exists()  # nothing was created, nothing served
