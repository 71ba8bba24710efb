"""``filegate dev``: keep the embedded dev stack up until Ctrl-C, with both web UIs.

Leases the state dir's embedded Temporal (127.0.0.1:7233) and S3 like ``run``
does (:func:`filegate.cli.services.local_services`), serves the approval UI
(behind its guard, like ``filegate ui``) and, when this command starts
Temporal, Temporal's Web UI, prints where everything is and the variables that
point other processes at it, and holds it: every ``filegate run`` in between
reuses the servers, and they stop when the last user (this command or a run
still going) is done.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from typing import Any

from filegate.cli.connection import target_from
from filegate.cli.errors import CliError, port_in_use
from filegate.cli.progress import say
from filegate.cli.services import local_services, s3_exports, services_client
from filegate.devstack.servers import LOOPBACK, is_listening, reserve_ports
from filegate.devstack.stack import reap_orphans

DEFAULT_UI_PORT = 8080
DEFAULT_WEB_UI_PORT = 8233
"""Temporal's own default Web UI port."""


async def _dev_command(args: argparse.Namespace) -> int:
    target = target_from(args)
    state_dir = target.settings.journal.state_dir.resolve()
    if not target.configured:
        # A `dev` (or `run`) killed with -9 left its servers holding their ports.
        for line in reap_orphans(state_dir):
            say(line)
    for port, what in ((args.ui_port, "--ui-port"), (args.web_ui_port, "--web-ui-port")):
        if port and is_listening(LOOPBACK, port):
            raise port_in_use(LOOPBACK, port, what)
    reserve_ports(args.ui_port, args.web_ui_port)  # the servers must not take them meanwhile
    web_ui_port = args.web_ui_port or None
    async with local_services(
        target, state_dir, reuse_default=True, web_ui_port=web_ui_port
    ) as services:
        for line in services.notes:
            say(line)
        if web_ui_port and any("started" in note for note in services.notes):
            say(f"Temporal Web UI at http://{LOOPBACK}:{web_ui_port}/")
        say(f"state: {state_dir} (stack-*.json)")
        say("for other processes (decisions of large pending calls need the S3 settings):")
        say(f"  export TEMPORAL_ADDRESS={services.temporal_address}")
        for line in s3_exports(services.s3):
            say(f"  export {line}")
        web_url = f"http://{LOOPBACK}:{web_ui_port}" if web_ui_port else None
        ui = await _approval_ui(target, services, args.ui_port, web_url) if args.ui_port else None
        say("Ctrl-C stops the servers (once no run uses them any more)")
        try:
            await asyncio.Event().wait()
        finally:
            if ui is not None:
                ui.should_exit = True
    return 0


async def _approval_ui(target: Any, services: Any, port: int, web_url: str | None) -> Any:
    """The approval UI on loopback, served on this event loop; prints its login URL.

    ``web_url``: the Temporal Web UI this command started, which cards link to."""
    from filegate.cli.ui.app import create_app, login_url, uvicorn_server  # the ui extra
    from filegate.cli.ui.web_guard import UiAccess

    try:
        access = UiAccess.for_address(LOOPBACK)  # FILEGATE_UI_* (docs/configuration.md)
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    client, _ = await services_client(target, services)

    async def reuse() -> Any:
        return client

    app = create_app(reuse, access, temporal_web_url=web_url)
    server = uvicorn_server(app, LOOPBACK, port)
    # The stack's own SIGTERM/SIGINT handling must stay in charge (it releases
    # the servers); uvicorn would take the signals for itself.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    serving = asyncio.get_running_loop().create_task(server.serve())
    while not server.started:  # print the URL only once it answers
        if serving.done():
            raise CliError(f"the approval UI could not start on {LOOPBACK}:{port}", 2)
        await asyncio.sleep(0.05)
    say(f"approval UI at {login_url(LOOPBACK, port, access)}")
    return server


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "dev", parents=[common], help="keep the embedded Temporal and S3 up until Ctrl-C"
    )
    parser.add_argument(
        "--ui-port",
        type=int,
        default=DEFAULT_UI_PORT,
        help=f"approval UI port on {LOOPBACK} (default {DEFAULT_UI_PORT}; 0: no UI)",
    )
    parser.add_argument(
        "--web-ui-port",
        type=int,
        default=DEFAULT_WEB_UI_PORT,
        help=f"Temporal Web UI port if dev starts Temporal (default {DEFAULT_WEB_UI_PORT}; 0: off)",
    )
    parser.set_defaults(handler=_dev_command)
