"""Change previews on pending approvals, and the re-check at decision time (contract §5).

Pure tests pin :func:`compute_preview` on the State and Filesystem backends
(diffs with real line numbers, errors, delete listings, permission hiding,
clipping) and the activity wrapper with a worker's policies. End to end, on the
real Temporal dev server with real workers: a pending write on a tools worker
carries its card (preview, description, task, model text, deadline); a file
changed after the preview bounces an approval (``changed_since_preview``) and
keeps it open with a fresh preview; the State backend's preview is computed in
the workflow; ``execute`` shows its command and working directory; the
approval search attributes follow the pending and decided counts.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import ActivityEnvironment

from filegate.activities.preview import PreviewActivities
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.local_shell import LocalShellBackend
from filegate.backends.policy import PolicyConfig
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.previews import MAX_DIFF_CHARS, ChangePreview, compute_preview
from filegate.kernel.protocol import BackendProtocol
from filegate.kernel.state import StateBackend
from filegate.kernel.tool_types import ToolRequest
from filegate.wiring.roles import file_tools
from filegate.worker import agent_worker
from filegate.workflows import (
    AgentInput,
    AgentWorkflow,
    ApprovalConfig,
    BackendRef,
    BackendSpec,
    Decision,
)
from filegate.workflows.approvals.handlers import (
    DECIDED_APPROVALS,
    PENDING_APPROVALS,
    initial_search_attributes,
)
from filegate.workflows.approvals.models import PendingApproval
from filegate.workflows.gate import ToolInterrupt
from filegate.workflows.inputs import DecidedApproval
from tests.scripting import calls, scripted, uid
from tests.workflows.test_workflow_e2e import (
    REPLAY_IDS,
    eventually,
    final,
    pending,
    remote,
    results,
    running_agent,
    running_tools,
)

TWENTY = "".join(f"line {n}\n" for n in range(1, 21))
"""A 20-line file: an edit near its end must show line numbers near 18, not 1."""


def request(
    tool: Any,
    *,
    prefix: str = "/",
    rules: list[FilesystemPermission] | None = None,
    **args: Any,
) -> ToolRequest:
    """The request the workflow would build: backend-local path below ``prefix``."""
    virtual = args.get("file_path")
    local = dict(args)
    if virtual is not None and prefix != "/":
        local["file_path"] = virtual[len(prefix.rstrip("/")) :]
    return ToolRequest(
        tool=tool,
        backend="b",
        args=local,
        tool_call_id="1:0:c",
        route_prefix=prefix,
        virtual_path=virtual,
        permissions=rules or [],
    )


def state_with(**files: str) -> StateBackend:
    backend = StateBackend()
    for path, text in files.items():
        backend.write("/" + path.replace("__", "/"), text)
    return backend


def hunk_starts(diff: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in re.findall(r"^@@ -(\d+),?\d* \+(\d+),?\d* @@", diff, re.M)]


# --------------------------------------------------------------------------- compute_preview


def test_write_new_file_and_overwrite() -> None:
    backend = state_with(**{"docs__a.txt": TWENTY})
    new = compute_preview(backend, request("write_file", file_path="/docs/b.txt", content="x\n"))
    assert new.kind == "new_file" and new.fingerprint is None and new.path == "/docs/b.txt"
    assert new.diff is not None and "+x" in new.diff and "--- /dev/null" in new.diff
    changed = TWENTY.replace("line 17\n", "LINE 17\n")
    over = compute_preview(backend, request("write_file", file_path="/docs/a.txt", content=changed))
    assert over.kind == "overwrite" and over.fingerprint and over.fingerprint.startswith("sha256:")
    assert over.diff is not None and hunk_starts(over.diff) == [(14, 14)]
    assert "-line 17\n+LINE 17\n" in over.diff and " line 14\n" in over.diff  # 3 lines context
    assert " line 13\n" not in over.diff


def test_edit_diff_has_real_line_numbers_and_errors() -> None:
    backend = state_with(**{"a.txt": TWENTY + "dup\ndup\n"})
    args: dict[str, Any] = {
        "file_path": "/a.txt",
        "old_string": "line 18\n",
        "new_string": "eighteen\n",
    }
    edit = compute_preview(backend, request("edit_file", **args))
    assert edit.kind == "edit" and edit.error is None and edit.diff is not None
    assert hunk_starts(edit.diff) == [(15, 15)]
    assert "-line 18\n+eighteen\n" in edit.diff
    missing = compute_preview(backend, request("edit_file", **{**args, "old_string": "nope"}))
    assert missing.kind == "edit" and missing.diff is None and "not found" in (missing.error or "")
    twice = compute_preview(
        backend, request("edit_file", file_path="/a.txt", old_string="dup", new_string="x")
    )
    assert "2 times" in (twice.error or "") and twice.fingerprint == edit.fingerprint
    gone = compute_preview(backend, request("edit_file", **{**args, "file_path": "/b.txt"}))
    assert gone.kind == "edit" and "not found" in (gone.error or "")


def test_delete_lists_what_goes_and_hides_denied() -> None:
    backend = state_with(**{"d__a.txt": "a", "d__sub__b.txt": "b", "d__secret.key": "k"})
    rules = [FilesystemPermission(operations=["read"], paths=["/d/*.key"], mode="deny")]
    tree = compute_preview(backend, request("delete", file_path="/d", rules=rules))
    assert tree.kind == "delete" and tree.deleted == ["/d/a.txt", "/d/sub/b.txt"]
    assert tree.fingerprint
    one = compute_preview(backend, request("delete", file_path="/d/a.txt"))
    assert one.deleted == ["/d/a.txt"] and one.fingerprint != tree.fingerprint
    nothing = compute_preview(backend, request("delete", file_path="/nope"))
    assert nothing.deleted == [] and nothing.error


def test_writing_onto_a_directory_is_not_a_new_file(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_text("x")
    for backend in (state_with(**{"d__a": "x"}), FilesystemBackend(tmp_path, virtual_mode=True)):
        shown = compute_preview(backend, request("write_file", file_path="/d", content="y"))
        assert shown.kind == "unavailable" and "directory" in (shown.error or ""), backend


def test_a_read_denied_target_shows_no_content() -> None:
    secret = "password=hunter2\n"
    backend = state_with(**{"s__cfg": secret})
    rules = [FilesystemPermission(operations=["read"], paths=["/s/**"], mode="deny")]
    shown = compute_preview(
        backend, request("write_file", file_path="/s/cfg", content="x", rules=rules)
    )
    assert shown.kind == "unavailable" and shown.diff is None and shown.fingerprint is None
    assert "hunter2" not in shown.model_dump_json()
    # A read interrupt asks for an approval of its own, which a write's is not:
    # no content (issue 26, P1), and the card says why.
    interrupt = [
        FilesystemPermission(operations=["read", "write"], paths=["/s/**"], mode="interrupt")
    ]
    hidden = compute_preview(
        backend, request("write_file", file_path="/s/cfg", content="x", rules=interrupt)
    )
    assert hidden.kind == "unavailable" and "hunter2" not in hidden.model_dump_json()
    assert "read: interrupt" in (hidden.error or "")
    # A write interrupt alone is the approval being asked for: the diff is shown.
    write_only = [FilesystemPermission(operations=["write"], paths=["/s/**"], mode="interrupt")]
    seen = compute_preview(
        backend, request("write_file", file_path="/s/cfg", content="x", rules=write_only)
    )
    assert seen.kind == "overwrite" and "hunter2" in (seen.diff or "")


def test_big_diffs_are_clipped_and_binary_is_not_shown() -> None:
    backend = StateBackend()
    big = "".join(f"row {n} {'x' * 60}\n" for n in range(2000))
    clipped = compute_preview(backend, request("write_file", file_path="/big", content=big))
    assert clipped.truncated and len(clipped.diff or "") <= MAX_DIFF_CHARS
    assert (clipped.diff or "").endswith("\n")


def test_route_paths_are_virtual(tmp_path: Path) -> None:
    (tmp_path / "n.md").write_text("old\n")
    backend = FilesystemBackend(tmp_path, virtual_mode=True)
    req = request("write_file", prefix="/memories/", file_path="/memories/n.md", content="new\n")
    preview = compute_preview(backend, req)
    assert preview.kind == "overwrite" and preview.path == "/memories/n.md"
    assert "--- a/memories/n.md" in (preview.diff or "") and "-old\n+new\n" in (preview.diff or "")


async def test_activity_uses_the_worker_policies(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("one\n")
    backends: dict[str, BackendProtocol] = {"b": FilesystemBackend(root, virtual_mode=True)}
    tools = file_tools(backends, tmp_path / "j", None, PolicyConfig())
    activity = PreviewActivities(tools).preview
    env = ActivityEnvironment()
    ok = await env.run(activity, request("write_file", file_path="/a.txt", content="two\n"))
    assert ok.kind == "overwrite" and "-one\n+two\n" in (ok.diff or "")
    unknown = request("write_file", file_path="/a.txt", content="x").model_copy(
        update={"backend": "other"}
    )
    failed = await env.run(activity, unknown)
    assert failed.kind == "unavailable" and "not configured" in (failed.error or "")
    assert (root / "a.txt").read_text() == "one\n"  # a preview never writes


# --------------------------------------------------------------------------- end to end

DOCS_INTERRUPT = [FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="interrupt")]


async def decided(handle: WorkflowHandle[Any, Any]) -> list[DecidedApproval]:
    return await handle.query(AgentWorkflow.decided_approvals)


async def sa(handle: WorkflowHandle[Any, Any]) -> tuple[int | None, int | None]:
    attrs = (await handle.describe()).typed_search_attributes
    return attrs.get(PENDING_APPROVALS), attrs.get(DECIDED_APPROVALS)


@pytest.mark.services
async def test_card_recheck_and_search_attributes(temporal_client: Client, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    target = root / "docs" / "a.txt"
    target.write_text(TWENTY)
    new_text = TWENTY.replace("line 10\n", "ten\n")
    model = scripted(
        {
            "content": "I will rename line 10.",
            "tool_calls": [
                {
                    "id": "w",
                    "name": "write_file",
                    "args": {"file_path": "/docs/a.txt", "content": new_text},
                }
            ],
        },
        final(),
    )
    async with (
        running_agent(temporal_client) as queue,
        running_tools(temporal_client, {"fs": FilesystemBackend(root)}, tmp_path / "j") as tq,
    ):
        input = AgentInput(
            task="Tidy the docs please",
            model=model,
            backend=BackendSpec(default=remote("fs", tq)),
            permissions=DOCS_INTERRUPT,
            approvals=ApprovalConfig(timeout_seconds=3600, on_timeout="escalate"),
        )
        workflow_id = uid("wf")
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run,
            input,
            id=workflow_id,
            task_queue=queue,
            search_attributes=initial_search_attributes(),
        )
        [approval] = await eventually(
            lambda: handle.query(AgentWorkflow.pending_approvals),
            lambda p: len(p) == 1 and p[0].preview is not None,
        )
        assert approval.task == "Tidy the docs please"
        assert approval.assistant_text == "I will rename line 10."
        assert approval.description and "permission rule #1" in approval.description
        assert approval.on_timeout == "escalate" and approval.timeout_at is not None
        deadline = datetime.fromisoformat(approval.timeout_at)
        assert deadline - datetime.fromisoformat(approval.requested_at) == timedelta(hours=1)
        preview = approval.preview
        assert preview is not None and preview.kind == "overwrite"
        assert hunk_starts(preview.diff or "") == [(7, 7)] and "-line 10\n+ten\n" in (
            preview.diff or ""
        )
        assert await eventually(lambda: sa(handle), lambda v: v == (1, 0))

        # Someone changes the file after the reviewer saw the preview.
        target.write_text(TWENTY + "appended\n")
        ack = await handle.execute_update(
            AgentWorkflow.decide_update,
            Decision(id=approval.id, decision="approve", reviewer="ana", via="cli"),
        )
        assert ack.changed_since_preview
        [still] = await handle.query(AgentWorkflow.pending_approvals)
        assert still.id == approval.id and still.changed_since_preview
        assert still.preview is not None and still.preview.fingerprint != preview.fingerprint
        assert "appended" in (still.preview.diff or "")
        [bounced] = await decided(handle)
        assert bounced.changed_since_preview and bounced.path == "/docs/a.txt"
        assert bounced.summary == "write_file /docs/a.txt"
        assert target.read_text() == TWENTY + "appended\n"  # not run on that decision

        ack = await handle.execute_update(
            AgentWorkflow.decide_update,
            Decision(id=approval.id, decision="approve", reviewer="ana", via="cli"),
        )
        assert not ack.changed_since_preview
        result = await handle.result()
        REPLAY_IDS.append(workflow_id)
        assert await eventually(lambda: sa(handle), lambda v: v == (0, 1))
        history = await decided(handle)
    assert [d.changed_since_preview for d in history] == [True, False]
    assert target.read_text() == new_text
    assert results(result)["w"]["status"] == "success"


@pytest.mark.services
async def test_state_preview_in_workflow_and_signal_recheck(temporal_client: Client) -> None:
    args: dict[str, Any] = {
        "file_path": "/a.txt",
        "old_string": "line 18\n",
        "new_string": "eighteen\n",
    }
    model = scripted(
        calls(("w", "write_file", {"file_path": "/a.txt", "content": TWENTY})),
        calls(("r", "read_file", {"file_path": "/a.txt"})),
        calls(
            ("e", "edit_file", args), ("x", "write_file", {"file_path": "/a.txt", "content": "z"})
        ),
        final(),
    )
    rules = [FilesystemPermission(operations=["write"], paths=["/a.txt"], mode="interrupt")]
    async with running_agent(temporal_client) as queue:
        input = AgentInput(
            task="t",
            model=model,
            permissions=rules,
            interrupt_on={"write_file": ToolInterrupt(always=False)},
        )
        workflow_id = uid("wf")
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=workflow_id, task_queue=queue
        )
        [approval] = await eventually(
            lambda: handle.query(AgentWorkflow.pending_approvals),
            lambda p: len(p) == 1 and p[0].preview is not None,
        )
        assert approval.tool == "edit_file"
        assert approval.preview is not None and hunk_starts(approval.preview.diff or "") == [
            (15, 15)
        ]
        # The write of the same path waits behind the edit (path order), so nothing
        # changes meanwhile: the signalled approval runs.
        await handle.signal(
            AgentWorkflow.decide_signal, Decision(id=approval.id, decision="approve")
        )
        result = await handle.result()
        REPLAY_IDS.append(workflow_id)
        [entry] = await handle.query(AgentWorkflow.decided_approvals)
    out = results(result)
    assert out["e"]["status"] == "success" and out["x"]["status"] == "success"
    assert entry.via == "signal" and not entry.changed_since_preview
    assert (await sa(handle)) == (None, None)  # not started with them: never upserted


@pytest.mark.services
async def test_execute_preview_and_interrupt_on_description(
    temporal_client: Client, tmp_path: Path
) -> None:
    work = tmp_path / "ws"
    work.mkdir()
    shell = LocalShellBackend(str(work))
    model = scripted(calls(("x", "execute", {"command": "echo hi"})), final())
    async with (
        running_agent(temporal_client) as queue,
        running_tools(temporal_client, {"sh": shell}, tmp_path / "j") as tq,
    ):
        input = AgentInput.model_validate(
            {
                "task": "run it",
                "model": model,
                "backend": {"default": remote("sh", tq, execute=True, shell=str(work))},
                "interrupt_on": {
                    "execute": {
                        "always": True,
                        "description": "Commands need a second pair of eyes",
                    }
                },
            }
        )
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=queue
        )
        [approval] = await pending(handle, 1)
        assert approval.description == "Commands need a second pair of eyes"
        assert approval.timeout_at is None and approval.on_timeout is None
        assert approval.preview == ChangePreview(kind="execute", command="echo hi", cwd=str(work))
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=approval.id, decision="approve")
        )
        result = await handle.result()
    assert "hi" in results(result)["x"]["content"]


@pytest.mark.services
async def test_local_backend_previews_on_the_agent_worker(
    temporal_client: Client, tmp_path: Path
) -> None:
    """``kind="local"``: the preview is a local activity on the agent worker hosting it."""
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "n.md").write_text("keep\nold\n")
    model = scripted(
        calls(("d", "delete", {"file_path": "/docs"})),
        final(),
    )
    queue = uid("agent")
    async with agent_worker(
        temporal_client,
        queue,
        backends={"ws": FilesystemBackend(str(root), virtual_mode=True)},
        journal_dir=tmp_path / "j",
    ):
        input = AgentInput(
            task="clean up",
            model=model,
            backend=BackendSpec(default=BackendRef(kind="local", name="ws")),
            permissions=DOCS_INTERRUPT,
        )
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=queue
        )
        [approval] = await eventually(
            lambda: handle.query(AgentWorkflow.pending_approvals),
            lambda p: len(p) == 1 and p[0].preview is not None,
        )
        assert approval.preview is not None and approval.preview.kind == "delete"
        # Every entry that goes, the directory itself first.
        assert approval.preview.deleted == ["/docs/", "/docs/n.md"]
        assert approval.preview.fingerprint
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=approval.id, decision="approve")
        )
        result = await handle.result()
    assert results(result)["d"]["status"] == "success" and not (root / "docs").exists()


@pytest.mark.services
async def test_counts_survive_continue_as_new(temporal_client: Client) -> None:
    """The decided count and the attributes travel to the next run of the thread."""
    write = {"content": "x"}
    model = scripted(
        calls(("a", "write_file", {"file_path": "/docs/a.txt", **write})),
        calls(("b", "write_file", {"file_path": "/docs/b.txt", **write})),
        final(),
    )
    async with running_agent(temporal_client) as queue:
        input = AgentInput(
            task="t", model=model, permissions=DOCS_INTERRUPT, continue_as_new_after_steps=1
        )
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run,
            input,
            id=uid("wf"),
            task_queue=queue,
            search_attributes=initial_search_attributes(),
        )
        for _ in range(2):
            [approval] = await pending(handle, 1)
            await handle.execute_update(
                AgentWorkflow.decide_update, Decision(id=approval.id, decision="approve")
            )
            # Until this one is gone (the next may already wait: "none pending" can pass
            # unseen between the two on a loaded machine).
            done = approval.id

            def gone(listed: list[PendingApproval], done: str = done) -> bool:
                return done not in [a.id for a in listed]

            await eventually(lambda: handle.query(AgentWorkflow.pending_approvals), gone)
        result = await handle.result()
        assert [d.tool_call_id for d in await decided(handle)] == ["a", "b"]
    assert result.approvals == 2
    assert await eventually(lambda: sa(handle), lambda v: v == (0, 2))
    first_run = temporal_client.get_workflow_handle(handle.id, run_id=handle.first_execution_run_id)
    assert (await first_run.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW
