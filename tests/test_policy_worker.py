"""Policies on a real tools worker: configured by env, named by the workflow (contract §8).

The worker reads ``FILEGATE_POLICY_JSON`` once when it is built; workflows only
name policies (``AgentInput.policies``). Runs go through the real Temporal dev
server and a Filesystem backend in a tmp dir, and the audit log is the real
JSON-lines file the worker writes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.policy import PolicyConfig
from filegate.cli.commands import build_parser
from filegate.kernel.protocol import BackendProtocol
from filegate.worker import make_backend
from filegate.workflows import AgentInput, AgentResult, BackendSpec
from temporalio.client import Client

from tests.test_workflow_e2e import (
    calls,
    final,
    remote,
    results,
    run_agent,
    running_agent,
    running_tools,
    scripted,
)

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
    """Agent worker + a tools worker whose policies come from the environment."""
    root = tmp_path / "files"
    (root / "locked").mkdir(parents=True)
    monkeypatch.delenv(PolicyConfig.ENV_FILE, raising=False)
    monkeypatch.setenv(PolicyConfig.ENV_JSON, policy_json(tmp_path / "audit" / "audit.jsonl"))
    backends: dict[str, BackendProtocol] = {
        "files": FilesystemBackend(str(root), virtual_mode=True)
    }
    async with (
        running_agent(temporal_client) as agent_queue,
        running_tools(temporal_client, backends, tmp_path / "journal") as tools_queue,
    ):
        yield Stack(temporal_client, agent_queue, tools_queue, root)


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
    backend = make_backend("sandbox", tmp_path / "box")
    assert isinstance(backend, BwrapSandboxBackend) and backend.can_execute
