"""The execute gate at FilegateWorkspace's construction (contract §4), shared with Deep Agents.

A workspace with commands refuses, before any call, a rule a command could
bypass: any protecting rule on a host shell, a rule that does not compile to
the sandbox's view on a sandboxed worker. The gate is the core's
(:mod:`filegate.workflows.adapter_gate`); each adapter names its own remedies.
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
