"""Filegate command line: workers, scripted runs, the demo, and human approvals.

The parser and the dispatch: each command group lives in its own module
(:mod:`~filegate.cli.workers`, :mod:`~filegate.cli.run`, :mod:`~filegate.cli.submit`,
:mod:`~filegate.cli.artifacts`,
:mod:`~filegate.cli.demo`,
:mod:`~filegate.cli.approvals`, :mod:`~filegate.cli.ui.app`) and adds its parsers
through :data:`COMMANDS`. The web UI's stack is imported only for ``filegate ui``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from temporalio.service import RPCError

from filegate.cli import (
    INTERRUPTED,
    approvals,
    artifacts,
    call,
    cancel,
    demo,
    dev,
    grants,
    mcp,
    run,
    submit,
    workers,
)
from filegate.cli.connection import connection_options
from filegate.cli.errors import CliError, undecodable
from filegate.cli.outage import transient
from filegate.cli.services import STOPPED_BY
from filegate.cli.telemetry import finish as finish_telemetry
from filegate.devstack.servers import LOOPBACK
from filegate.wiring.connection import ConfigError


def _add_ui_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("ui", parents=[common], help="approval web UI (the `ui` extra)")
    parser.add_argument("--host", default=LOOPBACK, help="interface to listen on")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on")
    parser.set_defaults(handler=_ui_command)


async def _ui_command(args: argparse.Namespace) -> int:
    try:  # the web stack is an optional extra: import it only for this command
        from filegate.cli.ui.app import ui_command
    except ImportError as exc:
        raise CliError(f"the web UI needs: pip install 'filegate[ui]' ({exc})", 2) from None
    return await ui_command(args)


COMMANDS: dict[str, Callable[[Any, argparse.ArgumentParser], None]] = {
    "worker": workers.add_parser,
    "run": run.add_parser,
    "submit": submit.add_parser,
    "call": call.add_parser,
    "demo": demo.add_parser,
    "dev": dev.add_parser,
    "approvals": approvals.add_parsers,
    "grants": grants.add_parsers,
    "ui": _add_ui_parser,
    "artifacts": artifacts.add_parsers,
    "cancel": cancel.add_parser,
    "mcp": mcp.add_parser,
}
"""Command group -> function adding its parser(s); extend to add commands."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr (exit 2), as docs/cli.md
    promises, instead of the whole usage block; ``--help`` still prints it all.
    Subcommand parsers inherit the class, so every command answers the same way."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    doc = __doc__ or "Filegate"
    parser = OneLineParser(prog="filegate", description=doc.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    common = connection_options()
    for add in COMMANDS.values():
        add(sub, common)
    return parser


async def _dispatch(args: argparse.Namespace) -> int:
    try:
        code: int = await args.handler(args)
    except ConfigError as exc:  # CliError, or a connection / S3 failure
        print(f"filegate: {exc}", file=sys.stderr, flush=True)
        return exc.code
    except RPCError as exc:  # Temporal went away mid-command: one line, not a traceback
        if not transient(exc):
            raise
        print(f"filegate: Temporal is unreachable ({exc.message}): try again shortly",
              file=sys.stderr, flush=True)  # fmt: skip
        return 1
    except KeyError as exc:  # an answer stored in S3 that this terminal cannot read
        reason = undecodable(exc)
        if reason is None:
            raise
        print(f"filegate: {reason}", file=sys.stderr, flush=True)
        return 1
    return code


S3_RETRY_LOGGER = "urllib3.connectionpool"
"""Where the S3 client's HTTP pool logs each retry it makes."""


def _quiet_s3_retries() -> None:
    """No warning per HTTP retry of the S3 client (``-v`` keeps them).

    While S3 is down urllib3 logs every retry of every request at WARNING, with
    the whole ``Retry(...)`` state: 10 to 66 such lines in one ``run`` through
    a 17 to 300 s outage (issue 49). Filegate's own ``filegate.s3`` logger
    already says once that it waits for S3 and once that S3 answers again, and
    an S3 failure that ends a command is its one-line error; the retries add
    nothing a person can act on. Errors of the pool still show.
    """
    logging.getLogger(S3_RETRY_LOGGER).setLevel(logging.ERROR)


def run_cli(argv: Sequence[str]) -> int:
    """Parse ``argv`` and run the command; returns the exit code (no process exit)."""
    args_list = list(argv)
    # `filegate --role agent` is shorthand for `filegate worker --role agent`.
    if args_list and args_list[0].startswith("--role"):
        args_list.insert(0, "worker")
    args = build_parser().parse_args(args_list)
    quiet = args.command not in ("worker",) and not args.verbose
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING if quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        _quiet_s3_retries()
    try:
        return asyncio.run(_dispatch(args))
    except KeyboardInterrupt:
        print("filegate: interrupted", file=sys.stderr)
        return INTERRUPTED
    except asyncio.CancelledError:
        if not STOPPED_BY:
            raise
        name = signal.Signals(STOPPED_BY[0]).name
        print(f"filegate: interrupted (stopped by {name})", file=sys.stderr)
        return INTERRUPTED  # as Ctrl-C: the command was interrupted, and cleaned up
    finally:
        finish_telemetry()  # spans still buffered: main() ends with os._exit


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point. Called without ``argv`` it ends the process itself with
    ``os._exit``: a connected temporalio client can crash the interpreter at exit
    (sdk-python issue 300), and everything this CLI started is stopped by now."""
    if argv is not None:
        return run_cli(argv)
    code = run_cli(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
