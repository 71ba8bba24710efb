"""Model providers behind one interface: ``async complete(ModelRequest) -> ModelResponse``.

Provider modules import their SDK lazily, so importing this package never needs
``openai`` or ``anthropic`` installed.
"""

from typing import TYPE_CHECKING

from filegate._lazy import attach

if TYPE_CHECKING:
    from .anthropic_messages import (
        AnthropicMessagesProvider,
    )
    from .common import (
        REQUEST_ERROR_TYPE,
        RETRYABLE_TYPE,
    )
    from .openai_chat import (
        OpenAIChatProvider,
    )
    from .profiles import (
        ModelProfile,
        ModelProfiles,
    )
    from .scripted import (
        ScriptedProvider,
    )

__getattr__, __dir__, __all__ = attach(__name__, __file__)
