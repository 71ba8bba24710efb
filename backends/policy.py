"""Policy wrappers: refuse, throttle and audit backend operations.

:class:`PolicyBackend` wraps any backend and implements *every* protocol
method itself (checked at import time against :data:`PROTOCOL_METHODS`), so a
policy cannot be bypassed through a method the wrapper forgot. It forwards
nothing else: there is no ``__getattr__`` passthrough, because a private
helper of the inner backend reached that way would skip every check.

Each call goes through the same steps:

1. every path argument is validated (:func:`validate_path`) and the
   *normalised* path is what policies see and what the inner backend gets,
   so a check and the action can never disagree about the target;
2. ``Policy.admit(operation)`` once per call (rate limits, operation bans);
3. ``Policy.check(call, inner)`` once per target (``upload``/``download``
   are checked per file, and refused files get their own error results while
   the rest go through);
4. the inner backend runs, and one audit record per target is emitted.

Refusals are error values (``code="permission_denied"``, or ``timeout`` for
a rate limit that would wait too long) whose message names the policy and
the rule, never exceptions.

Configuration: a :class:`PolicyConfig` (JSON file or env) holds *named*
policy instances; the workflow input only names which ones apply, and
:func:`build_policy_chain` wraps a backend with them. Built policies are
cached on the config object so stateful ones (a token bucket) are shared by
every backend the worker wraps with that name.

Rate limits here are a wrapper-level token bucket. On the tools worker,
Temporal's task-queue limit (``Worker(max_task_queue_activities_per_second=...)``)
is preferred where one limit per task queue fits: it is enforced by the
server across all workers, while this bucket is per worker process.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, get_args

from filegate.backends.audit import (
    AuditSink,
    FileAuditSink,
    Outcome,
    command_digest,
    emit_safely,
    new_record,
)
from filegate.kernel.paths import validate_path
from filegate.kernel.permissions import FilesystemPermission, delete_blockers
from filegate.kernel.protocol import (
    DEFAULT_READ_LIMIT,
    PROTOCOL_METHODS,
    BackendProtocol,
    DeleteResult,
    EditResult,
    ErrorCode,
    ExecuteResult,
    FileDownloadResult,
    FileUploadResult,
    GlobResult,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
    _Result,
)
from filegate.kernel.textops import apply_edit, decode_text
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializeAsAny,
    field_validator,
    model_validator,
)
from wcmatch import glob as wc_glob

ProtocolOperation = Literal[
    "ls", "read", "write", "edit", "delete", "glob", "grep", "upload", "download", "execute"
]
WriteOperation = Literal["write", "edit", "delete", "upload"]
ContentOperation = Literal["write", "edit", "upload"]

if set(get_args(ProtocolOperation)) != set(PROTOCOL_METHODS):  # pragma: no cover
    raise TypeError("ProtocolOperation is out of date with PROTOCOL_METHODS")

R = TypeVar("R", bound=_Result)


# --------------------------------------------------------------------------- #
# What a policy sees and says
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Call:
    """One target of one protocol call, as policies see it.

    ``path`` is the validated virtual path (the search root for glob/grep;
    None for execute). ``content`` is the text a write or text upload would
    store; ``old``/``new``/``replace_all`` describe an edit.
    """

    operation: str
    path: str | None
    content: str | None = None
    data: bytes | None = None
    old: str | None = None
    new: str | None = None
    replace_all: bool = False
    command: str | None = None


@dataclass(frozen=True)
class Refusal:
    """Why a call was refused. ``policy`` is None for the wrapper's own path check."""

    policy: str | None
    rule: str
    message: str
    code: ErrorCode = "permission_denied"


class Policy:
    """Base class: a policy allows everything until a hook says otherwise.

    Hooks must be thread-safe: sync activities call the same wrapped backend
    from several threads.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def permits(self, operation: str) -> bool:
        """False when the operation is refused outright (hides the capability)."""
        return True

    def admit(self, operation: str) -> Refusal | None:
        """Called once per protocol call, before any target is checked."""
        return None

    def check(self, call: Call, inner: BackendProtocol) -> Refusal | None:
        """Called once per target; may read through ``inner`` (not audited)."""
        return None


# --------------------------------------------------------------------------- #
# The wrapper
# --------------------------------------------------------------------------- #


def _refused(result_type: type[R], path: str | None, refusal: Refusal) -> R:
    result = result_type(error=refusal.message, code=refusal.code)
    if path is not None and "path" in result_type.model_fields:
        result.path = path  # type: ignore[attr-defined]
    return result


def _text_bytes(text: object) -> int | None:
    """UTF-8 size; None for a wrongly typed argument (the call itself will fail)."""
    return len(text.encode("utf-8", "surrogatepass")) if isinstance(text, str) else None


def _payload_bytes(call: Call, result: _Result | None) -> int | None:
    """Bytes carried in (write, edit, upload: as attempted) or out (on success)."""
    if call.operation == "write" and call.content is not None:
        return _text_bytes(call.content)
    if call.operation == "edit" and call.new is not None:
        return _text_bytes(call.new)
    if call.operation == "upload" and call.data is not None:
        return len(call.data)
    if result is None or not result.ok:
        return None
    if isinstance(result, ReadResult):
        if result.data is not None:
            return len(result.data)
        return sum(len(line.encode("utf-8", "surrogatepass")) + 1 for line in result.lines)
    if isinstance(result, FileDownloadResult) and result.content is not None:
        return len(result.content)
    if isinstance(result, ExecuteResult):
        return _text_bytes(result.output)
    return None


class PolicyBackend:
    """Any backend, behind an ordered list of policies and an optional audit sink."""

    def __init__(
        self,
        inner: BackendProtocol,
        policies: Sequence[Policy] = (),
        audit: AuditSink | None = None,
    ) -> None:
        self.inner = inner
        self.policies = tuple(policies)
        self.audit = audit

    # -- capabilities --------------------------------------------------------

    @property
    def can_execute(self) -> bool:
        return self.inner.can_execute and all(p.permits("execute") for p in self.policies)

    @property
    def can_delete(self) -> bool:
        return self.inner.can_delete and all(p.permits("delete") for p in self.policies)

    # -- the guard -----------------------------------------------------------

    def _admit(self, operation: str) -> Refusal | None:
        for policy in self.policies:
            refusal = policy.admit(operation)
            if refusal is not None:
                return refusal
        return None

    def _check(self, call: Call) -> Refusal | None:
        for policy in self.policies:
            refusal = policy.check(call, self.inner)
            if refusal is not None:
                return refusal
        return None

    def _record(
        self,
        call: Call,
        started: float,
        result: _Result | None = None,
        refusal: Refusal | None = None,
        exc: BaseException | None = None,
    ) -> None:
        if self.audit is None:
            return
        outcome: Outcome
        code: str | None
        if refusal is not None:
            outcome = "denied" if refusal.policy is not None else "error"
            code = refusal.code
        elif exc is not None:
            outcome, code = "error", f"exception:{type(exc).__name__}"
        else:
            assert result is not None
            outcome = "ok" if result.ok else "error"
            code = result.code
        extra: dict[str, Any] = {}
        if call.command is not None:
            extra["command_sha256"], extra["command_length"] = command_digest(call.command)
        if isinstance(result, ExecuteResult):
            extra["exit_code"] = result.exit_code
        record = new_record(
            call.operation,
            call.path,
            outcome,
            code=code,
            policy=refusal.policy if refusal else None,
            rule=refusal.rule if refusal else None,
            bytes=_payload_bytes(call, result),
            duration_ms=round((time.monotonic() - started) * 1000, 3),
            **extra,
        )
        emit_safely(self.audit, record)

    def _one(
        self,
        call: Call | Refusal,
        operation: str,
        raw_path: str | None,
        result_type: type[R],
        invoke: Callable[[Call], R],
    ) -> R:
        """Guard, run and audit a single-target call."""
        started = time.monotonic()
        if isinstance(call, Refusal):  # the path itself was invalid
            result = _refused(result_type, raw_path, call)
            self._record(Call(operation, raw_path), started, result, refusal=call)
            return result
        refusal = self._admit(operation) or self._check(call)
        if refusal is not None:
            result = _refused(result_type, call.path, refusal)
            self._record(call, started, result, refusal=refusal)
            return result
        try:
            result = invoke(call)
        except BaseException as exc:
            self._record(call, started, exc=exc)
            raise
        self._record(call, started, result)
        return result

    def _many(
        self,
        operation: str,
        calls: list[tuple[Call | Refusal, str]],
        result_type: type[R],
        invoke: Callable[[list[Call]], list[R]],
    ) -> list[R]:
        """Guard each target of a batch call; forward the admitted ones in one inner call.

        Results and audit records keep the caller's file order.
        """
        started = time.monotonic()
        admission = self._admit(operation) if calls else None
        results: dict[int, R] = {}
        refusals: dict[int, tuple[Call, Refusal]] = {}
        forward: list[tuple[int, Call]] = []
        for index, (call, raw_path) in enumerate(calls):
            if isinstance(call, Refusal):
                refusals[index] = (Call(operation, raw_path), call)
                results[index] = _refused(result_type, raw_path, call)
                continue
            refusal = admission or self._check(call)
            if refusal is not None:
                refusals[index] = (call, refusal)
                results[index] = _refused(result_type, call.path, refusal)
            else:
                forward.append((index, call))
        failure: BaseException | None = None
        if forward:
            try:
                inner_results = invoke([call for _, call in forward])
                if len(inner_results) != len(forward):
                    raise RuntimeError(
                        f"{operation}: inner backend returned {len(inner_results)} results "
                        f"for {len(forward)} files"
                    )
                results.update(
                    (index, r) for (index, _), r in zip(forward, inner_results, strict=True)
                )
            except BaseException as exc:
                failure = exc
        forwarded = dict(forward)
        for index in range(len(calls)):
            if index in refusals:
                call, refusal = refusals[index]
                self._record(call, started, results[index], refusal=refusal)
            elif failure is not None:
                self._record(forwarded[index], started, exc=failure)
            else:
                self._record(forwarded[index], started, results[index])
        if failure is not None:
            raise failure
        return [results[index] for index in range(len(calls))]

    # -- the protocol --------------------------------------------------------

    def ls(self, path: str) -> LsResult:
        call = _call("ls", path)
        return self._one(call, "ls", path, LsResult, lambda c: self.inner.ls(_p(c)))

    def read(self, path: str, offset: int = 0, limit: int = DEFAULT_READ_LIMIT) -> ReadResult:
        call = _call("read", path)
        return self._one(
            call, "read", path, ReadResult, lambda c: self.inner.read(_p(c), offset, limit)
        )

    def write(self, path: str, content: str) -> WriteResult:
        call = _call("write", path, content=content)
        return self._one(
            call, "write", path, WriteResult, lambda c: self.inner.write(_p(c), content)
        )

    def edit(self, path: str, old: str, new: str, replace_all: bool = False) -> EditResult:
        call = _call("edit", path, old=old, new=new, replace_all=replace_all)
        return self._one(
            call, "edit", path, EditResult,
            lambda c: self.inner.edit(_p(c), old, new, replace_all),
        )  # fmt: skip

    def delete(self, path: str) -> DeleteResult:
        call = _call("delete", path)
        return self._one(call, "delete", path, DeleteResult, lambda c: self.inner.delete(_p(c)))

    def glob(self, pattern: str, path: str = "/") -> GlobResult:
        call = _call("glob", path)
        return self._one(call, "glob", path, GlobResult, lambda c: self.inner.glob(pattern, _p(c)))

    def grep(
        self,
        literal: str,
        path: str | None = None,
        glob: str | None = None,
        max_count: int | None = None,
    ) -> GrepResult:
        call = _call("grep", path)
        return self._one(
            call, "grep", path, GrepResult,
            # None stays None: "no root given" is the inner backend's to interpret.
            lambda c: self.inner.grep(literal, None if path is None else c.path, glob, max_count),
        )  # fmt: skip

    def upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResult]:
        calls = [
            (_call("upload", path, data=bytes(data), content=decode_text(bytes(data))), path)
            for path, data in files
        ]
        return self._many(
            "upload",
            calls,
            FileUploadResult,
            lambda cs: self.inner.upload([(_p(c), c.data or b"") for c in cs]),
        )

    def download(self, paths: list[str]) -> list[FileDownloadResult]:
        calls = [(_call("download", path), path) for path in paths]
        return self._many(
            "download",
            calls,
            FileDownloadResult,
            lambda cs: self.inner.download([_p(c) for c in cs]),
        )

    def execute(self, command: str, timeout: float | None = None) -> ExecuteResult:
        call = Call("execute", None, command=command)
        return self._one(
            call, "execute", None, ExecuteResult, lambda c: self.inner.execute(command, timeout)
        )


def _call(operation: str, path: str | None, **fields: Any) -> Call | Refusal:
    """The Call for a validated path, or the wrapper's own invalid-path refusal."""
    try:
        vpath = validate_path(path)
    except ValueError as exc:
        return Refusal(policy=None, rule="path", message=str(exc), code="invalid_path")
    return Call(operation, vpath, **fields)


def _p(call: Call) -> str:
    assert call.path is not None
    return call.path


_missing = [name for name in PROTOCOL_METHODS if name not in PolicyBackend.__dict__]
if _missing:  # pragma: no cover - a protocol change must be handled here first
    raise TypeError(f"PolicyBackend does not implement {_missing}")


# --------------------------------------------------------------------------- #
# Policies
# --------------------------------------------------------------------------- #

WRITE_OPERATIONS: tuple[WriteOperation, ...] = ("write", "edit", "delete", "upload")
CONTENT_OPERATIONS: tuple[ContentOperation, ...] = ("write", "edit", "upload")


class DenyWritePolicy(Policy):
    """Refuse writes under path prefixes or matching globs (the seeds' ``deny_prefixes``).

    A prefix matches whole components (``/etc`` covers ``/etc/x``, not
    ``/etc2``). Globs use the permission-rule syntax (``**``, braces, dotfiles
    included). ``delete`` is refused when the deleted subtree *overlaps* a
    protected path (deleting ``/`` would take ``/etc`` with it), using the
    same overlap rules as the permission gate; the inner backend is asked
    (``ls``) whether the target is a leaf so a file delete is judged exactly.
    """

    def __init__(
        self,
        name: str,
        prefixes: Sequence[str] = (),
        globs: Sequence[str] = (),
        operations: Sequence[str] = WRITE_OPERATIONS,
    ) -> None:
        super().__init__(name)
        unknown = set(operations) - set(WRITE_OPERATIONS)
        if unknown:
            raise ValueError(f"deny_write governs {WRITE_OPERATIONS}, not {sorted(unknown)}")
        self.operations = frozenset(operations)
        self._rules: list[tuple[str, FilesystemPermission]] = []
        for prefix in prefixes:
            literal = wc_glob.escape(validate_path(prefix))
            patterns = ["/**"] if literal == "/" else [literal, literal + "/**"]
            self._rules.append((f"prefix:{validate_path(prefix)}", _deny_rule(patterns)))
        for pattern in globs:
            self._rules.append((f"glob:{pattern}", _deny_rule([pattern])))

    def check(self, call: Call, inner: BackendProtocol) -> Refusal | None:
        if call.operation not in self.operations or call.path is None:
            return None
        path = call.path
        if call.operation == "delete":
            leafy = _may_have_descendants(inner, path)
            hits = [label for label, rule in self._rules if delete_blockers([rule], path, leafy)]
        else:
            hits = [label for label, rule in self._rules if rule.matches(path)]
        if not hits:
            return None
        return Refusal(
            policy=self.name,
            rule=hits[0],
            message=(
                f"{call.operation} of {path} refused by policy '{self.name}' "
                f"(protected path rule {', '.join(hits)}). Do not retry; choose another path."
            ),
        )


def _deny_rule(patterns: list[str]) -> FilesystemPermission:
    return FilesystemPermission(operations=["write"], paths=patterns, mode="deny")


def _may_have_descendants(inner: BackendProtocol, path: str) -> bool:
    """False only when the inner backend shows ``path`` is a file, empty or absent."""
    listing = inner.ls(path)
    if listing.ok:
        return bool(listing.entries)
    return listing.code not in ("not_a_directory", "file_not_found")


@dataclass(frozen=True)
class SecretRule:
    name: str
    description: str
    pattern: re.Pattern[str]


def _rule(name: str, description: str, pattern: str) -> SecretRule:
    return SecretRule(name, description, re.compile(pattern))


BUILTIN_SECRET_RULES: dict[str, SecretRule] = {
    rule.name: rule
    for rule in (
        _rule(
            "pem_private_key",
            "PEM private key",
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----",
        ),
        _rule(
            "aws_access_key_id",
            "AWS access key id",
            r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b",
        ),
        _rule(
            "github_token",
            "GitHub token",
            r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
        ),
        _rule("slack_token", "Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
        # key name, '=' or ':', then a literal value of 16+ token characters
        # holding a digit (so `api_key = settings.api_key` is not a secret).
        _rule(
            "generic_api_key",
            "hard-coded API key or token",
            r"(?i)\b[a-z0-9_.-]*(?:api[_-]?key|secret[_-]?key|access[_-]?token|auth[_-]?token"
            r"|client[_-]?secret)[\"']?\s*[:=]\s*[\"']?(?=[A-Za-z0-9_\-+/=.]*\d)"
            r"[A-Za-z0-9_\-+/=.]{16,}",
        ),
    )
}
"""Rules a ``secret_scan`` policy uses when the config names none."""


class SecretScanPolicy(Policy):
    """Refuse content that looks like a secret (write, edit, text upload).

    The refusal names the rule, never the matched text. An edit is judged on
    the file it would produce: a rule refuses when the edit *adds* a match
    (one absent, or less frequent, before), so a secret assembled across the
    edit boundary is caught and an unrelated edit to a file that already
    holds one is not blocked. When the current file cannot be read the
    replacement text alone is scanned.
    """

    def __init__(
        self,
        name: str,
        rules: Sequence[SecretRule],
        operations: Sequence[str] = CONTENT_OPERATIONS,
    ) -> None:
        super().__init__(name)
        if not rules:
            raise ValueError("secret_scan needs at least one rule")
        self.rules = tuple(rules)
        self.operations = frozenset(operations)

    def check(self, call: Call, inner: BackendProtocol) -> Refusal | None:
        if call.operation not in self.operations or call.path is None:
            return None
        if call.operation == "edit":
            rule = self._added_by_edit(call, inner)
        elif isinstance(call.content, str):  # binary uploads carry no content
            rule = self._first_match(call.content)
        else:
            rule = None
        if rule is None:
            return None
        return Refusal(
            policy=self.name,
            rule=rule.name,
            message=(
                f"{call.operation} of {call.path} refused by policy '{self.name}': the content "
                f"matches secret rule '{rule.name}' ({rule.description}). Keep secrets out of "
                "files: reference an environment variable or secret store instead."
            ),
        )

    def _first_match(self, text: str) -> SecretRule | None:
        return next((rule for rule in self.rules if rule.pattern.search(text)), None)

    def _added_by_edit(self, call: Call, inner: BackendProtocol) -> SecretRule | None:
        if not (isinstance(call.path, str) and isinstance(call.old, str)
                and isinstance(call.new, str)):  # fmt: skip
            return None  # malformed call: the inner backend reports it
        (current,) = inner.download([call.path])
        before = decode_text(current.content) if current.content is not None else None
        after = None
        if before is not None:
            after, _ = apply_edit(call.path, before, call.old, call.new, call.replace_all)
        if before is None or after is None:
            return self._first_match(call.new)
        for rule in self.rules:
            added = Counter(rule.pattern.findall(after)) - Counter(rule.pattern.findall(before))
            if added:
                return rule
        return None


class TokenBucket:
    """Thread-safe token bucket; ``clock``/``sleep`` are injectable for tests.

    Tokens may go negative: each caller reserves the next free slot under the
    lock and sleeps outside it, so concurrent callers are spaced in order.
    """

    def __init__(
        self,
        rate: float,
        burst: int = 1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._stamp = clock()
        self._lock = threading.Lock()

    def reserve(self, max_wait: float | None = None) -> float | None:
        """Take a token; return how long to wait before using it.

        None (and nothing taken) when the wait would exceed ``max_wait``.
        """
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            wait = max(0.0, (1.0 - self._tokens) / self.rate)
            if max_wait is not None and wait > max_wait:
                return None
            self._tokens -= 1.0
            return wait

    def acquire(self, max_wait: float | None = None) -> bool:
        """Block until a token is available; False when that would exceed ``max_wait``."""
        wait = self.reserve(max_wait)
        if wait is None:
            return False
        if wait > 0:
            self._sleep(wait)
        return True


class RateLimitPolicy(Policy):
    """Space calls to ``calls_per_second`` with bursts up to ``burst``.

    One token per protocol call (a 10-file upload is one call). Blocks the
    calling thread; with ``max_wait_seconds`` set, a call that would wait
    longer is refused with ``code="timeout"`` instead.
    """

    def __init__(
        self,
        name: str,
        bucket: TokenBucket,
        max_wait_seconds: float | None = None,
        operations: Sequence[str] | None = None,
    ) -> None:
        super().__init__(name)
        self.bucket = bucket
        self.max_wait_seconds = max_wait_seconds
        self.operations = frozenset(operations if operations is not None else PROTOCOL_METHODS)

    def admit(self, operation: str) -> Refusal | None:
        if operation not in self.operations or self.bucket.acquire(self.max_wait_seconds):
            return None
        return Refusal(
            policy=self.name,
            rule="rate_limit",
            code="timeout",
            message=(
                f"{operation} refused by policy '{self.name}': rate limit of "
                f"{self.bucket.rate:g}/s exceeded. Wait and retry."
            ),
        )


class DenyOperationsPolicy(Policy):
    """Refuse whole operations (e.g. ``execute``, ``delete``) and hide the capability."""

    def __init__(self, name: str, operations: Sequence[str]) -> None:
        super().__init__(name)
        self.operations = frozenset(operations)

    def permits(self, operation: str) -> bool:
        return operation not in self.operations

    def admit(self, operation: str) -> Refusal | None:
        if operation not in self.operations:
            return None
        return Refusal(
            policy=self.name,
            rule=f"operation:{operation}",
            message=f"{operation} is disabled by policy '{self.name}'.",
        )


# --------------------------------------------------------------------------- #
# Configuration: named policy instances, built by kind
# --------------------------------------------------------------------------- #


class PolicySpec(BaseModel):
    """Configuration of one policy instance; subclasses register a ``kind``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str

    def build(self, name: str) -> Policy:
        raise NotImplementedError

    @model_validator(mode="after")
    def _buildable(self) -> PolicySpec:
        self.build("<config check>")  # bad globs/regexes fail when the config loads
        return self


POLICY_KINDS: dict[str, type[PolicySpec]] = {}
"""Registry of policy kinds by their ``kind`` string."""

S = TypeVar("S", bound=type[PolicySpec])


def register_policy_kind(spec: S) -> S:
    """Class decorator: make a :class:`PolicySpec` subclass loadable by its ``kind``."""
    spec_type: type[PolicySpec] = spec
    kind = spec_type.model_fields["kind"].default
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"{spec.__name__} needs a default 'kind' string")
    POLICY_KINDS[kind] = spec
    return spec


@register_policy_kind
class DenyWriteSpec(PolicySpec):
    kind: Literal["deny_write"] = "deny_write"
    prefixes: list[str] = Field(default_factory=list)
    globs: list[str] = Field(default_factory=list)
    operations: list[WriteOperation] = Field(default_factory=lambda: list(WRITE_OPERATIONS))

    def build(self, name: str) -> Policy:
        return DenyWritePolicy(name, self.prefixes, self.globs, self.operations)


@register_policy_kind
class SecretScanSpec(PolicySpec):
    kind: Literal["secret_scan"] = "secret_scan"
    rules: list[str] | None = Field(
        default=None, description="Built-in rule names; None means all of them."
    )
    patterns: dict[str, str] = Field(
        default_factory=dict, description="Extra rules: name -> Python regex."
    )
    operations: list[ContentOperation] = Field(default_factory=lambda: list(CONTENT_OPERATIONS))

    def build(self, name: str) -> Policy:
        names = list(BUILTIN_SECRET_RULES) if self.rules is None else self.rules
        unknown = [n for n in names if n not in BUILTIN_SECRET_RULES]
        if unknown:
            known = list(BUILTIN_SECRET_RULES)
            raise ValueError(f"unknown secret rules {unknown}; built-in: {known}")
        rules = [BUILTIN_SECRET_RULES[n] for n in names]
        for rule_name, pattern in self.patterns.items():
            try:
                rules.append(_rule(rule_name, f"custom rule {rule_name}", pattern))
            except re.error as exc:
                raise ValueError(f"secret rule {rule_name!r}: invalid regex: {exc}") from exc
        return SecretScanPolicy(name, rules, self.operations)


@register_policy_kind
class RateLimitSpec(PolicySpec):
    kind: Literal["rate_limit"] = "rate_limit"
    calls_per_second: float = Field(gt=0)
    burst: int = Field(default=1, ge=1)
    max_wait_seconds: float | None = Field(default=None, ge=0)
    operations: list[ProtocolOperation] | None = None

    def build(self, name: str) -> Policy:
        bucket = TokenBucket(self.calls_per_second, self.burst)
        return RateLimitPolicy(name, bucket, self.max_wait_seconds, self.operations)


@register_policy_kind
class DenyOperationsSpec(PolicySpec):
    kind: Literal["deny_operations"] = "deny_operations"
    operations: list[ProtocolOperation] = Field(min_length=1)

    def build(self, name: str) -> Policy:
        return DenyOperationsPolicy(name, self.operations)


_POLICY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class PolicyConfig(BaseModel):
    """The worker's policy configuration: named instances, defaults, audit target.

    Example (JSON)::

        {"policies": {
            "protect-config": {"kind": "deny_write", "prefixes": ["/etc"], "globs": ["/**/*.pem"]},
            "no-secrets": {"kind": "secret_scan"},
            "throttle": {"kind": "rate_limit", "calls_per_second": 20, "burst": 5}},
         "required": ["protect-config"],
         "default": ["no-secrets"],
         "audit_file": "/var/log/filegate/audit.jsonl"}
    """

    model_config = ConfigDict(extra="forbid")

    ENV_FILE: ClassVar[str] = "FILEGATE_POLICY_FILE"
    ENV_JSON: ClassVar[str] = "FILEGATE_POLICY_JSON"

    policies: dict[str, SerializeAsAny[PolicySpec]] = Field(default_factory=dict)
    required: list[str] = Field(
        default_factory=list,
        description="Always applied, first, whatever the workflow names (it cannot opt out).",
    )
    default: list[str] = Field(
        default_factory=list, description="Applied when the workflow names no policies."
    )
    audit_file: Path | None = None

    _built: dict[str, Policy] = PrivateAttr(default_factory=dict)
    _sink: AuditSink | None = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @field_validator("policies", mode="before")
    @classmethod
    def _specs_by_kind(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        specs: dict[str, PolicySpec] = {}
        for name, raw in value.items():
            if not isinstance(name, str) or not _POLICY_NAME.match(name):
                raise ValueError(f"policy name {name!r} must match {_POLICY_NAME.pattern}")
            if isinstance(raw, PolicySpec):
                specs[name] = raw
                continue
            kind = raw.get("kind") if isinstance(raw, Mapping) else None
            spec_type = POLICY_KINDS.get(kind) if isinstance(kind, str) else None
            if spec_type is None:
                raise ValueError(
                    f"policy {name!r}: unknown kind {kind!r}; known kinds: {sorted(POLICY_KINDS)}"
                )
            specs[name] = spec_type.model_validate(raw)
        return specs

    @model_validator(mode="after")
    def _defaults_exist(self) -> PolicyConfig:
        for name in [*self.required, *self.default]:
            self.spec(name)
        return self

    def spec(self, name: str) -> PolicySpec:
        try:
            return self.policies[name]
        except KeyError:
            raise ValueError(
                f"unknown policy {name!r}; configured: {sorted(self.policies)}"
            ) from None

    def policy(self, name: str) -> Policy:
        """The built policy for ``name``, built once per config (shared state)."""
        with self._lock:
            built = self._built.get(name)
            if built is None:
                built = self._built[name] = self.spec(name).build(name)
            return built

    def audit_sink(self) -> AuditSink | None:
        """The configured file sink (opened once), or None."""
        with self._lock:
            if self._sink is None and self.audit_file is not None:
                self._sink = FileAuditSink(self.audit_file)
            return self._sink

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> PolicyConfig:
        return cls.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PolicyConfig:
        """From ``FILEGATE_POLICY_FILE`` (a JSON file) or ``FILEGATE_POLICY_JSON``.

        Neither set means no policies. Both set is an error (which one wins
        would be a guess).
        """
        env = os.environ if environ is None else environ
        file_value = env.get(cls.ENV_FILE, "").strip()
        json_value = env.get(cls.ENV_JSON, "").strip()
        if file_value and json_value:
            raise ValueError(f"set only one of {cls.ENV_FILE} and {cls.ENV_JSON}")
        if file_value:
            return cls.from_file(file_value)
        if json_value:
            return cls.model_validate(json.loads(json_value))
        return cls()


def build_policy_chain(
    backend: BackendProtocol,
    config: PolicyConfig,
    names: Sequence[str] | None = None,
    audit_sink: AuditSink | None = None,
) -> BackendProtocol:
    """Wrap ``backend`` with ``config.required`` plus the named policies.

    ``names`` come from the workflow input; None means ``config.default``.

    ``audit_sink`` overrides the config's ``audit_file`` (plug an S3 sink in
    here). With no policy and no sink the backend is returned unwrapped.
    Raises ValueError for a name the config does not define.
    """
    chosen = config.default if names is None else names
    selected = list(dict.fromkeys([*config.required, *chosen]))
    policies = [config.policy(name) for name in selected]
    sink = audit_sink if audit_sink is not None else config.audit_sink()
    if not policies and sink is None:
        return backend
    return PolicyBackend(backend, policies, audit=sink)
