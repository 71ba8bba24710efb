"""Per-request tool visibility, descriptions and the shell-path prompt (contract §3)."""

from __future__ import annotations

import jsonschema
import pytest

from filegate.kernel.tool_types import TOOL_ARGS, TOOL_ORDER
from filegate.workflows import tool_descriptions as td
from filegate.workflows.inputs import BackendRef, BackendSpec, RouteSpec

STATE = BackendSpec()
SHELL = BackendSpec(
    default=BackendRef(
        kind="remote", name="shell", task_queue="q", can_execute=True, shell_path="/work/ws"
    )
)
NO_DELETE = BackendSpec(
    default=BackendRef(kind="remote", name="ro", task_queue="q", can_delete=False)
)


def test_state_default_hides_execute_only() -> None:
    assert td.visible_tools(td.whitelisted_tools(None), STATE) == [
        t for t in TOOL_ORDER if t != "execute"
    ]


def test_shell_default_shows_all_in_fixed_order() -> None:
    assert td.visible_tools(td.whitelisted_tools(None), SHELL) == list(TOOL_ORDER)


def test_delete_hidden_when_backend_cannot_delete() -> None:
    assert "delete" not in td.visible_tools(td.whitelisted_tools(None), NO_DELETE)


def test_execute_follows_default_not_routes() -> None:
    spec = BackendSpec(
        routes=[
            RouteSpec(
                prefix="/sh",
                backend=BackendRef(kind="remote", name="s", task_queue="q", can_execute=True),
            )
        ]
    )
    assert "execute" not in td.visible_tools(td.whitelisted_tools(None), spec)


def test_whitelist_keeps_read_file_and_order() -> None:
    enabled = td.whitelisted_tools(["grep", "ls"])
    assert enabled == ["ls", "read_file", "grep"]
    assert td.visible_tools(enabled, SHELL) == ["ls", "read_file", "grep"]
    assert td.whitelisted_tools([]) == ["read_file"]


def test_grep_description_drops_rg_when_execute_hidden() -> None:
    hidden = td.describe("grep", td.visible_tools(td.whitelisted_tools(None), STATE), {})
    shown = td.describe("grep", td.visible_tools(td.whitelisted_tools(None), SHELL), {})
    assert "rg" not in hidden and "execute" not in hidden
    assert "`rg`" in shown and "execute" in shown


@pytest.mark.parametrize(
    ("whitelist", "mentions", "absent"),
    [
        (None, ["grep tool", "glob tool"], ["`find`"]),
        (["grep", "execute"], ["grep tool", "`find`"], ["glob tool"]),
        (["glob", "execute"], ["glob tool", "`rg`"], ["grep tool"]),
        (["execute"], ["`rg`", "`find`"], ["grep tool", "glob tool"]),
    ],
)
def test_execute_description_has_four_variants(
    whitelist: list[str] | None, mentions: list[str], absent: list[str]
) -> None:
    visible = td.visible_tools(td.whitelisted_tools(whitelist), SHELL)
    text = td.describe("execute", visible, {})
    for word in mentions:
        assert word in text
    for word in absent:
        assert word not in text


def test_four_execute_variants_are_distinct() -> None:
    assert len(set(td.EXECUTE_DESCRIPTIONS.values())) == 4


def test_user_descriptions_are_never_rewritten() -> None:
    custom = {"grep": "Use execute with rg for everything.", "execute": "Custom shell."}
    visible = td.visible_tools(td.whitelisted_tools(None), STATE)
    specs = {s.name: s for s in td.tool_specs(visible, custom)}
    assert specs["grep"].description == custom["grep"]
    shell_specs = {
        s.name: s
        for s in td.tool_specs(td.visible_tools(td.whitelisted_tools(["execute"]), SHELL), custom)
    }
    assert shell_specs["execute"].description == "Custom shell."


def test_schemas_come_from_arg_models_and_validate() -> None:
    specs = td.tool_specs(list(TOOL_ORDER), {})
    assert [s.name for s in specs] == list(TOOL_ORDER)
    for spec in specs:
        model_schema = TOOL_ARGS[spec.name].model_json_schema()  # type: ignore[index]
        assert spec.parameters["properties"] == model_schema["properties"]
        jsonschema.Draft202012Validator.check_schema(spec.parameters)
        for prop in spec.parameters["properties"].values():
            assert prop.get("description"), f"{spec.name} field without description"
    read = next(s for s in specs if s.name == "read_file")
    jsonschema.validate({"file_path": "/a.txt", "limit": 5}, read.parameters)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"limit": 5}, read.parameters)


def _composite(default: BackendRef) -> BackendSpec:
    return BackendSpec(
        default=default,
        routes=[
            RouteSpec(
                prefix="/common",
                backend=BackendRef(kind="remote", name="c", task_queue="q", shell_path="/data"),
            ),
            RouteSpec(prefix="/memories/", backend=BackendRef(name="mem")),
        ],
    )


def test_shell_paths_section_only_for_composite_with_execute() -> None:
    spec = _composite(SHELL.default)
    visible = td.visible_tools(td.whitelisted_tools(None), spec)
    prompt = td.system_prompt("Be brief.", visible, spec)
    assert prompt.startswith("Be brief.")
    assert "## Shell paths vs. virtual paths" in prompt
    assert "- `/common/` -> `/data/` (e.g. `/common/dir/x.py` -> `/data/dir/x.py`)" in prompt
    unreachable = prompt.split("not accessible from the shell):", 1)[1]
    assert "`/memories/`" in unreachable and "/common/" not in unreachable
    assert "/work/ws" in prompt

    no_exec = td.visible_tools(td.whitelisted_tools(["ls"]), spec)
    assert td.system_prompt("Be brief.", no_exec, spec) == "Be brief."
    state_composite = _composite(BackendRef())
    visible_state = td.visible_tools(td.whitelisted_tools(None), state_composite)
    assert "Shell paths" not in td.system_prompt(None, visible_state, state_composite)
    shell_visible = td.visible_tools(td.whitelisted_tools(None), SHELL)
    assert td.system_prompt(None, shell_visible, SHELL) == td.default_system_prompt(shell_visible)


def test_default_system_prompt_covers_paths_paging_and_approvals() -> None:
    """contract §3: without a caller's prompt every model request carries the default."""
    visible = td.visible_tools(td.whitelisted_tools(None), SHELL)
    prompt = td.system_prompt(None, visible, SHELL)
    assert "virtual filesystem" in prompt and "absolute virtual paths" in prompt
    assert "before you edit it" in prompt
    assert "/large_tool_results/" in prompt and "/conversation_history/" in prompt
    assert "approval" in prompt and "reject" in prompt
    read_only = td.visible_tools(td.whitelisted_tools(["ls", "grep"]), SHELL)
    assert "edit_file" not in td.system_prompt(None, read_only, SHELL)  # only visible tools
    assert td.system_prompt("Mine.", visible, SHELL) == "Mine."
    extended = td.system_prompt("Mine.", visible, SHELL, extend=True)
    assert extended == td.default_system_prompt(visible) + "\n\nMine."


def test_read_file_advertises_video_only_when_a_backend_can_decode_it() -> None:
    from filegate.workflows import tool_descriptions as d
    from filegate.workflows.inputs import BackendRef, BackendSpec, RouteSpec

    plain = BackendSpec(default=BackendRef(kind="remote", name="fs", task_queue="q"))
    video = BackendSpec(
        default=BackendRef(kind="state"),
        routes=[
            RouteSpec(
                prefix="/media/",
                backend=BackendRef(kind="remote", name="fs", task_queue="q", can_read_video=True),
            )
        ],
    )
    visible = d.visible_tools(d.whitelisted_tools(None), plain)
    without = d.tool_specs(visible, {}, video=d.any_can_read_video(plain))
    with_video = d.tool_specs(visible, {}, video=d.any_can_read_video(video))
    read_without = next(t for t in without if t.name == "read_file")
    read_with = next(t for t in with_video if t.name == "read_file")
    assert "video" not in read_without.description.lower()
    assert "video" not in str(read_without.parameters).lower()
    assert "Videos come back as sampled frames" in read_with.description


def test_state_backend_cannot_claim_video() -> None:
    import pytest
    from pydantic import ValidationError

    from filegate.workflows.inputs import BackendRef

    with pytest.raises(ValidationError, match="does not decode video"):
        BackendRef(kind="state", can_read_video=True)


def test_progress_shows_results_under_their_own_tool_when_ids_repeat() -> None:
    """A model may reuse a call id (even within one message): results keep their tool."""
    from filegate.cli.progress import Progress

    lines: list[str] = []
    progress = Progress(lines.append)
    calls = [
        {"id": "c", "name": "read_file", "args": {"file_path": "/a"}},
        {"id": "c", "name": "ls", "args": {"path": "/"}},
    ]
    progress.transcript(
        [
            {"role": "assistant", "content": "", "tool_calls": calls},
            {"role": "tool", "content": "1\ta", "tool_call_id": "c", "status": "success"},
            {"role": "tool", "content": "/a", "tool_call_id": "c", "status": "success"},
            {"role": "assistant", "content": "", "tool_calls": [{**calls[0], "name": "grep"}]},
            {"role": "tool", "content": "none", "tool_call_id": "c", "status": "error"},
        ]
    )
    results = [line for line in lines if line.startswith("  <-")]
    assert results == ["  <- read_file [ok] 1\ta", "  <- ls [ok] /a", "  <- grep [ERROR] none"]
