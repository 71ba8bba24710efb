"""How the command line fails: one clear line and an exit code."""

from __future__ import annotations

from filegate.worker import ConfigError


class CliError(ConfigError):
    """A failure the CLI reports as one clear line and a non-zero exit code.

    A subclass of the worker layer's :class:`~filegate.worker.ConfigError`
    (connection and S3 failures), so the CLI catches both as ``ConfigError``.
    """


def failure_text(exc: BaseException) -> str:
    """The innermost cause's message: what actually went wrong."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return getattr(exc, "message", None) or str(exc)
