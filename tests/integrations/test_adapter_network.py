"""Network rules through the Deep Agents and Pydantic AI adapters (issue 51).

Each adapter carries its network rules with every ``execute`` as it carries
its path rules: on the bubblewrap sandbox a command reaches the loopback web
server a rule names and is refused a host no rule names; beside a host shell,
or on a backend without a shell, the rules are refused when the adapter is
built (one line), never dropped.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client

from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.kernel.execute_gate import ExecuteGateError
from filegate.kernel.network_rules import NetworkPermission
from tests.net_servers import token_server

pytest.importorskip("deepagents")
pytest.importorskip("pydantic_ai")

from filegate.integrations.deepagents import FilegateBackend, tools_worker
from filegate.integrations.pydantic_ai import FilegateWorkspace
from filegate.integrations.pydantic_ai.workspace import FilegateFileWorkspace
from tests.roots import made

BOX = "box"
TOKEN = "adapter-net-" + uuid.uuid4().hex


@pytest.fixture
def web() -> Iterator[int]:
    with token_server(TOKEN) as (port, _):
        yield port


@pytest_asyncio.fixture
async def box_queue(temporal_client: Client, tmp_path: Path, _bwrap_ok: None) -> AsyncIterator[str]:
    queue = f"net-adapter-{uuid.uuid4().hex[:8]}"
    backends = {BOX: BwrapSandboxBackend(made(tmp_path / "root"), check=False)}
    async with tools_worker(temporal_client, queue, backends, tmp_path / "journal"):
        yield queue


def _rules(port: int) -> list[NetworkPermission]:
    return [NetworkPermission(hosts=["127.0.0.1"], ports=[port])]


@pytest.mark.services
async def test_deep_agents_commands_reach_what_the_rules_allow(
    temporal_client: Client, box_queue: str, web: int
) -> None:
    backend = FilegateBackend(
        backend=BOX, task_queue=box_queue, client=temporal_client, mount="/workspace",
        sandboxed=True, network=_rules(web),
    )  # fmt: skip
    try:
        ok = await backend.aexecute(f"curl -sS http://127.0.0.1:{web}/x")
        assert TOKEN in ok.output and "[network: reached 127.0.0.1:" in ok.output, ok.output
        no = await backend.aexecute("curl -sS https://api.example.test/")
        assert "[network: refused api.example.test:443: no network rule names" in no.output
    finally:
        backend.close()
    bare = FilegateBackend(backend=BOX, task_queue=box_queue, client=temporal_client)
    try:  # the control: no rule, no network
        assert TOKEN not in (await bare.aexecute(f"curl -sS http://127.0.0.1:{web}/x")).output
    finally:
        bare.close()


@pytest.mark.services
async def test_pydantic_ai_commands_reach_what_the_rules_allow(
    temporal_client: Client, box_queue: str, web: int
) -> None:
    workspace = FilegateWorkspace(
        backend=BOX, task_queue=box_queue, client=temporal_client, mount="/workspace",
        sandboxed=True, network=_rules(web),
    )  # fmt: skip
    ok = await workspace.run(f"curl -sS http://127.0.0.1:{web}/x", shell=True)
    assert ok.exit_code == 0 and TOKEN in ok.stdout, ok
    no = await workspace.run("curl -sS https://api.example.test/", shell=True)
    assert no.exit_code != 0 and "403" in no.stderr, no
    assert workspace.file_tools_config().network == _rules(web)


def test_adapters_refuse_network_rules_they_cannot_enforce() -> None:
    rules = [NetworkPermission(hosts=["pypi.org"])]
    where: dict[str, Any] = {"backend": BOX, "task_queue": "unused"}
    with pytest.raises(ExecuteGateError, match="need the bubblewrap sandbox"):
        FilegateBackend(**where, network=rules)
    with pytest.raises(ExecuteGateError, match="need the bubblewrap sandbox"):
        FilegateWorkspace(**where, network=rules)
    with pytest.raises(ExecuteGateError, match="no command runs here"):
        FilegateBackend(**where, can_execute=False, network=rules)
    with pytest.raises(ExecuteGateError, match="no command runs here"):
        FilegateFileWorkspace(**where, network=rules)
    FilegateBackend(**where, sandboxed=True, network=rules).close()
    asking = [NetworkPermission(hosts=["pypi.org"], mode="interrupt")]
    with pytest.raises(ExecuteGateError, match="network rule 1 is in interrupt mode"):
        FilegateBackend(**where, sandboxed=True, network=asking)
    with pytest.raises(ExecuteGateError, match="network rule 1 is in interrupt mode"):
        FilegateWorkspace(**where, sandboxed=True, network=asking)
