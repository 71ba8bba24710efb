"""Histories recorded on commit f71da99 replay on this code, with no nondeterminism.

Why: a run that is in flight when the workers are upgraded continues on the
new code, which first replays the run's history; a change to a workflow's
commands (an activity added, moved or renamed, a marker or a timer) is then a
nondeterminism error and the run is stuck. So histories recorded before a
refactor stay in the repository and the suite replays them on the current
code, through ``Replayer(workflows=[...], plugins=[FilegatePlugin(...)])`` as
a user would (the plugin gives the replayer the workers' converter and
sandbox). ``tests/histories/f71da99/*.json`` were recorded on commit f71da99
(the suite's services, no S3) by the ``test_record_*`` tests here, which run
only when ``FILEGATE_RECORD_HISTORIES`` names a directory to write them to.
The package is installed editable from the main checkout, so the commit to
record from is put first on ``PYTHONPATH`` through a ``filegate`` link::

    git worktree add /tmp/rec <commit> && mkdir /tmp/rec-path
    ln -s /tmp/rec /tmp/rec-path/filegate
    cp tests/workflows/test_replay_new_histories.py /tmp/rec/tests/ && cd /tmp/rec
    # a commit from before the tests were grouped by layer has them flat in tests/:
    sed -i 's/tests[.]workflows[.]/tests./' tests/test_replay_new_histories.py
    export PYTHONPATH=/tmp/rec-path FILEGATE_RECORD_HISTORIES=/tmp/h
    python -m pytest tests/test_replay_new_histories.py -k test_record_  # this venv's python

then copy ``/tmp/h/*.json`` into a new ``tests/histories/<commit>/`` (and its
name into :data:`RECORDED`, or a second directory beside it) and keep the
old ones: a new directory adds to what must replay, it does not replace it.
(``tests/histories/*.json``, from an older release, are
test_recorded_histories.py's, xfail for a known gap.)

The scenarios (:data:`SCENARIOS`): an ``AgentWorkflow`` with approvals of
every kind (approve, edit, respond, reject, by update and by signal) under an
interrupt rule, a remembered grant used then revoked, a deny rule, and turn
decisions (one bounced because a target changed since its preview, one
approved, one rejected); a user's own workflow hosting ``FileTools``
(:class:`RecordedFileToolsHost`) with the same kinds of events; and two
``OperationWorkflow`` runs (``filegate call --via workflow``, the Deep Agents
adapter without standalone activities): a tool call and a read window.

How the replay was checked to fail (besides :func:`test_a_changed_workflow_fails_replay`,
which runs each time): with a worktree of f71da99 on ``PYTHONPATH`` (a
``filegate`` link to it), each of these edits made the replays named fail
with ``NondeterminismError`` and left the others passing: a 1 ms
``workflow.sleep`` at the top of ``FileTools.run_turn`` (agent and host);
``wire.PREVIEW_ACTIVITY`` renamed (agent and host: "Activity type of
scheduled event 'filegate.preview' does not match"); the transfer read
activity renamed (operation-read-window). Deleting a history file fails
:func:`test_the_recorded_histories_are_kept_whole` and its replay.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    # Passed through: the sandbox re-imports this module for RecordedFileToolsHost.
    import pytest
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client, WorkflowHandle, WorkflowHistory
    from temporalio.worker import Replayer, Worker

    from filegate.backends.filesystem import FilesystemBackend
    from filegate.integrations.deepagents import tools_worker as adapter_tools_worker
    from filegate.kernel import wire
    from filegate.kernel.operation_types import Operation, OperationResult, ReadWindowRequest
    from filegate.kernel.permissions import FilesystemPermission
    from filegate.kernel.tool_types import ToolRequest
    from filegate.plugin import FilegatePlugin
    from filegate.worker import tools_worker
    from filegate.workflows import (
        AgentWorkflow,
        BackendSpec,
        Decision,
        FileTools,
        FileToolsConfig,
        PendingApproval,
        TurnDecision,
        UserMessage,
    )
    from filegate.workflows.approvals.grants import GrantRevocation
    from filegate.workflows.operation import OperationWorkflow, run_operation
    from tests.scripting import calls, uid
    from tests.workflows.test_grants import approve_remembering, docs_agent, idle, workers, write
    from tests.workflows.test_workflow_e2e import eventually, final, pending, remote

RECORDED = Path(__file__).parents[1] / "histories" / "f71da99"


@workflow.defn(name="RecordedFileToolsHost")
class RecordedFileToolsHost:
    """A user's own workflow hosting ``FileTools``: its turns, one after another.

    Frozen with its recorded history: a change here is a change of the user's
    workflow, not of Filegate's, and would make the replay test meaningless.
    """

    @workflow.init
    def __init__(self, config: FileToolsConfig, turns: list[list[dict[str, Any]]]) -> None:
        self.tools = FileTools(config)

    @workflow.run
    async def run(
        self, config: FileToolsConfig, turns: list[list[dict[str, Any]]]
    ) -> dict[str, Any]:
        answers: dict[str, str] = {}
        for turn in turns:
            for result in await self.tools.run_turn(turn):
                answers[result.tool_call_id] = result.text
        return {"answers": answers, "counters": self.tools.state().counters}


@workflow.defn(name=wire.OPERATION_WORKFLOW_TYPE)
class ChangedOperationWorkflow:
    """``OperationWorkflow`` with a timer before its activity: a nondeterministic change."""

    @workflow.run
    async def run(self, op: Operation) -> OperationResult:
        await workflow.sleep(0.001)
        return await run_operation(op)


SCENARIOS: dict[str, tuple[type, set[str]]] = {
    "agent-approvals-grant-turn-decisions": (
        AgentWorkflow,
        {
            "update:decide", "update:decide_turn", "update:revoke", "update:add_message",
            "signal:decide", "signal:add_message",
        },
    ),
    "file-tools-host-approvals-grant-turn-decisions": (
        RecordedFileToolsHost,
        {"update:decide", "update:decide_turn", "update:revoke", "signal:decide"},
    ),
    "operation-write-file": (OperationWorkflow, set()),
    "operation-read-window": (OperationWorkflow, set()),
}  # fmt: skip
"""History file stem -> (workflow class, the updates and signals its history must hold)."""


def recorded(name: str) -> WorkflowHistory:
    return WorkflowHistory.from_json(name, (RECORDED / f"{name}.json").read_text())


def replayer(*workflows: type) -> Replayer:
    """As a user builds it: the plugin brings the converter and the workers' sandbox.

    ``artifacts=None``: the histories were recorded without S3, so no payload is
    a reference (and the test needs no S3 settings)."""
    return Replayer(workflows=list(workflows), plugins=[FilegatePlugin(artifacts=None)])


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_a_history_recorded_on_f71da99_replays(name: str) -> None:
    workflow_class, _ = SCENARIOS[name]
    await replayer(workflow_class).replay_workflow(recorded(name))


async def test_a_changed_workflow_fails_replay() -> None:
    """The replay above can fail: a timer the recorded run never started is caught."""
    with pytest.raises(workflow.NondeterminismError):
        await replayer(ChangedOperationWorkflow).replay_workflow(recorded("operation-write-file"))


def handled(history: WorkflowHistory) -> set[str]:
    """``update:<name>`` / ``signal:<name>`` of every accepted update and signal."""
    names = set()
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            attributes = event.workflow_execution_update_accepted_event_attributes
            names.add(f"update:{attributes.accepted_request.input.name}")
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            names.add(f"signal:{event.workflow_execution_signaled_event_attributes.signal_name}")
    return names


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_recorded_histories_are_kept_whole(name: str) -> None:
    """Deleting a history, or re-recording one that stops early, fails here."""
    assert (RECORDED / f"{name}.json").is_file(), f"missing {RECORDED / name}.json"
    history = recorded(name)
    last = history.events[-1].event_type
    assert last == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, EventType.Name(last)
    _, expected = SCENARIOS[name]
    assert expected <= handled(history), expected - handled(history)


# --------------------------------------------------------------------------- recording

recording = pytest.mark.skipif(
    not os.environ.get("FILEGATE_RECORD_HISTORIES"), reason="records only on request"
)


def save(name: str, history: WorkflowHistory) -> None:
    out = Path(os.environ["FILEGATE_RECORD_HISTORIES"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(history.to_json())


def shown(approvals: list[PendingApproval]) -> dict[str, str | None]:
    """Each approval's preview fingerprint, as a reviewer's client names it."""
    return {a.id: (a.preview.fingerprint or "") if a.preview else None for a in approvals}


def turn_of(approvals: list[PendingApproval]) -> str:
    [turn] = {a.turn for a in approvals}
    assert turn is not None
    return turn


@pytest.mark.services
@recording
async def test_record_an_agent_run(temporal_client: Client, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("def f():\n    return 1\n")
    edit = {"file_path": "/src/a.py", "old_string": "1", "new_string": "2"}
    turns = (
        calls(("l1", "ls", {"path": "/src"}), ("r1", "read_file", {"file_path": "/src/a.py"})),
        calls(("e1", "edit_file", edit), write("w1", "/docs/a.md")),  # w1: asked, remembered
        calls(write("w2", "/docs/b.md"), write("w3", "/docs/secret/x.md")),  # grant; deny
        final("one"),
        calls(*(write(f"w{n}", f"/docs/{n}.md") for n in range(4, 8))),  # one by one
        calls(write("w8", "/docs/8.md"), write("w9", "/docs/b.md")),  # bounced, then approved
        calls(write("w10", "/docs/10.md"), write("w11", "/docs/11.md")),  # turn rejected
        final("two"),
    )
    queues = (uid("agent"), uid("tools"))
    input = docs_agent(queues[1], *turns, wait_for_messages=True)
    async with workers(temporal_client, root, tmp_path / "j", queues):
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("rec-agent"), task_queue=queues[0]
        )
        grant = await approve_remembering(handle)
        await idle(handle, 4)
        await handle.execute_update(
            AgentWorkflow.revoke_update, GrantRevocation(id=grant.id, reviewer="bo", via="cli")
        )
        await handle.execute_update(AgentWorkflow.add_message_update, UserMessage(content="more"))
        by_path = {a.args["file_path"]: a for a in await pending(handle, 4)}  # revoked: asked
        w4, w5, w6, w7 = (by_path[f"/docs/{n}.md"] for n in range(4, 8))
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=w4.id, decision="approve")
        )
        edited = {"file_path": "/docs/5.md", "content": "edited\n"}
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=w5.id, decision="edit", args=edited)
        )
        await handle.signal(
            AgentWorkflow.decide_signal, Decision(id=w6.id, decision="reject", reason="no")
        )
        [left] = await pending(handle, 1)
        assert left.id == w7.id
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=w7.id, decision="respond", message="later")
        )
        first = await pending(handle, 2)
        (root / "docs" / "b.md").write_text("changed since its preview\n")
        approve = TurnDecision(turn=turn_of(first), decision="approve", fingerprints=shown(first))
        bounced = await handle.execute_update(AgentWorkflow.decide_turn_update, approve)
        assert bounced.changed_since_preview and not bounced.applied
        again = await pending(handle, 2)
        approve = approve.model_copy(update={"fingerprints": shown(again), "reviewer": "ana"})
        assert (await handle.execute_update(AgentWorkflow.decide_turn_update, approve)).applied
        last = await pending(handle, 2)
        reject = TurnDecision(
            turn=turn_of(last), decision="reject", reason="not these",
            fingerprints=dict.fromkeys(a.id for a in last),
        )  # fmt: skip
        await handle.execute_update(AgentWorkflow.decide_turn_update, reject)
        await idle(handle, 8)
        await handle.signal(AgentWorkflow.add_message_signal, UserMessage(end=True))
        await handle.result()
        save("agent-approvals-grant-turn-decisions", await handle.fetch_history())
    assert (root / "docs" / "5.md").read_text() == "edited\n"
    assert (root / "docs" / "b.md").read_text() == "w9\n"
    assert not (root / "docs" / "10.md").exists()


async def host_pending(handle: WorkflowHandle[Any, Any], count: int) -> list[dict[str, Any]]:
    """The host's ``count`` pending approvals, previews shown (by name: no typed stubs)."""
    found: list[dict[str, Any]] = await eventually(
        lambda: handle.query(wire.PENDING_QUERY, result_type=list[dict[str, Any]]),
        lambda p: len(p) == count and not any(a.get("preview_pending") for a in p),
    )
    return found


def host_turn(decision: str, approvals: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    fingerprints = {a["id"]: (a["preview"] or {}).get("fingerprint") or "" for a in approvals}
    [turn] = {a["turn"] for a in approvals}
    return {"turn": turn, "decision": decision, "fingerprints": fingerprints, **extra}


@pytest.mark.services
@recording
async def test_record_a_file_tools_host(temporal_client: Client, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "secret").mkdir(parents=True)
    (root / "secret" / "key.txt").write_text("hunter2\n")

    def turn(*items: tuple[str, str, dict[str, Any]]) -> list[dict[str, Any]]:
        return list(calls(*items)["tool_calls"])

    turns = [
        turn(write("a", "/a.txt"), ("s", "read_file", {"file_path": "/secret/key.txt"}),
             ("l", "ls", {"path": "/"})),
        turn(write("p", "/docs/plan.md")),  # asked, approved and remembered
        turn(write("m", "/docs/more.md"), ("r", "read_file", {"file_path": "/a.txt"})),
        turn(write("x", "/review/x.md"), write("y", "/review/y.md")),  # turn approved
        turn(write("z", "/review/z.md"), write("d", "/docs/after.md")),  # turn rejected
        turn(write("v", "/review/v.md")),  # rejected by signal
    ]  # fmt: skip
    rules = [
        FilesystemPermission(operations=["read", "write"], paths=["/secret/**"], mode="deny"),
        FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="interrupt"),
        FilesystemPermission(operations=["write"], paths=["/review/**"], mode="interrupt"),
    ]
    tools_q, host_q = uid("tools"), uid("host")
    config = FileToolsConfig(backend=BackendSpec(default=remote("fs", tools_q)), permissions=rules)
    async with (
        tools_worker(temporal_client, tools_q, {"fs": FilesystemBackend(root)}, tmp_path / "j"),
        Worker(temporal_client, task_queue=host_q, workflows=[RecordedFileToolsHost],
               plugins=[FilegatePlugin(artifacts=None)]),
    ):  # fmt: skip
        handle: WorkflowHandle[Any, dict[str, Any]] = await temporal_client.start_workflow(
            "RecordedFileToolsHost", args=[config, turns], id=uid("rec-host"),
            task_queue=host_q, result_type=dict[str, Any],
        )  # fmt: skip
        [asked] = await host_pending(handle, 1)
        remember = {"id": asked["id"], "decision": "approve", "reviewer": "ana", "remember": {}}
        ack = await handle.execute_update(wire.DECIDE_UPDATE, remember, result_type=dict[str, Any])
        review = await host_pending(handle, 2)
        revoke = {"id": ack["grant"]["id"], "reviewer": "bo", "via": "cli"}
        await handle.execute_update(wire.REVOKE_UPDATE, revoke, result_type=dict[str, Any])
        approve = host_turn("approve", review, reviewer="ana")
        await handle.execute_update(wire.DECIDE_TURN_UPDATE, approve, result_type=dict[str, Any])
        last = await host_pending(handle, 2)  # the grant is revoked: /docs/ is asked again
        reject = host_turn("reject", last, reason="not these")
        await handle.execute_update(wire.DECIDE_TURN_UPDATE, reject, result_type=dict[str, Any])
        [alone] = await host_pending(handle, 1)
        await handle.signal(wire.DECIDE_UPDATE, {"id": alone["id"], "decision": "reject"})
        answers = (await handle.result())["answers"]
        save("file-tools-host-approvals-grant-turn-decisions", await handle.fetch_history())
    assert answers["m"].startswith(f"[allowed by grant {ack['grant']['id']}")
    assert "hunter2" not in answers["s"] and (root / "review" / "y.md").exists()
    assert not (root / "docs" / "after.md").exists() and not (root / "review" / "v.md").exists()


@pytest.mark.services
@recording
async def test_record_operation_workflows(temporal_client: Client, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.md").write_text("one\ntwo\n")
    queue = uid("ops")
    write_op = Operation(
        task_queue=queue,
        tool=ToolRequest(
            tool="write_file", backend="ws", tool_call_id="",
            args={"file_path": "/new.txt", "content": "hi\n"},
        ),
    )  # fmt: skip
    read_op = Operation(
        task_queue=queue, read=ReadWindowRequest(backend="ws", file_path="/notes.md")
    )
    backend = FilesystemBackend(str(root), virtual_mode=True)
    async with adapter_tools_worker(temporal_client, queue, {"ws": backend}, tmp_path / "j"):
        for name, op in (("operation-write-file", write_op), ("operation-read-window", read_op)):
            handle = await temporal_client.start_workflow(
                OperationWorkflow.run, op, id=uid(f"rec-{name}"), task_queue=queue
            )
            result = await handle.result()
            save(name, await handle.fetch_history())
            if op.read is not None:
                assert result.read is not None and result.read.lines == ["one", "two"]
            else:
                assert result.outcome is not None and result.outcome.status == "success"
    assert (root / "new.txt").read_text() == "hi\n"
