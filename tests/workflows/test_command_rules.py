"""``interrupt_on.execute.allow_prefixes``: commands that run unasked (issue 29, item 3).

The matcher (``kernel.command_rules``) is pinned by a table of hostile
commands and checked against the real ``/bin/sh``: whatever it allows, the
shell builds an argv that starts with the prefix. The rule model
(validation, how it combines with ``when``), the execute gate (a prefix
allow does not gate ``execute``), the Deep Agents ``when`` predicate's
agreement with the workflow gate, and two end-to-end runs: ``AgentWorkflow``
with a scripted model on a LocalShell tools worker, and ``filegate run``
through the CLI on the session servers.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from temporalio.client import Client

from filegate.backends.local_shell import LocalShellBackend
from filegate.integrations.deepagents import execute_interrupt_on
from filegate.kernel.command_rules import (
    CommandPrefixError,
    allowing_prefix,
    parse_prefix,
    simple_argv,
)
from filegate.kernel.execute_gate import ExecuteGateError
from filegate.kernel.formatting import Rendered
from filegate.kernel.routing import Router
from filegate.kernel.tool_types import ToolName
from filegate.workflows import AgentInput, AgentWorkflow, BackendSpec, Decision
from filegate.workflows.gate import ToolInterrupt, approval_trigger, check_call
from tests.cli.test_cli import CLI, call, cli, cli_env, write_json
from tests.cli.test_run_cli import _pending as pending_once_started
from tests.scripting import calls, scripted, uid
from tests.workflows.test_workflow_e2e import (
    final,
    pending,
    remote,
    results,
    running_agent,
    running_tools,
)

__all__ = ["cli_env"]  # the fixture, shared with test_cli

PREFIXES = ["git status", "pytest -q"]

# --------------------------------------------------------------------------- the matcher


@pytest.mark.parametrize(
    "command",
    [
        "git status; rm -rf /",
        "git status ; rm -rf /",
        "git status;rm -rf /",
        "git status && rm -rf /",
        "git status || rm -rf /",
        "git status & rm -rf /",
        "git status | sh",
        "git status |& sh",
        "git status $(rm -rf /)",
        'git status "$(rm -rf /)"',
        "git status '$(rm -rf /)'",  # safe in sh, refused anyway: one rule for all quoting
        "git status ${HOME}",
        "git status `rm -rf /`",
        'git status "`rm -rf /`"',
        "git status > f",
        "git status >> f",
        "git status 2>&1",
        "git status < /etc/passwd",
        "git status <(rm -rf /)",
        "git status\nrm -rf /",
        "git status\r\nrm -rf /",
        "git status\x00",
        "git status\u2028rm -rf /",
        "git status\u200b",
        "git status \u202erm",
        "(git status)",
        "git status (x)",
        "FOO=1 git status",
        "PATH=/tmp git status",
        "GIT_DIR+=x git status",
        "git status \\; rm -rf /",
        "git status \\' ; rm -rf / \\'",  # an escaped quote opens nothing: the ';' is live
        "git status #; rm -rf /",  # a comment, but the ';' is refused first
        "git status 'unclosed",
        "git status \\",
        "'git status'",  # one word: a program called "git status"
        "git statusx",
        "gitstatus",
        "git-status",
        "git statu\u0455",  # Cyrillic dze for 's'
        "\uff47it status",  # fullwidth 'g'
        "git\u00a0status",  # no-break space: one word to sh and shlex
        "git status\uff1brm -rf /",  # fullwidth ';' inside a word: no prefix word match
        "git",
        "pytest",
        "pytest -qx",
        "",
        "   ",
    ],
)
def test_hostile_or_other_commands_are_not_allowed(command: str) -> None:
    assert allowing_prefix(PREFIXES, command) is None


@pytest.mark.parametrize(
    ("command", "prefix"),
    [
        ("git status", "git status"),
        ("git status --short", "git status"),
        ("git  status", "git status"),
        ("  git\tstatus  -s ", "git status"),
        ("git 'status'", "git status"),
        ('"git" "status"', "git status"),
        ("g'i't st\\atus", "git status"),
        ("git status 'a; b' \"c | d\"", "git status"),  # quoted operators are arguments
        ("git status -- 'src dir'", "git status"),
        ("pytest -q tests/test_x.py -k 'a and not b'", "pytest -q"),
        ("git status ；rm -rf /", "git status"),  # fullwidth ';' is a plain argument to sh
    ],
)
def test_commands_starting_with_a_prefix_are_allowed(command: str, prefix: str) -> None:
    assert allowing_prefix(PREFIXES, command) == prefix


def test_non_strings_and_bad_prefixes_allow_nothing() -> None:
    assert allowing_prefix(PREFIXES, None) is None
    assert allowing_prefix(PREFIXES, ["git", "status"]) is None
    assert allowing_prefix(["git status; rm"], "git status; rm") is None
    assert simple_argv("git  'sta tus'") == ("git", "sta tus")


@pytest.mark.parametrize(
    ("prefix", "words"),
    [
        ("", None),
        ("   ", None),
        ("git status;", None),
        ("git status && x", None),
        ("git $(x)", None),
        ("git 'unclosed", None),
        ("FOO=1 git", None),
        ("ls *.py", None),
        ("ls [ab]", None),
        ("cat ~/x", None),
        ("git #x", None),
        ("git\nstatus", None),
        ("git  status", ("git", "status")),
        ("git commit -m 'two words'", ("git", "commit", "-m", "two words")),
    ],
)
def test_prefixes_are_validated(prefix: str, words: tuple[str, ...] | None) -> None:
    if words is None:
        with pytest.raises(CommandPrefixError) as info:
            parse_prefix(prefix)
        assert "\n" not in str(info.value) and "allow_prefixes" in str(info.value)
    else:
        assert parse_prefix(prefix) == words


WORDS = ["git", "status", "pytest", "-q", "--short", "x", "rm", "-rf", "/", "a b", "~", "*"]
QUOTINGS = [
    lambda w: w,
    lambda w: f"'{w}'",
    lambda w: f'"{w}"',
    lambda w: "\\" + w if w else w,
    lambda w: w[:1] + "''" + w[1:],
]
NOISE = [";", "&&", "|", ">", "$(x)", "`x`", "#", "\\;", "\\'", "'", '"', "\n", "=", "FOO=1", "ѕ"]


@st.composite
def shell_commands(draw: st.DrawFn) -> str:
    """Commands near the prefixes: their words quoted every way, plus noise and hostile bits."""
    pieces = draw(st.lists(st.sampled_from(WORDS + NOISE), min_size=0, max_size=5))
    start = draw(st.sampled_from([["git", "status"], ["pytest", "-q"], ["git"], []]))
    words = [draw(st.sampled_from(QUOTINGS))(w) if " " not in w else f"'{w}'" for w in start]
    words += pieces
    return draw(st.sampled_from([" ", "  ", "\t"])).join(words)


def sh_words(command: str) -> list[str]:
    """The words ``/bin/sh`` makes of ``command`` (no globbing, nothing run but ``set``)."""
    script = f"set -f; set -- {command}\nprintf '%s\\0' \"$@\""
    out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, check=True).stdout
    return out.decode().split("\0")[:-1]


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(command=shell_commands())
def test_what_is_allowed_is_what_sh_runs(command: str) -> None:
    """The real shell agrees: an allowed command's argv starts with the prefix's words."""
    prefix = allowing_prefix(PREFIXES, command)
    if prefix is None:
        return
    words = list(parse_prefix(prefix))
    argv = sh_words(command)
    assert argv[: len(words)] == words, (command, argv)
    if "~" not in command:  # sh expands a leading '~'; shlex keeps it
        assert argv == list(simple_argv(command) or ()), (command, argv)


# --------------------------------------------------------------------------- the rule model


def entry(**fields: Any) -> ToolInterrupt:
    return ToolInterrupt.model_validate(fields)


def execute_call(command: str) -> Any:
    checked = check_call(
        "execute",
        {"command": command},
        allowed=["execute"],
        router=Router([]),
        max_args_chars=100_000,
        max_execute_timeout=3600,
    )
    assert not isinstance(checked, Rendered)
    return checked


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"allow_prefixes": []}, "at least one"),
        ({"allow_prefixes": ["git status; rm"]}, "not a plain command"),
        ({"allow_prefixes": ["git status", ""]}, "non-empty"),
        ({"allow_prefixes": ["ls *.py"]}, "literally"),
        ({"always": True, "allow_prefixes": ["git status"]}, "not both"),
        ({"always": False, "allow_prefixes": ["git status"]}, "not both"),
        ({"allow_prefixes": "git status"}, "list"),
    ],
)
def test_bad_entries_are_refused(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        ToolInterrupt.model_validate(raw)
    assert message in str(info.value)


def test_allow_prefixes_is_for_execute_only() -> None:
    with pytest.raises(ValidationError, match="allow_prefixes applies to execute only"):
        AgentInput.model_validate(
            {"task": "t", "interrupt_on": {"write_file": {"allow_prefixes": ["git status"]}}}
        )


def test_alone_it_asks_for_everything_else() -> None:
    rules: dict[ToolName, ToolInterrupt] = {"execute": entry(allow_prefixes=PREFIXES)}
    assert approval_trigger([], rules, execute_call("git status -s")) is None
    trigger = approval_trigger([], rules, execute_call("git status; rm -rf /"))
    assert trigger is not None and trigger.rule["source"] == "interrupt_on"
    assert trigger.rule["allow_prefixes"] == PREFIXES
    assert trigger.rule["description"] == (
        'interrupt_on[execute]: when command not allowed by allow_prefixes ["git status", '
        '"pytest -q"]'
    )
    assert rules["execute"].allowed_by("execute", {"command": "pytest -q a"}) == "pytest -q"


def test_with_when_it_asks_when_when_matches_and_no_prefix_allows() -> None:
    combined = entry(when={"arg": "command", "regex": r"\bgit\b"}, allow_prefixes=["git status"])
    assert combined.fires("execute", {"command": "git push"}) is True
    assert combined.fires("execute", {"command": "git status"}) is False
    assert combined.fires("execute", {"command": "ls"}) is False  # `when` does not match
    assert combined.fires("execute", {"command": "git status && git push"}) is True
    assert "regex" in combined.describe("execute") and "allow_prefixes" in combined.describe(
        "execute"
    )


def test_round_trip_keeps_the_prefixes() -> None:
    raw = {"task": "t", "interrupt_on": {"execute": {"allow_prefixes": PREFIXES}}}
    first = AgentInput.model_validate(raw)
    again = AgentInput.model_validate_json(first.model_dump_json())
    assert again.interrupt_on == first.interrupt_on
    assert again.interrupt_on["execute"].model_dump() == {"allow_prefixes": PREFIXES}


HOST_SHELL_WITH_DENY: dict[str, Any] = {
    "task": "t",
    "backend": {
        "default": {"kind": "remote", "name": "sh", "task_queue": "q", "can_execute": True}
    },
    "permissions": [{"operations": ["read"], "paths": ["/secret/**"], "mode": "deny"}],
}


def test_a_prefix_allow_does_not_gate_execute() -> None:
    """Only ``always`` lets path rules stand next to a host shell; allow_prefixes is not it."""
    allowed = AgentInput.model_validate(
        {**HOST_SHELL_WITH_DENY, "interrupt_on": {"execute": {"allow_prefixes": PREFIXES}}}
    )
    assert allowed.execute_gated() is False
    with pytest.raises(ExecuteGateError):
        allowed.check_execute_gate()
    gated = AgentInput.model_validate(
        {**HOST_SHELL_WITH_DENY, "interrupt_on": {"execute": {"always": True}}}
    )
    gated.check_execute_gate()


# --------------------------------------------------------------------------- Deep Agents


DEEP_AGENTS_CONFIG = execute_interrupt_on(PREFIXES)
WORKFLOW_RULES: dict[ToolName, ToolInterrupt] = {"execute": entry(allow_prefixes=PREFIXES)}


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(command=shell_commands())
def test_the_deep_agents_predicate_agrees_with_the_workflow_gate(command: str) -> None:
    """``execute_interrupt_on``'s ``when`` interrupts exactly the calls the workflow asks about."""
    request = SimpleNamespace(
        tool_call={"name": "execute", "args": {"command": command}, "id": "1"}
    )
    asks = approval_trigger([], WORKFLOW_RULES, execute_call(command)) is not None
    assert DEEP_AGENTS_CONFIG["when"](request) is asks, command


def test_the_deep_agents_config_is_validated_and_complete() -> None:
    config = execute_interrupt_on(["git status"], allowed_decisions=["approve", "reject"])
    assert config["allowed_decisions"] == ["approve", "reject"]
    assert config["when"](SimpleNamespace(tool_call={"args": {}})) is True
    with pytest.raises(CommandPrefixError):
        execute_interrupt_on(["git status | sh"])


# --------------------------------------------------------------------------- end to end

services = pytest.mark.services


@services
async def test_an_allowed_command_runs_unasked_and_another_waits(
    temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    model = scripted(
        calls(("ok", "execute", {"command": "touch allowed.txt"})),
        calls(("no", "execute", {"command": "touch allowed.txt; touch pwned.txt"})),
        final(),
    )
    async with (
        running_agent(temporal_client) as agent_queue,
        running_tools(
            temporal_client, {"shell": LocalShellBackend(str(root))}, tmp_path / "journal"
        ) as tools_queue,
    ):
        spec = BackendSpec(default=remote("shell", tools_queue, execute=True, shell=str(root)))
        input = AgentInput.model_validate(
            {
                "task": "go",
                "model": model,
                "backend": spec,
                "interrupt_on": {"execute": {"allow_prefixes": ["touch allowed.txt"]}},
            }
        )
        handle = await temporal_client.start_workflow(
            AgentWorkflow.run, input, id=uid("wf"), task_queue=agent_queue
        )
        [waiting] = await pending(handle, 1)
        assert waiting.tool_call_id == "no"
        assert (root / "allowed.txt").exists(), "the allowed command did not run unasked"
        assert waiting.rule is not None and "allow_prefixes" in waiting.rule["description"]
        await handle.execute_update(
            AgentWorkflow.decide_update, Decision(id=waiting.id, decision="reject")
        )
        result = await handle.result()
    out = results(result)
    assert out["ok"]["status"] == "success" and "approved" not in out["ok"]["content"]
    assert out["no"]["status"] == "error" and "rejected" in out["no"]["content"]
    assert not (root / "pwned.txt").exists()
    assert result.approvals == 1


@services
async def test_filegate_run_with_allow_prefixes(
    cli_env: dict[str, str], temporal_client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    script = write_json(
        tmp_path / "s.json",
        {"turns": [
            {"tool_calls": [call("ok", "execute", command="touch allowed.txt")]},
            {"tool_calls": [call("no", "execute", command="touch allowed.txt && touch pwned.txt")]},
            {"content": "done"},
        ]},
    )  # fmt: skip
    rules = write_json(tmp_path / "i.json", {"execute": {"allow_prefixes": ["touch allowed.txt"]}})
    bad = write_json(tmp_path / "bad.json", {"execute": {"allow_prefixes": ["touch a | sh"]}})
    workflow_id = f"prefixes-{uuid.uuid4().hex[:8]}"
    transcript = tmp_path / "t.json"
    run = subprocess.Popen(
        [*CLI, "run", "go", "--model", f"scripted:{script}", "--root", str(root), "--shell",
         "--interrupt-on", rules, "--workflow-id", workflow_id, "--transcript", str(transcript)],
        env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    bad_run = ["run", "t", "--model", f"scripted:{script}", "--root", str(root), "--shell",
               "--interrupt-on", bad]  # fmt: skip
    # Alongside the run: a bad rule exits before anything starts.
    refusal = asyncio.create_task(asyncio.to_thread(cli, cli_env, *bad_run))
    try:
        [waiting] = await pending_once_started(temporal_client, workflow_id)
        assert waiting.tool_call_id == "no"
        assert (root / "allowed.txt").exists()
        reject = await asyncio.to_thread(
            cli, cli_env, "reject", waiting.id, "--workflow", workflow_id
        )
        assert reject.returncode == 0, reject.stderr
        output, _ = await asyncio.to_thread(run.communicate, timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, output
    assert not (root / "pwned.txt").exists()
    out = {m["tool_call_id"]: m for m in json.loads(transcript.read_text()) if "status" in m}
    assert out["ok"]["status"] == "success"
    assert out["no"]["status"] == "error" and "rejected" in out["no"]["content"]

    refused = await refusal
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "allow_prefixes entry 'touch a | sh' is not a plain command" in refused.stderr
