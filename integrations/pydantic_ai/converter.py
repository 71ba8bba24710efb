"""One payload converter for a client that carries both Filegate's and Pydantic AI's plugins.

Each plugin wants its own payload converter class, and each keeps another's
if it is a subclass of the pydantic converter, so with both plugins on one
client the order decides which survives:

- Filegate's (:class:`~filegate.activities.history.InlineMarkingPayloadConverter`,
  with an S3 store) marks values that must stay inline (approval listings and
  statuses that the approval UI and the command line read) for the S3 codec;
- Pydantic AI's (``PydanticAIPayloadConverter``) memoizes type adapters and
  decodes with its journal context, which its recorded messages rely on.

Losing either would be a silent change. :class:`FilegatePydanticAIPayloadConverter`
is both (cooperative inheritance: Filegate's marks on top of Pydantic AI's
encoding). Give :func:`pydantic_ai_data_converter` to ``Client.connect``:
both plugins keep it, and ``FilegatePlugin`` adds its S3 codec when it has a
store. This is the same move ``filegate.integrations.openai_agents.agents_data_converter``
makes for the OpenAI Agents plugin.
"""

from __future__ import annotations

import dataclasses

from pydantic_ai.durable_exec.temporal import PydanticAIPayloadConverter
from temporalio.converter import DataConverter

from filegate.activities.history import InlineMarkingPayloadConverter


class FilegatePydanticAIPayloadConverter(InlineMarkingPayloadConverter, PydanticAIPayloadConverter):
    """Pydantic AI's payload converter that also marks Filegate's inline-only values."""


def pydantic_ai_data_converter(converter: DataConverter | None = None) -> DataConverter:
    """``converter`` (default: the SDK's) with the merged payload converter, its codec kept."""
    base = converter or DataConverter.default
    return dataclasses.replace(base, payload_converter_class=FilegatePydanticAIPayloadConverter)


__all__ = ["FilegatePydanticAIPayloadConverter", "pydantic_ai_data_converter"]
