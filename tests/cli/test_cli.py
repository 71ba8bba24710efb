"""The user-facing CLI as real subprocesses against the session Temporal and S3 servers.

``filegate run`` with a scripted file on a temp root (permissions, transcript,
workspace effects); a run waiting on interrupt approvals while other processes
list them and send all four decisions; bad ids and bad input refused with
clear messages and the documented exit codes.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError, TLSConfig

from filegate.backends.settings import Settings
from filegate.cli.approvals import decision_payload
from filegate.cli.commands import build_parser
from filegate.cli.connection import target_from
from filegate.cli.errors import CliError
from filegate.cli.run import load_permissions, parse_model
from filegate.devstack.s3 import S3DevServer
from filegate.devstack.servers import TemporalDevServer
from filegate.kernel.messages import ModelSpec
from filegate.plugin import connect
from filegate.wiring.connection import configured_store
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec
from filegate.workflows.approvals.handlers import DECIDED_APPROVALS, PENDING_APPROVALS
from filegate.workflows.gate import ToolInterrupt
from tests.run_chain import scope_of

pytestmark = pytest.mark.services

CLI = [sys.executable, "-m", "filegate"]
"""The command line as users run it (``python -m filegate`` is the ``filegate`` script)."""
ROLES = {"user", "assistant", "tool"}


@pytest.fixture
def cli_env(
    temporal_server: TemporalDevServer, s3_server: S3DevServer, tmp_path: Path
) -> dict[str, str]:
    """Environment pointing every CLI process at the session servers."""
    return env_for(temporal_server, s3_server, tmp_path)


def env_for(server: TemporalDevServer, s3: S3DevServer, tmp_path: Path) -> dict[str, str]:
    """Environment pointing a CLI process at ``server`` and ``s3``, nothing inherited."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FILEGATE_", "TEMPORAL_"))}
    env.update(
        TEMPORAL_ADDRESS=server.address,
        TEMPORAL_NAMESPACE=server.namespace,
        FILEGATE_S3_ENDPOINT=s3.endpoint,
        FILEGATE_S3_ACCESS_KEY=s3.access_key,
        FILEGATE_S3_SECRET_KEY=s3.secret_key,
        FILEGATE_STATE_DIR=str(tmp_path / "state"),
    )
    return env


def cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def cli_parallel(env: dict[str, str], *commands: list[str]) -> list[tuple[int, str, str]]:
    """Several CLI processes at once (each pays the interpreter start-up only in parallel)."""
    procs = [
        subprocess.Popen(
            [*CLI, *args],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for args in commands
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outputs, strict=True)]


def write_json(path: Path, data: Any) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": args}


def assert_transcript_shape(transcript: Any) -> None:
    """contract §10: a list of {role, content, tool_calls?, tool_call_id?, status?}."""
    assert isinstance(transcript, list) and transcript
    for message in transcript:
        assert message["role"] in ROLES
        assert set(message) <= {"role", "content", "tool_calls", "tool_call_id", "status"}
        content = message["content"]
        assert isinstance(content, str) or (
            isinstance(content, list) and all(isinstance(b, dict) and "type" in b for b in content)
        )
        for tc in message.get("tool_calls", []):
            assert set(tc) == {"id", "name", "args"} and isinstance(tc["args"], dict)
        if message["role"] == "tool":
            assert isinstance(message["tool_call_id"], str)
            assert message["status"] in ("success", "error")


def by_call(transcript: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["tool_call_id"]: m for m in transcript if m["role"] == "tool"}


def test_run_scripted_file(cli_env: dict[str, str], tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.py").write_text("x = 1  # FIXME\n")
    (root / "secret").mkdir()
    (root / "secret" / "key.txt").write_text("k\n")
    script = write_json(
        tmp_path / "script.json",
        {
            "turns": [
                {"tool_calls": [
                    call("r", "read_file", file_path="/src/main.py"),
                    call("g", "grep", pattern="FIXME"),
                    call("l", "ls", path="/"),
                ]},
                {"tool_calls": [
                    call("e", "edit_file", file_path="/src/main.py",
                         old_string="# FIXME", new_string="# fixed"),
                    call("w", "write_file", file_path="/out/notes.md", content="notes\n"),
                    call("d", "write_file", file_path="/secret/key.txt", content="stolen"),
                    call("x", "delete", file_path="/secret"),
                ]},
                {"content": "all good"},
            ]
        },
    )  # fmt: skip
    perms = write_json(
        tmp_path / "perms.json",
        [{"operations": ["write"], "paths": ["/secret/**"], "mode": "deny"}],
    )
    out = tmp_path / "out" / "transcript.json"
    began = time.monotonic()
    proc = cli(cli_env, "run", "tidy up", "--model", f"scripted:{script}", "--root", str(root),
               "--permissions", perms, "--transcript", str(out))  # fmt: skip
    elapsed = time.monotonic() - began
    assert proc.returncode == 0, proc.stdout + proc.stderr
    match = re.search(r"^workflow id: (\S+)$", proc.stdout, re.M)
    assert match and match.group(1).startswith("filegate-run-")
    assert "final answer: all good" in proc.stdout
    transcript = json.loads(out.read_text())
    assert_transcript_shape(transcript)
    assert transcript[0] == {"role": "user", "content": "tidy up"}
    assert transcript[-1]["role"] == "assistant" and transcript[-1]["content"] == "all good"
    results = by_call(transcript)
    assert results["r"]["status"] == "success" and "FIXME" in results["r"]["content"]
    assert results["g"]["content"] == "/src/main.py"
    assert set(results["l"]["content"].splitlines()) == {"/secret/", "/src/"}
    assert results["e"]["status"] == "success"
    assert results["w"]["status"] == "success"
    assert results["d"]["status"] == "error" and "denied" in results["d"]["content"]
    assert results["x"]["status"] == "error" and "/secret/**" in results["x"]["content"]
    assert (root / "src" / "main.py").read_text() == "x = 1  # fixed\n"
    assert (root / "out" / "notes.md").read_text() == "notes\n"
    assert (root / "secret" / "key.txt").read_text() == "k\n"
    assert elapsed < 30, f"run took {elapsed:.1f}s"


async def test_run_waits_for_decisions_from_other_processes(
    cli_env: dict[str, str], temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    writes = [
        call(n, "write_file", file_path=f"/docs/{n}.txt", content=f"orig {n}")
        for n in ("a", "b", "c", "d")
    ]
    script = write_json(
        tmp_path / "script.json",
        {"turns": [{"tool_calls": writes}, {"content": "decided"}]},
    )
    perms = write_json(
        tmp_path / "perms.json",
        [{"operations": ["write"], "paths": ["/docs/**"], "mode": "interrupt"}],
    )
    workflow_id = f"cli-approvals-{uuid.uuid4().hex[:8]}"
    transcript_path = tmp_path / "t.json"
    run = subprocess.Popen(
        [*CLI, "run", "write docs", "--model", f"scripted:{script}",
         "--root", str(root), "--permissions", perms, "--transcript", str(transcript_path),
         "--workflow-id", workflow_id],
        env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        handle = temporal_client.get_workflow_handle(workflow_id)

        async def four_pending() -> list[Any]:
            deadline = time.monotonic() + 30
            while True:
                with contextlib.suppress(RPCError, WorkflowQueryFailedError):
                    found = await handle.query(AgentWorkflow.pending_approvals)
                    if len(found) == 4:
                        return found
                assert time.monotonic() < deadline, "the run never asked for 4 approvals"
                await asyncio.sleep(0.2)

        ids = {a.args["file_path"]: a.id for a in await four_pending()}
        assert not (root / "docs").exists()  # nothing ran while waiting
        # The embedded server has the approval counters registered, so the run
        # was started with them and keeps them current (one visibility query
        # finds it).
        attrs = (await handle.describe()).typed_search_attributes
        assert attrs.get(PENDING_APPROVALS) == 4 and attrs.get(DECIDED_APPROVALS) == 0
        listing, status, bad, bad_edit = cli_parallel(
            cli_env,
            ["approvals", "--json"],
            ["status", workflow_id],
            ["approve", "nope", "--workflow", workflow_id],
            ["edit", ids["/docs/d.txt"], "--workflow", workflow_id,
             "--args", json.dumps({"file_path": "/../x", "content": "y"})],
        )  # fmt: skip
        # 3: another test's workflow in the shared namespace did not answer (it may wait)
        assert listing[0] in (0, 3), listing[2]
        approvals = [a for a in json.loads(listing[1]) if a["workflow_id"] == workflow_id]
        for item in approvals:
            assert set(item) == {"workflow_id", "id", "tool", "args", "rule"}
            assert item["tool"] == "write_file" and item["rule"]["mode"] == "interrupt"
        assert {item["args"]["file_path"]: item["id"] for item in approvals} == ids
        assert status[0] == 0 and '"awaiting_approval"' in status[1]
        assert bad[0] == 1 and "no pending approval with id 'nope'" in bad[2]
        assert bad_edit[0] == 1 and "edited args refused" in bad_edit[2]

        decisions = [
            ["approve", ids["/docs/a.txt"], "--reviewer", "bo"],
            ["reject", ids["/docs/b.txt"], "--reason", "not today"],
            ["respond", ids["/docs/c.txt"], "--message", "c is handled elsewhere"],
            ["edit", ids["/docs/d.txt"], "--args",
             json.dumps({"file_path": "/docs/d.txt", "content": "edited d"})],
        ]  # fmt: skip
        acks = cli_parallel(
            cli_env, *([kind, approval_id, "--workflow", workflow_id, *extra]
                       for kind, approval_id, *extra in decisions)
        )  # fmt: skip
        for (kind, approval_id, *_), (code, out, err) in zip(decisions, acks, strict=True):
            assert code == 0, err
            assert f"{kind}: approval {approval_id}" in out
            assert f"(by {'bo' if kind == 'approve' else getpass.getuser()} via cli)" in out
        output, _ = await asyncio.to_thread(run.communicate, timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, output
    assert f"filegate approve {ids['/docs/a.txt']} --workflow {workflow_id}" in output
    assert (root / "docs" / "a.txt").read_text() == "orig a"
    assert not (root / "docs" / "b.txt").exists()
    assert not (root / "docs" / "c.txt").exists()
    assert (root / "docs" / "d.txt").read_text() == "edited d"
    transcript = json.loads(transcript_path.read_text())
    assert_transcript_shape(transcript)
    results = by_call(transcript)
    assert results["a"]["status"] == "success"
    assert "approved by bo via cli" in results["a"]["content"]
    assert results["b"]["status"] == "error" and "not today" in results["b"]["content"]
    assert f"({getpass.getuser()} via cli)" in results["b"]["content"]
    assert results["c"]["content"].endswith("answered it instead]\nc is handled elsewhere")
    assert "reviewer changed" in results["d"]["content"]


async def test_decisions_fail_cleanly_without_a_target(
    cli_env: dict[str, str], temporal_client: Client
) -> None:
    """Unknown workflow: exit 1 at once. Workflow nobody serves: exit 1 after --timeout."""
    orphan = f"orphan-{uuid.uuid4().hex[:6]}"
    handle = await temporal_client.start_workflow(
        AgentWorkflow.run, AgentInput(task="x"), id=orphan, task_queue=f"nobody-{orphan}"
    )
    try:
        missing, unserved = cli_parallel(
            cli_env,
            ["reject", "a1", "--workflow", f"missing-{uuid.uuid4().hex[:6]}"],
            ["approve", "a1", "--workflow", orphan, "--timeout", "2"],
        )
    finally:
        await handle.terminate("test over")
    assert missing[0] == 1 and "no workflow missing-" in missing[2] and "in namespace" in missing[2]
    assert unserved[0] == 1 and f"no worker answered for {orphan} within 2 s" in unserved[2]
    for result in (missing, unserved):
        assert "Traceback" not in result[2]


def test_bad_input_is_a_usage_error(cli_env: dict[str, str], tmp_path: Path) -> None:
    perms = write_json(
        tmp_path / "p.json", [{"operations": ["write"], "paths": ["/x/**"], "mode": "deny"}]
    )
    script = write_json(tmp_path / "s.json", {"turns": [{"content": "hi"}]})
    (tmp_path / "ws").mkdir()
    bad_json, shell = cli_parallel(
        cli_env,
        ["edit", "a1", "--workflow", "wf", "--args", "{not json"],
        ["run", "t", "--model", f"scripted:{script}", "--root", str(tmp_path / "ws"),
         "--permissions", perms, "--shell"],
    )  # fmt: skip
    assert bad_json[0] == 2 and "--args is not valid JSON" in bad_json[2]
    assert shell[0] == 2 and "host shell" in shell[2] and "rule 1" in shell[2]


# --------------------------------------------------------------------------- in-process parsing


def test_decisions_say_who_decided(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--reviewer`` (default: the OS user) and ``via: cli`` go with every CLI decision."""
    parser = build_parser()
    args = parser.parse_args(["approve", "0123456789abcdef", "--workflow", "wf"])
    assert decision_payload(args) == {
        "id": "0123456789abcdef", "decision": "approve",
        "reviewer": getpass.getuser(), "via": "cli",
    }  # fmt: skip
    args = parser.parse_args(["reject", "x", "--workflow", "wf", "--reviewer", "ana"])
    assert decision_payload(args)["reviewer"] == "ana"
    with pytest.raises(CliError, match="--reviewer"):
        decision_payload(parser.parse_args(["approve", "x", "--workflow", "w", "--reviewer", " "]))


def test_parse_model(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"turns": [{"content": "x"}]}))
    spec = parse_model(f"scripted:{script}")
    # Sent inline: the agent worker never opens a path from the workflow input.
    assert spec.provider == "scripted" and spec.name == ""
    assert spec.options == {"script": {"turns": [{"content": "x"}]}}
    assert parse_model("openai:gpt-4o-mini").name == "gpt-4o-mini"
    assert parse_model("anthropic:claude-x").provider == "anthropic"
    for bad in ("gpt-4o", "openai:", ":x", "a b:x"):
        with pytest.raises(CliError, match="--model"):
            parse_model(bad)
    with pytest.raises(CliError, match="no model profile 'mystery'"):
        parse_model("mystery:x", known=["openai", "anthropic", "scripted"])
    assert parse_model("mystery:x").provider == "mystery"  # submit: the deployment decides
    script.write_text(json.dumps({"turns": [{}]}))
    with pytest.raises(CliError, match=r"turns\.0"):
        parse_model(f"scripted:{script}")
    with pytest.raises(CliError, match="cannot read script"):
        parse_model(f"scripted:{tmp_path / 'absent.json'}")


def test_load_permissions(tmp_path: Path) -> None:
    good = write_json(tmp_path / "g.json", [{"operations": ["read"], "paths": ["/a/**"]}])
    [rule] = load_permissions(good)
    assert rule.mode == "allow" and rule.paths == ["/a/**"]
    assert load_permissions(None) == []
    with pytest.raises(CliError, match="JSON list"):
        load_permissions(write_json(tmp_path / "o.json", {"operations": ["read"]}))
    with pytest.raises(CliError, match="invalid rule"):
        load_permissions(write_json(tmp_path / "b.json", [{"operations": ["x"], "paths": ["/"]}]))


def test_target_configured_only_when_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from argparse import Namespace

    for name in list(os.environ):
        if name.startswith(("TEMPORAL_", "FILEGATE_")):
            monkeypatch.delenv(name)
    default = target_from(Namespace())
    assert not default.configured and default.settings.temporal.address == "127.0.0.1:7233"
    assert default.tls is None
    monkeypatch.setenv("TEMPORAL_ADDRESS", "10.0.0.9:7233")
    from_env = target_from(Namespace())
    assert from_env.configured and from_env.settings.temporal.address == "10.0.0.9:7233"
    flag = target_from(Namespace(address="h:1", namespace="ns"))
    assert flag.settings.temporal.address == "h:1" and flag.settings.temporal.namespace == "ns"
    with pytest.raises(CliError, match="go together"):
        target_from(Namespace(tls_cert="/c.pem"))
    # TLS files: flags win, then FILEGATE_TLS_*, then the temporal CLI's variables.
    (tmp_path / "ca.pem").write_bytes(b"CA")
    (tmp_path / "c.pem").write_bytes(b"CERT")
    (tmp_path / "k.pem").write_bytes(b"KEY")
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", str(tmp_path / "ca.pem"))
    tls = target_from(Namespace()).tls
    assert isinstance(tls, TLSConfig)
    assert tls.server_root_ca_cert == b"CA" and tls.client_cert is None
    monkeypatch.setenv("FILEGATE_TLS_CERT", str(tmp_path / "c.pem"))
    tls = target_from(Namespace(tls_key=str(tmp_path / "k.pem"))).tls
    assert isinstance(tls, TLSConfig)
    assert (tls.client_cert, tls.client_private_key) == (b"CERT", b"KEY")
    with pytest.raises(CliError, match="cannot read client key"):
        target_from(Namespace(tls_key=str(tmp_path / "absent.pem")))


# --------------------------------------------------------------------------- shared payload codec


def settings_of(env: dict[str, str]) -> Settings:
    settings = Settings.from_env(env)
    temporal = settings.temporal.model_copy(update={"address": env["TEMPORAL_ADDRESS"]})
    return settings.model_copy(update={"temporal": temporal})


def start_worker(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "worker", *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def stop_worker(proc: subprocess.Popen[str]) -> str:
    """SIGTERM (graceful shutdown), then its output; killed if it does not stop."""
    proc.terminate()
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


async def test_worker_processes_and_clients_share_the_payload_codec(
    cli_env: dict[str, str], temporal_client: Client, tmp_path: Path
) -> None:
    """`filegate worker` processes with S3 configured: the agent keeps transcripts in S3,
    payloads over the codec threshold travel as references, and `approvals` (another process)
    decodes them; a client without the codec cannot."""
    root = tmp_path / "ws"
    root.mkdir()
    content = "".join(f"row {i:05d} " + "c" * 80 + "\n" for i in range(2000))  # ~180 KB
    queue = f"cli-codec-{uuid.uuid4().hex[:8]}"
    workers = [
        start_worker(cli_env, "--role", "agent", "--task-queue", f"{queue}.agent"),
        start_worker(cli_env, "--role", "tools", "--backend", "filesystem", "--root", str(root),
                     "--name", "fs", "--task-queue", f"{queue}.tools"),
    ]  # fmt: skip
    client = await connect(settings_of(cli_env))  # the store from FILEGATE_S3_*
    store = await configured_store(settings_of(cli_env).s3)
    assert store is not None and client.data_converter.payload_codec is not None
    workflow_id = f"cli-codec-{uuid.uuid4().hex[:8]}"
    script = {"turns": [
        {"tool_calls": [call("w", "write_file", file_path="/big.txt", content=content)]},
        {"tool_calls": [call("r", "read_file", file_path="/big.txt", offset=1999, limit=1)]},
        {"content": "written"},
    ]}  # fmt: skip
    input = AgentInput(
        task="write the big file",
        model=ModelSpec(provider="scripted", options={"script": script}),
        backend=BackendSpec(
            default=BackendRef(kind="remote", name="fs", task_queue=f"{queue}.tools")
        ),
        interrupt_on={"write_file": ToolInterrupt(always=True)},
    )
    try:
        handle = await client.start_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=f"{queue}.agent"
        )
        deadline = time.monotonic() + 30
        while not await handle.query(AgentWorkflow.pending_approvals):
            assert time.monotonic() < deadline, "no approval was requested"
            await asyncio.sleep(0.2)
        # The pending call carries the 180 KB content, yet the query answer stays
        # inline (it never enters history): a client without the codec reads it.
        [raw] = await temporal_client.get_workflow_handle(workflow_id).query(
            AgentWorkflow.pending_approvals
        )
        assert raw.args["content"] == content
        listing = await asyncio.to_thread(
            cli, cli_env, "approvals", "--json", "--workflow", workflow_id
        )
        assert listing.returncode == 0, listing.stderr
        [item] = json.loads(listing.stdout)
        assert item["args"]["content"] == content
        approve = await asyncio.to_thread(
            cli, cli_env, "approve", item["id"], "--workflow", workflow_id
        )
        assert approve.returncode == 0, approve.stderr
        result = await handle.result()
    finally:
        outputs = [await asyncio.to_thread(stop_worker, proc) for proc in workers]
    assert result.final_answer == "written", outputs
    assert (root / "big.txt").read_text() == content
    assert "row 01999" in by_call(result.transcript)["r"]["content"]
    # The agent worker process kept the model-facing transcript in S3 (by reference).
    scope = await scope_of(temporal_client, workflow_id)
    keys = store.list_thread(scope)
    assert [k for k in keys if "/transcript/" in k] == [
        store.key_for(scope, f"transcript/{n:06d}") for n in range(3)
    ]
    for proc in workers:
        assert proc.returncode == 0, outputs


def test_agent_worker_local_backend_needs_a_root(cli_env: dict[str, str]) -> None:
    """--local-backend names a backend like --role tools does: a missing --root is exit 2."""
    proc = cli(cli_env, "worker", "--role", "agent", "--local-backend", "--backend", "filesystem")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--root is required for the filesystem backend" in proc.stderr
