# ruff: noqa: F811  (pytest fixtures imported from tests.sandbox_fixtures)
"""The sandbox's view is never weaker than the rules (issue 33, item 3).

Each test runs real commands in real bubblewrap namespaces through the tools
worker's dispatcher (``run_tool``), as a workflow's ``execute`` would:

- a write-protected path below a file, a link out of the root or a link the
  command could re-point refuses the command in one line naming the rule, and
  nothing runs;
- a placeholder stays while any command still has a mount on it (two
  concurrent commands; two worker processes);
- a read-protected path missing when the command starts is hidden too, so what
  another writer makes there during the command stays out of it;
- ``io_uring`` is refused in the sandbox (its ``IORING_OP_FALLOCATE`` would
  pass the fallocate filter and every disk bound).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.kernel.dispatch import run_tool
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.tool_types import ToolOutcome, ToolRequest
from tests.sandbox_fixtures import _bwrap_ok, root, sb  # noqa: F401  (fixtures)

SECRET = "TOPSECRET-" + uuid.uuid4().hex


def rule(mode: str, ops: list[str], *paths: str) -> FilesystemPermission:
    return FilesystemPermission(operations=ops, paths=list(paths), mode=mode)  # type: ignore[arg-type]


def execute(box: BwrapSandboxBackend, command: str, rules: list[FilesystemPermission]) -> str:
    request = ToolRequest(
        tool="execute",
        backend="box",
        args={"command": command},
        tool_call_id=f"1:0:{uuid.uuid4().hex[:6]}",
        permissions=rules,
    )
    outcome: ToolOutcome = run_tool(box, request)
    return outcome.text


def assert_refused(text: str, rule_text: str) -> None:
    """One line, naming the rule, saying that nothing ran."""
    assert text.startswith("Error: execute refused: "), text
    assert "\n" not in text.strip(), text
    assert rule_text in text, text


ESCAPE = "rm -rf .github; mkdir -p .github/workflows && echo x > .github/workflows/ci.yml"


def test_a_write_rule_below_a_file_refuses_the_command(sb: BwrapSandboxBackend, root: Path) -> None:
    (root / ".github").write_text("a plain file\n")
    rules = [rule("deny", ["write"], "/.github/workflows/**")]
    text = execute(sb, f"touch ran; {ESCAPE}", rules)
    assert_refused(text, "permission rule 1 (deny write /.github/workflows/**)")
    assert (root / ".github").read_text() == "a plain file\n"
    assert not (root / "ran").exists()  # nothing ran


def test_a_write_rule_behind_a_link_out_of_the_root_refuses_the_command(
    sb: BwrapSandboxBackend, root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / ".github").symlink_to(outside)
    rules = [rule("allow", ["read"], "/**"), rule("deny", ["write"], "/.github/workflows/**")]
    text = execute(sb, f"touch ran; {ESCAPE}", rules)
    assert_refused(text, "permission rule 2 (deny write /.github/workflows/**)")
    assert "link out of the root" in text
    assert os.readlink(root / ".github") == str(outside) and not (root / "ran").exists()


def test_a_write_rule_behind_a_link_the_command_could_re_point_refuses(
    sb: BwrapSandboxBackend, root: Path
) -> None:
    (root / "docs").mkdir()
    (root / "ln_docs").symlink_to("docs")
    rules = [rule("deny", ["write"], "/ln_docs/**")]
    text = execute(sb, "rm ln_docs && mkdir ln_docs && echo x > ln_docs/x.md", rules)
    assert_refused(text, "permission rule 1 (deny write /ln_docs/**)")
    assert os.readlink(root / "ln_docs") == "docs"


def test_a_read_rule_below_a_file_refuses_the_command(sb: BwrapSandboxBackend, root: Path) -> None:
    (root / "secrets").write_text("not yet a directory\n")
    text = execute(sb, "cat secrets/key", [rule("deny", ["read"], "/secrets/**")])
    assert_refused(text, "permission rule 1 (deny read /secrets/**)")


def test_a_write_rule_on_an_existing_file_still_runs(sb: BwrapSandboxBackend, root: Path) -> None:
    (root / "cfg.json").write_text("{}\n")
    text = execute(
        sb,
        "echo x > cfg.json; rm -f cfg.json; cat cfg.json",
        [rule("deny", ["write"], "/cfg.json")],
    )
    assert "{}" in text and (root / "cfg.json").read_text() == "{}\n"


def _in_thread(target: object, *args: object) -> tuple[threading.Thread, list[str]]:
    out: list[str] = []

    def run() -> None:
        out.append(target(*args))  # type: ignore[operator]

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


@pytest.mark.slow
def test_one_commands_clean_up_leaves_anothers_placeholder(
    sb: BwrapSandboxBackend, root: Path
) -> None:
    """A starts first and makes the placeholder ``docs``; B starts while A runs and
    mounts it read-only; A ends. B's mount must still be there."""
    rules = [rule("deny", ["write"], "/docs/**")]
    first, _ = _in_thread(execute, sb, "sleep 1", rules)
    time.sleep(0.5)
    later = "sleep 2; mkdir -p docs; echo x > docs/x.md; echo y > docs/y.md && echo WROTE"
    second, second_out = _in_thread(execute, sb, later, rules)
    first.join(30)
    second.join(30)
    assert "WROTE" not in second_out[0], second_out
    assert not (root / "docs").exists()  # the last user removed it
    assert sorted(p.name for p in root.iterdir()) == []


WORKER_B = """
import sys
from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.kernel.execute_gate import compile_view
from filegate.kernel.permissions import FilesystemPermission
rules = [FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="deny")]
box = BwrapSandboxBackend(sys.argv[1], check=False)
command = "sleep 4; mkdir -p docs; echo x > docs/x.md && echo WROTE"
print(box.execute_in_view(command, 30, compile_view(rules)).output)
"""


@pytest.mark.slow
@pytest.mark.parametrize("own_tmp", [False, True], ids=["same-tmpdir", "own-tmpdir"])
def test_a_placeholder_in_use_by_another_worker_process_stays(
    sb: BwrapSandboxBackend, root: Path, tmp_path: Path, own_tmp: bool
) -> None:
    """Two worker processes on one root: the second one's command keeps its mount,
    also when each has its own temporary directory (two replicas of the compose
    file's sandbox worker, systemd's PrivateTmp; issue 50, item 3: locks kept in a
    temporary directory let the first one's clean-up pull the placeholder)."""
    rules = [rule("deny", ["write"], "/docs/**")]
    env = dict(os.environ)
    if own_tmp:
        (tmp_path / "tmp-b").mkdir(mode=0o700)
        env["TMPDIR"] = str(tmp_path / "tmp-b")
    first, _ = _in_thread(execute, sb, "sleep 3", rules)
    time.sleep(0.5)
    other = subprocess.run(
        [sys.executable, "-c", WORKER_B, str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    first.join(30)
    assert other.returncode == 0, other.stderr
    assert "WROTE" not in other.stdout
    assert not (root / "docs" / "x.md").exists()


@pytest.mark.slow
def test_a_missing_read_protected_path_stays_hidden_when_it_appears(
    sb: BwrapSandboxBackend, root: Path
) -> None:
    poll = "for i in $(seq 40); do cat secrets/key 2>/dev/null && break; sleep 0.1; done; echo END"
    command, out = _in_thread(execute, sb, poll, [rule("deny", ["read"], "/secrets/**")])
    time.sleep(1)
    (root / "secrets").mkdir(exist_ok=True)  # another writer, on the host
    (root / "secrets" / "key").write_text(SECRET)
    command.join(30)
    assert "END" in out[0] and SECRET not in out[0]
    assert (root / "secrets" / "key").read_text() == SECRET  # the writer's file stays


IO_URING = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
for name, args in (("setup", (425, 4, params)), ("enter", (426, 0, 1, 0, 0, None, 0)),
                   ("register", (427, 0, 0, None, 0))):
    ctypes.set_errno(0)
    rc = libc.syscall(*args)
    print(name, rc, errno.errorcode.get(ctypes.get_errno(), "0"))
"""


def test_io_uring_is_refused_in_the_sandbox(sb: BwrapSandboxBackend) -> None:
    if os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip("no seccomp filter on this architecture")
    text = execute(sb, f"python3 -c '{IO_URING}'", [])
    lines = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
    assert lines.get("setup") == "-1 ENOSYS", text
    assert lines.get("enter") == "-1 ENOSYS", text
    assert lines.get("register") == "-1 ENOSYS", text


@pytest.mark.slow
def test_a_command_holding_a_lock_on_a_protected_directory_stalls_nobody(
    sb: BwrapSandboxBackend, root: Path
) -> None:
    """Placeholder locks live outside every sandbox: a command's own ``flock -x``
    on a protected directory cannot make the next command wait."""
    (root / "docs").mkdir()
    rules = [rule("deny", ["write"], "/docs/**")]
    holder, _ = _in_thread(execute, sb, "flock -x docs sleep 4", rules)
    time.sleep(1)
    started = time.monotonic()
    assert "[Command succeeded" in execute(sb, "true", rules)
    assert time.monotonic() - started < 3
    holder.join(30)


def test_a_subtree_rule_on_a_file_or_a_link_to_one_refuses(
    sb: BwrapSandboxBackend, root: Path
) -> None:
    """``dir/**`` does not protect ``dir`` itself, so a file there is a name anyone may
    replace with the protected directory: refused, whether reached directly or by a link."""
    (root / "notes.txt").write_text("n\n")
    (root / "ln").symlink_to("notes.txt")
    for pattern in ("/notes.txt/**", "/ln/**"):
        text = execute(sb, "touch ran", [rule("deny", ["read"], pattern)])
        assert_refused(text, f"permission rule 1 (deny read {pattern})")
    assert not (root / "ran").exists()
