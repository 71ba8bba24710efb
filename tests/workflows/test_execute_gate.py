# ruff: noqa: F811  (pytest fixtures imported from tests.sandbox_fixtures / tests.cli.test_cli)
"""Rules that hold for ``execute`` (contract §5): one gate in the kit, rules compiled
into the sandbox's view, the same answer through every entry point.

The leaks these reproduce: a deny rule on ``/secrets/**`` next to a backend
that can execute, and the model's ``cat secrets/key.txt`` returned the secret
through ``FileTools`` in a workflow of one's own, through the tools worker's
activities used directly, and through the CLI. Each test here failed on the
code before the gate moved into the kit.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.local_shell import LocalShellBackend
from filegate.kernel.dispatch import run_tool
from filegate.kernel.execute_gate import (
    ExecuteGateError,
    ProtectedPath,
    SandboxView,
    check_execute_gate,
    compile_view,
    protecting_rules,
)
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.tool_types import ToolRequest
from filegate.workflows import BackendRef, BackendSpec, FileToolsConfig, RouteSpec
from filegate.workflows.gate import ToolInterrupt
from tests.activities.test_stubs import _load_example
from tests.cli.test_cli import CLI, call, cli_env, write_json  # noqa: F401  (cli_env: a fixture)
from tests.sandbox_fixtures import _bwrap_ok, root, sb  # noqa: F401  (fixtures)
from tests.workflows.test_workflow_e2e import running_tools

with workflow.unsafe.imports_passed_through():
    from filegate.workflows.runner import agent_runner

ToolListWorkflow = _load_example("file_tools_host").ToolListWorkflow

SECRET = "TOPSECRET-" + uuid.uuid4().hex


def rule(mode: str, ops: list[str], *paths: str) -> FilesystemPermission:
    return FilesystemPermission(operations=ops, paths=list(paths), mode=mode)  # type: ignore[arg-type]


DENY_SECRETS = rule("deny", ["read"], "/secrets/**")
DENY_DOCS = rule("deny", ["write"], "/docs/**")


WALK = (
    "python3 -c 'import pathlib; "
    'print([p.read_text() for p in pathlib.Path(".").rglob("*") if p.is_file()])\''
)
"""A script walking the whole workspace and printing every file it can read."""


def plant(root: Path) -> Path:
    (root / "secrets").mkdir(parents=True, exist_ok=True)
    (root / "secrets" / "key.txt").write_text(SECRET)
    (root / "docs").mkdir(exist_ok=True)
    (root / "docs" / "a.md").write_text("doc\n")
    (root / "src").mkdir(exist_ok=True)
    (root / "src" / "ok.txt").write_text("fine\n")
    return root


def uid() -> str:
    return f"gate-{uuid.uuid4().hex[:8]}"


@asynccontextmanager
async def running_host(client: Client) -> AsyncIterator[str]:
    """A worker hosting the docs' own-workflow example (``ToolListWorkflow``); its queue."""
    queue = uid()
    async with Worker(
        client, task_queue=queue, workflows=[ToolListWorkflow], workflow_runner=agent_runner()
    ):
        yield queue


def execute_request(command: str, rules: list[FilesystemPermission], **fields: Any) -> ToolRequest:
    return ToolRequest(
        tool="execute",
        backend="shell",
        args={"command": command},
        tool_call_id="1:0:x",
        permissions=rules,
        **fields,
    )


# --------------------------------------------------------------------------- the kernel


def test_literal_and_subtree_rules_compile_shallowest_first() -> None:
    view = compile_view(
        [
            DENY_SECRETS,
            DENY_DOCS,
            rule("interrupt", ["read", "write"], "/{a,b}/**"),
            rule("deny", ["write"], "/docs/inner/**", "/cfg.json"),
            rule("allow", ["read"], "/**/*.py"),  # allows need no enforcement
        ]
    )
    assert view.protected == (
        ProtectedPath("/a", hidden=True, frozen=True),
        ProtectedPath("/b", hidden=True, frozen=True),
        ProtectedPath("/cfg.json", hidden=False, frozen=True),
        ProtectedPath("/docs", hidden=False, frozen=True),
        ProtectedPath("/secrets", hidden=True, frozen=False),
    )
    assert not compile_view([rule("allow", ["read", "write"], "/**")])


def test_a_hidden_path_inside_a_read_only_one_is_kept() -> None:
    view = compile_view([rule("deny", ["write"], "/w/**"), rule("deny", ["read"], "/w/s/**")])
    assert [e.path for e in view.protected] == ["/w", "/w/s"]
    with pytest.raises(ValueError, match="inside"):
        SandboxView((ProtectedPath("/a", True, False), ProtectedPath("/a/b", False, True)))


@pytest.mark.parametrize("pattern", ["/**/*.env", "/src/*.key", "/a/*/b/**", "/x?/**"])
def test_patterns_mounts_cannot_express_are_refused_naming_the_rule(pattern: str) -> None:
    rules = [DENY_DOCS, rule("deny", ["read"], pattern)]
    with pytest.raises(ExecuteGateError, match=r"rule 2 \(deny read") as caught:
        check_execute_gate(rules, backend="box", can_execute=True, sandboxed=True)
    assert caught.value.rule_number == 2 and caught.value.pattern == pattern
    assert "'box'" in str(caught.value)
    # ... unless every command waits for a human, or execute is not offered.
    check_execute_gate(rules, backend="box", can_execute=True, sandboxed=True, execute_gated=True)
    check_execute_gate(rules, backend="box", can_execute=False, sandboxed=True)
    # A human-approved command compiles what compiles and leaves the rest to the human.
    assert [e.path for e in compile_view(rules, lenient=True).protected] == ["/docs"]


def test_routes_the_shell_cannot_reach_need_nothing_and_reachable_ones_refuse() -> None:
    rules = [rule("deny", ["read"], "/mem/**/*.key", "/secrets/**")]
    assert [r.paths for r in protecting_rules(rules, ["/mem/"])] == [["/secrets/**"]]
    check_execute_gate(
        rules, backend="box", can_execute=True, sandboxed=True, unreachable_prefixes=["/mem/"]
    )
    with pytest.raises(ExecuteGateError, match="route /data"):
        check_execute_gate(
            [rule("deny", ["read"], "/data/x/**")],
            backend="box",
            can_execute=True,
            sandboxed=True,
            reachable_prefixes=["/data/"],
        )


def test_the_config_gate_is_one_answer_for_every_configuration_shape() -> None:
    shell = BackendRef(kind="remote", name="shell", task_queue="q", can_execute=True)
    config = FileToolsConfig(backend=BackendSpec(default=shell), permissions=[DENY_SECRETS])
    with pytest.raises(ExecuteGateError, match=r"rule 1 \(deny read /secrets/\*\*\).*'shell'"):
        config.check_execute_gate()
    gated = config.model_copy(update={"interrupt_on": {"execute": ToolInterrupt(always=True)}})
    gated.check_execute_gate()
    config.model_copy(update={"tools": ["ls", "read_file"]}).check_execute_gate()  # no execute
    boxed = shell.model_copy(update={"sandboxed": True})
    FileToolsConfig(
        backend=BackendSpec(default=boxed), permissions=[DENY_SECRETS]
    ).check_execute_gate()
    routed = FileToolsConfig(
        backend=BackendSpec(
            default=shell,
            routes=[RouteSpec(prefix="/secrets/", backend=BackendRef(kind="state"))],
        ),
        permissions=[DENY_SECRETS],
    )
    routed.check_execute_gate()  # the rule's paths live where the shell cannot reach
    with pytest.raises(ValueError, match="sandboxed needs can_execute"):
        BackendRef(kind="remote", name="x", task_queue="q", sandboxed=True)


# --------------------------------------------------------------------------- the tools worker


def test_a_host_shell_refuses_an_unapproved_command_that_rules_reach(tmp_path: Path) -> None:
    backend = LocalShellBackend(plant(tmp_path / "ws"))
    refused = run_tool(backend, execute_request("cat secrets/key.txt", [DENY_SECRETS]))
    assert refused.status == "error" and SECRET not in refused.text
    assert "execute refused" in refused.text and "rule 1" in refused.text
    approved = run_tool(backend, execute_request("cat src/ok.txt", [DENY_SECRETS], approved=True))
    assert approved.status == "success" and "fine" in approved.text
    free = run_tool(backend, execute_request("cat src/ok.txt", [rule("allow", ["read"], "/**")]))
    assert free.status == "success"


@pytest.mark.slow
def test_the_sandbox_runs_commands_in_the_compiled_view(
    sb: BwrapSandboxBackend, root: Path
) -> None:
    plant(root)
    (root / "src" / "planted").symlink_to("../secrets/key.txt")
    rules = [DENY_SECRETS, DENY_DOCS]
    answers = {
        command: run_tool(sb, execute_request(command, rules))
        for command in (
            "cat /workspace/secrets/key.txt",
            "cat src/planted",
            "ln -s ../secrets made && cat made/key.txt",
            WALK,
            "echo x > docs/a.md",
            "mv docs moved",
            "rm -rf docs",
            "echo new > src/b.txt && cat src/b.txt",
        )
    }
    assert all(SECRET not in outcome.text for outcome in answers.values())
    assert "fine" in answers[WALK].text
    assert "Read-only" in answers["echo x > docs/a.md"].text
    assert (root / "docs" / "a.md").read_text() == "doc\n"
    assert (root / "secrets" / "key.txt").read_text() == SECRET
    assert (root / "src" / "b.txt").read_text() == "new\n"
    assert sorted(p.name for p in root.iterdir()) == ["docs", "made", "secrets", "src"]


def test_a_write_rule_on_a_missing_path_blocks_creating_it(
    sb: BwrapSandboxBackend,
    root: Path,
) -> None:
    rules = [rule("deny", ["write"], "/new/**", "/cfg.json")]
    for command in ("mkdir -p new/x && echo y > new/x/f", "echo '{}' > cfg.json"):
        outcome = run_tool(sb, execute_request(command, rules))
        assert outcome.status == "error" or "exit code" in outcome.text, outcome.text
    assert sorted(p.name for p in root.iterdir()) == []  # placeholders are gone again


def test_an_uncompilable_rule_refuses_the_command_unless_approved(
    sb: BwrapSandboxBackend,
    root: Path,
) -> None:
    plant(root)
    (root / "src" / ".env").write_text(SECRET)
    rules = [rule("deny", ["read"], "/**/.env"), DENY_SECRETS]
    refused = run_tool(sb, execute_request("cat src/.env", rules))
    assert refused.status == "error" and "execute refused" in refused.text
    assert SECRET not in refused.text
    approved = run_tool(
        sb, execute_request("cat secrets/key.txt; cat src/ok.txt", rules, approved=True)
    )
    assert SECRET not in approved.text and "fine" in approved.text


# --------------------------------------------------------------------------- own workflow


pytest_services = pytest.mark.services


@pytest_services
async def test_own_workflow_on_a_host_shell_is_refused_before_any_tool_runs(
    temporal_client: Client, tmp_path: Path
) -> None:
    workspace = plant(tmp_path / "ws")
    calls = [
        {"id": "w", "name": "write_file", "args": {"file_path": "/src/w.txt", "content": "w"}},
        {"id": "x", "name": "execute", "args": {"command": "cat secrets/key.txt"}},
    ]
    async with running_tools(
        temporal_client, {"shell": LocalShellBackend(workspace)}, tmp_path / "j"
    ) as queue:
        config = FileToolsConfig(
            backend=BackendSpec(
                default=BackendRef(kind="remote", name="shell", task_queue=queue, can_execute=True)
            ),
            permissions=[DENY_SECRETS],
        )
        async with running_host(temporal_client) as host_queue:
            handle = await temporal_client.start_workflow(
                ToolListWorkflow.run,
                args=[config, calls],
                id=uid(),
                task_queue=host_queue,
            )
            with pytest.raises(WorkflowFailureError) as failed:
                await asyncio.wait_for(handle.result(), 60)
            history = await handle.fetch_history()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidConfiguration"
    assert "rule 1 (deny read /secrets/**)" in cause.message and "'shell'" in cause.message
    assert not (workspace / "src" / "w.txt").exists()  # refused before any tool ran
    assert SECRET not in json.dumps(history.to_json_dict())


@pytest_services
async def test_own_workflow_on_the_sandbox_runs_with_the_rules_compiled(
    temporal_client: Client,
    tmp_path: Path,
    _bwrap_ok: None,
) -> None:
    workspace = plant(tmp_path / "ws")
    calls = [
        {"id": "r", "name": "execute", "args": {"command": "cat /workspace/secrets/key.txt"}},
        {"id": "d", "name": "execute", "args": {"command": "echo x > docs/a.md"}},
        {"id": "s", "name": "execute", "args": {"command": "echo s > src/s.txt; cat src/ok.txt"}},
    ]
    box = BwrapSandboxBackend(workspace, check=False)
    async with running_tools(temporal_client, {"box": box}, tmp_path / "j") as queue:
        config = FileToolsConfig(
            backend=BackendSpec(
                default=BackendRef(
                    kind="remote", name="box", task_queue=queue, can_execute=True, sandboxed=True
                )
            ),
            permissions=[DENY_SECRETS, DENY_DOCS],
        )
        async with running_host(temporal_client) as host_queue:
            result = await temporal_client.execute_workflow(
                ToolListWorkflow.run,
                args=[config, calls],
                id=uid(),
                task_queue=host_queue,
            )
    answers = result["answers"]
    assert SECRET not in json.dumps(result)
    assert "No such file" in answers["r"]["text"]
    assert "Read-only" in answers["d"]["text"]
    assert "fine" in answers["s"]["text"] and (workspace / "src" / "s.txt").read_text() == "s\n"
    assert (workspace / "docs" / "a.md").read_text() == "doc\n"


# --------------------------------------------------------------------------- the CLI


@pytest_services
def test_cli_sandbox_with_permissions_runs_the_rules(
    cli_env: dict[str, str],
    tmp_path: Path,
    _bwrap_ok: None,
) -> None:
    workspace = plant(tmp_path / "ws")
    script = write_json(
        tmp_path / "s.json",
        {
            "turns": [
                {"tool_calls": [call("r", "execute", command="cat /workspace/secrets/key.txt")]},
                {"tool_calls": [call("d", "execute", command="echo x > /workspace/docs/a.md")]},
                {"tool_calls": [call("s", "execute", command="echo s > /workspace/src/s.txt")]},
                {"content": "done"},
            ]
        },
    )
    perms = write_json(tmp_path / "p.json", [
        {"operations": ["read"], "paths": ["/secrets/**"], "mode": "deny"},
        {"operations": ["write"], "paths": ["/docs/**"], "mode": "deny"},
    ])  # fmt: skip
    transcript = tmp_path / "t.json"
    run = subprocess.run(
        [*CLI, "run", "t", "--model", f"scripted:{script}", "--root", str(workspace),
         "--sandbox", "--permissions", perms, "--transcript", str(transcript)],
        env=cli_env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    results = {m["tool_call_id"]: m for m in json.loads(transcript.read_text()) if "status" in m}
    assert SECRET not in transcript.read_text() and SECRET not in run.stdout
    assert "No such file" in json.dumps(results["r"]["content"])
    assert "Read-only" in json.dumps(results["d"]["content"])
    assert (workspace / "src" / "s.txt").read_text() == "s\n"
    assert (workspace / "docs" / "a.md").read_text() == "doc\n"

    glob_rule = write_json(
        tmp_path / "g.json", [{"operations": ["read"], "paths": ["/**/*.env"], "mode": "deny"}]
    )
    refused = subprocess.run(
        [*CLI, "run", "t", "--model", f"scripted:{script}", "--root", str(workspace),
         "--sandbox", "--permissions", glob_rule],
        env=cli_env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "rule 1 (deny read /**/*.env)" in refused.stderr


def test_filesystem_backend_without_execute_keeps_every_rule(tmp_path: Path) -> None:
    # No shell, nothing to bypass: the gate has no say.
    backend = FilesystemBackend(plant(tmp_path / "ws"))
    assert not backend.can_execute
    check_execute_gate([DENY_SECRETS], backend="fs", can_execute=backend.can_execute)
