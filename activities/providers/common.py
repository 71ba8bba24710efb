"""Pieces every model provider shares: error mapping, credentials, media fallbacks.

Temporal owns retries (SDK retries are off), so the one thing a provider must get
right is *which* failures are worth retrying. That decision lives here, once.
"""

from __future__ import annotations

import email.utils
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from filegate.activities.providers.profiles import ModelProfile
from filegate.kernel import wire
from filegate.kernel.messages import (
    ContentBlock,
    MediaBlock,
    Message,
    ModelRequest,
    ModelSpec,
    TextBlock,
)

RETRYABLE_TYPE = wire.MODEL_RETRYABLE_ERROR
REQUEST_ERROR_TYPE = wire.MODEL_REQUEST_ERROR

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""Besides every 5xx: timeout, conflict (lock contention) and rate limit."""

MAX_ERROR_TEXT = 500
"""Provider error bodies can be long; the model loop only needs the gist."""

DEFAULT_TIMEOUT_S = 600.0


def retryable_error(
    message: str, *, status: int | None = None, retry_after: float | None = None
) -> ApplicationError:
    """An error Temporal retries, after ``retry_after`` seconds when the server said so."""
    delay = timedelta(seconds=retry_after) if retry_after is not None else None
    return ApplicationError(
        message, {"status": status}, type=RETRYABLE_TYPE, next_retry_delay=delay
    )


def request_error(message: str, *, status: int | None = None) -> ApplicationError:
    """An error retrying cannot fix (bad request, bad key, bad script)."""
    return ApplicationError(
        message, {"status": status}, type=REQUEST_ERROR_TYPE, non_retryable=True
    )


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``retry-after`` (seconds or HTTP date)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = lowered.get(name)
        if raw is None:
            continue
        try:
            seconds = float(raw) / scale
        except ValueError:
            parsed = email.utils.parsedate_tz(raw) if scale == 1.0 else None
            if parsed is None:
                continue
            seconds = email.utils.mktime_tz(parsed) - (time.time() if now is None else now)
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


def _status_error(
    provider: str,
    status: int,
    headers: Mapping[str, str],
    detail: str,
    *,
    secret: str | None = None,
) -> ApplicationError:
    """Map an HTTP error response to a retryable or non-retryable ApplicationError."""
    text = _scrub(detail, secret)[:MAX_ERROR_TEXT]
    message = f"{provider} API returned HTTP {status}: {text}"
    if status in RETRYABLE_STATUSES or status >= 500:
        if status == 429 and "(insufficient_quota)" in detail:
            # Billing, not throttling: waiting will not help.
            return request_error(message, status=status)
        return retryable_error(message, status=status, retry_after=parse_retry_after(headers))
    return request_error(message, status=status)


def _connection_error(
    provider: str, exc: BaseException, secret: str | None = None
) -> ApplicationError:
    """Network failures and client-side timeouts are transient by nature."""
    cause = _scrub(str(exc) or type(exc).__name__, secret)[:MAX_ERROR_TEXT]
    return retryable_error(f"{provider} API unreachable: {cause}")


def _scrub(text: str, secret: str | None) -> str:
    """Keep a key out of error messages even if a server echoes it back."""
    return text.replace(secret, "***") if secret else text


def _require_env(name: str, purpose: str) -> str:
    """Read a credential from the worker's environment or fail without retry."""
    value = os.environ.get(name, "").strip()
    if not value:
        raise request_error(
            f"{purpose} needs an API key: set the {name} environment variable on the "
            "agent worker (any non-empty value for local servers that ignore keys)"
        )
    return value


def _resolve_base_url(configured: str | None, env_name: str) -> str | None:
    """The profile's base URL, then the worker's environment, then the SDK default."""
    return configured or os.environ.get(env_name, "").strip() or None


def sdk_timeout(spec: ModelSpec) -> float:
    """HTTP timeout: ``options["timeout_s"]``, else just inside the activity's start-to-close.

    Timing out in the client first gives a clean retryable error instead of an
    abandoned request still running after Temporal gave up on the attempt.
    """
    if spec.options.get("timeout_s"):
        return float(spec.options["timeout_s"])
    if activity.in_activity():
        limit = activity.info().start_to_close_timeout
        if limit is not None:
            return max(1.0, limit.total_seconds() - 1.0)
    return DEFAULT_TIMEOUT_S


def lazy_import(module: str, extra: str) -> Any:
    """Import an optional SDK, turning absence into a clear non-retryable error."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise request_error(
            f"the '{module}' package is not installed on the agent worker; "
            f"install it with: pip install 'filegate[{extra}]'"
        ) from exc


# --- media the model cannot take -------------------------------------------------


def model_accepts(block: MediaBlock, accepts: list[str]) -> bool:
    """Whether ModelSpec.accepts covers the block; video frames that are stills count as images."""
    if block.type in accepts:
        return True
    return block.type == "video" and block.mime_type.startswith("image/") and "image" in accepts


def placeholder(block: MediaBlock) -> TextBlock:
    """A short stand-in that tells the model something was there and where to find it."""
    where = f" {block.path}" if block.path else ""
    return TextBlock(
        text=f"[{block.type}{where} ({block.mime_type}) omitted: this model cannot take "
        f"{block.type} input]"
    )


def _downgrade_blocks(
    content: str | list[ContentBlock], can_send: Callable[[MediaBlock], bool]
) -> str | list[ContentBlock]:
    """Replace every media block ``can_send`` rejects by its placeholder."""
    if isinstance(content, str):
        return content
    return [b if isinstance(b, TextBlock) or can_send(b) else placeholder(b) for b in content]


def downgrade_messages(
    messages: list[Message], can_send: Callable[[MediaBlock], bool]
) -> list[Message]:
    """Copy of ``messages`` with unsendable media replaced; the originals are untouched."""
    out: list[Message] = []
    for m in messages:
        new = _downgrade_blocks(m.content, can_send)
        out.append(m if new is m.content else m.model_copy(update={"content": new}))
    return out


@dataclass(frozen=True)
class SdkCall:
    """What an SDK provider resolves before building its request."""

    api_key: str
    base_url: str | None
    sdk: Any
    """The imported SDK module."""
    messages: list[Message]
    """The transcript with media the model cannot take replaced by placeholders."""


def prepare_sdk_call(
    request: ModelRequest,
    profile: ModelProfile,
    provider: str,
    key_env: str,
    base_url_env: str,
    module: str,
    encodable: Callable[[MediaBlock], bool],
) -> SdkCall:
    """The shared preamble of an SDK provider: credential, endpoint, SDK, sendable media.

    Key variable and endpoint come from the worker's ``profile`` only (its
    ``api_key_env`` overrides ``key_env``), never from the request; a block is sent
    only when the spec accepts its type and the provider's wire format can
    ``encodable`` it.
    """
    spec = request.model
    key_name = profile.api_key_env or key_env
    api_key = _require_env(key_name, f"the {provider} model provider")
    base_url = _resolve_base_url(profile.base_url, base_url_env)
    sdk = lazy_import(module, module)

    def can_send(block: MediaBlock) -> bool:
        return model_accepts(block, list(spec.accepts)) and encodable(block)

    return SdkCall(api_key, base_url, sdk, downgrade_messages(request.messages, can_send))


def _error_detail(exc: Any) -> str:
    """``message (code)`` from the body both APIs use: ``{"error": {"message", "code"|"type"}}``."""
    body = getattr(exc, "body", None)
    error = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        code = error.get("code") or error.get("type")
        return f"{error['message']} ({code})" if code else error["message"]
    return str(getattr(exc, "message", exc))


def _sdk_error(provider: str, exc: Exception, sdk: Any, secret: str | None) -> Exception:
    """Translate an ``openai``/``anthropic`` SDK exception (same shape in both SDKs).

    Anything unrecognised is returned unchanged: Temporal's default policy retries it.
    A body nested past Python's JSON parser (``RecursionError``) is not retried: the
    same answer would fail the same way, and its calls cannot be told apart to
    answer them one by one.
    """
    if isinstance(exc, RecursionError):
        return request_error(f"{provider} API response nests too deeply to parse")
    if isinstance(exc, sdk.APIStatusError):
        return _status_error(
            provider, exc.status_code, exc.response.headers, _error_detail(exc), secret=secret
        )
    if isinstance(exc, sdk.APIConnectionError):
        return _connection_error(provider, exc, secret)
    return exc


@contextmanager
def sdk_errors(provider: str, sdk: Any, secret: str | None) -> Iterator[None]:
    """Run an SDK call, re-raising its HTTP/connection failures as ApplicationErrors."""
    try:
        yield
    except Exception as exc:
        mapped = _sdk_error(provider, exc, sdk, secret)
        if mapped is exc:
            raise
        raise mapped from None
