"""What the model reads after a decision, and a reviewer never asked about a no-op
(issue 28, items 9 and 10).

- An ``edit_file`` of a file the run has not read is refused before anyone is
  asked (it used to ask the reviewer, then fail with "has not been read").
- A reject reason ends its sentence before "Do not retry".
- After ``respond`` the model is told that the call did not run.
- Edited arguments are quoted as JSON, not as a Python repr.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.client import Client

from filegate.workflows import AgentInput, AgentWorkflow, BackendSpec, Decision
from filegate.workflows.approvals.pending import rejection_text, response_text
from filegate.workflows.gate import ToolInterrupt
from tests.scripting import calls, scripted, uid
from tests.workflows.test_workflow_e2e import final, pending, results, running_agent

pytestmark = pytest.mark.services


def test_texts_read_as_sentences() -> None:
    assert rejection_text("b is not wanted") == (
        "A human reviewer rejected this tool call: b is not wanted. "
        "Do not retry it unless the user asks you to."
    )
    assert rejection_text("no!", "ana").startswith(
        "A human reviewer (ana) rejected this tool call: no! Do"
    )
    assert rejection_text("   ") == rejection_text(None)
    assert "was not run" in response_text("use /c.txt", "ana").splitlines()[0]


async def test_the_model_reads_what_happened(temporal_client: Client) -> None:
    model = scripted(
        calls(
            ("e", "edit_file", {"file_path": "/a.txt", "old_string": "x", "new_string": "y"}),
            ("w1", "write_file", {"file_path": "/b.txt", "content": "b"}),
        ),
        calls(("w2", "write_file", {"file_path": "/c.txt", "content": "c"})),
        calls(("w3", "write_file", {"file_path": "/d.txt", "content": "d"})),
        final(),
    )
    always = ToolInterrupt(always=True)
    async with running_agent(temporal_client) as queue:
        input = AgentInput(
            task="t",
            model=model,
            backend=BackendSpec(),
            interrupt_on={"edit_file": always, "write_file": always},
        )
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=queue
        )
        [first] = await pending(handle, 1)  # the edit of an unread file asked no one
        assert first.tool == "write_file"
        await decide(handle, Decision(id=first.id, decision="reject", reason="b is not wanted"))
        [second] = await pending(handle, 1)
        await decide(
            handle, Decision(id=second.id, decision="respond", message="write /x.txt instead")
        )
        [third] = await pending(handle, 1)
        edited = {"file_path": "/d.txt", "content": "édité"}
        await decide(handle, Decision(id=third.id, decision="edit", args=edited))
        result = await handle.result()
    out = results(result)
    assert "has not been read" in out["e"]["content"] and result.approvals == 3
    assert "b is not wanted. Do not retry" in out["w1"]["content"]
    assert out["w2"]["content"].startswith("[This call was not run: a human reviewer")
    assert "write /x.txt instead" in out["w2"]["content"]
    assert json.dumps(edited, ensure_ascii=False) in out["w3"]["content"]


async def decide(handle: Any, decision: Decision) -> None:
    await handle.execute_update(AgentWorkflow.decide_update, decision)
