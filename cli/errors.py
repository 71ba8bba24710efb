"""How the command line fails: one clear line and an exit code."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from filegate.backends.embedded import StartupFailed
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


SERVICE_FAILED = "could not start a local service"


def service_failure(failure: BaseException, scratch: Path | None = None) -> CliError:
    """A local service that did not start, as one line: its cause and its log's path.

    ``scratch``: a directory about to be removed (the demo's); a log inside it
    is copied to the system's temp directory first, so the path the line names
    still exists when the user reads it.
    """
    if (
        isinstance(failure, StartupFailed)
        and scratch is not None
        and failure.log_path.resolve().is_relative_to(scratch.resolve())
    ):
        failure = failure.with_log_in(tempfile.gettempdir())
    return CliError(f"{SERVICE_FAILED}: {failure}")


@asynccontextmanager
async def logs_kept(scratch: Path) -> AsyncIterator[None]:
    """While it lasts, a local service that fails to start with its log in ``scratch``
    (a directory the command removes on its way out) names a kept copy instead."""
    try:
        yield
    except CliError as exc:
        if not isinstance(exc.__cause__, StartupFailed):
            raise
        raise service_failure(exc.__cause__, scratch) from exc.__cause__
