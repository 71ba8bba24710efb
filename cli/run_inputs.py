"""What ``filegate run`` reads from its flags, each refused with one clear line (exit 2).

The model (``--model``), the rules (``--permissions``), the approvals
(``--interrupt-on``), the system prompt (``--system-prompt`` /
``--extend-system-prompt``) and the workspace (``--root``, which must exist).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pydantic import ValidationError

from filegate.cli.connection import read_file
from filegate.cli.errors import CliError, failure_text

if TYPE_CHECKING:
    from filegate.kernel.messages import ModelSpec
    from filegate.kernel.network_rules import NetworkPermission
    from filegate.kernel.permissions import FilesystemPermission
    from filegate.kernel.review_scope import ReviewerConfig
    from filegate.kernel.tool_types import ToolName
    from filegate.workflows.gate import ToolInterrupt


PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def parse_model(text: str, known: Collection[str] | None = None) -> ModelSpec:
    """``PROFILE:NAME`` -> a ModelSpec: ``scripted:FILE``, ``openai:NAME``,
    ``anthropic:NAME`` or any profile of the agent worker's ``FILEGATE_MODEL_PROFILES``.

    ``known``: the profile names the agent worker has, when this command knows
    them (``run`` hosts the agent worker itself); None (``submit``) leaves the
    check to the deployment's worker. The script FILE of ``scripted`` is read
    here and sent inline: the agent worker never opens a path that came from a
    workflow input (contract §11).
    """
    from filegate.activities.providers.scripted import load_script
    from filegate.kernel.messages import ModelSpec

    profile, sep, name = text.partition(":")
    if not sep or not name or not PROFILE_NAME.match(profile):
        raise CliError(
            f"--model {text!r}: use PROFILE:NAME (scripted:FILE, openai:NAME, anthropic:NAME "
            "or a profile of FILEGATE_MODEL_PROFILES)",
            2,
        )
    if known is not None and profile not in known:
        names = ", ".join(sorted(known))
        raise CliError(f"--model {text!r}: no model profile {profile!r} (profiles: {names})", 2)
    if profile != "scripted":
        return ModelSpec(provider=profile, name=name)
    path = Path(name).expanduser().resolve()
    try:
        source = path.read_text(encoding="utf-8")
        script = load_script(source, f"file {path}")
    except OSError as exc:
        raise CliError(f"cannot read script {path}: {exc.strerror or exc}", 2) from None
    except Exception as exc:  # load_script raises a non-retryable ApplicationError
        raise CliError(failure_text(exc), 2) from None
    return ModelSpec(provider="scripted", options={"script": script.model_dump(exclude_none=True)})


def first_error(exc: ValidationError) -> str:
    """One line for a pydantic error: where (``operations.0``) and what, plus how many more.

    An unknown key comes first and names itself, with the missing field it most
    likely meant: a typo (``operation``) otherwise read ``operations: Field
    required`` and never named the key the user wrote (issue 36).
    """
    errors = exc.errors(include_url=False)
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    first = (unknown or errors)[0]
    where = ".".join(str(part) for part in first["loc"])
    text = f"{where}: {first['msg']}" if where else str(first["msg"])
    if unknown:
        parent, key = first["loc"][:-1], str(first["loc"][-1])
        missing = [
            str(e["loc"][-1]) for e in errors if e["type"] == "missing" and e["loc"][:-1] == parent
        ]
        close = difflib.get_close_matches(key, missing, n=1)
        text = f"{where}: unknown key" + (f" (did you mean {close[0]!r}?)" if close else "")
    if len(errors) > 1:
        text += f" (and {len(errors) - 1} more)"
    return text


def _json_file(path: str, what: str) -> Any:
    try:
        return json.loads(read_file(path, what))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CliError(f"{what} {path} is not valid JSON: {exc}", 2) from None


@dataclass(frozen=True)
class RuleSet:
    """What ``--permissions FILE`` holds, read once: the file rules, the network rules
    (entries with ``hosts``, kernel.network_rules) and the first-pass reviewer."""

    permissions: list[FilesystemPermission] = field(default_factory=list)
    network: list[NetworkPermission] = field(default_factory=list)
    reviewer: ReviewerConfig | None = None


def load_rule_set(path: str | None) -> RuleSet:
    """``--permissions FILE``: a JSON list of rules, or an object with ``rules`` and
    ``reviewer``. Any mistake is one line naming the entry, exit 2."""
    from filegate.kernel.network_rules import NetworkPermission
    from filegate.kernel.permissions import FilesystemPermission

    if not path:
        return RuleSet()
    data = _json_file(path, "permissions file")
    reviewer = None
    if isinstance(data, dict) and set(data) & {"rules", "reviewer"}:
        unknown = sorted(set(data) - {"rules", "reviewer"})
        if unknown:
            raise CliError(f"permissions file {path}: unknown section {unknown[0]!r}", 2)
        reviewer = _reviewer(path, data.get("reviewer"))
        data = data.get("rules", [])
    if not isinstance(data, list):
        raise CliError(
            f"permissions file {path} must hold a JSON list of rules, or an object "
            "with 'rules' (and 'reviewer')",
            2,
        )
    rules = RuleSet(reviewer=reviewer)
    for index, rule in enumerate(data):
        network = isinstance(rule, dict) and "hosts" in rule
        try:
            if network:
                rules.network.append(NetworkPermission.model_validate(rule))
            else:
                rules.permissions.append(FilesystemPermission.model_validate(rule))
        except ValidationError as exc:
            raise CliError(f"invalid rule {index} in {path}: {first_error(exc)}", 2) from None
        except ValueError as exc:
            raise CliError(f"invalid rule {index} in {path}: {exc}", 2) from None
    return rules


def _reviewer(path: str, section: Any) -> ReviewerConfig | None:
    from filegate.kernel.review_scope import ReviewerConfig

    if section is None:
        return None
    try:
        return ReviewerConfig.model_validate(section)
    except ValidationError as exc:
        raise CliError(f"invalid reviewer in {path}: {first_error(exc)}", 2) from None
    except ValueError as exc:
        raise CliError(f"invalid reviewer in {path}: {exc}", 2) from None


def load_permissions(path: str | None) -> list[FilesystemPermission]:
    """``--permissions FILE``'s file rules (:func:`load_rule_set`)."""
    return load_rule_set(path).permissions


def load_interrupt_on(path: str | None) -> dict[ToolName, ToolInterrupt]:
    """``--interrupt-on FILE``: a JSON object ``{tool: true | {"always"|"when": ...}}``."""
    from filegate.kernel.tool_types import TOOL_ORDER
    from filegate.workflows.gate import ToolInterrupt

    if not path:
        return {}
    data = _json_file(path, "interrupt-on file")
    if not isinstance(data, dict):
        raise CliError(f"interrupt-on file {path} must hold a JSON object: tool -> rule", 2)
    out: dict[ToolName, ToolInterrupt] = {}
    for tool, rule in data.items():
        if tool not in TOOL_ORDER:
            known = ", ".join(TOOL_ORDER)
            raise CliError(f"interrupt-on file {path}: unknown tool {tool!r} ({known})", 2)
        try:
            entry = ToolInterrupt.model_validate(rule)
        except ValidationError as exc:
            raise CliError(f"interrupt-on file {path}, {tool}: {first_error(exc)}", 2) from None
        problem = entry.tool_problem(tool)
        if problem is not None:
            raise CliError(f"interrupt-on file {path}, {tool}: {problem}", 2)
        out[cast("ToolName", tool)] = entry
    return out


def load_prompt(text: str | None, flag: str) -> str | None:
    """``TEXT`` as given, or ``@FILE``: that file's text."""
    if text is None:
        return None
    if text.startswith("@"):
        data = read_file(text[1:], f"{flag} file")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise CliError(f"{flag} file {text[1:]} is not UTF-8 text", 2) from None
    if not text.strip():
        raise CliError(f"{flag} is empty", 2)
    return text


def workspace_root(text: str) -> Path:
    """``--root``: an existing directory (a typo must not become a new empty workspace)."""
    root = Path(text).expanduser().resolve()
    if not root.exists():
        raise CliError(f"--root {root}: no such directory (create it first)", 2)
    if not root.is_dir():
        raise CliError(f"--root {root}: not a directory", 2)
    return root
