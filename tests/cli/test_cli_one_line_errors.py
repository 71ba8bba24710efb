"""Bad input to the CLI is one line on stderr, exit 2, naming what was wrong.

docs/cli.md promises it; argparse printed the whole usage block, and a typo'd
key in a rules file read ``operations: Field required (and 1 more)`` without
ever naming the key the user wrote (issue 36).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from filegate.cli.run_inputs import first_error
from filegate.kernel.permissions import FilesystemPermission

CLI = [sys.executable, "-m", "filegate"]


def _stderr_line(*args: str) -> str:
    done = subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=60, check=False, cwd="/"
    )
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "usage:" not in done.stderr, done.stderr
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["approve", "--workflow"], "--workflow"),
        (["frobnicate"], "frobnicate"),
        (["approvals", "--jsn"], "--jsn"),
        (["cancel"], "workflow_id"),
        (["worker", "--role", "chef"], "chef"),
    ],
)
def test_an_argument_error_is_one_line_naming_it(args: list[str], named: str) -> None:
    line = _stderr_line(*args)
    assert line.startswith("filegate") and named in line and "--help" in line, line


@pytest.mark.slow
def test_help_still_prints_the_usage() -> None:
    done = subprocess.run([*CLI, "cancel", "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "usage:" in done.stdout and "--grace" in done.stdout


def _error(data: object) -> str:
    with pytest.raises(ValidationError) as raised:
        FilesystemPermission.model_validate(data)
    return first_error(raised.value)


def test_a_typod_key_is_named_with_the_field_it_meant() -> None:
    text = _error({"operation": ["write"], "paths": ["/docs/**"]})
    assert text.startswith("operation: unknown key (did you mean 'operations'?)"), text


def test_an_unknown_key_with_nothing_missing_is_named() -> None:
    text = _error({"operations": ["write"], "paths": ["/x"], "colour": "red"})
    assert text == "colour: unknown key", text


def test_other_errors_read_as_before() -> None:
    assert _error({"paths": ["/x"]}).startswith("operations: Field required")


@pytest.mark.slow
def test_the_cli_names_the_typo_in_a_rules_file(tmp_path: Path) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([{"operation": ["write"], "paths": ["/docs/**"]}]))
    root = tmp_path / "ws"
    root.mkdir()
    line = _stderr_line(
        "call", "read_file", "--args", '{"file_path": "/a"}', "--root", str(root),
        "--permissions", str(rules),
    )  # fmt: skip
    assert "operation: unknown key (did you mean 'operations'?)" in line, line


@pytest.mark.slow
def test_a_worker_without_a_server_is_told_how_to_get_one(tmp_path: Path) -> None:
    """A worker cannot "use `filegate run`": the line says to start a server first."""
    env = {"PATH": "/usr/bin:/bin", "TEMPORAL_ADDRESS": "127.0.0.1:1", "HOME": str(tmp_path)}
    done = subprocess.run(
        [*CLI, "worker", "--role", "agent"], env=env, capture_output=True, text=True,
        timeout=60, check=False, cwd="/",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "cannot connect to Temporal at 127.0.0.1:1" in line
    assert "filegate dev" in line and "filegate run" not in line, line


def test_ctrl_c_while_the_command_line_starts_is_one_line_and_130(tmp_path: Path) -> None:
    """A Ctrl-C in the first moments (the imports take most of a second) reads like
    any interrupted command: ``filegate: interrupted``, exit 130, no traceback out of
    whichever import it landed in. The child does what the ``filegate`` script does
    (``python -m filegate`` calls the same ``filegate.cli.main``): import the light
    entry point, then call it."""
    import signal

    # "up" when the import of the commands begins (an audit hook), that is inside
    # main(): a signal sent after it lands in the imports main() guards, never in
    # the instant between this script's own lines.
    start = (
        "import sys\n"
        "def up(event, args):\n"
        "    if event == 'import' and args[0] == 'filegate.cli.commands':\n"
        "        print('up', flush=True)\n"
        "sys.addaudithook(up)\n"
        "from filegate.cli import main\n"
        "main()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", start, "approvals"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd="/",
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"
    proc.send_signal(signal.SIGINT)  # the heavy imports have only begun
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip() == "filegate: interrupted", err
