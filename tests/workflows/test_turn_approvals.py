"""Turn approvals: every pending call of one model turn decided in one update (contract §5).

The calls of a turn wait side by side and the model is asked again only once
each has a result: two calls decided of three leave the run waiting, with no
model call (the bug this guards against: approving one call resumed the run
and its siblings got made-up results). ``decide_turn`` decides all of a turn
at once, all or nothing: the validator refuses a decision that does not name
exactly the turn's pending approvals or names a stale preview, and when a
target changed since its preview nothing of the turn is applied. Through the
typed ``AgentWorkflow.decide_turn_update``, through ``filegate approve --all``
/ ``reject --all`` on an ``AgentWorkflow`` and on a ``FileTools`` host of one's
own that runs two turns side by side (``--turn`` picks one).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from filegate.backends.filesystem import FilesystemBackend
from filegate.cli.approvals import check_target
from filegate.cli.commands import build_parser
from filegate.cli.errors import CliError
from filegate.cli.turn_approvals import chosen_turn, turn_payload, turns_of
from filegate.cli.ui.app import _parse_turn_decision
from filegate.cli.ui.turns import mark_turns, turn_decision_text
from filegate.cli.ui.web_guard import Reviewer
from filegate.kernel.previews import ChangePreview
from filegate.workflows import (
    AgentInput,
    AgentWorkflow,
    BackendSpec,
    Decision,
    FileTools,
    FileToolsConfig,
    TurnDecision,
)
from filegate.workflows.approvals.pending import ApprovalBook
from filegate.workflows.approvals.turn_decisions import check_turn, turn_of, turn_pending
from tests.cli.test_cli import CLI, cli_env
from tests.scripting import calls, local_activities, scripted, uid
from tests.workflows.test_workflow_e2e import (
    DOCS_INTERRUPT,
    eventually,
    final,
    pending,
    remote,
    results,
    running_agent,
    running_tools,
)

__all__ = ["cli_env"]  # the fixture, shared with tests/cli/test_cli.py


def no_edit(tool: str, args: dict[str, Any]) -> str | None:
    return None


def writes(*names: str) -> list[tuple[str, str, dict[str, Any]]]:
    return [(n, "write_file", {"file_path": f"/docs/{n}.txt", "content": f"{n}\n"}) for n in names]


def shown(approvals: list[Any]) -> dict[str, str | None]:
    """Each approval's preview fingerprint, as a reviewer's client names it."""
    return {a.id: (a.preview.fingerprint or "") if a.preview else None for a in approvals}


# --------------------------------------------------------------------------- the rules


def test_a_turn_decision_is_all_or_nothing() -> None:
    book = ApprovalBook()
    opened = [
        book.open(
            tool="write_file",
            args={"file_path": f"/docs/{n}.txt", "content": "x"},
            rule=None,
            tool_call_id=n,
            now="t",
            turn="3",
            preview=ChangePreview(kind="overwrite", path=f"/docs/{n}.txt", fingerprint=f"fp-{n}"),
        )
        for n in "abc"
    ]
    other = book.open(tool="read_file", args={}, rule=None, tool_call_id="z", now="t", turn="4")
    ids = [a.id for a in opened]
    fingerprints: dict[str, str | None] = {a.id: f"fp-{a.tool_call_id}" for a in opened}
    approve = TurnDecision(turn="3", decision="approve", fingerprints=fingerprints)
    assert check_turn(book, approve, no_edit, set()) == ids
    assert [a.id for a in turn_pending(book, "4")] == [other.id]
    assert turn_of("3:1:call_0") == "3" and turn_of("12:0:a:b") == "12"

    def refused(decision: TurnDecision, checking: frozenset[str] = frozenset()) -> str:
        with pytest.raises(ValueError) as error:
            check_turn(book, decision, no_edit, set(checking))
        return str(error.value)

    assert "no pending approvals in turn '9'" in refused(approve.model_copy(update={"turn": "9"}))
    subset = approve.model_copy(update={"fingerprints": dict(list(fingerprints.items())[:2])})
    assert f"not named: {ids[2]}" in refused(subset)
    extra = approve.model_copy(update={"fingerprints": {**fingerprints, other.id: None}})
    assert f"not pending in it: {other.id}" in refused(extra)
    stale = approve.model_copy(update={"fingerprints": {**fingerprints, ids[1]: "fp-old"}})
    assert f"approval {ids[1]!r}: the preview changed" in refused(stale)
    assert "reserved" in refused(approve.model_copy(update={"via": "timeout"}))
    assert "being checked" in refused(approve, frozenset({ids[0]}))
    book.expect_preview(ids[2])
    assert f"approval {ids[2]!r}: the preview is not ready" in refused(approve)
    # A rejection is about the calls, not their previews: it takes the turn as it is.
    reject = TurnDecision(turn="3", decision="reject", reason="no", fingerprints=dict.fromkeys(ids))
    assert check_turn(book, reject, no_edit, set()) == ids
    assert {(d.reason, d.preview_fingerprint) for d in reject.decisions(ids)} == {("no", None)}
    assert approve.decisions(ids)[0].preview_fingerprint == "fp-a"
    # Someone decided one meanwhile: the decision naming all three is refused.
    book.attach_preview(ids[2], ChangePreview(kind="new_file", path="/docs/c.txt"))
    book.record(Decision(id=ids[0], decision="reject"), "t")
    assert f"not pending in it: {ids[0]}" in refused(reject)


def test_the_command_picks_one_turn() -> None:
    parser = build_parser()
    for argv, problem in (
        (["approve", "0123", "--all", "--workflow", "w"], "give an approval ID or --all, not both"),
        (["reject", "--workflow", "w"], "give an approval ID, or --all"),
        (["approve", "0123", "--turn", "2", "--workflow", "w"], "--turn goes with --all"),
    ):
        with pytest.raises(CliError, match=re.escape(problem)) as error:
            check_target(parser.parse_args(argv))
        assert error.value.code == 2
    listed = [
        {"id": "a1", "turn": "2"},
        {"id": "b1", "turn": "3"},
        {"id": "a2", "turn": "2"},
        {"id": "old"},  # from a worker before turn approvals: no turn
    ]
    assert [a["id"] for a in turns_of(listed)["2"]] == ["a1", "a2"]
    assert chosen_turn(listed, "3", "wf") == ("3", [listed[1]])
    with pytest.raises(CliError, match=re.escape("no pending approvals in turn 7 of wf (pending:")):
        chosen_turn(listed, "7", "wf")
    with pytest.raises(CliError, match="that carry a turn: decide them one by one"):
        chosen_turn([{"id": "old"}], None, "wf")
    with pytest.raises(CliError, match=r"wf has no pending approvals$"):
        chosen_turn([], None, "wf")
    decision = {"id": None, "decision": "reject", "reviewer": "bo", "via": "cli", "reason": "no"}
    assert turn_payload(decision, "2", [{"id": "a1", "preview": {"fingerprint": None}}]) == {
        "turn": "2", "decision": "reject", "fingerprints": {"a1": ""},
        "reviewer": "bo", "via": "cli", "reason": "no",
    }  # fmt: skip


def test_the_page_offers_one_decision_per_turn() -> None:
    cards: list[dict[str, Any]] = [
        {"workflow_id": "w", "id": "a1", "turn": "2", "version": "v1"},
        {"workflow_id": "w", "id": "b1", "turn": "3", "version": "v1"},
        {"workflow_id": "w", "id": "a2", "turn": "2", "version": "v1"},
        {"workflow_id": "x", "id": "c1", "turn": "2", "version": "v1"},
    ]
    mark_turns(cards)
    bar = cards[0]["turn_bar"]
    assert (bar["key"], bar["count"], bar["ids"]) == ("turn/w/2", 2, ["a1", "a2"])
    assert [c.get("turn_bar") for c in cards[1:]] == [None, None, None]  # one call: no bar
    ack = {"turn": "2", "decision": "approve", "ids": ["a1", "a2"], "reviewer": "ana", "via": "ui"}
    assert turn_decision_text(ack, "w") == "approved 2 tool calls of turn 2 of w (by ana via ui)"
    bounced = turn_decision_text({**ack, "changed_since_preview": ["a2"]}, "w")
    assert bounced.startswith("nothing approved in turn 2 of w: the target of 1 tool call changed")
    who = Reviewer(who="ana", via="ui")
    body = {"workflow_id": "w", "turn": "2", "decision": "reject", "fingerprints": {"a1": None}}
    workflow_id, decision = _parse_turn_decision({**body, "reason": " "}, who)
    assert (workflow_id, decision.reviewer, decision.via) == ("w", "ana", "ui")
    assert decision.reason is None  # an empty reason box means none
    with pytest.raises(ValueError, match="set by the UI from your login"):
        _parse_turn_decision({**body, "reviewer": "mallory"}, who)
    with pytest.raises(ValueError, match="decision"):
        _parse_turn_decision({**body, "decision": "edit"}, who)


# --------------------------------------------------------------------------- AgentWorkflow


def model_calls(history: Any) -> int:
    return sum(kind == "filegate.model" for kind, _ in local_activities(history))


@pytest.mark.services
async def test_no_model_call_until_every_call_of_the_turn_is_decided(
    temporal_client: Client,
) -> None:
    input = AgentInput(
        task="write three docs",
        model=scripted(calls(*writes("a", "b", "c")), final()),
        permissions=DOCS_INTERRUPT,
    )
    async with running_agent(temporal_client) as queue:
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("turn"), task_queue=queue
        )
        approvals = await pending(handle, 3)
        assert {a.turn for a in approvals} == {"1"}
        first, second, last = approvals
        for approval in (first, second):
            decision = Decision(id=approval.id, decision="approve")
            await handle.execute_update(AgentWorkflow.decide_update, decision)
        await asyncio.sleep(0.5)  # room for a run that (wrongly) went on to the model
        status = await handle.query(AgentWorkflow.status)
        assert status.step == 1 and status.state == "awaiting_approval"
        assert [a.id for a in status.pending_approvals] == [last.id]
        transcript = await handle.query(AgentWorkflow.transcript)
        assert transcript[-1]["role"] == "assistant"  # no tool result reached the model
        assert not any(m["role"] == "tool" for m in transcript)
        assert model_calls(await handle.fetch_history()) == 1
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=last.id, decision="reject")
        )
        result = await handle.result()
        assert model_calls(await handle.fetch_history()) == 2
    out = results(result)
    assert (out["a"]["status"], out["b"]["status"], out["c"]["status"]) == (
        "success",
        "success",
        "error",
    )
    assert result.steps == 2


@pytest.mark.services
async def test_one_update_decides_every_call_of_a_turn(
    temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "b.txt").write_text("old b\n")
    model = scripted(calls(*writes("a", "b", "c")), calls(*writes("d", "e")), final())
    async with (
        running_agent(temporal_client) as queue,
        running_tools(temporal_client, {"fs": FilesystemBackend(root)}, tmp_path / "j") as tq,
    ):
        input = AgentInput(
            task="docs",
            model=model,
            backend=BackendSpec(default=remote("fs", tq)),
            permissions=DOCS_INTERRUPT,
        )
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("turn"), task_queue=queue
        )
        first = await pending(handle, 3)
        ids = [a.id for a in first]
        b = next(a for a in first if a.args["file_path"] == "/docs/b.txt")
        approve = TurnDecision(turn="1", decision="approve", fingerprints=shown(first))
        for refused, text in (
            (approve.model_copy(update={"turn": "9"}), "no pending approvals in turn '9'"),
            (approve.model_copy(update={"fingerprints": shown(first[:2])}), "not named"),
            (
                approve.model_copy(update={"fingerprints": {**shown(first), b.id: "stale"}}),
                "the preview changed",
            ),
        ):
            with pytest.raises(WorkflowUpdateFailedError) as error:
                await handle.execute_update(AgentWorkflow.decide_turn_update, refused)
            assert text in str(error.value.cause)

        # b.txt changes after its preview: nothing of the turn runs, b shows the change.
        (root / "docs" / "b.txt").write_text("changed meanwhile\n")
        bounced = await handle.execute_update(AgentWorkflow.decide_turn_update, approve)
        assert bounced.changed_since_preview == [b.id] and not bounced.applied
        again = await pending(handle, 3)
        assert [a.id for a in again] == ids
        fresh = {a.id: a for a in again}[b.id]
        assert fresh.changed_since_preview and fresh.preview is not None
        assert fresh.preview.fingerprint != (b.preview.fingerprint if b.preview else None)
        assert not (root / "docs" / "a.txt").exists()

        ack = await handle.execute_update(
            AgentWorkflow.decide_turn_update,
            TurnDecision(turn="1", decision="approve", fingerprints=shown(again), reviewer="ana"),
        )
        assert ack.applied and ack.ids == ids and (ack.reviewer, ack.via) == ("ana", "api")
        second = await pending(handle, 2)
        assert {a.turn for a in second} == {"2"}
        rejected = await handle.execute_update(
            AgentWorkflow.decide_turn_update,
            TurnDecision(
                turn="2",
                decision="reject",
                reason="not these",
                fingerprints=dict.fromkeys(a.id for a in second),
            ),
        )
        assert rejected.ids == [a.id for a in second]
        result = await handle.result()
        decided = await handle.query(AgentWorkflow.decided_approvals)
    out = results(result)
    for name in "abc":
        assert out[name]["status"] == "success"
        assert "approved by ana via api" in out[name]["content"]
        assert (root / "docs" / f"{name}.txt").read_text() == f"{name}\n"
    for name in "de":
        assert out[name]["status"] == "error" and "not these" in out[name]["content"]
        assert not (root / "docs" / f"{name}.txt").exists()
    applied = [d for d in decided if d.decision == "approve" and not d.changed_since_preview]
    assert [d.id for d in applied] == ids
    assert len({d.decided_at for d in applied}) == 1  # one update, one moment
    assert [d.id for d in decided if d.changed_since_preview] == [b.id]


# --------------------------------------------------------------------------- the CLI


async def decide_by_cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *CLI, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


@pytest.mark.services
async def test_approve_all_from_the_command_line(
    temporal_client: Client,
    tmp_path: Path,
    cli_env: dict[str, str],
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    async with (
        running_agent(temporal_client) as queue,
        running_tools(temporal_client, {"fs": FilesystemBackend(root)}, tmp_path / "j") as tq,
    ):
        input = AgentInput(
            task="docs",
            model=scripted(calls(*writes("a", "b", "c")), final()),
            backend=BackendSpec(default=remote("fs", tq)),
            permissions=DOCS_INTERRUPT,
        )
        workflow_id = uid("turn-cli")
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=queue
        )
        # Not waiting for the previews here: the command does, as a single approve does.
        await eventually(
            lambda: handle.query(AgentWorkflow.pending_approvals), lambda p: len(p) == 3
        )
        code, out, err = await decide_by_cli(
            cli_env, "approve", "--all", "--workflow", workflow_id, "--reviewer", "bo"
        )
        assert code == 0, err
        assert one_line(out) == f"approved 3 tool calls of turn 1 of {workflow_id} (by bo via cli)"
        result = await handle.result()
    out_of = results(result)
    for name in "abc":
        assert "approved by bo via cli" in out_of[name]["content"]
        assert (root / "docs" / f"{name}.txt").read_text() == f"{name}\n"


@workflow.defn(name="TurnsSideBySide")
class TurnsSideBySide:
    """A host of its own: runs its turns concurrently through ``FileTools.run_turn``."""

    @workflow.init
    def __init__(self, config: FileToolsConfig, turns: list[list[dict[str, Any]]]) -> None:
        self.tools = FileTools(config)

    @workflow.run
    async def run(
        self, config: FileToolsConfig, turns: list[list[dict[str, Any]]]
    ) -> dict[str, str]:
        done = await asyncio.gather(*(self.tools.run_turn(turn) for turn in turns))
        return {r.tool_call_id: r.text for results in done for r in results}


@pytest.mark.services
async def test_turns_of_a_file_tools_host_from_the_command_line(
    temporal_client: Client,
    cli_env: dict[str, str],
) -> None:
    turns = [
        [{"id": n, "name": name, "args": args} for n, name, args in writes(*group)]
        for group in (("a", "b"), ("c", "d"))
    ]
    queue = f"turns-{uuid.uuid4().hex[:8]}"
    workflow_id = f"turns-{uuid.uuid4().hex[:8]}"
    async with Worker(
        temporal_client, task_queue=queue, workflows=[TurnsSideBySide],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):  # fmt: skip
        handle: WorkflowHandle[Any, dict[str, str]] = await temporal_client.start_workflow(
            "TurnsSideBySide",
            args=[FileToolsConfig(permissions=DOCS_INTERRUPT), turns],
            id=workflow_id,
            task_queue=queue,
            result_type=dict[str, str],
        )
        listed = await eventually(
            lambda: handle.query("pending_approvals", result_type=list[dict[str, Any]]),
            lambda p: len(p) == 4,
        )
        assert sorted(a["turn"] for a in listed) == ["1", "1", "2", "2"]
        ambiguous = await decide_by_cli(cli_env, "approve", "--all", "--workflow", workflow_id)
        assert ambiguous[0] == 1 and one_line(ambiguous[2]) == (
            f"filegate: workflow {workflow_id} has 2 turns pending (turn 1: 2 tool calls, "
            "turn 2: 2 tool calls): pick one with --turn"
        )
        approved = await decide_by_cli(
            cli_env, "approve", "--all", "--turn", "1", "--workflow", workflow_id
        )
        assert approved[0] == 0, approved[2]
        assert one_line(approved[1]).startswith(f"approved 2 tool calls of turn 1 of {workflow_id}")
        rejected = await decide_by_cli(  # only turn 2 is left: no --turn needed
            cli_env, "reject", "--all", "--workflow", workflow_id, "--reason", "not now"
        )
        assert rejected[0] == 0, rejected[2]
        assert one_line(rejected[1]).startswith(f"rejected 2 tool calls of turn 2 of {workflow_id}")
        answers = await handle.result()
    assert all("approved by" in answers[n] for n in "ab")
    assert all("rejected" in answers[n] and "not now" in answers[n] for n in "cd")
