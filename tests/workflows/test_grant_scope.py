"""A grant is never wider than the decision it remembers (issue 33, item 4).

Pure tests of :mod:`filegate.workflows.approvals.grants`: a command glob covers one
simple command only (the ``allow_prefixes`` parse), no ``execute`` grant
counts as a human's approval at the tools worker, and a glob grant is scoped
by where and what it searched, not by its ``path`` argument. The last test runs
the issue's host-shell case on the session Temporal server; the other
workflow paths are in tests/workflows/test_grants.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from filegate.backends.local_shell import LocalShellBackend
from filegate.kernel.command_rules import simple_argv
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.protocol import BackendProtocol
from filegate.worker import tools_worker
from filegate.workflows import BackendSpec, Decision, FileToolsConfig, PendingApproval
from filegate.workflows.approvals.grant_models import GrantRequest
from filegate.workflows.approvals.grants import GrantBook, grant_scope
from filegate.workflows.gate import ToolInterrupt
from tests.scripting import uid
from tests.workflows.test_grants import ToolListWorkflow, decide_host, host_worker
from tests.workflows.test_workflow_e2e import remote

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
EXECUTE = {"source": "interrupt_on", "tool": "execute", "always": True}
SECRETS = FilesystemPermission(operations=["read"], paths=["/secrets/**"], mode="interrupt")
SECRETS_RULE = {"source": "permissions", **SECRETS.model_dump(mode="json"), "index": 0}


def book() -> GrantBook:
    counter = iter(range(1000))
    return GrantBook(random_hex=lambda: f"{next(counter):08x}" + "0" * 24)


def remembered(tool: str, args: dict[str, Any], rule: Any, pattern: str | None = None) -> GrantBook:
    grants = book()
    asked = PendingApproval(
        id="a" * 16, tool=tool, args=args, rule=rule, requested_at=T0.isoformat(), tool_call_id="c"
    )
    decision = Decision(
        id="a" * 16, decision="approve", reviewer="ana", via="cli",
        remember=GrantRequest(pattern=pattern),
    )  # fmt: skip
    grants.remember(decision, asked, T0)
    return grants


# --------------------------------------------------------------------------- command globs

COMPOUND = [
    "echo a; touch p1",
    "echo $(touch p2)",
    "echo a && touch p3",
    "echo a\ntouch p4",
    "echo a | sh",
    "echo a > p6",
    "echo a < /etc/passwd",
    "echo a || touch p7",
    "echo `touch p8`",
    "echo a & touch p9",
    "echo ${HOME}",
    "echo a # hidden",
    "echo a\rtouch",
    "echo (a)",
]


@pytest.mark.parametrize("command", COMPOUND)
def test_a_command_glob_covers_no_compound_command(command: str) -> None:
    grants = remembered("execute", {"command": "echo hi"}, EXECUTE, "echo *")
    assert simple_argv(command) is None  # the allow_prefixes matcher asks for each
    assert grants.use("execute", {"command": command}, EXECUTE, T0) is None


def test_a_command_glob_still_covers_simple_commands() -> None:
    grants = remembered("execute", {"command": "echo hi"}, EXECUTE, "echo *")
    for command in ("echo hi", "echo 'a; b'", 'echo "x > y"', "echo  two  words"):
        assert grants.use("execute", {"command": command}, EXECUTE, T0) is not None, command
    # A leading assignment is not the command the glob names.
    assert grants.use("execute", {"command": "X=1 echo hi"}, EXECUTE, T0) is None
    star = remembered("execute", {"command": "ls"}, EXECUTE, "*")
    assert star.use("execute", {"command": "FOO=1 ls"}, EXECUTE, T0) is None
    assert star.use("execute", {"command": "ls; id"}, EXECUTE, T0) is None


# --------------------------------------------------------------------------- no lifted rule


def test_no_execute_grant_counts_as_a_humans_approval() -> None:
    """The tools worker sees an unapproved command: a host shell beside protecting
    rules refuses it, the sandbox compiles every rule strictly."""
    exact = remembered("execute", {"command": "sh build.sh"}, EXECUTE)
    used = exact.use("execute", {"command": "sh build.sh"}, EXECUTE, T0)
    assert used is not None and used.grant.kind == "command"
    assert not used.approves
    glob = remembered("execute", {"command": "echo hi"}, EXECUTE, "echo *")
    used = glob.use("execute", {"command": "echo ho"}, EXECUTE, T0)
    assert used is not None and not used.approves
    # A path grant still answers its interrupt rule at the worker (its path is judged there).
    docs = {"source": "interrupt_on", "tool": "write_file", "always": True}
    writes = remembered("write_file", {"file_path": "/docs/a.md", "content": "x"}, docs)
    used = writes.use("write_file", {"file_path": "/docs/b.md", "content": "y"}, docs, T0)
    assert used is not None and used.approves


# --------------------------------------------------------------------------- search scope


def test_a_rerooting_glob_is_remembered_as_what_it_searched() -> None:
    asked = {"pattern": "/secrets/*.txt", "path": "/pub"}
    grants = remembered("glob", asked, SECRETS_RULE)
    [grant] = grants.grants
    assert grant.pattern == "/secrets" and grant.search == "/secrets/*.txt"
    assert grant.scope() == "glob '/secrets/*.txt' in /secrets"
    wider = [
        {"pattern": "/secrets/**", "path": "/pub"},
        {"pattern": "/secrets/*", "path": "/pub"},
        {"pattern": "**", "path": "/secrets"},
        {"pattern": "*.txt", "path": "/secrets"},
        {"pattern": "/{secrets,etc}/*.txt", "path": "/pub"},
    ]
    for args in wider:
        assert grants.use("glob", args, SECRETS_RULE, T0) is None, args
    # The same search again (the tool ignores path for a pattern that re-roots).
    assert grants.use("glob", {"pattern": "/secrets/*.txt", "path": "/x"}, SECRETS_RULE, T0)


def test_a_glob_grant_keeps_its_pattern_and_its_root() -> None:
    grants = remembered("glob", {"pattern": "*.md", "path": "/secrets/a"}, SECRETS_RULE)
    [grant] = grants.grants
    assert (grant.pattern, grant.search) == ("/secrets/**", "*.md")
    assert grants.use("glob", {"pattern": "*.md", "path": "/secrets/b"}, SECRETS_RULE, T0)
    for args in (
        {"pattern": "**", "path": "/secrets/b"},
        {"pattern": "/secrets/**/*.md", "path": "/secrets/b"},
        {"pattern": "*.md", "path": "/pub"},
        {"pattern": "*.md"},
    ):
        assert grants.use("glob", args, SECRETS_RULE, T0) is None, args


def test_a_path_grant_for_a_search_covers_no_rerooting_glob() -> None:
    """An ``ls``-style exact root grant, or one carried from before ``search``
    existed: a glob that leaves its path is not below it."""
    grants = remembered("glob", {"pattern": "*", "path": "/pub"}, SECRETS_RULE)
    grants.grants[0].search = None  # as carried across continue-as-new by an older worker
    assert grants.use("glob", {"pattern": "*", "path": "/pub"}, SECRETS_RULE, T0)
    for pattern in ("/secrets/**", "{/secrets/*,x}"):
        assert grants.use("glob", {"pattern": pattern, "path": "/pub"}, SECRETS_RULE, T0) is None


def test_a_glob_that_leaves_its_path_oddly_cannot_be_remembered() -> None:
    for pattern in ("{/secrets/*,x}", "../secrets/*", "/a/../secrets/*"):
        with pytest.raises(ValueError, match="cannot be remembered"):
            grant_scope("glob", {"pattern": pattern, "path": "/pub"}, SECRETS_RULE, None)
    with pytest.raises(ValueError, match="broader than the rule's scope"):
        grant_scope("glob", {"pattern": "/secrets/*.txt", "path": "/pub"}, SECRETS_RULE, "/**")


# --------------------------------------------------------------------------- on a server

SECRETS = FilesystemPermission(operations=["read", "write"], paths=["/secrets/**"], mode="deny")


@pytest.mark.services
async def test_a_file_tools_host_keeps_execute_grants_and_the_execute_gate(
    temporal_client: Client, tmp_path: Path
) -> None:
    """On a host shell beside a protecting rule, no execute grant is a human's approval.

    ``sh build.sh`` is approved and remembered; the model then rewrites
    ``build.sh`` to print the secret. The grant still answers the question for
    the same text, but the tools worker's execute gate refuses it, as any
    command nobody approved. A command glob covers one simple command only:
    ``echo a; touch p1`` asks.
    """
    root = tmp_path / "ws"
    (root / "secrets").mkdir(parents=True)
    (root / "secrets" / "key").write_text("TOPSECRET-build\n")
    (root / "build.sh").write_text("echo building\n")
    rewrite = {"file_path": "/build.sh", "content": "cat secrets/key\n"}
    run = [
        {"id": "x0", "name": "execute", "args": {"command": "sh build.sh"}},
        {"id": "x1", "name": "write_file", "args": rewrite},
        {"id": "x2", "name": "execute", "args": {"command": "sh build.sh"}},
        {"id": "x3", "name": "execute", "args": {"command": "echo two"}},
        {"id": "x4", "name": "execute", "args": {"command": "echo three"}},
        {"id": "x5", "name": "execute", "args": {"command": "echo a; touch p1"}},
    ]
    shell: dict[str, BackendProtocol] = {"sh": LocalShellBackend(str(root))}
    async with (
        tools_worker(temporal_client, tools_q := uid("tools"), shell, tmp_path / "j"),
        host_worker(temporal_client) as host_q,
    ):
        config = FileToolsConfig(
            backend=BackendSpec(default=remote("sh", tools_q, execute=True, shell=str(root))),
            permissions=[SECRETS],
            interrupt_on={"execute": ToolInterrupt(always=True)},
        )
        handle = await temporal_client.start_workflow(
            ToolListWorkflow.run, args=[config, run], id=uid("host"), task_queue=host_q
        )
        exact = await decide_host(handle, "sh build.sh", {"decision": "approve", "remember": {}})
        assert exact["grant"]["kind"] == "command" and exact["grant"]["pattern"] == "sh build.sh"
        glob = {"decision": "approve", "remember": {"pattern": "echo *"}}
        by_glob = await decide_host(handle, "echo two", glob)
        await decide_host(handle, "echo a; touch p1", {"decision": "reject"})
        answers = (await handle.result())["answers"]
        grants = await handle.query("grants", result_type=list[dict[str, Any]])
    assert answers["x0"]["text"].startswith("[This call was approved by ana via cli")
    assert "building" in answers["x0"]["text"] and not answers["x0"]["error"]
    assert not answers["x1"]["error"]  # the model rewrote the script
    rerun = answers["x2"]["text"]
    assert rerun.startswith(f"[allowed by grant {exact['grant']['id']}")
    assert "execute refused" in rerun and "TOPSECRET" not in rerun
    assert not answers["x3"]["error"]  # a human approved this very command
    three = answers["x4"]["text"]
    assert three.startswith(f"[allowed by grant {by_glob['grant']['id']}")
    assert "execute refused" in three  # nobody saw this command: the host shell's gate holds
    assert answers["x5"]["error"]  # not one simple command: asked, rejected
    assert not (root / "p1").exists()
    assert [g["uses"] for g in grants] == [1, 1]
