"""Policies on a real tools worker: configured by env, named by the workflow (contract §8).

The worker reads ``FILEGATE_POLICY_JSON`` once when it is built; workflows only
name policies (``AgentInput.policies``). Runs go through the real Temporal dev
server and a Filesystem backend in a tmp dir, and the audit log is the real
JSON-lines file the worker writes.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.worker import Worker

from filegate import FilegatePlugin
from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.backends.composite import CompositeBackend
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.local_shell import LocalShellBackend
from filegate.backends.policy import PolicyConfig
from filegate.backends.settings import Settings
from filegate.backends.startup import ALLOW_EXECUTE_ENV
from filegate.cli.commands import build_parser
from filegate.cli.errors import CliError
from filegate.cli.services import state_dir_outside
from filegate.cli.workers import backend_from_args
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.protocol import BackendProtocol
from filegate.kernel.state import StateBackend
from filegate.wiring.connection import ConfigError
from filegate.wiring.roles import file_tools
from filegate.worker import make_backend
from filegate.workflows import AgentInput, AgentResult, AgentWorkflow, BackendSpec, Decision
from tests.roots import made
from tests.scripting import calls, scripted
from tests.workflows.test_workflow_e2e import final, remote, results, run_agent, running_agent

pytestmark = pytest.mark.services

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example key id


def policy_json(audit: Path) -> str:
    return json.dumps(
        {
            "policies": {
                "protect": {"kind": "deny_write", "prefixes": ["/locked"]},
                "no-secrets": {"kind": "secret_scan"},
            },
            "required": ["protect"],
            "default": ["no-secrets"],
            "audit_file": str(audit),
        }
    )


class Stack:
    def __init__(self, client: Client, agent_queue: str, tools_queue: str, root: Path) -> None:
        self.client, self.agent_queue, self.tools_queue, self.root = (
            client, agent_queue, tools_queue, root,
        )  # fmt: skip

    async def run(self, policies: list[str] | None, *turns: dict[str, Any]) -> AgentResult:
        input = AgentInput(
            task="go",
            model=scripted(*turns, final()),
            backend=BackendSpec(default=remote("files", self.tools_queue)),
            policies=policies,
        )
        return await run_agent(self.client, self.agent_queue, input)


@pytest_asyncio.fixture
async def stack(
    temporal_client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    """Agent worker + a tools worker whose policies come from the environment: the
    plugin's default (the library's own factories take policies as a value)."""
    root = tmp_path / "files"
    (root / "locked").mkdir(parents=True)
    monkeypatch.delenv(PolicyConfig.ENV_FILE, raising=False)
    monkeypatch.setenv(PolicyConfig.ENV_JSON, policy_json(tmp_path / "audit" / "audit.jsonl"))
    backends: dict[str, BackendProtocol] = {
        "files": FilesystemBackend(str(root), virtual_mode=True)
    }
    async with (
        running_agent(temporal_client) as agent_queue,
        plugin_tools(temporal_client, backends, tmp_path / "journal") as tools_queue,
    ):
        yield Stack(temporal_client, agent_queue, tools_queue, root)


@asynccontextmanager
async def plugin_tools(
    client: Client, backends: dict[str, BackendProtocol], journal: Path
) -> AsyncIterator[str]:
    queue = f"tools-{uuid.uuid4().hex[:8]}"
    plugin = FilegatePlugin(backends=backends, journal_dir=journal, artifacts=None)
    async with Worker(client, task_queue=queue, plugins=[plugin]):
        yield queue


def audit_lines(stack: Stack) -> list[dict[str, Any]]:
    path = stack.root.parent / "audit" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_required_and_default_policies_apply(stack: Stack) -> None:
    result = await stack.run(
        None,
        calls(
            ("lock", "write_file", {"file_path": "/locked/x.txt", "content": "no\n"}),
            ("key", "write_file", {"file_path": "/aws.txt", "content": f"id={AWS_KEY}\n"}),
            ("ok", "write_file", {"file_path": "/ok.txt", "content": "fine\n"}),
        ),
    )
    out = results(result)
    assert out["lock"]["status"] == "error" and "policy 'protect'" in out["lock"]["content"]
    assert out["key"]["status"] == "error" and "aws_access_key_id" in out["key"]["content"]
    assert out["ok"]["status"] == "success"
    assert not (stack.root / "locked" / "x.txt").exists()
    assert not (stack.root / "aws.txt").exists()
    assert (stack.root / "ok.txt").read_text() == "fine\n"

    [run_id] = {m["workflow_id"] for m in audit_lines(stack)}
    records = {r["tool_call_id"]: r for r in audit_lines(stack)}
    assert records["1:0:lock"]["outcome"] == "denied"
    assert records["1:0:lock"]["policy"] == "protect"
    assert records["1:0:lock"]["path"] == "/locked/x.txt"
    assert records["1:1:key"]["policy"] == "no-secrets"
    assert records["1:2:ok"]["outcome"] == "ok" and records["1:2:ok"]["bytes"] == 5
    assert run_id.startswith("wf-")
    assert AWS_KEY not in (stack.root.parent / "audit" / "audit.jsonl").read_text()


async def test_audit_log_names_the_reviewer_of_an_approved_call(stack: Stack) -> None:
    """contract §11: a decision records who made it, in the tools worker's audit log too."""
    input = AgentInput(
        task="go",
        model=scripted(
            calls(
                ("asked", "write_file", {"file_path": "/review/a.txt", "content": "a\n"}),
                ("free", "write_file", {"file_path": "/free.txt", "content": "b\n"}),
            ),
            final(),
        ),
        backend=BackendSpec(default=remote("files", stack.tools_queue)),
        permissions=[
            FilesystemPermission(operations=["write"], paths=["/review/**"], mode="interrupt")
        ],
    )
    handle = await stack.client.start_workflow(
        AgentWorkflow.run,
        input,
        id=f"wf-audit-{uuid.uuid4().hex[:8]}",
        task_queue=stack.agent_queue,
    )
    for _ in range(200):
        pending = await handle.query(AgentWorkflow.pending_approvals)
        if pending and not pending[0].preview_pending:
            break
        await asyncio.sleep(0.05)
    [approval] = pending
    await handle.execute_update(
        AgentWorkflow.decide_update,
        Decision(id=approval.id, decision="approve", reviewer="ana", via="cli"),
    )
    await handle.result()
    records = {r["tool_call_id"]: r for r in audit_lines(stack)}
    assert records["1:0:asked"]["outcome"] == "ok"
    assert records["1:0:asked"]["approved_by"] == "ana via cli"
    assert records["1:1:free"]["approved_by"] is None


async def test_naming_no_policies_keeps_required(stack: Stack) -> None:
    result = await stack.run(
        [],
        calls(
            ("lock", "write_file", {"file_path": "/locked/y.txt", "content": "no\n"}),
            ("key", "write_file", {"file_path": "/aws.txt", "content": f"id={AWS_KEY}\n"}),
        ),
    )
    out = results(result)
    assert out["lock"]["status"] == "error" and "policy 'protect'" in out["lock"]["content"]
    assert out["key"]["status"] == "success"  # the default was not asked for
    assert not (stack.root / "locked" / "y.txt").exists()


async def test_named_policy_applies(stack: Stack) -> None:
    result = await stack.run(
        ["no-secrets", "protect"],
        calls(("key", "write_file", {"file_path": "/k.txt", "content": f"{AWS_KEY}\n"})),
    )
    assert results(result)["key"]["status"] == "error"
    assert not (stack.root / "k.txt").exists()


async def test_unknown_policy_is_an_error_result(stack: Stack) -> None:
    result = await stack.run(
        ["no-such-policy"],
        calls(("w", "write_file", {"file_path": "/w.txt", "content": "x\n"})),
        calls(("l", "ls", {"path": "/"})),
    )
    out = results(result)
    assert result.stop_reason == "final_answer"
    assert out["w"]["status"] == "error" and "no-such-policy" in out["w"]["content"]
    assert out["l"]["status"] == "error"  # every call of the run names it
    assert not (stack.root / "w.txt").exists()


def test_worker_options() -> None:
    args = build_parser().parse_args(
        ["worker", "--role", "tools", "--backend", "sandbox", "--max-activities-per-second", "2.5"]
    )
    assert args.max_activities_per_second == 2.5 and args.backend == "sandbox"


def test_sandbox_backend_kind(tmp_path: Path) -> None:
    (tmp_path / "box").mkdir()
    backend = make_backend("sandbox", tmp_path / "box")
    assert isinstance(backend, BwrapSandboxBackend) and backend.can_execute


# -- start-time refusals (contract §11): policies vs execute, journal vs root ----


def _config(tmp_path: Path, **extra: Any) -> PolicyConfig:
    raw = json.loads(policy_json(tmp_path / "audit.jsonl"))
    raw["policies"].update(extra.pop("policies", {}))
    raw.update(extra)
    return PolicyConfig.model_validate(raw)


def test_path_policies_refuse_an_executing_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ALLOW_EXECUTE_ENV, raising=False)
    root, journal = made(tmp_path / "root"), tmp_path / "journal"
    shells: list[BackendProtocol] = [
        LocalShellBackend(root),
        BwrapSandboxBackend(root, check=False),
    ]
    for shell in shells:
        with pytest.raises(ConfigError, match="cannot constrain execute") as info:
            file_tools({"sh": shell}, journal, None, _config(tmp_path))
        assert "\n" not in str(info.value) and "deny_operations" in str(info.value)
        # Execute denied by a *required* policy, or an explicit opt-in: the worker starts.
        denied = _config(
            tmp_path,
            policies={"no-shell": {"kind": "deny_operations", "operations": ["execute"]}},
            required=["protect", "no-shell"],
        )
        file_tools({"sh": shell}, journal, None, denied)
        allowed = _config(tmp_path)
        file_tools({"sh": shell}, journal, None, allowed, allow_execute_with_policies=True)
    # A non-executing backend, or an executing one with only a rate limit: fine.
    file_tools({"fs": FilesystemBackend(str(root))}, journal, None, _config(tmp_path))
    throttle = {"policies": {"t": {"kind": "rate_limit", "calls_per_second": 5}}}
    file_tools({"sh": shells[0]}, journal, None, PolicyConfig.model_validate(throttle))
    # The consent in the environment is the CLI's and the plugin's to read: the
    # library takes it as a value and never reads it behind the caller's back.
    monkeypatch.setenv(ALLOW_EXECUTE_ENV, "1")
    with pytest.raises(ConfigError, match="cannot constrain execute"):
        file_tools({"sh": shells[0]}, journal, None, _config(tmp_path))
    consent = Settings.from_env().commands.allow_execute_with_policies
    file_tools(
        {"sh": shells[0]}, journal, None, _config(tmp_path), allow_execute_with_policies=consent
    )


def test_journal_inside_a_served_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    fs = FilesystemBackend(str(root))
    composite = CompositeBackend(StateBackend(), {"/mounted/": fs})
    for backend in (fs, composite):
        for journal in (root, root / ".filegate" / "journal"):
            with pytest.raises(ConfigError, match="inside the root"):
                file_tools({"b": backend}, journal, None, PolicyConfig())
    file_tools({"b": composite}, tmp_path / "journal", None, PolicyConfig())


def test_default_state_dir_never_lands_inside_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    monkeypatch.chdir(root)  # a worker started inside its workspace
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("FILEGATE_STATE_DIR", raising=False)
    argv = ["worker", "--role", "tools", "--backend", "filesystem", "--root", "."]
    argv += ["--task-queue", "q"]
    args = build_parser().parse_args(argv)
    _, _, journal = backend_from_args(args, Settings.from_env({}))
    assert journal == tmp_path / "xdg" / "filegate" / "journal" / "filesystem"
    outside = state_dir_outside(Settings.from_env({}).journal, [str(root)])
    assert outside == tmp_path / "xdg" / "filegate"
    # An explicit choice inside the root is refused, with the way out.
    inside_root = Settings.from_env({"FILEGATE_STATE_DIR": str(root / "state")})
    with pytest.raises(CliError, match="inside the root"):
        backend_from_args(args, inside_root)
    explicit = build_parser().parse_args([*argv, "--journal-dir", str(root / "j")])
    with pytest.raises(CliError, match="inside the root"):
        backend_from_args(explicit, Settings.from_env({}))


def test_execute_bounds_from_flags_and_settings(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    argv = ["worker", "--role", "tools", "--backend", "local-shell", "--root", str(tmp_path / "r")]
    flags = [
        "--exec-memory", "512MiB", "--exec-max-processes", "16", "--exec-file-size", "1MiB",
        "--sandbox-tmp-size", "8MiB", "--exec-max-seconds", "60",
    ]  # fmt: skip
    args = build_parser().parse_args([*argv, *flags, "--journal-dir", str(tmp_path / "j")])
    _, backend, _ = backend_from_args(args, Settings.from_env({}))
    assert isinstance(backend, LocalShellBackend)
    bounds = backend.bounds
    assert (bounds.memory_bytes, bounds.max_processes) == (512 << 20, 16)
    assert bounds.file_bytes == 1 << 20
    assert (bounds.tmp_bytes, bounds.max_seconds) == (8 << 20, 60)
    env = Settings.from_env({"FILEGATE_EXEC_MEMORY": "2GiB", "FILEGATE_EXEC_MAX_PROCESSES": "0"})
    plain = build_parser().parse_args([*argv, "--journal-dir", str(tmp_path / "j")])
    _, backend, _ = backend_from_args(plain, env)
    assert isinstance(backend, LocalShellBackend)
    assert (backend.bounds.memory_bytes, backend.bounds.max_processes) == (2 << 30, 0)
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--exec-memory", "lots"])
