"""How the command line fails: one clear line and an exit code."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from filegate.backends.settings import S3Settings
from filegate.devstack.servers import StartupFailed
from filegate.wiring.connection import ConfigError


class CliError(ConfigError):
    """A failure the CLI reports as one clear line and a non-zero exit code.

    A subclass of the worker layer's :class:`~filegate.wiring.connection.ConfigError`
    (connection and S3 failures), so the CLI catches both as ``ConfigError``.
    """


def port_in_use(host: str, port: int, flag: str) -> CliError:
    """The one line every serving command gives for a port another process holds."""
    return CliError(f"{host}:{port} is already in use; pick another {flag}", 2)


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


CODEC_ENCODING_NAME = "filegate/artifact-ref"
"""The payload encoding of a value the S3 codec stored by reference (activities/history.py)."""

S3_VARIABLES = tuple(S3Settings.env_name(f) for f in ("endpoint", "access_key", "secret_key"))
"""What a terminal exports to read what a run stored in S3 (`filegate run` prints them)."""

NEEDS_S3 = (
    "needs the run's S3 settings: export "
    + ", ".join(S3_VARIABLES)
    + " as `filegate run` (or `filegate dev`) prints them, then try again"
)


def undecodable(exc: BaseException) -> str | None:
    """Why an answer could not be read, when it is a value stored in S3 by reference
    that this terminal cannot fetch; else None.

    Without the codec the SDK raises ``KeyError: 'Unknown payload encoding
    filegate/artifact-ref'`` (a run whose worker stores large answers in S3,
    read from a terminal without the run's S3 settings): one line with the fix,
    never a traceback, and never mistaken for "not a Filegate workflow".
    """
    seen: BaseException | None = exc
    while seen is not None:
        if CODEC_ENCODING_NAME in str(seen):
            return (
                f"its answer is stored in S3 by reference and this terminal cannot read it: "
                f"{NEEDS_S3}"
            )
        seen = seen.__cause__ or seen.__context__
    return None


def unknown_query(exc: BaseException) -> bool:
    """True when a query failed because the workflow has no handler of that name (an
    older worker, or not a Filegate workflow), not because its handler failed."""
    text = str(exc).lower()
    # The Python SDK: "Query handler for 'pending_approvals' expected but not found, ..."
    return ("query" in text and "not found" in text) or "unknown query" in text
