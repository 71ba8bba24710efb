"""Policy configuration: named policy instances, built by kind, and the chain builder.

A :class:`PolicyConfig` (JSON file or env) holds *named* policy instances;
the workflow input only names which ones apply, and
:func:`build_policy_chain` wraps a backend with them. Built policies are
cached on the config object so stateful ones (a token bucket) are shared by
every backend the worker wraps with that name. A new kind registers its spec
with :func:`register_policy_kind`.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializeAsAny,
    field_validator,
    model_validator,
)

from filegate.backends.audit import (
    AuditSink,
    FileAuditSink,
)
from filegate.backends.policy.base import (
    CONTENT_OPERATIONS,
    WRITE_OPERATIONS,
    ContentOperation,
    Policy,
    ProtocolOperation,
    WriteOperation,
)
from filegate.backends.policy.chain import PolicyBackend
from filegate.backends.policy.deny_operations import DenyOperationsPolicy
from filegate.backends.policy.deny_write import DenyWritePolicy
from filegate.backends.policy.rate_limit import RateLimitPolicy, TokenBucket
from filegate.backends.policy.secrets import BUILTIN_SECRET_RULES, SecretScanPolicy, secret_rule
from filegate.kernel.protocol import (
    BackendProtocol,
)


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
                rules.append(secret_rule(rule_name, f"custom rule {rule_name}", pattern))
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
