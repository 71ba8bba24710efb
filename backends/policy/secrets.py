"""The ``secret_scan`` policy kind: refuse content that looks like a secret.

Holds the built-in rules (:data:`BUILTIN_SECRET_RULES`) and the scanner.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from filegate.backends.policy.base import CONTENT_OPERATIONS, Call, Policy, Refusal, names_operation
from filegate.kernel.protocol import (
    BackendProtocol,
)
from filegate.kernel.textops import apply_edit, decode_text


@dataclass(frozen=True)
class SecretRule:
    name: str
    description: str
    pattern: re.Pattern[str]


def secret_rule(name: str, description: str, pattern: str) -> SecretRule:
    return SecretRule(name, description, re.compile(pattern))


BUILTIN_SECRET_RULES: dict[str, SecretRule] = {
    rule.name: rule
    for rule in (
        secret_rule(
            "pem_private_key",
            "PEM private key",
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----",
        ),
        secret_rule(
            "aws_access_key_id",
            "AWS access key id",
            r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b",
        ),
        secret_rule(
            "github_token",
            "GitHub token",
            r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
        ),
        secret_rule("slack_token", "Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
        # key name, '=' or ':', then a literal value of 16+ token characters
        # holding a digit (so `api_key = settings.api_key` is not a secret).
        secret_rule(
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
        if not names_operation(self.operations, call.operation) or call.path is None:
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
                f"{call.operation} refused by policy '{self.name}': the content "
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
