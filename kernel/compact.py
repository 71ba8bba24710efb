"""Payload models whose JSON leaves out the fields at their defaults.

Every tool call and every model turn put one such payload into workflow
history (the activity's input, its result, the local activity's marker), and a
run keeps its whole history. Fields at their defaults (no rules, no policies,
not approved, no media) carried about a hundred bytes per step that the reader
restores anyway: every omitted field has a default, so an omitted key decodes
to the same value, and a payload written in full (an older worker's) decodes
as before. Only JSON is compacted (``model_dump(mode="json")``,
``model_dump_json``, the data converter); ``model_dump()`` keeps every field.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, SerializationInfo, SerializerFunctionWrapHandler, model_serializer

_DEFAULTS: dict[type[BaseModel], tuple[tuple[str, Any], ...]] = {}
"""Per model class: its optional fields and their defaults, worked out once (pydantic's
``get_default`` inspects the factory's signature on every call)."""


def _optional_defaults(cls: type[BaseModel]) -> tuple[tuple[str, Any], ...]:
    found = _DEFAULTS.get(cls)
    if found is None:
        found = tuple(
            (name, field.get_default(call_default_factory=True))
            for name, field in cls.model_fields.items()
            if not field.is_required()
        )
        _DEFAULTS[cls] = found
    return found


class DefaultsOmitted(BaseModel):
    """A model whose JSON holds only the fields that differ from their defaults."""

    @model_serializer(mode="wrap")
    def _without_defaults(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> Any:
        data = handler(self)
        if not info.mode_is_json() or not isinstance(data, dict):
            return data
        for name, default in _optional_defaults(type(self)):
            # The cached default is only compared, never handed out or changed.
            if name in data and getattr(self, name) == default:
                del data[name]
        return data
