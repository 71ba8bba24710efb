"""``filegate run`` flags and refusals (issue 16), as real subprocesses.

The default system prompt reaching a local OpenAI-wire server (and
``--system-prompt`` / ``--extend-system-prompt`` replacing or extending it);
``--root`` that does not exist and broken permission files refused with one
line; a rerun under a running or finished ``--workflow-id`` refused, never
attached silently; ``--interrupt-on``, ``--max-steps`` and ``--shell`` with
rules when every ``execute`` waits for approval.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError

from filegate.cli.run import tools_queue_for
from filegate.workflows import AgentWorkflow
from tests.cli.test_cli import CLI, call, cli, cli_env, cli_parallel, write_json
from tests.providers_http import FakeModelServer

__all__ = ["cli_env"]  # the fixture, shared with test_cli

pytestmark = pytest.mark.services


def completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_default_system_prompt_reaches_an_openai_wire_server(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "extra.md").write_text("Answer in French.")
    env = {**cli_env, "OPENAI_BASE_URL": "", "OPENAI_API_KEY": "sk-local-test"}
    with FakeModelServer() as server:
        env["OPENAI_BASE_URL"] = f"{server.url}/v1"
        for _ in range(3):
            server.queue(body=completion("done"))
        base = ["--model", "openai:gpt-test", "--root", str(root)]
        runs = cli_parallel(
            env,
            ["run", "task-default", *base],
            ["run", "task-replaced", *base, "--system-prompt", "You only list files."],
            ["run", "task-extended", *base, "--extend-system-prompt", f"@{tmp_path / 'extra.md'}"],
        )
        for code, out, err in runs:
            assert code == 0, out + err
            assert "final answer: done" in out
        sent = {r.json["messages"][-1]["content"]: r.json["messages"] for r in server.requests}
    default = sent["task-default"]
    assert default[0]["role"] == "system", "a real model got no system message"
    prompt = default[0]["content"]
    assert "virtual filesystem" in prompt and "absolute" in prompt and "`/src/main.py`" in prompt
    assert "Read a file with read_file before you edit it" in prompt
    assert "/large_tool_results/" in prompt and "offset" in prompt
    assert "/conversation_history/" in prompt
    assert "approval" in prompt and "reject" in prompt
    assert default[1] == {"role": "user", "content": "task-default"}
    assert sent["task-replaced"][0] == {"role": "system", "content": "You only list files."}
    extended = sent["task-extended"][0]["content"]
    assert extended.startswith(prompt) and extended.endswith("Answer in French.")


def test_bad_root_and_rules_are_one_line(cli_env: dict[str, str], tmp_path: Path) -> None:
    script = write_json(tmp_path / "s.json", {"turns": [{"content": "hi"}]})
    missing = tmp_path / "nonexistent"
    (tmp_path / "ws").mkdir()
    (tmp_path / "file").write_text("x")
    bad_rule = write_json(
        tmp_path / "bad.json",
        [
            {"operations": ["read"], "paths": ["/a/**"]},
            {"operations": ["frobnicate"], "paths": ["/"], "mode": "sometimes"},
        ],
    )
    bad_interrupt = write_json(tmp_path / "i.json", {"execute": {"always": "maybe"}})
    base = ["run", "t", "--model", f"scripted:{script}"]
    ws = ["--root", str(tmp_path / "ws")]
    results = cli_parallel(
        cli_env,
        [*base, "--root", str(missing)],
        [*base, "--root", str(tmp_path / "file")],
        [*base, *ws, "--permissions", bad_rule],
        [*base, *ws, "--interrupt-on", bad_interrupt],
        [*base, *ws, "--max-steps", "0"],
    )
    lines = [
        one_line_error(subprocess.CompletedProcess([], code, out, err))
        for code, out, err in results
    ]
    assert lines[0] == f"filegate: --root {missing}: no such directory (create it first)"
    assert not missing.exists()
    assert "not a directory" in lines[1]
    assert f"invalid rule 1 in {bad_rule}: operations.0:" in lines[2]
    assert "(and 1 more)" in lines[2]
    assert "execute: always:" in lines[3]
    assert "--max-steps 0" in lines[4]


async def _pending(client: Client, workflow_id: str, count: int = 1) -> list[Any]:
    handle = client.get_workflow_handle(workflow_id)
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(RPCError, WorkflowQueryFailedError):
            found = await handle.query(AgentWorkflow.pending_approvals)
            if len(found) >= count:
                return list(found)
        assert time.monotonic() < deadline, "the run never asked for approval"
        await asyncio.sleep(0.2)


async def test_rerun_of_a_workflow_id_is_refused_not_attached(
    cli_env: dict[str, str], temporal_client: Client, tmp_path: Path
) -> None:
    first_root, second_root = tmp_path / "first", tmp_path / "second"
    first_root.mkdir()
    second_root.mkdir()
    script = write_json(
        tmp_path / "s.json",
        {"turns": [
            {"tool_calls": [call("w", "write_file", file_path="/docs/a.txt", content="a")]},
            {"content": "wrote"},
        ]},
    )  # fmt: skip
    perms = write_json(
        tmp_path / "p.json", [{"operations": ["write"], "paths": ["/docs/**"], "mode": "interrupt"}]
    )
    workflow_id = f"rerun-{uuid.uuid4().hex[:8]}"
    run = [
        "run", "write a", "--model", f"scripted:{script}", "--permissions", perms,
        "--workflow-id", workflow_id,
    ]  # fmt: skip
    first = subprocess.Popen(
        [*CLI, *run, "--root", str(first_root)],
        env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        [approval] = await _pending(temporal_client, workflow_id)
        while_running, wrong_root = await asyncio.to_thread(
            cli_parallel,
            cli_env,
            [*run, "--root", str(second_root)],
            [*run, "--root", str(second_root), "--resume"],
        )
        assert while_running[0] == 2, while_running
        assert f"workflow {workflow_id} is still running" in while_running[2]
        assert "--resume" in while_running[2]
        assert wrong_root[0] == 2 and f"works on {first_root}, not {second_root}" in wrong_root[2]
        approve = await asyncio.to_thread(
            cli, cli_env, "approve", approval.id, "--workflow", workflow_id
        )
        assert approve.returncode == 0, approve.stderr
        output, _ = await asyncio.to_thread(first.communicate, timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 0, output
    assert (first_root / "docs" / "a.txt").read_text() == "a"
    assert not any(second_root.iterdir()), "the old workflow wrote into the new root"

    after = await asyncio.to_thread(cli, cli_env, *run, "--root", str(second_root))
    assert after.returncode == 2
    assert f"workflow {workflow_id} already finished (completed)" in after.stderr
    assert "--new-run" in after.stderr
    no_perms = [a for a in run if a not in ("--permissions", perms)]
    again = await asyncio.to_thread(
        cli, cli_env, *no_perms, "--root", str(second_root), "--new-run"
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"starting a new run of workflow {workflow_id}" in again.stdout
    assert (second_root / "docs" / "a.txt").read_text() == "a"


async def test_shell_with_rules_when_execute_waits_for_approval(
    cli_env: dict[str, str], temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    (root / "secret").mkdir(parents=True)
    script = write_json(
        tmp_path / "s.json",
        {"turns": [
            {"tool_calls": [call("x", "execute", command="echo hi > out.txt")]},
            {"tool_calls": [call("w", "write_file", file_path="/secret/k", content="k")]},
            {"content": "never reached"},
        ]},
    )  # fmt: skip
    perms = write_json(
        tmp_path / "p.json", [{"operations": ["write"], "paths": ["/secret/**"], "mode": "deny"}]
    )
    gated = write_json(tmp_path / "i.json", {"execute": True})
    workflow_id = f"shell-gated-{uuid.uuid4().hex[:8]}"
    transcript = tmp_path / "t.json"
    run = subprocess.Popen(
        [*CLI, "run", "shell", "--model", f"scripted:{script}", "--root", str(root), "--shell",
         "--permissions", perms, "--interrupt-on", gated, "--max-steps", "2",
         "--workflow-id", workflow_id, "--transcript", str(transcript)],
        env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        [approval] = await _pending(temporal_client, workflow_id)
        assert approval.tool == "execute"
        assert not (root / "out.txt").exists()
        approve = await asyncio.to_thread(
            cli, cli_env, "approve", approval.id, "--workflow", workflow_id
        )
        assert approve.returncode == 0, approve.stderr
        output, _ = await asyncio.to_thread(run.communicate, timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, output
    assert "completed: max_steps after 2 model calls" in output
    assert (root / "out.txt").read_text() == "hi\n"
    assert not (root / "secret" / "k").exists()
    results = {m["tool_call_id"]: m for m in json.loads(transcript.read_text()) if "status" in m}
    assert results["w"]["status"] == "error" and "denied" in results["w"]["content"]

    # Without the gate the combination is still refused.
    ungated = await asyncio.to_thread(
        cli, cli_env, "run", "t", "--model", f"scripted:{script}", "--root", str(root),
        "--shell", "--permissions", perms,
    )  # fmt: skip
    assert ungated.returncode == 2 and "interrupt_on execute: always" in ungated.stderr


def test_provider_outage_is_one_line_per_attempt(cli_env: dict[str, str], tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    with FakeModelServer() as server:
        env = {**cli_env, "OPENAI_BASE_URL": f"{server.url}/v1", "OPENAI_API_KEY": "sk-local"}
        server.queue(503, {"error": {"message": "upstream overloaded"}})
        server.queue(503, {"error": {"message": "upstream overloaded"}})
        server.queue(body=completion("back"))
        proc = cli(env, "run", "t", "--model", "openai:gpt-test", "--root", str(root))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    failures = [line for line in proc.stdout.splitlines() if line.startswith("  !! model call")]
    assert len(failures) == 2, proc.stdout
    assert failures[0].startswith("  !! model call failed (attempt 1): ")
    assert "503" in failures[0] or "overloaded" in failures[0]
    assert proc.stderr.strip() == "", proc.stderr
    assert "final answer: back" in proc.stdout


def test_tools_queues_are_unique_per_root(tmp_path: Path) -> None:
    """A run's tool calls can only reach a tools worker serving the same root."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    same = tools_queue_for("wf", tmp_path / "a")
    assert same == tools_queue_for("wf", tmp_path / "a" / ".." / "a")
    assert same != tools_queue_for("wf", tmp_path / "b")
    assert same != tools_queue_for("wf2", tmp_path / "a")


def test_run_and_its_shell_keep_the_command_bounds_from_the_environment(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """``FILEGATE_EXEC_FILE_SIZE`` bounds a command of ``filegate run --shell`` as it
    does one of ``filegate worker``: the run's in-process shell was built with the
    default bounds, and a command wrote as much as it liked."""
    root = tmp_path / "ws"
    root.mkdir()
    script = write_json(
        tmp_path / "s.json",
        {"turns": [
            {"tool_calls": [call("x", "execute", command="head -c 200000 /dev/zero > big")]},
            {"content": "done"},
        ]},
    )  # fmt: skip
    env = {**cli_env, "FILEGATE_EXEC_FILE_SIZE": "16384"}
    run = cli(env, "run", "fill", "--model", f"scripted:{script}", "--root", str(root), "--shell")
    assert run.returncode == 0, run.stderr
    assert (root / "big").stat().st_size <= 16384
