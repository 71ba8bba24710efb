"""Compact step payloads: JSON without fields at their defaults, decoding to the same value."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel
from temporalio.contrib.pydantic import pydantic_data_converter

from filegate.kernel.messages import Message, ModelResponse
from filegate.kernel.permissions import FilesystemPermission
from filegate.kernel.tool_types import ToolOutcome, ToolRequest
from filegate.kernel.transcripts import ModelTurnResult


def _request(**extra: object) -> ToolRequest:
    return ToolRequest.model_validate(
        {"tool": "read_file", "backend": "fs", "args": {"file_path": "/a"},
         "tool_call_id": "1:0:r", "virtual_path": "/a", **extra}
    )  # fmt: skip


CASES: list[BaseModel] = [
    _request(),
    _request(
        permissions=[FilesystemPermission(operations=["read"], paths=["/x/**"], mode="deny")],
        policies=[],
        approved=True,
        approved_by="ana via ui",
        want_raw=True,
        max_execute_timeout=5.0,
        route_prefix="/docs/",
    ),
    ToolOutcome(content="ok"),
    ToolOutcome(content="bad", status="error"),
    ModelTurnResult(response=ModelResponse(message=Message(role="assistant", content="hi"))),
]


@pytest.mark.parametrize("value", CASES, ids=lambda v: type(v).__name__)
def test_payload_round_trips_through_the_data_converter(value: BaseModel) -> None:
    converter = pydantic_data_converter.payload_converter
    [payload] = converter.to_payloads([value])
    [back] = converter.from_payloads([payload], [type(value)])
    assert back == value
    # Every key left out is a field at its default; every other field is there.
    written = json.loads(payload.data)
    for name, field in type(value).model_fields.items():
        at_default = not field.is_required() and getattr(value, name) == field.get_default(
            call_default_factory=True
        )
        assert (name not in written) == at_default, name


def test_defaults_are_left_out_of_a_plain_request() -> None:
    written = json.loads(_request().model_dump_json())
    assert written == {
        "tool": "read_file", "backend": "fs", "args": {"file_path": "/a"},
        "tool_call_id": "1:0:r", "virtual_path": "/a",
    }  # fmt: skip
    # A value equal to the default is left out even when given explicitly ...
    assert "policies" not in json.loads(_request(policies=None).model_dump_json())
    # ... but an empty list is not None: "no policies" differs from "the worker's defaults".
    assert json.loads(_request(policies=[]).model_dump_json())["policies"] == []


def test_a_payload_written_in_full_decodes_the_same() -> None:
    """An older worker's payload (every field written) reads as today's."""
    value = _request()
    full = json.dumps(value.model_dump(mode="python"))
    assert ToolRequest.model_validate_json(full) == value
    assert set(value.model_dump()) == set(ToolRequest.model_fields)  # python mode keeps all
