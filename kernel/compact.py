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


class DefaultsOmitted(BaseModel):
    """A model whose JSON holds only the fields that differ from their defaults."""

    @model_serializer(mode="wrap")
    def _without_defaults(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> Any:
        data = handler(self)
        if not info.mode_is_json() or not isinstance(data, dict):
            return data
        for name, field in type(self).model_fields.items():
            if name not in data or field.is_required():
                continue
            if getattr(self, name) == field.get_default(call_default_factory=True):
                del data[name]
        return data
