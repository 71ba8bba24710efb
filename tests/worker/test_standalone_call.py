"""One operation without a workflow: ``filegate call`` and the adapter's client mode (issue 29).

On the session server (Temporal CLI 1.9, standalone activities on) a call is
the ``filegate.<tool>`` activity itself, started by the client; forced
(``--via workflow``) or on a server with standalone activities off it is one
``OperationWorkflow``. Both paths answer the same, and the direct path is
no weaker: a deny rule refuses, an ``interrupt`` rule refuses without an
approval on record, and an approval the request merely claims is ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from filegate.activities.stubs import STUBS
from filegate.backends.filesystem import FilesystemBackend
from filegate.cli.commands import run_cli
from filegate.devstack.servers import TemporalDevServer
from filegate.integrations.deepagents import FilegateBackend, tools_worker
from filegate.integrations.environment import operation_path_from_env
from filegate.kernel.formatting import permission_denied
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.tool_types import ToolOutcome, ToolRequest
from filegate.operations import StandaloneUnavailable, standalone_known
from tests.cli.test_cli import cli, cli_env, cli_parallel, write_json

__all__ = ["cli_env"]  # the fixture, shared with test_cli

pytestmark = pytest.mark.services

BACKEND = "ws"
DENY_SECRET = {"operations": ["read"], "paths": ["/secret/**"], "mode": "deny"}
ASK_SECRET = {"operations": ["read"], "paths": ["/secret/**"], "mode": "interrupt"}


def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "secret").mkdir(parents=True)
    (root / "notes.md").write_text("one\ntwo\n")
    (root / "secret" / "key.txt").write_text("k\n")
    return root


def answer(code: int, out: str, err: str) -> dict[str, Any]:
    """The ``--json`` answer of one ``filegate call``, with its exit code."""
    assert "Traceback" not in err, err
    return {"code": code, **json.loads(out)}


def test_call_runs_the_tool_activity_itself_and_rules_hold(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    root = workspace(tmp_path)
    deny = write_json(tmp_path / "deny.json", [DENY_SECRET])
    on_root = ["--root", str(root), "--json"]
    secret = json.dumps({"file_path": "/secret/key.txt"})
    runs = cli_parallel(
        cli_env,
        ["call", "write_file", "--args", '{"file_path": "/new.txt", "content": "hi"}', *on_root],
        ["call", "read_file", "--args", secret, "--permissions", deny, *on_root],
        ["call", "read_file", "--args", secret, "--permissions", deny, *on_root, "--via",
         "workflow"],
    )  # fmt: skip
    write, denied, denied_wf = (answer(*run) for run in runs)

    assert (write["code"], write["via"], write["tool"]) == (0, "standalone", "write_file")
    assert (root / "new.txt").read_text() == "hi"  # journaled in the activity's own scope
    # The deny rule travels with the request and the tools worker enforces it on
    # the direct path exactly as under the OperationWorkflow: the same refusal.
    assert (denied["code"], denied["via"], denied_wf["via"]) == (1, "standalone", "workflow")
    assert denied["outcome"]["content"] == permission_denied("read", "/secret/key.txt").text
    assert denied["outcome"] == denied_wf["outcome"]


def test_call_prints_the_tools_text_or_its_structured_result(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    root = workspace(tmp_path)
    deny = write_json(tmp_path / "deny.json", [DENY_SECRET])
    (code, out, err), listed = cli_parallel(
        cli_env,
        ["call", "read_file", "--root", str(root), "--args", '{"file_path": "/notes.md"}'],
        ["call", "ls", "--root", str(root), "--permissions", deny, "--json"],
    )
    assert code == 0, out + err
    first, second = out.splitlines()[:2]
    assert first.endswith("one") and second.endswith("two")
    listing = answer(*listed)
    assert (listing["code"], listing["via"]) == (0, "standalone")
    names = {entry["path"] for entry in listing["listing"]["ls"]["entries"]}
    assert "/notes.md" in names and "/notes.md" in listing["outcome"]["content"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--args", "not json"], "--args is not valid JSON"),
        (["--args", '{"file": "/notes.md"}'], "--args for read_file: file: unknown key"),
        (["--args", '{"file_path": "/a/../b"}'], "path traversal not allowed"),
        (["--args", "[1]"], "--args must be a JSON object"),
        (["--via", "sometimes"], "invalid choice"),
        (["--tools-queue", "q"], "--root serves its own tools worker"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    root = workspace(tmp_path)
    with contextlib.suppress(SystemExit):  # argparse's own refusals exit 2 themselves
        code = run_cli(["call", "read_file", "--root", str(root), *argv])
        assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    if message != "invalid choice":
        assert len(err.strip().splitlines()) == 1 and err.startswith("filegate: ")


def test_a_missing_root_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(["call", "ls", "--root", str(tmp_path / "none")]) == 2
    assert "no such directory" in capsys.readouterr().err


# --------------------------------------------------------------------------- the adapter


@pytest_asyncio.fixture
async def tools_queue(temporal_client: Client, tmp_path: Path) -> AsyncIterator[str]:
    """The adapter's tools worker (tools, transfers, OperationWorkflow) on a tmp root."""
    queue = f"sa-{uuid.uuid4().hex[:8]}"
    backend = FilesystemBackend(str(workspace(tmp_path)), virtual_mode=True)
    async with tools_worker(temporal_client, queue, {BACKEND: backend}, tmp_path / "journal"):
        yield queue


async def operation_workflows(client: Client, queue: str, *, at_least: int = 0) -> int:
    """OperationWorkflows started on ``queue``, waiting a little for visibility to catch up."""
    query = f"WorkflowType = 'filegate.Operation' AND TaskQueue = '{queue}'"
    for _ in range(50):
        count = (await client.count_workflows(query)).count
        if count >= at_least:
            return count
        await asyncio.sleep(0.1)
    return count


async def test_the_adapters_client_mode_starts_no_workflow_and_keeps_the_rules(
    temporal_client: Client, tools_queue: str
) -> None:
    deny = [FilesystemPermission.model_validate(DENY_SECRET)]
    direct = FilegateBackend(
        backend=BACKEND, task_queue=tools_queue, client=temporal_client, can_execute=False,
        permissions=deny, operation_path="auto",
    )  # fmt: skip
    forced = FilegateBackend(
        backend=BACKEND, task_queue=tools_queue, client=temporal_client, can_execute=False,
        permissions=deny, operation_path="workflow",
    )  # fmt: skip
    read = await direct.aread("/notes.md")
    assert read.error is None and read.file_data is not None
    assert read.file_data["content"].startswith("one\ntwo")
    assert standalone_known(temporal_client) is True
    refused = await direct.aread("/secret/key.txt")
    assert refused.error == permission_denied("read", "/secret/key.txt").text.removeprefix(
        "Error: "
    )
    assert [d.error for d in await direct.adownload_files(["/secret/key.txt"])] == [
        "permission_denied"
    ]
    assert (await direct.awrite("/made.txt", "x")).error is None
    assert await operation_workflows(temporal_client, tools_queue) == 0

    assert (await forced.aread("/secret/key.txt")).error == refused.error
    assert await operation_workflows(temporal_client, tools_queue, at_least=1) == 1


async def test_a_standalone_call_cannot_claim_an_approval(
    temporal_client: Client, tools_queue: str
) -> None:
    """An ``interrupt`` rule refuses a direct call: only a workflow's history records a
    reviewer's decision, so an approval the request claims is ignored."""
    request = ToolRequest(
        tool="read_file", backend=BACKEND, args={"file_path": "/secret/key.txt"},
        tool_call_id="claimed", permissions=[FilesystemPermission.model_validate(ASK_SECRET)],
        approved=True, approved_by="nobody",
    )  # fmt: skip
    outcome: ToolOutcome = await temporal_client.execute_activity(
        STUBS["read_file"], request, id=f"claim-{uuid.uuid4().hex}", task_queue=tools_queue,
        start_to_close_timeout=timedelta(seconds=30),
    )  # fmt: skip
    assert outcome.status == "error" and "needs human approval" in outcome.text


def test_the_operation_path_setting() -> None:
    assert operation_path_from_env({}) == "auto"
    assert operation_path_from_env({"FILEGATE_OPERATION_PATH": " Workflow "}) == "workflow"
    with pytest.raises(ValueError, match="FILEGATE_OPERATION_PATH='sometimes'"):
        operation_path_from_env({"FILEGATE_OPERATION_PATH": "sometimes"})
    with pytest.raises(ValueError, match="operation_path"):
        FilegateBackend(backend="b", task_queue="q", operation_path="never")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- fallback


class NoStandaloneServer(TemporalDevServer):
    """A dev server with standalone activities turned off (as an older server has none)."""

    def _command(self) -> list[str]:
        on, off = "activity.enableStandalone=true", "activity.enableStandalone=false"
        command = super()._command()
        if on in command:
            command[command.index(on)] = off
        else:
            command += ["--dynamic-config-value", off]
        return command


@pytest.mark.slow
async def test_without_standalone_activities_calls_fall_back_to_the_workflow(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    root = workspace(tmp_path)
    with NoStandaloneServer(tmp_path / "temporal") as server:
        env = {**cli_env, "TEMPORAL_ADDRESS": server.address}
        done = cli(env, "call", "read_file", "--args", '{"file_path": "/notes.md"}',
                   "--root", str(root), "--json")  # fmt: skip
        forced = cli(env, "call", "ls", "--root", str(root), "--via", "standalone")
        unpolled = f"nobody-{uuid.uuid4().hex[:8]}"
        unserved = cli(env, "call", "ls", "--tools-queue", unpolled, "--timeout", "2")
        client = await Client.connect(server.address, data_converter=pydantic_data_converter)
        queue = f"nosa-{uuid.uuid4().hex[:8]}"
        backend = FilesystemBackend(str(root), virtual_mode=True)
        async with tools_worker(client, queue, {BACKEND: backend}, tmp_path / "journal"):
            adapter = FilegateBackend(
                backend=BACKEND, task_queue=queue, client=client, can_execute=False
            )
            assert (await adapter.als("/")).error is None
            assert standalone_known(client) is False  # learnt once, then the workflow
            assert await operation_workflows(client, queue, at_least=1) >= 1
            strict = FilegateBackend(
                backend=BACKEND, task_queue=queue, client=client, can_execute=False,
                operation_path="standalone",
            )  # fmt: skip
            with pytest.raises(StandaloneUnavailable, match="no standalone activities"):
                await strict.als("/")
    result = answer(done.returncode, done.stdout, done.stderr)
    assert (result["code"], result["via"]) == (0, "workflow")
    assert "one" in result["outcome"]["content"]
    assert forced.returncode == 1 and "no standalone activities" in forced.stderr
    assert len(forced.stderr.strip().splitlines()) == 1
    # The fallback is said only where it explains something: a call nobody answered.
    assert unserved.returncode == 1 and unserved.stdout == ""
    error = unserved.stderr.rstrip("\n").splitlines()[-1]
    assert error.startswith(f"filegate: no worker polls task queue '{unpolled}'"), error
    assert "so it ran as an OperationWorkflow" in error
