"""The model-call activity: one activity name, a provider chosen by ModelSpec.provider.

Temporal owns retries. Providers raise ``ModelRetryable`` ApplicationErrors for
rate limits, 5xx and network failures (with ``next_retry_delay`` when the server
sent retry-after) and non-retryable ``ModelRequestError`` for everything a retry
cannot fix. API keys come only from the worker's environment.
"""

from __future__ import annotations

from typing import Protocol

from temporalio import activity

from activities.messages import ModelRequest, ModelResponse
from activities.providers import AnthropicMessagesProvider, OpenAIChatProvider, ScriptedProvider
from activities.providers.common import request_error


class ModelProvider(Protocol):
    async def complete(self, request: ModelRequest) -> ModelResponse: ...


PROVIDERS: dict[str, ModelProvider] = {
    "scripted": ScriptedProvider(),
    "openai": OpenAIChatProvider(),
    "anthropic": AnthropicMessagesProvider(),
}
"""Providers are stateless (clients are per call), so one instance each is enough."""


def register_provider(name: str, provider: ModelProvider) -> None:
    """Plug in another provider (a worker calls this before it starts polling)."""
    PROVIDERS[name] = provider


def get_provider(name: str) -> ModelProvider:
    try:
        return PROVIDERS[name]
    except KeyError:
        known = ", ".join(sorted(PROVIDERS))
        raise request_error(f"unknown model provider {name!r}; known: {known}") from None


@activity.defn(name="filegate.model")
async def call_model(request: ModelRequest) -> ModelResponse:
    """Ask the configured model for the next assistant message."""
    return await get_provider(request.model.provider).complete(request)
