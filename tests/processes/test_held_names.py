# ruff: noqa: F811  (pytest fixtures imported from tests.sandbox_fixtures)
"""A protected name stays protected while a command runs (issue 50, item 2).

Real bubblewrap, both calls through the tool path (``run_tool``) as one turn runs
them side by side. A command's view holds ``interrupt``/``deny`` names by mounts on
them; a file tool that replaced or removed such a name on the host detached the
mount, and the running command then changed what the rules froze: an approved
``write_file /config.json`` ended with the command's appends after it, an approved
``delete /docs`` let the command create ``docs/x.md``. Now the change waits for the
command (or is refused in one line when the command outlasts the wait).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from filegate.backends import held_names
from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.kernel.dispatch import run_tool
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.tool_args import ToolName
from filegate.kernel.tool_types import ToolRequest
from tests.processes.test_view_strength import execute, rule
from tests.sandbox_fixtures import _bwrap_ok, root, sb  # noqa: F401  (fixtures)

Rules = list[FilesystemPermission]

APPEND = "for i in $(seq 1 25); do echo cmd >> config.json 2>/dev/null; sleep 0.1; done; echo ok"


def _beside(command: str, box: BwrapSandboxBackend, rules: Rules) -> threading.Thread:
    thread = threading.Thread(target=execute, args=(box, command, rules), daemon=True)
    thread.start()
    time.sleep(0.6)  # the command is running, its view mounted
    return thread


def _tool(box: BwrapSandboxBackend, tool: ToolName, args: dict[str, str], rules: Rules) -> str:
    request = ToolRequest(
        tool=tool, backend="box", args=args, tool_call_id="1:1:w", permissions=rules,
        approved=True, approved_by="ana via cli",
    )  # fmt: skip
    return run_tool(box, request).text


def test_an_approved_write_of_a_frozen_file_waits_for_the_command(
    sb: BwrapSandboxBackend, root: Path
) -> None:
    (root / "config.json").write_text("{}\n")
    rules = [rule("interrupt", ["write"], "/config.json")]
    command = _beside(APPEND, sb, rules)
    began = time.monotonic()
    text = _tool(sb, "write_file", {"file_path": "/config.json", "content": "approved\n"}, rules)
    assert "Error" not in text, text
    assert time.monotonic() - began > 1.0  # it waited for the command
    command.join(30)
    assert (root / "config.json").read_text() == "approved\n"  # no append slipped in


def test_an_approved_delete_of_a_frozen_tree_waits_for_the_command(
    sb: BwrapSandboxBackend, root: Path
) -> None:
    (root / "docs").mkdir()
    (root / "docs" / "a.md").write_text("a\n")
    rules = [rule("interrupt", ["write"], "/docs/**")]
    create = (
        "for i in $(seq 1 25); do mkdir -p docs && echo x > docs/x.md 2>/dev/null; sleep 0.1; done"
    )
    command = _beside(create, sb, rules)
    text = _tool(sb, "delete", {"file_path": "/docs"}, rules)
    assert "Error" not in text, text
    command.join(30)
    assert not (root / "docs").exists()  # deleted after the command, nothing created


def test_a_command_that_outlasts_the_wait_gets_the_change_refused(
    sb: BwrapSandboxBackend, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(held_names, "WAIT_SECONDS", 1.0)
    (root / "config.json").write_text("{}\n")
    rules = [rule("interrupt", ["write"], "/config.json")]
    command = _beside(APPEND, sb, rules)
    text = _tool(sb, "write_file", {"file_path": "/config.json", "content": "approved\n"}, rules)
    assert text.startswith("Error: write_file /config.json was not applied: a command running")
    assert "\n" not in text.strip(), text
    command.join(30)
    assert (root / "config.json").read_text() == "{}\n"
    # Unheld names and changes below a held directory do not wait.
    began = time.monotonic()
    assert "Error" not in _tool(sb, "write_file", {"file_path": "/free.txt", "content": "f"}, [])
    assert time.monotonic() - began < 1.0


OTHER_WORKER = """
import sys
from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.kernel.execute_gate import compile_view
from filegate.kernel.permissions import FilesystemPermission
rules = [FilesystemPermission(operations=["write"], paths=["/config.json"], mode="interrupt")]
box = BwrapSandboxBackend(sys.argv[1], check=False)
print(box.execute_in_view(sys.argv[2], 30, compile_view(rules)).output, flush=True)
"""


def test_a_change_waits_for_a_command_of_another_worker_process(
    sb: BwrapSandboxBackend, root: Path, tmp_path: Path
) -> None:
    """Two sandbox workers on one root, each with its own temporary directory: this
    one's approved write waits for the other one's command (the holds were kept per
    process, so the write went through and the command appended after it)."""
    (root / "config.json").write_text("{}\n")
    rules = [rule("interrupt", ["write"], "/config.json")]
    (tmp_path / "tmp-b").mkdir(mode=0o700)
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER_WORKER, str(root), "touch started; " + APPEND],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path / "tmp-b")},
    )
    try:
        deadline = time.monotonic() + 20
        while not (root / "started").exists():
            assert time.monotonic() < deadline, "the other worker's command never started"
            time.sleep(0.05)
        text = _tool(
            sb, "write_file", {"file_path": "/config.json", "content": "approved\n"}, rules
        )
        assert "Error" not in text, text
        out, _ = other.communicate(timeout=30)
    finally:
        other.kill()
        other.wait()
    assert "ok" in out, out
    assert (root / "config.json").read_text() == "approved\n"  # no append after it
