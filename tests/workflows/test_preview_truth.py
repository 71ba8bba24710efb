"""Previews that tell the truth (issue 26, items 1-2).

Each case was found by trying to mislead a reviewer on real servers:

- H1: a directory delete's preview listed only ``/pub/a.txt`` (glob skips
  dotfiles and returns regular files only), the approved delete also removed
  ``.env``, ``.git/.keep``, an empty directory and a symlink, and a file
  created after the preview did not bounce the decision;
- H2: deleting a directory whose files are all read-denied showed 0 paths;
- H3: a worker policy denying ``read`` did not stop the write preview from
  reading the file through ``download``;
- P1: a write's preview diff showed the current content of a read=interrupt
  path, which no one approved reading.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.testing import ActivityEnvironment

from filegate.activities.preview import PreviewActivities
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.policy import PolicyConfig
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.previews import MAX_DELETED, compute_preview
from filegate.kernel.protocol import BackendProtocol
from filegate.kernel.state import StateBackend
from filegate.wiring.roles import file_tools
from filegate.workflows import AgentInput, AgentWorkflow, BackendSpec, Decision
from filegate.workflows.approvals.pending import PREVIEW_CHANGED, PREVIEW_NOT_READY
from tests.scripting import scripted, uid
from tests.workflows.test_previews import request
from tests.workflows.test_workflow_e2e import (
    eventually,
    final,
    remote,
    results,
    running_agent,
    running_tools,
)

SECRET = "s3cret-token-value"


def rule(mode: str, ops: list[str], *paths: str) -> FilesystemPermission:
    return FilesystemPermission(operations=ops, paths=list(paths), mode=mode)  # type: ignore[arg-type]


def plant_pub(root: Path) -> None:
    pub = root / "pub"
    (pub / ".git").mkdir(parents=True)
    (pub / "a.txt").write_text("a\n")
    (pub / ".env").write_text(f"TOKEN={SECRET}\n")
    (pub / ".git" / ".keep").write_text("")
    (pub / "empty").mkdir()
    (root / "outside.txt").write_text("not deleted\n")
    (pub / "link").symlink_to("../outside.txt")


def test_a_directory_delete_lists_every_entry_that_goes(tmp_path: Path) -> None:
    plant_pub(tmp_path)
    shown = compute_preview(FilesystemBackend(tmp_path), request("delete", file_path="/pub"))
    assert shown.kind == "delete" and shown.deleted == [
        "/pub/",
        "/pub/.env",
        "/pub/.git/",
        "/pub/.git/.keep",
        "/pub/a.txt",
        "/pub/empty/",
        "/pub/link",
    ]
    assert shown.deleted_links == ["/pub/link"]  # the link goes, not its target
    assert shown.deleted_more == 0 and shown.deleted_hidden == 0 and not shown.truncated
    before = shown.fingerprint
    os.utime(tmp_path / "pub" / "a.txt", ns=(1, 1))  # only an mtime changes
    again = compute_preview(FilesystemBackend(tmp_path), request("delete", file_path="/pub"))
    assert before and again.fingerprint != before


def test_the_listing_is_capped_and_hidden_entries_are_counted_not_named(tmp_path: Path) -> None:
    (tmp_path / "big" / "secrets").mkdir(parents=True)
    for n in range(MAX_DELETED + 50):
        (tmp_path / "big" / f"f{n:04}").write_text("x")
    for n in range(3):
        (tmp_path / "big" / "secrets" / f"k{n}").write_text(SECRET)
    rules = [rule("deny", ["read"], "/big/secrets/**"), rule("deny", ["read"], "/big/secrets")]
    shown = compute_preview(
        FilesystemBackend(tmp_path), request("delete", file_path="/big", rules=rules)
    )
    assert len(shown.deleted) == MAX_DELETED and shown.truncated
    assert shown.deleted_more == MAX_DELETED + 50 + 1 - MAX_DELETED  # /big/ itself is listed
    assert shown.deleted_hidden == 4  # the directory and its three files
    assert "secrets" not in shown.model_dump_json()


def test_a_wholly_read_denied_subtree_is_counted(tmp_path: Path) -> None:
    (tmp_path / "vault").mkdir()
    for n in range(3):
        (tmp_path / "vault" / f"k{n}").write_text(SECRET)
    rules = [rule("deny", ["read"], "/vault/**")]
    shown = compute_preview(
        FilesystemBackend(tmp_path), request("delete", file_path="/vault", rules=rules)
    )
    assert shown.deleted == ["/vault/"] and shown.deleted_hidden == 3
    state = StateBackend()
    for n in range(2):
        state.write(f"/vault/k{n}", SECRET)
    in_state = compute_preview(state, request("delete", file_path="/vault", rules=rules))
    assert in_state.deleted == [] and in_state.deleted_hidden == 2


async def test_a_worker_policy_denying_read_denies_the_preview_read(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text(f"{SECRET}\n")
    backends: dict[str, BackendProtocol] = {"b": FilesystemBackend(root)}
    policies = PolicyConfig.model_validate(
        {"policies": {"no-read": {"kind": "deny_operations", "operations": ["read"]}},
         "required": ["no-read"]}
    )  # fmt: skip
    activity = PreviewActivities(file_tools(backends, tmp_path / "j", None, policies)).preview
    shown = await ActivityEnvironment().run(
        activity, request("write_file", file_path="/a.txt", content="new\n")
    )
    assert SECRET not in shown.model_dump_json()
    assert shown.kind == "unavailable" and "no-read" in (shown.error or "")


def test_a_read_interrupt_path_gets_no_content_preview(tmp_path: Path) -> None:
    (tmp_path / "cfg").write_text(f"{SECRET}\n")
    rules = [rule("interrupt", ["read", "write"], "/cfg")]
    for tool, args in (
        ("write_file", {"content": "x\n"}),
        ("edit_file", {"old_string": SECRET, "new_string": "y"}),
    ):
        shown = compute_preview(
            FilesystemBackend(tmp_path), request(tool, file_path="/cfg", rules=rules, **args)
        )
        assert shown.kind == "unavailable" and SECRET not in shown.model_dump_json()
        assert "read: interrupt" in (shown.error or "")


@pytest.mark.services
async def test_a_change_after_the_delete_preview_bounces_the_decision(
    temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    plant_pub(root)
    model = scripted(
        {"tool_calls": [{"id": "d", "name": "delete", "args": {"file_path": "/pub"}}]}, final()
    )
    async with (
        running_agent(temporal_client) as queue,
        running_tools(temporal_client, {"fs": FilesystemBackend(root)}, tmp_path / "j") as tq,
    ):
        input = AgentInput(
            task="clean up",
            model=model,
            backend=BackendSpec(default=remote("fs", tq)),
            permissions=[rule("interrupt", ["write"], "/pub/**", "/pub")],
        )
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=queue
        )
        pending: list[Any] = await eventually(
            lambda: handle.query(AgentWorkflow.pending_approvals),
            lambda p: len(p) == 1 and p[0].preview is not None,
        )
        preview = pending[0].preview
        assert "/pub/.env" in preview.deleted and "/pub/link" in preview.deleted_links
        (root / "pub" / ".bashrc").write_text("created after the preview\n")
        ack = await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=pending[0].id, decision="approve")
        )
        assert ack.changed_since_preview
        [still] = await handle.query(AgentWorkflow.pending_approvals)
        assert still.preview is not None and "/pub/.bashrc" in still.preview.deleted
        assert (root / "pub" / ".env").exists()  # nothing ran on the stale decision
        ack = await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=pending[0].id, decision="approve")
        )
        assert not ack.changed_since_preview
        result = await handle.result()
    assert results(result)["d"]["status"] == "success"
    assert not (root / "pub").exists() and (root / "outside.txt").exists()


class SlowPreviews(FilesystemBackend):
    """Its reads take a second: the window in which a preview is being computed."""

    def download(self, paths: list[str]) -> list[Any]:
        time.sleep(1.5)
        return super().download(paths)


@pytest.mark.services
async def test_a_decision_must_name_the_preview_it_was_made_on(
    temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("old\n")
    write = {
        "id": "w",
        "name": "write_file",
        "args": {"file_path": "/docs/a.md", "content": "new\n"},
    }
    model = scripted({"tool_calls": [write]}, final())
    async with (
        running_agent(temporal_client) as queue,
        running_tools(temporal_client, {"fs": SlowPreviews(root)}, tmp_path / "j") as tq,
    ):
        input = AgentInput(
            task="edit",
            model=model,
            backend=BackendSpec(default=remote("fs", tq)),
            permissions=[rule("interrupt", ["write"], "/docs/**")],
        )
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=queue
        )
        [early] = await eventually(
            lambda: handle.query(AgentWorkflow.pending_approvals), lambda p: len(p) == 1
        )
        assert early.preview_pending and early.preview is None
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(
                AgentWorkflow.decide_update, Decision(id=early.id, decision="approve")
            )
        assert PREVIEW_NOT_READY in str(refused.value.cause)
        [shown] = await eventually(
            lambda: handle.query(AgentWorkflow.pending_approvals),
            lambda p: len(p) == 1 and not p[0].preview_pending,
        )
        assert shown.preview is not None and shown.preview.fingerprint
        stale = Decision(id=shown.id, decision="approve", preview_fingerprint="sha256:0")
        with pytest.raises(WorkflowUpdateFailedError) as changed:
            await handle.execute_update(AgentWorkflow.decide_update, stale)
        assert PREVIEW_CHANGED in str(changed.value.cause)
        assert (root / "docs" / "a.md").read_text() == "old\n"  # still open, nothing ran
        assert [a.id for a in await handle.query(AgentWorkflow.pending_approvals)] == [shown.id]
        seen = Decision(
            id=shown.id, decision="approve", preview_fingerprint=shown.preview.fingerprint
        )
        await handle.execute_update(AgentWorkflow.decide_update, seen)
        await handle.result()
    assert (root / "docs" / "a.md").read_text() == "new\n"
