# ruff: noqa: F811  (pytest fixtures imported from tests.sandbox_fixtures / tests.cli.test_cli)
"""One filesystem on real servers (issue 33, item 1): links a command makes lead nowhere protected.

The case as reported: ``deny read,write /secrets/**`` and ``deny write /docs/**``
beside the bubblewrap sandbox. The model's ``execute`` runs
``ln -s /workspace/secrets pub/sw; ln -s /workspace/docs pub/dw`` (or links
climbing past the root, ``../../../../workspace/...``); then ``read_file
/pub/sw/key.txt``, ``grep``/``ls``/``glob`` under ``/pub/sw``, ``write_file
/pub/dw/evil.md``, ``edit_file /pub/dw/a.md`` and ``delete /pub/dw/b.md``.
Inside the sandbox those links lead to the protected directories; the file
tools must not follow them there. Checked through ``AgentWorkflow`` with a
scripted model, through ``FileTools`` in a workflow of one's own, and through
``filegate run --sandbox --permissions``: no byte of the secret (nor the name
of a file only ``/secrets`` holds) in the transcript, the result or the
history; ``/docs`` (and ``/secrets``) unchanged; ``/pub`` still writable.

Each test failed on the code before the file tools judged what they reached
(``kernel/reach.py``), as did the ``AgentWorkflow`` test of a turn whose own
command keeps re-pointing the links while its file calls run.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHistory

from filegate.backends.bwrap import BwrapSandboxBackend
from filegate.kernel.permissions import FilesystemPermission
from filegate.workflows import (
    AgentInput,
    AgentResult,
    AgentWorkflow,
    BackendRef,
    BackendSpec,
    FileToolsConfig,
)
from tests.cli.test_cli import CLI, cli_env, write_json  # noqa: F401  (cli_env: a fixture)
from tests.sandbox_fixtures import _bwrap_ok  # noqa: F401  (fixture)
from tests.scripting import calls, scripted
from tests.workflows.test_execute_gate import ToolListWorkflow, running_host
from tests.workflows.test_workflow_e2e import results, running_agent, running_tools

pytestmark = pytest.mark.services

SECRET = "TOPSECRET-" + uuid.uuid4().hex
HIDDEN_NAME = "only-in-secrets-" + uuid.uuid4().hex[:12]
"""A file name only ``/secrets`` holds; no call names it."""
RULES = [
    FilesystemPermission(operations=["read", "write"], paths=["/secrets/**"], mode="deny"),
    FilesystemPermission(operations=["write"], paths=["/docs/**"], mode="deny"),
]
LINKS = {
    "absolute": ("/workspace/secrets", "/workspace/docs"),
    "climbing": ("../../../../workspace/secrets", "../../../../workspace/docs"),
}


def plant(root: Path) -> Path:
    for name in ("secrets", "docs", "pub"):
        (root / name).mkdir(parents=True, exist_ok=True)
    (root / "secrets" / "key.txt").write_text(SECRET + "\n")
    (root / "secrets" / f"{HIDDEN_NAME}.txt").write_text(SECRET + " again\n")
    (root / "docs" / "a.md").write_text("docs a\n")
    (root / "docs" / "b.md").write_text("docs b\n")
    return root


def protected_files(root: Path) -> dict[str, bytes]:
    """What the rules keep from writes: every file below /secrets and /docs."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for base in ("secrets", "docs")
        for p in sorted((root / base).rglob("*"))
    }


def turns(secrets_link: str, docs_link: str) -> list[list[tuple[str, str, dict[str, Any]]]]:
    """The model's turns: make the links, then every file tool through them, then /pub."""
    return [
        [("x", "execute", {"command": f"ln -s {secrets_link} pub/sw; ln -s {docs_link} pub/dw"})],
        [
            ("r1", "read_file", {"file_path": "/pub/sw/key.txt"}),
            ("g1", "grep", {"pattern": "TOPSECRET", "path": "/pub/sw", "output_mode": "content"}),
            ("g2", "grep", {"pattern": "TOPSECRET", "path": "/pub", "output_mode": "content"}),
            ("l1", "ls", {"path": "/pub/sw"}),
            ("o1", "glob", {"pattern": "**", "path": "/pub/sw"}),
            ("o2", "glob", {"pattern": "**", "path": "/pub"}),
            ("r2", "read_file", {"file_path": "/pub/dw/a.md"}),  # read before the edit
        ],
        [
            ("w1", "write_file", {"file_path": "/pub/dw/evil.md", "content": "evil"}),
            ("e1", "edit_file", {"file_path": "/pub/dw/a.md", "old_string": "docs",
                                 "new_string": "evil"}),
            ("d1", "delete", {"file_path": "/pub/dw/b.md"}),
        ],
        [("w2", "write_file", {"file_path": "/pub/ok.md", "content": "still writable"})],
        [("r3", "read_file", {"file_path": "/pub/ok.md"})],
    ]  # fmt: skip


REFUSED = ("r1", "w1", "e1", "d1")
"""Calls that must fail (the others may answer, with nothing protected in them)."""


def decoded(history: WorkflowHistory) -> str:
    """The history as text, with every payload's data decoded (it is base64 in JSON)."""
    parts: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            data = node.get("data")
            if isinstance(data, str) and "metadata" in node:
                parts.append(base64.b64decode(data).decode("utf-8", "replace"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    tree = history.to_json_dict()
    walk(tree)
    return json.dumps(tree) + "\n".join(parts)


def assert_contained(root: Path, before: dict[str, bytes], *texts: str) -> None:
    for text in texts:
        assert SECRET not in text
        assert HIDDEN_NAME not in text
    assert protected_files(root) == before
    assert not (root / "docs" / "evil.md").exists()
    assert (root / "pub" / "ok.md").read_text() == "still writable"


def sandbox(queue: str) -> BackendSpec:
    return BackendSpec(
        default=BackendRef(
            kind="remote", name="box", task_queue=queue, can_execute=True, sandboxed=True
        )
    )


# --------------------------------------------------------------------------- AgentWorkflow


async def run_agent_on_sandbox(
    client: Client, root: Path, journal: Path, *model_turns: dict[str, Any]
) -> tuple[AgentResult, str]:
    box = BwrapSandboxBackend(root, check=False)
    async with (
        running_tools(client, {"box": box}, journal) as tools_queue,
        running_agent(client) as agent_queue,
    ):
        workflow_id = f"onefs-{uuid.uuid4().hex[:10]}"
        model = scripted(*model_turns, {"content": "done"})
        result = await client.execute_workflow(
            AgentWorkflow.run,
            AgentInput(task="go", model=model, backend=sandbox(tools_queue), permissions=RULES),
            id=workflow_id,
            task_queue=agent_queue,
        )
        history = await client.get_workflow_handle(workflow_id).fetch_history()
    return result, decoded(history)


@pytest.mark.parametrize("links", sorted(LINKS))
async def test_agent_workflow_links_a_command_made_lead_nowhere_protected(
    temporal_client: Client, tmp_path: Path, _bwrap_ok: None, links: str
) -> None:
    root = plant(tmp_path / "ws")
    before = protected_files(root)
    model_turns = [calls(*turn) for turn in turns(*LINKS[links])]
    result, history = await run_agent_on_sandbox(
        temporal_client, root, tmp_path / "j", *model_turns
    )
    out = results(result)
    assert out["x"]["status"] == "success", out["x"]
    assert (root / "pub" / "sw").is_symlink() and (root / "pub" / "dw").is_symlink()
    for call_id in REFUSED:
        assert out[call_id]["status"] == "error", out[call_id]
    assert out["w2"]["status"] == "success" and "still writable" in str(out["r3"]["content"])
    assert_contained(root, before, result.model_dump_json(), history)


async def test_agent_workflow_links_re_pointed_during_the_turn_carry_nothing_past_the_rules(
    temporal_client: Client, tmp_path: Path, _bwrap_ok: None
) -> None:
    """One turn: a command re-points relative links while the same turn's file calls run."""
    root = plant(tmp_path / "ws")
    (root / "decoy").mkdir()
    (root / "decoy" / "key.txt").write_text("nothing here\n")
    (root / "pub" / "sw").symlink_to("../decoy")
    (root / "pub" / "dw").symlink_to("../decoy")
    before = protected_files(root)
    flipper = (
        "end=$(($(date +%s) + 2)); while [ $(date +%s) -lt $end ]; do "
        "ln -sfn ../secrets pub/sw; ln -sfn ../docs pub/dw; "
        "ln -sfn ../decoy pub/sw; ln -sfn ../decoy pub/dw; done"
    )
    # Two chains of calls, each on one path: a call on a path waits for the one
    # before it (PathOrder), so each link of a chain is a round trip of its own
    # and the chains run while the command flips the links.
    turn: list[tuple[str, str, dict[str, Any]]] = [("x", "execute", {"command": flipper})]
    secret_path, docs_path = "/pub/sw/key.txt", "/pub/dw/k.md"
    for n in range(7):
        turn += [
            (f"sr{n}", "read_file", {"file_path": secret_path}),
            (f"sw{n}", "write_file", {"file_path": secret_path, "content": f"mine {n}"}),
            (f"sR{n}", "read_file", {"file_path": secret_path}),
            (f"sd{n}", "delete", {"file_path": secret_path}),
            (f"dw{n}", "write_file", {"file_path": docs_path, "content": f"x{n}"}),
            (f"dr{n}", "read_file", {"file_path": docs_path}),
            (f"de{n}", "edit_file", {"file_path": docs_path, "old_string": "x", "new_string": "y"}),
            (f"dd{n}", "delete", {"file_path": docs_path}),
        ]  # fmt: skip
    follow = [
        calls(("ok", "write_file", {"file_path": "/pub/ok.md", "content": "still writable"})),
        calls(("r", "read_file", {"file_path": "/pub/ok.md"})),
    ]
    result, history = await run_agent_on_sandbox(
        temporal_client, root, tmp_path / "j", calls(*turn), *follow
    )
    out = results(result)
    assert out["x"]["status"] == "success", out["x"]
    assert "still writable" in str(out["r"]["content"])
    through_links = [m for call_id, m in out.items() if call_id not in ("x", "ok", "r")]
    # The calls ran while the links moved: some reached the decoy, some were refused.
    assert any(m["status"] == "success" for m in through_links)
    assert any("permission denied" in str(m["content"]) for m in through_links)
    assert_contained(root, before, result.model_dump_json(), history)


# --------------------------------------------------------------------------- own workflow


@pytest.mark.parametrize("links", sorted(LINKS))
async def test_file_tools_in_an_own_workflow_links_a_command_made_lead_nowhere_protected(
    temporal_client: Client, tmp_path: Path, _bwrap_ok: None, links: str
) -> None:
    root = plant(tmp_path / "ws")
    before = protected_files(root)
    tool_calls = [
        {"id": call_id, "name": name, "args": args}
        for turn in turns(*LINKS[links])
        for call_id, name, args in turn
    ]
    box = BwrapSandboxBackend(root, check=False)
    async with running_tools(temporal_client, {"box": box}, tmp_path / "j") as queue:
        config = FileToolsConfig(backend=sandbox(queue), permissions=RULES)
        async with running_host(temporal_client) as host_queue:
            workflow_id = f"onefs-own-{uuid.uuid4().hex[:10]}"
            result = await temporal_client.execute_workflow(
                ToolListWorkflow.run,
                args=[config, tool_calls],
                id=workflow_id,
                task_queue=host_queue,
            )
            history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
    answers = result["answers"]
    assert not answers["x"]["error"], answers["x"]
    for call_id in REFUSED:
        assert answers[call_id]["error"], answers[call_id]
    assert not answers["w2"]["error"] and "still writable" in answers["r3"]["text"]
    assert_contained(root, before, json.dumps(result), decoded(history))


# --------------------------------------------------------------------------- the CLI


async def test_cli_run_sandbox_links_a_command_made_lead_nowhere_protected(
    cli_env: dict[str, str], temporal_client: Client, tmp_path: Path, _bwrap_ok: None
) -> None:
    root = plant(tmp_path / "ws")
    before = protected_files(root)
    script = write_json(
        tmp_path / "s.json",
        {"turns": [calls(*turn) for turn in turns(*LINKS["absolute"])] + [{"content": "done"}]},
    )
    perms = write_json(tmp_path / "p.json", [rule.model_dump() for rule in RULES])
    transcript = tmp_path / "t.json"
    workflow_id = f"onefs-cli-{uuid.uuid4().hex[:10]}"
    run = await asyncio.to_thread(
        subprocess.run,
        [*CLI, "run", "t", "--model", f"scripted:{script}", "--root", str(root), "--sandbox",
         "--permissions", perms, "--transcript", str(transcript), "--workflow-id", workflow_id],
        env=cli_env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    messages = json.loads(transcript.read_text())
    out = {m["tool_call_id"]: m for m in messages if "status" in m}
    assert out["x"]["status"] == "success", out["x"]
    for call_id in REFUSED:
        assert out[call_id]["status"] == "error", out[call_id]
    assert out["w2"]["status"] == "success" and "still writable" in json.dumps(out["r3"])
    history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
    assert_contained(root, before, transcript.read_text(), run.stdout, run.stderr, decoded(history))
