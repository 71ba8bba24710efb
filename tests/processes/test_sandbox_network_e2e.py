# ruff: noqa: F811  (pytest fixtures imported from tests.sandbox_fixtures / tests.cli.test_cli)
"""Network rules through every entry point (issue 51), on real servers.

The same two commands -- one to a host's loopback web server a rule allows,
one to a host no rule names -- through ``AgentWorkflow``, ``FileTools`` in a
workflow of one's own, and ``filegate run --sandbox --permissions``: the
first reaches the server, the second is refused with its reason in the
model's result, and the history holds host, port and decision only. A rule
that cannot be enforced (a host shell, an ``interrupt`` network rule) is
refused in one line before anything runs.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from temporalio.client import Client
from temporalio.worker import Worker

from filegate import FilegatePlugin
from filegate.backends.audit import FileAuditSink
from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.backends.policy import PolicyBackend
from filegate.devstack.servers import TemporalDevServer
from filegate.kernel.execute_gate import ExecuteGateError
from filegate.kernel.network_rules import NetworkPermission
from filegate.workflows import AgentInput, AgentWorkflow, BackendRef, BackendSpec, FileToolsConfig
from tests.cli.test_cli import CLI, cli_env, write_json  # noqa: F401  (cli_env: a fixture)
from tests.net_servers import token_server
from tests.processes.test_one_filesystem_e2e import decoded, sandbox
from tests.roots import made
from tests.sandbox_fixtures import _bwrap_ok  # noqa: F401  (fixture)
from tests.scripting import calls, scripted, uid
from tests.worker.test_observability import OtlpReceiver, receiver  # noqa: F401 (fixture)
from tests.workflows.test_execute_gate import ToolListWorkflow, running_host
from tests.workflows.test_workflow_e2e import results, running_agent, running_tools

pytestmark = pytest.mark.services

TOKEN = "net-e2e-" + uuid.uuid4().hex
SECRET_PATH = "/private-" + uuid.uuid4().hex[:8]
"""A URL path: the network record says host, port and decision, never the URL."""


@pytest.fixture
def web() -> Iterator[int]:
    with token_server(TOKEN) as (port, _):
        yield port


def rules(port: int) -> list[NetworkPermission]:
    return [NetworkPermission(hosts=["127.0.0.1"], ports=[port])]


def commands(port: int) -> list[tuple[str, str, dict[str, str]]]:
    return [
        ("ok", "execute", {"command": f"curl -sS http://127.0.0.1:{port}{SECRET_PATH}"}),
        ("no", "execute", {"command": "curl -sS https://api.example.test/v1"}),
    ]


def check(ok: str, no: str, history: str) -> None:
    assert TOKEN in ok and "[network: reached 127.0.0.1:" in ok, ok
    assert "[network: refused api.example.test:443: no network rule names" in no, no
    network = [line for line in ok.splitlines() if line.startswith("[network:")]
    assert network and not any(SECRET_PATH in line for line in network)
    assert '"network":[{"host":"api.example.test","port":443,"allowed":false' in history


async def test_agent_workflow_commands_reach_what_the_rules_allow(
    temporal_client: Client, tmp_path: Path, _bwrap_ok: None, web: int
) -> None:
    box = BwrapSandboxBackend(made(tmp_path / "ws"), check=False)
    async with (
        running_tools(temporal_client, {"box": box}, tmp_path / "j") as tools_queue,
        running_agent(temporal_client) as agent_queue,
    ):
        workflow_id = f"net-{uuid.uuid4().hex[:10]}"
        model = scripted(calls(*commands(web)), {"content": "done"})
        result = await temporal_client.execute_workflow(
            AgentWorkflow.run,
            AgentInput(task="go", model=model, backend=sandbox(tools_queue), network=rules(web)),
            id=workflow_id,
            task_queue=agent_queue,
        )
        history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
    out = results(result)
    check(str(out["ok"]["content"]), str(out["no"]["content"]), decoded(history))


async def test_file_tools_in_an_own_workflow_commands_reach_what_the_rules_allow(
    temporal_client: Client, tmp_path: Path, _bwrap_ok: None, web: int
) -> None:
    box = BwrapSandboxBackend(made(tmp_path / "ws"), check=False)
    tool_calls = [{"id": i, "name": n, "args": a} for i, n, a in commands(web)]
    async with running_tools(temporal_client, {"box": box}, tmp_path / "j") as queue:
        config = FileToolsConfig(backend=sandbox(queue), network=rules(web))
        async with running_host(temporal_client) as host_queue:
            workflow_id = f"net-own-{uuid.uuid4().hex[:10]}"
            result = await temporal_client.execute_workflow(
                ToolListWorkflow.run,
                args=[config, tool_calls],
                id=workflow_id,
                task_queue=host_queue,
            )
            history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
    answers = result["answers"]
    check(answers["ok"]["text"], answers["no"]["text"], decoded(history))


async def test_cli_run_sandbox_takes_network_rules_from_the_permissions_file(
    cli_env: dict[str, str], temporal_client: Client, tmp_path: Path, _bwrap_ok: None, web: int
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    script = write_json(tmp_path / "s.json", {"turns": [calls(*commands(web)), {"content": "d"}]})
    perms = write_json(
        tmp_path / "p.json",
        [
            {"operations": ["write"], "paths": ["/docs/**"], "mode": "deny"},
            {"hosts": ["127.0.0.1"], "ports": [web], "mode": "allow"},
        ],
    )
    transcript = tmp_path / "t.json"
    workflow_id = f"net-cli-{uuid.uuid4().hex[:10]}"
    run = await asyncio.to_thread(
        subprocess.run,
        [*CLI, "run", "t", "--model", f"scripted:{script}", "--root", str(root), "--sandbox",
         "--permissions", perms, "--transcript", str(transcript), "--workflow-id", workflow_id],
        env=cli_env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    out = {m["tool_call_id"]: m for m in json.loads(transcript.read_text()) if "status" in m}
    history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
    check(str(out["ok"]["content"]), str(out["no"]["content"]), decoded(history))


# --------------------------------------------------------------------------- refused at start


def _no_turns(tmp_path: Path) -> str:
    return "scripted:" + str(write_json(tmp_path / "s.json", {"turns": []}))


def test_network_rules_beside_a_host_shell_are_refused() -> None:
    host = BackendSpec(default=BackendRef(kind="local", name="sh", can_execute=True))
    config = FileToolsConfig(backend=host, network=[NetworkPermission(hosts=["pypi.org"])])
    with pytest.raises(ExecuteGateError, match="network rules need the bubblewrap sandbox"):
        config.check_execute_gate()
    FileToolsConfig(backend=host).check_execute_gate()  # no rule: nothing to refuse


def test_an_interrupt_network_rule_is_taken_where_a_human_can_be_asked() -> None:
    box = BackendSpec(
        default=BackendRef(
            kind="remote", name="b", task_queue="q", can_execute=True, sandboxed=True
        )
    )
    rule = NetworkPermission(hosts=["pypi.org"], mode="interrupt")
    FileToolsConfig(backend=box, network=[rule]).check_execute_gate()  # AgentWorkflow, FileTools


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"hosts": ["*"]}, "'*' would allow every host"),
        ({"hosts": ["pypi.org"], "ports": [0]}, "ports must be 1-65535"),
        ({"hosts": ["bad host"]}, "is not a plain DNS name"),
    ],
)
def test_cli_refuses_a_network_rule_it_cannot_enforce_in_one_line(
    cli_env: dict[str, str], tmp_path: Path, rule: dict[str, object], message: str
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    perms = write_json(tmp_path / "p.json", [rule])
    run = subprocess.run(
        [*CLI, "run", "t", "--model", _no_turns(tmp_path),
         "--root", str(root), "--sandbox", "--permissions", perms],
        env=cli_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], run.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--shell"], "network rules need the bubblewrap sandbox"),
        ([], "no command runs here (execute is not offered)"),
    ],
)
def test_cli_without_the_sandbox_refuses_network_rules(
    cli_env: dict[str, str], tmp_path: Path, flags: list[str], message: str
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    perms = write_json(tmp_path / "p.json", [{"hosts": ["pypi.org"]}])
    run = subprocess.run(
        [*CLI, "run", "t", "--model", _no_turns(tmp_path),
         "--root", str(root), "--permissions", perms, *flags],
        env=cli_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2 and message in run.stderr, run.stderr


# --------------------------------------------------------------------------- spans and audit


async def test_each_host_is_a_connect_span_under_its_call_and_an_audit_line(
    temporal_server: TemporalDevServer,
    receiver: OtlpReceiver,
    tmp_path: Path,
    _bwrap_ok: None,
    web: int,
) -> None:
    """Through a worker built with the plugin (tracing on, an audit file): the run's
    two commands give a ``connect 127.0.0.1`` span (allow, bytes) and a
    ``connect api.example.test`` span (deny, the reason), each a child of its call's
    ``execute_tool execute`` span, and one ``connect`` audit line each."""
    exporter = OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces")
    provider = TracerProvider(resource=Resource({"service.name": "filegate-net"}))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    audit = tmp_path / "audit.jsonl"
    box = PolicyBackend(
        BwrapSandboxBackend(made(tmp_path / "ws"), check=False), audit=FileAuditSink(audit)
    )
    plugin = FilegatePlugin(
        agent=True, backends={"box": box}, journal_dir=tmp_path / "j", tracer_provider=provider
    )
    client = await Client.connect(
        temporal_server.address, namespace=temporal_server.namespace, plugins=[plugin]
    )
    queue = uid("net-otel")
    spec = BackendSpec(
        default=BackendRef(kind="local", name="box", can_execute=True, sandboxed=True)
    )
    model = scripted(calls(*commands(web)), {"content": "done"})
    async with Worker(client, task_queue=queue):
        result = await client.execute_workflow(
            AgentWorkflow.run,
            AgentInput(task="go", model=model, backend=spec, network=rules(web)),
            id=uid("wf-net-otel"),
            task_queue=queue,
        )
    assert result.final_answer == "done"
    provider.force_flush()
    deadline = asyncio.get_running_loop().time() + 20
    while (
        len(receiver.named("connect 127.0.0.1")) + len(receiver.named("connect api.example.test"))
        < 2
    ):
        assert asyncio.get_running_loop().time() < deadline, [s.name for s in receiver.spans]
        await asyncio.sleep(0.1)
    [reached] = receiver.named("connect 127.0.0.1")
    [refused] = receiver.named("connect api.example.test")
    calls_by_id = {
        s.attributes["gen_ai.tool.call.id"]: s for s in receiver.named("execute_tool execute")
    }
    assert len(calls_by_id) == 2
    parents = {reached.parent, refused.parent}
    assert all(parent for parent in parents) and len(parents) == 2
    assert reached.attributes["network.peer.port"] == web
    assert reached.attributes["filegate.network.decision"] == "allow"
    assert reached.attributes["filegate.network.bytes_in"] > len(TOKEN)
    assert refused.attributes["filegate.network.decision"] == "deny"
    assert "no network rule names" in refused.attributes["filegate.network.reason"]
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    connects = [line for line in lines if line["operation"] == "connect"]
    assert [(c["host"], c["outcome"]) for c in connects] == [
        ("127.0.0.1", "ok"),
        ("api.example.test", "denied"),
    ]
    assert connects[0]["port"] == web and connects[0]["bytes_in"] > len(TOKEN)
    assert all(SECRET_PATH not in json.dumps(line) for line in connects)
