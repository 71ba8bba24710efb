"""``filegate dev``: keep the embedded dev stack up until Ctrl-C.

Leases the state dir's embedded Temporal (127.0.0.1:7233) and S3 like ``run``
does (:func:`filegate.cli.services.local_services`), prints where they are and
the variables that point other processes at them, and holds them: every
``filegate run`` in between reuses them, and the servers stop when the last
user (this command or a run still going) is done.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from filegate.cli.connection import target_from
from filegate.cli.progress import say
from filegate.cli.services import local_services


async def dev_command(args: argparse.Namespace) -> int:
    target = target_from(args)
    state_dir = target.settings.state_dir.resolve()
    async with local_services(target, state_dir, reuse_default=True) as services:
        for line in services.notes:
            say(line)
        say(f"state: {state_dir} (stack-*.json)")
        say("for other processes (decisions of large pending calls need the S3 settings):")
        say(f"  export TEMPORAL_ADDRESS={services.temporal_address}")
        s3 = services.s3
        say(f"  export FILEGATE_S3_ENDPOINT={s3.endpoint}")
        say(f"  export FILEGATE_S3_ACCESS_KEY={s3.access_key}")
        say(f"  export FILEGATE_S3_SECRET_KEY={s3.secret_key}")
        say("Ctrl-C stops the servers (once no run uses them any more)")
        await asyncio.Event().wait()
    return 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "dev", parents=[common], help="keep the embedded Temporal and S3 up until Ctrl-C"
    )
    parser.set_defaults(handler=dev_command)
