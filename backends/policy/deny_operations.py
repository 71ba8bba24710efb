"""The ``deny_operations`` policy kind: refuse whole operations, hide the capability."""

from __future__ import annotations

from collections.abc import Sequence

from filegate.backends.policy.base import Policy, Refusal, names_operation


class DenyOperationsPolicy(Policy):
    """Refuse whole operations (e.g. ``execute``, ``delete``) and hide the capability."""

    def __init__(self, name: str, operations: Sequence[str]) -> None:
        super().__init__(name)
        self.operations = frozenset(operations)

    def permits(self, operation: str) -> bool:
        return not names_operation(self.operations, operation)

    def admit(self, operation: str) -> Refusal | None:
        if not names_operation(self.operations, operation):
            return None
        return Refusal(
            policy=self.name,
            rule=f"operation:{operation}",
            message=f"{operation} is disabled by policy '{self.name}'.",
        )
