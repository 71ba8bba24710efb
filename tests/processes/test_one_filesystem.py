"""One filesystem for the rules, the file tools and the shell (issue 33, item 1).

A file operation judges the object it reached, not only the path the gate
resolved a moment earlier (:mod:`filegate.kernel.reach`):

- links a sandboxed command makes (absolute ``/workspace/...`` ones, and ones
  climbing past the root) lead nowhere protected: the sandbox's file tools
  resolve on the host, beneath the root, like every host backend;
- a link re-pointed between the gate's check and the operation's open is
  caught at the open (made deterministic here by re-pointing it inside the
  backend's own ``resolve_path``, i.e. right after the gate looked);
- a real command re-pointing links in a loop, beside file tools in threads,
  gets no byte of a secret out and no write into a protected directory.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from filegate.activities.tools import FileToolActivities
from filegate.activities.transfer import TransferActivities
from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.backends.filesystem import FilesystemBackend
from filegate.backends.local_shell import LocalShellBackend
from filegate.backends.policy import PolicyBackend
from filegate.backends.policy.deny_write import DenyWritePolicy
from filegate.kernel.dispatch import run_tool
from filegate.kernel.execute_gate import compile_view
from filegate.kernel.operation_types import (
    DownloadRequest,
    ReadWindowRequest,
    UploadFile,
    UploadRequest,
)
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.previews import compute_preview
from filegate.kernel.tool_types import ToolRequest

SECRET = "hunter2-secret"
RULES = [
    FilesystemPermission(operations=["read", "write"], paths=["/secrets/**"], mode="deny"),
    FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="deny"),
]


def _tree(root: Path) -> None:
    for name in ("secrets", "docs", "decoy", "pub"):
        (root / name).mkdir(exist_ok=True)
    (root / "secrets" / "key.txt").write_text(SECRET + "\n")
    (root / "decoy" / "key.txt").write_text("nothing here\n")
    (root / "docs" / "a.md").write_text("docs a\n")
    (root / "docs" / "b.md").write_text("docs b\n")
    (root / "decoy" / "a.md").write_text("decoy a\n")


def _req(tool: str, **args: Any) -> ToolRequest:
    return ToolRequest(
        tool=tool,  # type: ignore[arg-type]
        backend="box",
        args=args,
        tool_call_id="c",
        permissions=RULES,
    )


def _run(backend: Any, tool: str, **args: Any) -> tuple[str, str]:
    out = run_tool(backend, _req(tool, **args))
    return out.status, str(out.content)


def _point(root: Path, name: str, target: str = "../decoy") -> None:
    """(Re-)point the link ``/pub/<name>`` at ``target``."""
    link = root / "pub" / name
    link.unlink(missing_ok=True)
    link.symlink_to(target)


def _docs(root: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((root / "docs").iterdir())}


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"file_path": "/pub/sw/key.txt"}),
    ("grep", {"pattern": "hunter2", "path": "/pub/sw"}),
    ("grep", {"pattern": "hunter2", "path": "/pub"}),
    ("ls", {"path": "/pub/sw"}),
    ("glob", {"pattern": "**", "path": "/pub/sw"}),
    ("write_file", {"file_path": "/pub/dw/evil.md", "content": "evil"}),
    ("edit_file", {"file_path": "/pub/dw/a.md", "old_string": "docs", "new_string": "evil"}),
    ("delete", {"file_path": "/pub/dw/b.md"}),
]


@pytest.mark.parametrize(
    ("secrets_link", "docs_link"),
    [
        ("/workspace/secrets", "/workspace/docs"),
        ("../../../../workspace/secrets", "../../../../workspace/docs"),
    ],
)
def test_links_a_sandboxed_command_makes_lead_nowhere_protected(
    sb: BwrapSandboxBackend, root: Path, secrets_link: str, docs_link: str
) -> None:
    _tree(root)
    made = sb.execute(
        f"ln -s {secrets_link} pub/sw && ln -s {docs_link} pub/dw && cat pub/sw/key.txt"
    )
    assert made.exit_code == 0 and SECRET in made.output  # inside the sandbox they do lead there
    before = _docs(root)
    for tool, args in CALLS:
        status, text = _run(sb, tool, **args)
        assert SECRET not in text, (tool, args, text)
        if tool in ("ls", "glob", "grep"):  # no protected name is listed either
            assert "key.txt" not in text, (tool, args, text)
        if tool in ("read_file", "write_file", "edit_file", "delete"):
            assert status == "error", (tool, args, text)
    assert _docs(root) == before
    assert not (root / "docs" / "evil.md").exists()
    # /pub stays writable and readable.
    assert _run(sb, "write_file", file_path="/pub/ok.md", content="fine")[0] == "success"
    assert "fine" in _run(sb, "read_file", file_path="/pub/ok.md")[1]


class _FlipAfterCheck(FilesystemBackend):
    """Re-points ``/pub/<name>`` right after the gate resolved it: the race, made certain."""

    def __init__(self, root: Path, flips: dict[str, str]) -> None:
        super().__init__(root)
        self.flips = flips

    def resolve_path(self, path: str) -> str | None:
        answer = super().resolve_path(path)
        for name, target in self.flips.items():
            _point(Path(self.root), name, target)
        return answer


@pytest.mark.parametrize("backend_type", [FilesystemBackend, LocalShellBackend])
def test_a_link_flipped_after_the_check_is_judged_where_it_lands(
    tmp_path: Path, backend_type: type[FilesystemBackend]
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    _tree(root)
    _point(root, "sw")
    _point(root, "dw")
    flipping = type("Flip", (_FlipAfterCheck, backend_type), {})
    backend = flipping(root, {"sw": "../secrets", "dw": "../docs"})
    before = _docs(root)
    for tool, args in CALLS:
        for name in ("sw", "dw"):  # each call starts with both links at the decoy
            _point(root, name)
        status, text = _run(backend, tool, **args)
        assert SECRET not in text, (tool, args, text)
        if tool != "grep" or args["path"] != "/pub":
            assert status == "error" or tool in ("ls", "glob", "grep"), (tool, args, text)
    assert _docs(root) == before
    assert not (root / "docs" / "evil.md").exists()


def test_a_missing_parent_is_not_made_under_a_protected_path(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    _tree(root)
    _point(root, "dw")
    backend = _FlipAfterCheck(root, {"dw": "../docs"})
    status, _ = _run(backend, "write_file", file_path="/pub/dw/new/deep/x.md", content="x")
    assert status == "error"
    assert not (root / "docs" / "new").exists()


@pytest.mark.slow
def test_a_command_flipping_links_gets_nothing_past_the_rules(
    sb: BwrapSandboxBackend, root: Path
) -> None:
    """A real sandboxed command re-points relative links while file tools run beside it."""
    _tree(root)
    os.symlink("../decoy", root / "pub" / "sw")
    os.symlink("../decoy", root / "pub" / "dw")
    stop = root / "decoy" / "stop"
    flipper = (
        "while [ ! -e decoy/stop ]; do "
        "ln -sfn ../docs pub/dw; ln -sfn ../secrets pub/sw; "
        "ln -sfn ../decoy pub/dw; ln -sfn ../decoy pub/sw; done"
    )
    view = compile_view(RULES, backend="box", lenient=False)
    done = threading.Event()

    def flip() -> None:
        sb.execute_in_view(flipper, 60, view)
        done.set()

    thread = threading.Thread(target=flip, daemon=True)
    thread.start()
    time.sleep(0.5)  # the command is running
    outputs: list[str] = []
    try:
        for n in range(60):
            outputs.append(_run(sb, "write_file", file_path=f"/pub/dw/k{n}.md", content="x")[1])
            outputs.append(_run(sb, "read_file", file_path="/pub/sw/key.txt")[1])
            outputs.append(_run(sb, "grep", pattern="hunter2", path="/pub/sw")[1])
    finally:
        stop.write_text("")
        done.wait(30)
    assert not any(SECRET in text for text in outputs)
    assert sorted(p.name for p in (root / "docs").iterdir()) == ["a.md", "b.md"]
    assert any("nothing here" in text for text in outputs)  # the decoy was reached at times


def test_a_preview_through_a_flipped_link_shows_nothing_protected(tmp_path: Path) -> None:
    """The reviewer's card reads with the model's read rights at the object reached."""
    root = tmp_path / "ws"
    root.mkdir()
    _tree(root)
    _point(root, "sw")
    backend = _FlipAfterCheck(root, {"sw": "../secrets"})
    for tool, args in [
        ("edit_file", {"file_path": "/pub/sw/key.txt", "old_string": "x", "new_string": "y"}),
        ("write_file", {"file_path": "/pub/sw/key.txt", "content": "new"}),
        ("delete", {"file_path": "/pub/sw/key.txt"}),
    ]:
        _point(root, "sw")
        preview = compute_preview(backend, _req(tool, **args))
        assert SECRET not in preview.model_dump_json(), (tool, preview)


def test_a_worker_policy_judges_where_a_flipped_link_lands(tmp_path: Path) -> None:
    """Worker policies (no request rules at all) hold at the object reached too."""
    root = tmp_path / "ws"
    root.mkdir()
    _tree(root)
    _point(root, "dw")
    policy = DenyWritePolicy("protect-docs", prefixes=["/docs/"])
    wrapped = PolicyBackend(_FlipAfterCheck(root, {"dw": "../docs"}), [policy])
    before = _docs(root)
    for tool, args in CALLS[5:]:  # write, edit, delete
        _point(root, "dw")
        request = _req(tool, **args).model_copy(update={"permissions": []})
        assert run_tool(wrapped, request).status == "error", (tool, args)
    assert _docs(root) == before
    assert not (root / "docs" / "evil.md").exists()


async def test_deep_agents_transfers_judge_where_a_flipped_link_lands(tmp_path: Path) -> None:
    """The Deep Agents adapter's read/upload/download activities (no run_tool) hold too."""
    root = tmp_path / "ws"
    root.mkdir()
    _tree(root)
    _point(root, "sw")
    _point(root, "dw")
    backend = _FlipAfterCheck(root, {"sw": "../secrets", "dw": "../docs"})
    transfers = TransferActivities(FileToolActivities({"box": backend}, tmp_path / "journal"))
    env = ActivityEnvironment()

    def reset() -> None:
        for name in ("sw", "dw"):
            _point(root, name)

    scope: dict[str, Any] = {"backend": "box", "permissions": RULES}
    window = await env.run(
        transfers.read_window, ReadWindowRequest(file_path="/pub/sw/key.txt", **scope)
    )
    assert SECRET not in window.model_dump_json() and window.error is not None
    reset()
    got = await env.run(
        transfers.download_files, DownloadRequest(paths=["/pub/sw/key.txt"], **scope)
    )
    assert SECRET not in str(got[0].content) and got[0].error is not None
    reset()
    put = await env.run(
        transfers.upload_files,
        UploadRequest(files=[UploadFile(path="/pub/dw/evil.md", content=b"evil")], **scope),
    )
    assert put[0].error is not None
    assert not (root / "docs" / "evil.md").exists()
