"""Deterministic scripted model (contract §10) for demos and tests.

The answer depends only on the script and ``request.call_index``, never on
in-process state, so a retried activity or a restarted worker gives the same turn.
The worker keeps parsed scripts (:data:`SCRIPTS`, by content hash), so a call
does not validate its script again; that is a cache, not state: a miss parses
the same script into the same turns.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from temporalio.exceptions import ApplicationError

from filegate.activities.providers.common import request_error
from filegate.activities.providers.profiles import ModelProfile, script_path
from filegate.kernel.limits import MAX_TOOL_ARGS_DEPTH
from filegate.kernel.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
    nesting_exceeds,
)
from filegate.kernel.scripts import SCRIPT_UNAVAILABLE, canonical_script, script_digest

END_OF_SCRIPT_STOP = "end_of_script"
SCRIPT_CACHE_SIZE = 32
"""Distinct parsed scripts a worker process keeps (least recently used go first)."""


class ScriptToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    """Optional; a stable id ``s<turn>_<n>`` is derived when absent."""
    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


def _call_id_for(call: ScriptToolCall, turn: int, n: int) -> str:
    """The script's id, or a stable one derived from the call's position."""
    return call.id or f"s{turn}_{n}"


class ScriptTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool_calls: list[ScriptToolCall] | None = None
    content: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ScriptTurn:
        if self.tool_calls is None and self.content is None:
            raise ValueError("a turn needs 'tool_calls' or 'content'")
        if self.tool_calls is not None and not self.tool_calls:
            raise ValueError("'tool_calls' must not be empty")
        return self


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turns: list[ScriptTurn]

    @model_validator(mode="after")
    def _unique_ids(self) -> Script:
        # Tool activities are idempotent per call id: a reused id would replay
        # the first call's result instead of running the second one.
        seen: dict[str, int] = {}
        for k, turn in enumerate(self.turns):
            for n, call in enumerate(turn.tool_calls or []):
                call_id = _call_id_for(call, k, n)
                if call_id in seen:
                    raise ValueError(
                        f"tool call id {call_id!r} is used in turn {seen[call_id]} and "
                        f"turn {k}; ids must be unique"
                    )
                seen[call_id] = k
        return self


def load_script(source: Any, origin: str) -> Script:
    """Validate a script (dict or JSON text); errors name the origin and the bad field."""
    try:
        data = json.loads(source) if isinstance(source, str) else source
    except RecursionError:
        # Caught, not retried: the same script fails the same way every attempt.
        raise request_error(f"scripted model {origin} nests too deeply to parse") from None
    except ValueError as exc:  # JSONDecodeError, and integers of more than 4300 digits
        raise request_error(f"scripted model {origin} is not valid JSON: {exc}") from None
    try:
        return Script.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()
        )
        raise request_error(f"invalid scripted model {origin}: {problems}") from None


@dataclass(frozen=True)
class Parsed:
    """A validated script and its identity: sha256 and size of its canonical JSON
    (``""`` and 0 for a script canonical JSON cannot write: never kept or referenced)."""

    sha256: str
    size: int
    script: Script


class ScriptCache:
    """Parsed scripts of this worker process by sha256 of their canonical JSON (LRU).

    A long scripted run used to validate its whole script on every model call
    (``load_script`` was a quarter of a 2 000-step run's time). Hashing the
    canonical JSON is a fraction of validating it, and a call naming its
    script by reference (:class:`~filegate.kernel.scripts.ScriptRef`) does not
    even hash. Invalid scripts are never kept: each call fails the same way.
    Thread-safe.
    """

    def __init__(self, size: int = SCRIPT_CACHE_SIZE) -> None:
        self.size = size
        self._parsed: OrderedDict[str, Parsed] = OrderedDict()
        self._files: OrderedDict[tuple[str, int, int], str] = OrderedDict()
        """(path, mtime_ns, size) -> sha256 of a script file's content."""
        self._lock = threading.Lock()

    def get(self, sha256: str) -> Parsed | None:
        with self._lock:
            found = self._parsed.get(sha256)
            if found is not None:
                self._parsed.move_to_end(sha256)
            return found

    def keep(self, parsed: Parsed) -> None:
        with self._lock:
            self._parsed[parsed.sha256] = parsed
            self._parsed.move_to_end(parsed.sha256)
            while len(self._parsed) > self.size:
                self._parsed.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._parsed.clear()
            self._files.clear()

    def parse(self, source: Any, origin: str) -> Parsed:
        """``source`` (dict or JSON text) parsed once per distinct script; errors as
        :func:`load_script`'s."""
        data = source
        try:
            if isinstance(source, str):
                data = json.loads(source)
            canonical = canonical_script(data)
        except (ValueError, TypeError, RecursionError):
            # Not JSON, or nothing canonical JSON can write (too deep, NaN): load_script
            # names the problem, or answers a valid oddity uncached (no identity).
            return Parsed("", 0, load_script(source, origin))
        sha256 = script_digest(canonical)
        found = self.get(sha256)
        if found is None:
            found = Parsed(sha256, len(canonical), load_script(data, origin))
            self.keep(found)
        return found

    def parse_file(self, path: Path, name: str) -> Parsed:
        """The script file at ``path``, read and parsed again only when it changed."""
        try:
            stat = path.stat()
            key = (str(path), stat.st_mtime_ns, stat.st_size)
            with self._lock:
                sha256 = self._files.get(key)
            found = self.get(sha256) if sha256 is not None else None
            if found is not None:
                return found
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise request_error(f"scripted model file {name!r} not found") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise request_error(f"cannot read scripted model file {name!r}: {exc}") from None
        found = self.parse(text, f"file {name!r}")
        with self._lock:
            self._files[key] = found.sha256
            while len(self._files) > self.size:
                self._files.popitem(last=False)
        return found


SCRIPTS = ScriptCache()
"""This worker process's parsed scripts."""


def script_unavailable(sha256: str) -> ApplicationError:
    """A script reference this worker cannot resolve: the workflow sends the script again."""
    return ApplicationError(
        f"this agent worker does not hold script {sha256[:12]}; send it inline",
        type=SCRIPT_UNAVAILABLE,
        non_retryable=True,
    )


def _script_for(request: ModelRequest, profile: ModelProfile | None = None) -> Script:
    """The script ``request.script`` names (parsed on this worker before), inline in
    ``options["script"]``, or in the file ``model.name`` names inside the profile's
    script directory (never any other path on the worker)."""
    spec = request.model
    profile = profile or ModelProfile(kind="scripted")
    path = script_path(profile, spec.name) if spec.name else None
    if request.script is not None:
        found = SCRIPTS.get(request.script.sha256)
        if found is None:
            raise script_unavailable(request.script.sha256)
        return found.script
    if "script" in spec.options:
        return SCRIPTS.parse(spec.options["script"], "inline script").script
    if path is None:
        raise request_error(
            "scripted model needs a script: options['script'] or a file name in the "
            "profile's script directory as the name"
        )
    return SCRIPTS.parse_file(path, spec.name).script


def _rough_tokens(request: ModelRequest) -> int:
    """~4 chars per token, so context-size logic has something to react to in demos."""
    chars = len(request.system) + sum(len(m.text()) for m in request.messages)
    return chars // 4


class ScriptedProvider:
    """Answers turn ``call_index`` of the script; past the end, says the script ended."""

    def __init__(self, profile: ModelProfile | None = None) -> None:
        self.profile = profile or ModelProfile(kind="scripted")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        script = _script_for(request, self.profile)
        k = request.call_index
        usage = Usage(input_tokens=_rough_tokens(request))
        if k < 0 or k >= len(script.turns):
            text = (
                f"[scripted model] The script has ended: it has {len(script.turns)} turn(s) "
                f"and this is call {k}. No further actions."
            )
            return ModelResponse(
                message=Message(role="assistant", content=text),
                usage=usage.model_copy(update={"output_tokens": len(text) // 4}),
                stop_reason=END_OF_SCRIPT_STOP,
            )
        turn = script.turns[k]
        calls = [
            ToolCall(id=_call_id_for(c, k, n), name=c.name, args=c.args)
            for n, c in enumerate(turn.tool_calls or [])
        ]
        content = turn.content or ""
        # Script arguments are capped like a model's (model_output.limit_turn), after
        # this: measure only what json.dumps can walk without recursing too deep.
        measurable = [c.args for c in calls if not nesting_exceeds(c.args, MAX_TOOL_ARGS_DEPTH)]
        usage.output_tokens = (len(content) + len(json.dumps(measurable))) // 4
        return ModelResponse(
            message=Message(role="assistant", content=content, tool_calls=calls or None),
            usage=usage,
            stop_reason="tool_use" if calls else "end_turn",
        )
