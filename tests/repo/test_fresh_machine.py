"""The README's quickstart on a fresh clone, with no system tools on PATH.

A fresh machine has Python and pip and nothing else: no ``bwrap``, ``rg`` or
``fdfind``. This test clones the committed repository into a temp dir and runs
the README's two quickstart commands as written there, with a PATH on which
those programs are failing stubs (a shadowing directory first; a stub that runs
fails the test). The first (venv, install, demo) runs exactly. The
second is the whole suite, which CI already runs on such a machine; here it
runs as written but narrowed through ``PYTEST_ADDOPTS`` to the tests that need
the programs the wheels bring (the bubblewrap sandbox and ripgrep), so the
suite does not run itself twice.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.services]

ROOT = Path(__file__).resolve().parents[2]
INNER = "FILEGATE_FRESH_MACHINE_INNER"
SYSTEM_TOOLS = ("bwrap", "rg", "fdfind", "fd")
WHEEL_TOOL_TESTS = (
    "tests/processes/test_sandbox.py tests/processes/test_bwrap_isolation.py"
    " tests/backends/test_filesystem.py"
)


def quickstart_commands(readme: str) -> list[str]:
    """The commands of the README's Quickstart code block, one per line."""
    section = readme.split("## Quickstart", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the Quickstart has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def shadowed_path(shadow: Path, used: Path) -> str:
    """This machine's PATH (venvs left out) behind ``shadow``, a directory of stubs
    named after every system tool we ship as a wheel.

    Dropping the directories that hold the tools instead would drop ``/usr/bin``
    on a machine with apt's ripgrep or fd-find, and ``bash`` with it. A stub
    records that it ran in ``used`` and fails, so code that looked a tool up on
    PATH instead of taking the wheel's shows up in the test.
    """
    shadow.mkdir(parents=True, exist_ok=True)
    for tool in SYSTEM_TOOLS:
        stub = shadow / tool
        stub.write_text(f"#!/bin/sh\necho {tool} >> '{used}'\nexit 127\n")
        stub.chmod(0o755)
    keep = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and ".venv" not in d]
    return os.pathsep.join([str(shadow), *keep])


def test_readme_has_exactly_two_quickstart_commands() -> None:
    commands = quickstart_commands((ROOT / "README.md").read_text())
    assert len(commands) == 2, commands
    assert commands[1] == ".venv/bin/python -m pytest -q"
    # .ci/run must run that same command.
    assert "TEST_CMD=(.venv/bin/python -m pytest -q)" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.skipif(bool(os.environ.get(INNER)), reason="inside the fresh-machine run itself")
@pytest.mark.slow(seconds=130)
def test_quickstart_on_a_fresh_clone_without_system_tools(tmp_path: Path) -> None:
    # Not under pytest's private (0700) tmp dir: one test drops to uid nobody
    # and must still be able to import the package from the clone.
    clone = Path(tempfile.mkdtemp(prefix="filegate-fresh-")) / "clone"
    clone.parent.chmod(0o755)
    try:
        _quickstart(clone, tmp_path)
    finally:
        shutil.rmtree(clone.parent, ignore_errors=True)


def _quickstart(clone: Path, tmp_path: Path) -> None:
    subprocess.run(
        ["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    install_demo, tests = quickstart_commands((clone / "README.md").read_text())
    home = tmp_path / "home"
    home.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("FILEGATE_", "TEMPORAL_", "VIRTUAL_ENV", "PYTEST_", "PYTHON"))
    }
    used = tmp_path / "system-tools-used.txt"
    env |= {"PATH": shadowed_path(tmp_path / "shadow", used), "HOME": str(home), INNER: "1"}
    for tool in SYSTEM_TOOLS:
        found = shutil.which(tool, path=env["PATH"])
        assert found == str(tmp_path / "shadow" / tool), f"{tool} is {found}, not the stub"
    first = subprocess.run(
        install_demo, shell=True, cwd=clone, env=env, capture_output=True, text=True,
        timeout=1200, check=False,
    )  # fmt: skip
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert "hello, filegate!" in first.stdout
    # -n 0: one process, beside the outer run's own workers.
    env["PYTEST_ADDOPTS"] = f"-p no:cacheprovider -rs -n 0 {WHEEL_TOOL_TESTS}"
    second = subprocess.run(
        tests, shell=True, cwd=clone, env=env, capture_output=True, text=True,
        timeout=1200, check=False,
    )  # fmt: skip
    assert second.returncode == 0, second.stdout[-6000:] + second.stderr[-2000:]
    summary = second.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "error" not in summary, summary
    # A missing program skips nothing: only a test that needs root may skip, as a normal user.
    skips = [line for line in second.stdout.splitlines() if line.startswith("SKIPPED")]
    excused = [line for line in skips if os.geteuid() != 0 and "root" in line]
    assert skips == excused, "\n".join(skips)
    assert not used.exists(), f"a system tool was run instead of the wheel's: {used.read_text()}"
