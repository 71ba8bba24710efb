"""Model providers behind one interface: ``async complete(ModelRequest) -> ModelResponse``.

Provider modules import their SDK lazily, so importing this package never needs
``openai`` or ``anthropic`` installed.
"""

from activities.providers.anthropic_messages import AnthropicMessagesProvider
from activities.providers.common import REQUEST_ERROR_TYPE, RETRYABLE_TYPE
from activities.providers.openai_chat import OpenAIChatProvider
from activities.providers.scripted import ScriptedProvider

__all__ = [
    "REQUEST_ERROR_TYPE",
    "RETRYABLE_TYPE",
    "AnthropicMessagesProvider",
    "OpenAIChatProvider",
    "ScriptedProvider",
]
