"""The ``filegate`` command line: workers, scripted runs, the demo, human approvals.

``filegate worker`` runs one worker per role and backend (:mod:`filegate.worker`
builds them); ``filegate run`` and ``filegate demo`` start for their own
duration whatever is missing (embedded Temporal and S3 servers, an agent
worker and a tools worker) and stop what they started; ``filegate approvals /
approve / reject / respond / edit / status`` and ``filegate ui`` are plain
clients of any Temporal address. Every process shares one data converter
(:func:`filegate.plugin.connect`).

The top layer: nothing else in Filegate imports it. Names load lazily.
"""

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from filegate._lazy import attach

if TYPE_CHECKING:
    from filegate.cli.commands import build_parser, run_cli
    from filegate.cli.errors import CliError

INTERRUPTED = 130
"""The exit code of a command stopped by Ctrl-C (128 + SIGINT), as a shell's."""


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point (the ``filegate`` script and ``python -m filegate``).

    Why here and not in :mod:`.commands`: importing the commands takes most of a
    second (Temporal's client, pydantic, the S3 client), and a Ctrl-C in that
    time is an interrupted command like any other (one line, exit 130), not a
    traceback out of whichever import it landed in."""
    try:
        from filegate.cli.commands import main as run

        return run(argv)
    except KeyboardInterrupt:
        print("filegate: interrupted", file=sys.stderr, flush=True)
        if argv is not None:
            return INTERRUPTED
        sys.exit(INTERRUPTED)


__getattr__, __dir__, __all__ = attach(__name__, __file__)
__all__ = [*__all__, "INTERRUPTED", "main"]
