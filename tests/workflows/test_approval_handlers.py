"""The reusable approval handlers on a host workflow that declares none (contract §5).

A small hand-written workflow keeps its own :class:`ApprovalBook` and calls
:meth:`ApprovalHandlers.register`; clients find and decide it only through the
public names (``pending_approvals``, ``decided_approvals``, signal and update
``decide``), exactly as the CLI and UI address an ``AgentWorkflow``. Its
recheck reads a fingerprint the test changes by signal, to drive the
changed-since-preview path of both the update and the signal; the search
attributes follow the counts.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateStage,
)
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from filegate.kernel.previews import ChangePreview
from filegate.workflows.approvals.handlers import (
    DECIDED_APPROVALS,
    PENDING_APPROVALS,
    ApprovalHandlers,
)
from filegate.workflows.approvals.pending import DECIDED_KEPT, ApprovalBook
from filegate.workflows.inputs import (
    DecidedApproval,
    Decision,
    DecisionAck,
    PendingApproval,
)
from tests.workflows.test_workflow_e2e import eventually


@workflow.defn(name="ApprovalHandlersProbe")
class ProbeWorkflow:
    """Asks for one approval per path, then returns the decisions in order."""

    @workflow.init
    def __init__(self, paths: list[str]) -> None:
        self.version = "v1"
        self.holding = False
        self.book = ApprovalBook(random_hex=lambda: workflow.uuid4().hex)
        self.handlers = ApprovalHandlers(
            self.book, check_edit=self._check_edit, recheck=self._recheck, search_attributes=True
        )
        self.handlers.register()

    @workflow.run
    async def run(self, paths: list[str]) -> list[str]:
        ids = [
            self.book.open(
                tool="write_file",
                args={"file_path": path, "content": "x"},
                rule=None,
                tool_call_id=f"c{n}",
                now=workflow.now().isoformat(),
                preview=self._preview(path),
            ).id
            for n, path in enumerate(paths)
        ]
        self.handlers.publish()
        await workflow.wait_condition(lambda: all(self.book.is_decided(i) for i in ids))
        return [self.book.close(i).decision for i in ids]

    @workflow.signal(name="touch")
    def touch(self) -> None:
        """Someone changed the files after the previews were computed."""
        self.version = "v2"

    @workflow.signal(name="hold")
    def hold(self, holding: bool) -> None:
        """Keep the next re-check waiting (a slow preview activity), or let it finish."""
        self.holding = holding

    def _preview(self, path: str) -> ChangePreview:
        return ChangePreview(kind="overwrite", path=path, fingerprint=f"{path}@{self.version}")

    async def _recheck(self, approval: PendingApproval) -> ChangePreview:
        await workflow.wait_condition(lambda: not self.holding)
        return self._preview(approval.args["file_path"])

    @staticmethod
    def _check_edit(tool: str, args: dict[str, Any]) -> str | None:
        return None if str(args.get("file_path", "")).startswith("/") else "absolute path needed"


async def pending(handle: WorkflowHandle[Any, Any]) -> list[PendingApproval]:
    return await handle.query("pending_approvals", result_type=list[PendingApproval])


async def decided(handle: WorkflowHandle[Any, Any]) -> list[DecidedApproval]:
    return await handle.query("decided_approvals", result_type=list[DecidedApproval])


async def decide(handle: WorkflowHandle[Any, Any], decision: Decision) -> DecisionAck:
    return await handle.execute_update("decide", decision, result_type=DecisionAck)


@contextlib.asynccontextmanager
async def probe_on_worker(
    client: Client, paths: list[str]
) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    """The probe workflow for ``paths``, started on a worker of its own (running meanwhile)."""
    queue = f"probe-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=queue, workflows=[ProbeWorkflow],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):  # fmt: skip
        yield await client.start_workflow(
            "ApprovalHandlersProbe", paths, id=f"probe-{uuid.uuid4().hex}", task_queue=queue
        )


async def counts(handle: WorkflowHandle[Any, Any]) -> tuple[int | None, int | None]:
    attrs = (await handle.describe()).typed_search_attributes
    return attrs.get(PENDING_APPROVALS), attrs.get(DECIDED_APPROVALS)


@pytest.mark.services
async def test_any_host_is_found_and_decided_by_name(temporal_client: Client) -> None:
    async with probe_on_worker(temporal_client, ["/a", "/b"]) as handle:
        first, second = await eventually(lambda: pending(handle), lambda p: len(p) == 2)
        assert await eventually(lambda: counts(handle), lambda c: c == (2, 0))

        # The validator answers at once; nothing enters the book.
        for refused in (
            Decision(id="nope", decision="approve"),
            Decision(id=first.id, decision="edit", args={"file_path": "relative"}),
            Decision(id=first.id, decision="approve", via="timeout"),
        ):
            with pytest.raises(WorkflowUpdateFailedError):
                await decide(handle, refused)

        await handle.signal("touch")
        bounced = await decide(handle, Decision(id=first.id, decision="approve", reviewer="ana"))
        assert bounced.changed_since_preview and bounced.reviewer == "ana"
        still = {a.id: a for a in await pending(handle)}
        assert still[first.id].changed_since_preview
        assert still[first.id].preview == ChangePreview(
            kind="overwrite", path="/a", fingerprint="/a@v2"
        )
        ack = await decide(handle, Decision(id=first.id, decision="approve", reviewer="ana"))
        assert not ack.changed_since_preview and ack.via == "api"

        # The signal path re-checks too: it keeps the approval open, then accepts.
        await handle.signal("decide", Decision(id=second.id, decision="approve", reviewer="bo"))
        [left] = await eventually(lambda: pending(handle), lambda p: len(p) == 1)
        assert left.id == second.id and left.changed_since_preview
        await handle.signal("decide", Decision(id=second.id, decision="reject", reason="no"))
        assert await handle.result() == ["approve", "reject"]
        history = await decided(handle)
        assert await eventually(lambda: counts(handle), lambda c: c == (0, 2))
    assert [(d.id, d.decision, d.changed_since_preview) for d in history] == [
        (first.id, "approve", True),
        (first.id, "approve", False),
        (second.id, "approve", True),
        (second.id, "reject", False),
    ]
    assert [d.via for d in history] == ["api", "api", "signal", "signal"]


@pytest.mark.services
async def test_a_decision_under_recheck_refuses_a_second_one(temporal_client: Client) -> None:
    async with probe_on_worker(temporal_client, ["/a"]) as handle:
        [approval] = await eventually(lambda: pending(handle), lambda p: len(p) == 1)
        await handle.signal("hold", True)
        first = await handle.start_update(
            "decide",
            Decision(id=approval.id, decision="approve"),
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            result_type=DecisionAck,
        )
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await decide(handle, Decision(id=approval.id, decision="reject"))
        assert "being checked" in str(refused.value.cause)
        await handle.signal("hold", False)
        assert not (await first.result()).changed_since_preview
        assert await handle.result() == ["approve"]


def test_decided_is_bounded_newest_last() -> None:
    book = ApprovalBook()
    handlers = ApprovalHandlers(book, check_edit=lambda tool, args: None, search_attributes=False)
    for n in range(DECIDED_KEPT + 5):
        approval = book.open(
            tool="delete", args={"file_path": f"/f{n}"}, rule=None, tool_call_id=str(n), now="t"
        )
        book.record(Decision(id=approval.id, decision="reject"), "t")
    kept = handlers.decided()
    assert len(kept) == DECIDED_KEPT
    assert kept[-1].path == f"/f{DECIDED_KEPT + 4}" and kept[0].path == "/f5"
    assert kept[-1].summary == f"delete /f{DECIDED_KEPT + 4}"
    assert book.decided_total == DECIDED_KEPT + 5
