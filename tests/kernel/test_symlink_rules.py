"""Rules and path policies judge the path as written AND its in-root symlink target.

``/pub/alias -> ../secrets`` must not open a way around ``deny /secrets/**``:
every tool (read, ls, glob, grep, write, edit, delete) is refused through the
link, listings hide entries whose target is denied, ``deny_write`` policies
see the target too, and a third-party backend without ``resolve_path`` keeps
working. Also here: an ``interrupt`` rule reaching the activity without an
approval on record is refused (contract §11, run scope).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.policy import PolicyBackend
from filegate.backends.policy.deny_write import DenyWritePolicy
from filegate.kernel.dispatch import run_tool
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.state import StateBackend
from filegate.kernel.tool_types import ToolRequest
from filegate.kernel.visibility import resolve_in_backend

SECRETS = [FilesystemPermission(operations=["read", "write"], paths=["/secrets/**"], mode="deny")]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "secrets").mkdir(parents=True)
    (ws / "secrets" / "key.txt").write_text("hunter2\n")
    (ws / "pub").mkdir()
    (ws / "pub" / "ok.txt").write_text("fine\n")
    os.symlink("../secrets", ws / "pub" / "alias")
    os.symlink("../secrets/key.txt", ws / "pub" / "key-link.txt")
    return ws


def _deny_read(*patterns: str) -> FilesystemPermission:
    return FilesystemPermission(operations=["read"], paths=list(patterns), mode="deny")


def _req(tool: str, rules: list[FilesystemPermission] = SECRETS, **args: Any) -> ToolRequest:
    return ToolRequest(
        tool=tool,  # type: ignore[arg-type]
        backend="fs",
        args=args,
        tool_call_id="c",
        permissions=rules,
    )


def _run(backend: Any, tool: str, **args: Any) -> tuple[str, str]:
    out = run_tool(backend, _req(tool, **args))
    return out.status, str(out.content)


@pytest.mark.parametrize("ripgrep", [False, None])
def test_every_tool_through_an_in_root_symlink_is_refused(root: Path, ripgrep: bool | None) -> None:
    fs = FilesystemBackend(root, use_ripgrep=ripgrep)
    cases: list[tuple[str, dict[str, Any]]] = [
        ("read_file", {"file_path": "/pub/alias/key.txt"}),
        ("read_file", {"file_path": "/pub/key-link.txt"}),
        ("grep", {"pattern": "hunter2", "path": "/pub/key-link.txt"}),
        ("write_file", {"file_path": "/pub/alias/evil.txt", "content": "x"}),
        ("edit_file", {"file_path": "/pub/alias/key.txt", "old_string": "h", "new_string": "H"}),
        ("edit_file", {"file_path": "/pub/key-link.txt", "old_string": "h", "new_string": "H"}),
        ("delete", {"file_path": "/pub/alias/key.txt"}),
    ]
    for tool, args in cases:
        status, text = _run(fs, tool, **args)
        assert status == "error", (tool, args, text)
        assert "hunter2" not in text.replace("pattern", "")  # the secret never shows
        assert "permission denied" in text.lower() or "refused" in text.lower()
    assert (root / "secrets" / "key.txt").read_text() == "hunter2\n"
    assert not (root / "secrets" / "evil.txt").exists()
    # Listings through the link answer exactly as listings of the target do.
    for tool, args, target_args in (
        ("ls", {"path": "/pub/alias"}, {"path": "/secrets"}),
        ("glob", {"pattern": "**", "path": "/pub/alias"}, {"pattern": "**", "path": "/secrets"}),
        (
            "grep",
            {"pattern": "hunter2", "path": "/pub/alias"},
            {"pattern": "hunter2", "path": "/secrets"},
        ),
    ):
        status, text = _run(fs, tool, **args)
        assert status == "success" and "key.txt" not in text
        assert text == _run(fs, tool, **target_args)[1]


def test_listings_hide_links_into_denied_areas(root: Path) -> None:
    fs = FilesystemBackend(root)
    status, text = _run(fs, "ls", path="/pub")
    assert status == "success" and "/pub/ok.txt" in text
    assert "key-link" not in text  # a file link is judged by its target
    # The directory link shows as /secrets/ itself would ("/secrets/**" denies below it) ...
    assert "/pub/alias/" in text and "/secrets/" in _run(fs, "ls", path="/")[1]
    # ... and is hidden as soon as the directory itself is denied.
    both = [_deny_read("/secrets", "/secrets/**")]
    out = run_tool(fs, _req("ls", rules=both, path="/pub"))
    assert "alias" not in str(out.content) and "/pub/ok.txt" in str(out.content)
    for tool, args in (("glob", {"pattern": "**/*.txt"}), ("grep", {"pattern": "hunter2"})):
        out = run_tool(fs, _req(tool, rules=both, **args))
        assert "hunter2" not in str(out.content).replace("pattern", "")
        assert "alias" not in str(out.content) and "key-link" not in str(out.content)
    # Without rules the links are ordinary entries.
    out = run_tool(fs, _req("ls", rules=[], path="/pub"))
    assert "/pub/alias/" in str(out.content) and "/pub/key-link.txt" in str(out.content)


def test_deleting_the_link_itself_is_judged_by_the_link(root: Path) -> None:
    fs = FilesystemBackend(root)
    status, _ = _run(fs, "delete", file_path="/pub/key-link.txt")
    assert status == "success" and not (root / "pub" / "key-link.txt").is_symlink()
    assert (root / "secrets" / "key.txt").exists()


def test_deny_write_policy_judges_the_target(root: Path) -> None:
    guarded = PolicyBackend(FilesystemBackend(root), [DenyWritePolicy("p", prefixes=["/secrets"])])
    assert guarded.write("/pub/alias/evil.txt", "x").code == "permission_denied"
    assert guarded.edit("/pub/key-link.txt", "h", "H").code == "permission_denied"
    assert guarded.delete("/pub/alias/key.txt").code == "permission_denied"
    [up] = guarded.upload([("/pub/alias/up.bin", b"x")])
    assert up.code == "permission_denied"
    assert guarded.write("/pub/new.txt", "x").ok
    assert not (root / "secrets" / "evil.txt").exists()
    assert (root / "secrets" / "key.txt").read_text() == "hunter2\n"
    assert resolve_in_backend(guarded, "/pub/alias/x") == "/secrets/x"


def test_backends_without_symlinks_or_resolve_keep_working() -> None:
    class ThirdParty:
        """Delegates to a StateBackend but has no resolve_path."""

        def __init__(self) -> None:
            self.inner = StateBackend()

        def __getattr__(self, name: str) -> Any:
            if name in ("resolve_path", "resolve_paths"):
                raise AttributeError(name)
            return getattr(self.inner, name)

    backend = ThirdParty()
    backend.inner.write("/pub/a.txt", "x\n")
    assert resolve_in_backend(backend, "/pub/a.txt") == "/pub/a.txt"  # type: ignore[arg-type]
    status, text = _run(backend, "read_file", file_path="/pub/a.txt")
    assert status == "success" and "x" in text


# --------------------------------------------------------------------------- interrupt


INTERRUPT = [FilesystemPermission(operations=["write"], paths=["/pub/**"], mode="interrupt")]


def test_interrupt_rule_without_approval_is_refused(root: Path) -> None:
    fs = FilesystemBackend(root)
    request = _req("write_file", rules=INTERRUPT, file_path="/pub/new.txt", content="x")
    out = run_tool(fs, request)
    assert out.status == "error" and "approval" in str(out.content).lower()
    assert not (root / "pub" / "new.txt").exists()
    approved = run_tool(fs, request.model_copy(update={"approved": True}))
    assert approved.status == "success" and (root / "pub" / "new.txt").read_text() == "x"


def test_interrupt_rule_on_the_link_target_also_needs_approval(root: Path) -> None:
    rules = [FilesystemPermission(operations=["write"], paths=["/secrets/**"], mode="interrupt")]
    fs = FilesystemBackend(root)
    request = _req("write_file", rules=rules, file_path="/pub/alias/new.txt", content="x")
    assert run_tool(fs, request).status == "error"
    assert not (root / "secrets" / "new.txt").exists()


# --------------------------------------------------------------------------- end to end


@pytest.mark.services
async def test_reviewer_edit_through_a_link_is_refused_end_to_end(
    temporal_client: Any, root: Path, tmp_path: Path
) -> None:
    """A reviewer's edit goes through the same activity check: the link does not help.

    The model asks to write ``/pub/ok.txt`` (held by an interrupt rule); the
    reviewer edits the path to ``/pub/alias/evil.txt``. The workflow's gate
    passes it (the path as written is not under ``/secrets``); the activity
    resolves the link and refuses, and the approved call carries its approval
    (so the interrupt rule itself does not refuse it).
    """
    from filegate.workflows import AgentInput, AgentWorkflow, BackendSpec, Decision
    from tests.scripting import calls, scripted, uid
    from tests.workflows.test_workflow_e2e import (
        final,
        pending,
        remote,
        results,
        running_agent,
        running_tools,
    )

    rules = [
        FilesystemPermission(operations=["write"], paths=["/secrets/**"], mode="deny"),
        FilesystemPermission(operations=["write"], paths=["/pub/**"], mode="interrupt"),
    ]
    model = scripted(
        calls(
            ("w", "write_file", {"file_path": "/pub/ok.txt", "content": "evil\n"}),
            ("v", "write_file", {"file_path": "/pub/new.txt", "content": "new\n"}),
        ),
        final(),
    )
    async with (
        running_agent(temporal_client) as agent_queue,
        running_tools(
            temporal_client, {"fs": FilesystemBackend(root)}, tmp_path / "journal"
        ) as tools_queue,
    ):
        input = AgentInput(
            task="go",
            model=model,
            backend=BackendSpec(default=remote("fs", tools_queue)),
            permissions=rules,
        )
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=agent_queue
        )
        by_path = {a.args["file_path"]: a for a in await pending(handle, 2)}
        edited = {"file_path": "/pub/alias/evil.txt", "content": "evil\n"}
        await handle.execute_update(
            AgentWorkflow.decide_update,
            Decision(id=by_path["/pub/ok.txt"].id, decision="edit", args=edited),
        )
        await handle.execute_update(
            AgentWorkflow.decide_update,
            Decision(id=by_path["/pub/new.txt"].id, decision="approve"),
        )
        result = await handle.result()
    out = results(result)
    assert out["w"]["status"] == "error", out["w"]
    assert "not allowed by the filesystem permission rules" in out["w"]["content"]
    # The approved call carries its approval: the interrupt rule does not refuse it.
    assert out["v"]["status"] == "success", out["v"]
    assert (root / "pub" / "new.txt").read_text() == "new\n"
    assert not (root / "secrets" / "evil.txt").exists()
    assert (root / "pub" / "ok.txt").read_text() == "fine\n"
