"""No decision payload fails a workflow task (issue 33, item 4).

An exception in an update's *handler* fails the workflow task on every retry
(queries fail, the run is stuck); one in its *validator*, or in decoding the
payload, only refuses the update and the approval stays open. So every field
of a ``decide``, ``decide_turn`` and ``revoke`` payload must be checked before
the handler: a property test sends random payloads through the worker's own
data converter, the real validators and the handlers' synchronous parts, and
an end-to-end test sends the worst of them to a real workflow.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter

from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.previews import ChangePreview
from filegate.workflows import AgentInput, AgentWorkflow, BackendSpec, Decision
from filegate.workflows.approvals.grant_models import GRANT_SECONDS_MAX, GrantRequest
from filegate.workflows.approvals.grants import GrantBook, GrantRevocation
from filegate.workflows.approvals.handlers import ApprovalHandlers
from filegate.workflows.approvals.pending import ApprovalBook, stamped
from filegate.workflows.approvals.turn_decisions import TurnDecision
from tests.scripting import calls, scripted, uid
from tests.workflows.test_grants import pending_one, workers, write
from tests.workflows.test_workflow_e2e import final, remote

CONVERTER = pydantic_data_converter.payload_converter
NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
DOCS = FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="interrupt")
DOCS_RULE = {"source": "permissions", **DOCS.model_dump(mode="json"), "index": 0}
EXECUTE = {"source": "interrupt_on", "tool": "execute", "always": True}
SECRETS = {"source": "interrupt_on", "tool": "glob", "always": True}
FINGERPRINT = "f" * 64
HOUR = GrantRequest(duration_seconds=3600)
MISSING = object()
"""A field left out of the payload."""


class Desk:
    """One turn of three pending approvals (a write, a command, a re-rooting glob)
    and a grant, behind the real handlers (no search attributes: no Temporal calls)."""

    def __init__(self) -> None:
        counter = iter(range(10_000))
        self.book = ApprovalBook(random_hex=lambda: f"{next(counter):08x}" * 4)
        self.grants = GrantBook(random_hex=lambda: f"{next(counter):08x}" * 4)
        self.handlers = ApprovalHandlers(
            self.book, check_edit=_check_edit, search_attributes=False, grants=self.grants
        )
        preview = ChangePreview(kind="overwrite", path="/docs/a.md", fingerprint=FINGERPRINT)
        opened = [
            ("write_file", {"file_path": "/docs/a.md", "content": "x"}, DOCS_RULE, preview),
            ("execute", {"command": "make test"}, EXECUTE, None),
            ("glob", {"pattern": "/secrets/*.txt", "path": "/pub"}, SECRETS, None),
        ]
        self.ids = [
            self.book.open(
                tool=tool, args=args, rule=rule, tool_call_id=f"c{n}", now=NOW.isoformat(),
                turn="1", preview=shown,
            ).id
            for n, (tool, args, rule, shown) in enumerate(opened)
        ]  # fmt: skip
        first = Decision(id=self.ids[0], decision="approve", remember=GrantRequest())
        self.grant = self.handlers.apply(stamped(first, "api"), NOW).grant
        assert self.grant is not None
        self.ids = self.ids[1:]

    def open_ids(self) -> list[str]:
        return [a.id for a in self.book.waiting()]


def _check_edit(tool: str, args: dict[str, Any]) -> str | None:
    """The host's verdict on edited arguments, as FileTools gives it: a line or None."""
    path = args.get("file_path", args.get("command"))
    return None if isinstance(path, str) and path.startswith("/docs/") else "not under /docs"


def decode(model: type[Any], payload: dict[str, Any]) -> Any:
    """What the worker hands the validator: the payload through the data converter
    (an exception here refuses the update before its validator runs)."""
    data = json.dumps(payload).encode()
    raw = Payload(metadata={"encoding": b"json/plain"}, data=data)
    return CONVERTER.from_payloads([raw], [model])[0]


# --------------------------------------------------------------------------- payloads

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=6,
)
TEXT = (
    st.text(max_size=30)
    | st.sampled_from(["ana", "", " ", "a\nb", "a\x00", "a\u202eb", "\t", "x" * 5000])
    | st.text(min_size=190, max_size=210)
)
EDGES = [1e12, 1e308, 10**20, GRANT_SECONDS_MAX, GRANT_SECONDS_MAX + 1, 0.001, 0, -1]
SECONDS = st.one_of(
    st.sampled_from(EDGES),
    st.sampled_from(EDGES),
    st.floats(min_value=0),
    st.floats(),
    st.integers(min_value=-(10**20), max_value=10**20),
)
PATTERNS = st.sampled_from(["/docs/*.md", "/**", "echo *", "/secrets/**", "make *", "*", "/"])


def field(usual: st.SearchStrategy[Any], *odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's value: mostly ``usual`` (so payloads reach the handler), else one of
    ``odd``, any JSON, or left out."""
    rare = st.one_of(*odd, JSON, st.just(MISSING))
    return st.integers(0, 14).flatmap(lambda n: rare if n == 14 else usual)


def payload(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    extra = st.dictionaries(st.sampled_from(["junk", "grant", "id "]), JSON, min_size=1)
    return st.builds(
        lambda chosen, more: {k: v for k, v in {**chosen, **more}.items() if v is not MISSING},
        st.fixed_dictionaries(fields),
        st.integers(0, 19).flatmap(lambda n: extra if n == 19 else st.just({})),
    )


REMEMBER = st.fixed_dictionaries(
    {},
    optional={
        "pattern": st.one_of(PATTERNS, PATTERNS, PATTERNS, TEXT),
        "duration_seconds": SECONDS,
    },
)
VIA = st.sampled_from(["ui", "cli", "api", "proxy", "signal", "timeout", "mail"])


def decide_payloads(ids: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Half of them an approve that remembers (the handler's riskiest part), half any."""
    absent = st.just(MISSING)
    remembering = payload(
        id=st.sampled_from(ids),
        decision=st.just("approve"),
        reviewer=field(absent | st.just("ana"), TEXT),
        remember=REMEMBER,
    )
    return remembering | payload(
        id=field(st.sampled_from(ids), TEXT),
        decision=field(st.sampled_from(["approve", "edit", "reject", "respond"]), st.just("maybe")),
        args=field(absent, st.just({"file_path": "/docs/b.md", "content": "y"}), st.just({})),
        reason=field(absent, TEXT),
        message=field(absent, TEXT),
        reviewer=field(absent | st.just("ana"), TEXT),
        via=field(absent | VIA),
        preview_fingerprint=field(absent, st.just(FINGERPRINT), TEXT),
        remember=field(REMEMBER, absent, st.just({"pattern": "echo *"})),
    )


def turn_payloads(ids: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    exact = {approval_id: None for approval_id in ids}
    odd = st.dictionaries(st.sampled_from(ids) | TEXT, TEXT | st.none())
    return payload(
        turn=field(st.just("1"), TEXT),
        decision=field(st.sampled_from(["approve", "reject"]), st.just("edit")),
        fingerprints=field(st.just(exact), odd),
        reason=field(st.just(MISSING) | TEXT),
        reviewer=field(st.just(MISSING) | st.just("ana"), TEXT),
        via=field(st.just(MISSING) | VIA),
    )


def revoke_payloads(grant_id: str) -> st.SearchStrategy[dict[str, Any]]:
    return payload(
        id=field(st.just(grant_id), TEXT),
        reviewer=field(st.just(MISSING) | TEXT),
        via=field(st.just(MISSING) | VIA),
    )


IDS = Desk().ids
"""The pending ids of every fresh desk (its randomness is a counter)."""
GRANT_ID = Desk().grant.id  # type: ignore[union-attr]
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def refused_or_applied(desk: Desk, validate: Any, apply: Any) -> bool:
    """Run the validator; when it accepts, the handler's part must not raise and
    its answer must encode. True when applied, False when refused (nothing changed)."""
    before = desk.open_ids()
    try:
        validate()
    except Exception:  # any validator exception refuses the update
        assert desk.open_ids() == before  # the approvals stay open
        return False
    answer = apply()
    CONVERTER.to_payloads([answer])
    CONVERTER.to_payloads([desk.book.decided, desk.grants.listing(NOW)])
    return True


@pytest.mark.slow
@PROPERTY
@given(body=decide_payloads(IDS))
def test_no_decide_payload_fails_the_handler(body: dict[str, Any]) -> None:
    desk = Desk()
    try:
        decision = decode(Decision, body)
    except Exception:
        return  # refused before the validator
    refused_or_applied(
        desk,
        lambda: desk.handlers.validate(decision),
        lambda: desk.handlers.apply(stamped(decision, "api"), NOW),
    )


@pytest.mark.slow
@PROPERTY
@given(body=turn_payloads(IDS))
def test_no_decide_turn_payload_fails_the_handler(body: dict[str, Any]) -> None:
    desk = Desk()
    try:
        decision = decode(TurnDecision, body)
    except Exception:
        return
    refused_or_applied(
        desk,
        lambda: desk.handlers.validate_turn(decision),
        lambda: desk.handlers.apply_turn(decision.stamped("api"), NOW),
    )


@pytest.mark.slow
@PROPERTY
@given(body=revoke_payloads(GRANT_ID))
def test_no_revoke_payload_fails_the_handler(body: dict[str, Any]) -> None:
    desk = Desk()
    try:
        revocation = decode(GrantRevocation, body)
    except Exception:
        return
    refused_or_applied(
        desk,
        lambda: desk.grants.check_revoke(revocation),
        lambda: desk.grants.revoke(revocation, NOW),
    )


def test_the_issues_payloads_are_refused_in_one_line() -> None:
    desk = Desk()
    command = desk.ids[0]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"remember": {"duration_seconds": 1e12}}, "less than or equal to 316224000"),
        ({"remember": {"duration_seconds": 99999999 * 86400}}, "less than or equal"),
        ({"reviewer": "ana\nmallory via ui"}, "control or invisible character"),
        ({"args": {"command": "id"}}, "args go with an edit decision, not approve"),
        ({"remember": {"pattern": "echo *\n"}}, "control or invisible character"),
    ]
    for body, why in cases:
        with pytest.raises(Exception, match=why):
            desk.handlers.validate(decode(Decision, {"id": command, "decision": "approve", **body}))
    assert desk.open_ids() == desk.ids
    ack = desk.handlers.apply(
        stamped(Decision(id=command, decision="approve", remember=HOUR), "api"),
        NOW,
    )
    assert ack.grant is not None and ack.grant.expires_at == "2030-01-01T13:00:00+00:00"


# --------------------------------------------------------------------------- end to end


@pytest.mark.services
async def test_an_out_of_range_decision_leaves_the_run_answering(
    temporal_client: Client, tmp_path: Path
) -> None:
    """The issue's case on a real server: ``remember`` for 1e12 s is refused by the
    validator; the approval stays open, queries answer, a sound decision then runs."""
    root = tmp_path / "ws"
    root.mkdir()
    queues = (uid("agent"), uid("tools"))
    input = AgentInput(
        task="write the docs",
        model=scripted(calls(write("w1", "/docs/a.md")), final("done")),
        backend=BackendSpec(default=remote("fs", queues[1])),
        permissions=[DOCS],
    )
    async with workers(temporal_client, root, tmp_path / "j", queues):
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=queues[0]
        )
        asked = await pending_one(handle)
        bad: list[dict[str, Any]] = [
            {"remember": {"duration_seconds": 1e12}},
            {"reviewer": "ana\nbo"},
            {"preview_fingerprint": "x" * 500},
            {"args": {"file_path": "/docs/b.md", "content": "y"}},
        ]
        for extra in bad:
            body = {"id": asked.id, "decision": "approve", "reviewer": "ana", **extra}
            with pytest.raises(WorkflowUpdateFailedError):
                await asyncio.wait_for(handle.execute_update("decide", body), 20)
        turn = {"turn": asked.turn, "decision": "approve", "fingerprints": {asked.id: "\x00"}}
        with pytest.raises(WorkflowUpdateFailedError):
            await asyncio.wait_for(handle.execute_update("decide_turn", turn), 20)
        revoke = {"id": "g-" + "0" * 100}
        with pytest.raises(WorkflowUpdateFailedError):
            await asyncio.wait_for(handle.execute_update("revoke", revoke), 20)
        still = await pending_one(handle)  # queries answer; the approval is still open
        assert still.id == asked.id
        ack = await asyncio.wait_for(
            handle.execute_update(
                AgentWorkflow.decide_update,
                Decision(id=asked.id, decision="approve", remember=HOUR),
            ),
            20,
        )
        assert ack.grant is not None and ack.grant.expires_at is not None
        result = await asyncio.wait_for(handle.result(), 60)
    assert (root / "docs" / "a.md").read_text() == "w1\n"
    assert result.approvals == 1
