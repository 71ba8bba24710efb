"""A Pydantic AI agent under Temporal writes through Filegate and waits on an interrupt.

The done-when of issue 37's first part, end to end on real parts: the
example's agent (``docs/examples/pydantic_ai_agent.py``) runs under Pydantic
AI's Temporal integration in one worker with ``FilegatePlugin`` (converters
merged), on the session's Temporal dev server; its model is a
``FunctionModel``. One write runs unasked, the other hits an ``interrupt``
rule: the workflow waits, ``filegate approvals`` lists the approval, and the
real ``filegate approve`` command line decides it, after which the agent
resumes and the write is on disk. ``filegate reject`` leaves nothing written
and tells the model why.

The workspace's own refusals are checked too: an approval Filegate did not
give (a Pydantic AI ``ToolApproved`` from anywhere else) writes nothing.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import ApprovalRequired, RunContext
from pydantic_ai._run_context import set_current_run_context
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RunUsage

from filegate.devstack.servers import TemporalDevServer
from filegate.integrations.pydantic_ai import FilegateFileWorkspace
from filegate.kernel.permissions import FilesystemPermission
from tests.activities.test_stubs import _load_example
from tests.cli.test_cli import CLI, cli_env  # noqa: F401  (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.services]


async def _cli(env: dict[str, str], *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        *CLI,
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def _run_example(
    server: TemporalDevServer, workspace: Path, env: dict[str, str], verb: str
) -> tuple[str, str, dict[str, Any]]:
    """Run the example; decide its one approval with ``filegate <verb>``."""
    example = _load_example("pydantic_ai_agent")
    seen: dict[str, Any] = {}

    async def decide(workflow_id: str, approval_id: str) -> None:
        # The note outside the rule is written before anyone decides; the other waits.
        seen["free_before"] = (workspace / "notes" / "today.md").read_text()
        seen["held_before"] = (workspace / "docs" / "plan.md").exists()
        listed = await _cli(env, "approvals", "--workflow", workflow_id, "--json")
        seen["listed"] = listed
        await _cli(env, verb, approval_id, "--workflow", workflow_id, "--reviewer", "pai-tester")

    workflow_id, answer = await asyncio.wait_for(
        example.main(server.address, server.namespace, workspace, decide=decide), 240
    )
    return workflow_id, answer, seen


async def test_the_agent_waits_on_an_interrupt_and_resumes_after_filegate_approve(
    temporal_server: TemporalDevServer,
    cli_env: dict[str, str],  # noqa: F811
    workspace: Path,
) -> None:
    _, answer, seen = await _run_example(temporal_server, workspace, cli_env, "approve")

    assert seen["free_before"] == "standup at 10\n"
    assert seen["held_before"] is False
    assert "/docs/plan.md" in seen["listed"] and "write_file" in seen["listed"]
    assert (workspace / "docs" / "plan.md").read_text() == "the plan\n"
    assert "wrote /notes/today.md" in answer and "wrote /docs/plan.md" in answer


async def test_filegate_reject_writes_nothing_and_tells_the_model(
    temporal_server: TemporalDevServer,
    cli_env: dict[str, str],  # noqa: F811
    workspace: Path,
) -> None:
    _, answer, seen = await _run_example(temporal_server, workspace, cli_env, "reject")

    assert seen["held_before"] is False
    assert not (workspace / "docs" / "plan.md").exists()
    assert "wrote /notes/today.md" in answer
    assert "wrote /docs/plan.md" not in answer and "reject" in answer.lower()


def _context(*, approved: bool, metadata: Any = None) -> RunContext[None]:
    return RunContext(
        deps=None,
        model=TestModel(),
        usage=RunUsage(),
        tool_call_approved=approved,
        tool_call_metadata=metadata,
    )


async def test_an_approval_not_given_through_filegate_writes_nothing(tmp_path: Path) -> None:
    """The workspace refuses an interrupted write before any I/O: no client is even needed."""
    rules = [FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="interrupt")]
    workspace = FilegateFileWorkspace(backend="b", task_queue="nowhere", permissions=rules)

    with pytest.raises(PermissionError, match="outside an agent run"):
        await workspace.write_bytes("/docs/a.md", b"x")
    with (
        set_current_run_context(_context(approved=False)),
        pytest.raises(ApprovalRequired) as asked,
    ):
        await workspace.write_bytes("/docs/a.md", b"x")
    metadata = asked.value.metadata or {}
    assert metadata["filegate"]["tool"] == "write_file"
    assert metadata["filegate"]["args"] == {"file_path": "/docs/a.md", "content": "x"}
    # Approved by the application, not through Filegate: nothing settled, so refused.
    with (
        set_current_run_context(_context(approved=True, metadata={"other": 1})),
        pytest.raises(PermissionError, match="not given through Filegate"),
    ):
        await workspace.write_bytes("/docs/a.md", b"x")
    # A binary write cannot become a write_file a reviewer approves.
    with (
        set_current_run_context(_context(approved=False)),
        pytest.raises(PermissionError, match="only a text"),
    ):
        await workspace.write_bytes("/docs/a.bin", b"\xff\xfe")
    # Settled for another content: this call is not the approved one.
    key = metadata["filegate"]["key"]
    settled = {"filegate": {key: {"ok": True, "text": "Successfully wrote"}}}
    with set_current_run_context(_context(approved=True, metadata=settled)):
        await workspace.write_bytes("/docs/a.md", b"x")  # the approved call: its answer
        with pytest.raises(PermissionError, match="not given through Filegate"):
            await workspace.write_bytes("/docs/a.md", b"y")
    assert json.dumps(metadata)  # the request travels through Temporal as JSON


def test_bad_configuration_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="backend= and task_queue="):
        FilegateFileWorkspace(backend="", task_queue="q")
    with pytest.raises(ValueError, match="absolute"):
        FilegateFileWorkspace(backend="b", task_queue="q", mount="workspace")
    with pytest.raises(ValueError, match="operation_path"):
        FilegateFileWorkspace(backend="b", task_queue="q", operation_path="fast")  # type: ignore[arg-type]
