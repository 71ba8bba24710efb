"""The checks FilegateWorkspace makes before any I/O: the execute gate, hostile paths.

A workspace with commands refuses, before any call, a rule a command could
bypass: any protecting rule on a host shell, a rule that does not compile to
the sandbox's view on a sandboxed worker. The gate is the core's
(:mod:`filegate.workflows.adapter_gate`); each adapter names its own remedies.
A path that leaves the mount, or a malformed one, is refused before anything is
sent: these workspaces have no client, so a call that got further would fail
with ``RuntimeError`` instead.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic_ai")

from filegate.integrations.pydantic_ai import FilegateFileWorkspace, FilegateWorkspace
from filegate.kernel.execute_gate import ExecuteGateError
from filegate.kernel.permissions import FilesystemPermission

SECRET = FilesystemPermission(operations=["read"], paths=["/secrets/**"], mode="deny")
WILD = FilesystemPermission(operations=["write"], paths=["/**/*.env"], mode="interrupt")


def test_a_host_shell_with_a_protecting_rule_is_refused() -> None:
    with pytest.raises(ExecuteGateError) as refused:
        FilegateWorkspace(backend="shell", task_queue="q", permissions=[SECRET])
    assert refused.value.rule_number == 1 and refused.value.backend == "shell"
    assert "FilegateWorkspace(sandboxed=True)" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_sandbox_takes_rules_that_compile_to_its_view_only() -> None:
    FilegateWorkspace(backend="sb", task_queue="q", permissions=[SECRET], sandboxed=True)
    with pytest.raises(ExecuteGateError) as refused:
        FilegateWorkspace(backend="sb", task_queue="q", permissions=[SECRET, WILD], sandboxed=True)
    assert refused.value.rule_number == 2


def test_files_only_workspaces_take_any_rule_and_offer_no_commands() -> None:
    files = FilegateFileWorkspace(backend="fs", task_queue="q", permissions=[SECRET, WILD])
    assert not hasattr(files, "run")
    config = files.file_tools_config()
    assert config.backend.default.can_execute is False
    assert config.permissions == [SECRET, WILD]


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", "/workspacex/a", "/", "/work"],
)
async def test_a_path_outside_the_mount_is_refused_before_any_call(path: str) -> None:
    files = FilegateFileWorkspace(backend="sb", task_queue="q", mount="/workspace")
    with pytest.raises(PermissionError, match="not in this Filegate workspace"):
        await files.read_bytes(path)
    with pytest.raises(PermissionError, match="not in this Filegate workspace"):
        await files.write_bytes(path, b"x")


@pytest.mark.parametrize(
    "path", ["relative/a", "/workspace/a\x00b", "~/a", "/workspace/../etc/passwd"]
)
async def test_a_malformed_path_is_a_value_error(path: str) -> None:
    files = FilegateFileWorkspace(backend="sb", task_queue="q", mount="/workspace")
    with pytest.raises(ValueError):
        await files.read_bytes(path)


async def test_the_working_dir_and_its_ancestors_are_never_removed() -> None:
    files = FilegateFileWorkspace(backend="sb", task_queue="q", mount="/workspace")
    for path in ("/workspace", "/workspace/", "/", "/workspace/a/.."):
        with pytest.raises(ValueError, match="working directory"):
            await files.remove(path)
