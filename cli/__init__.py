"""The ``filegate`` command line: workers, scripted runs, the demo, human approvals.

``filegate worker`` runs one worker per role and backend (:mod:`filegate.worker`
builds them); ``filegate run`` and ``filegate demo`` start for their own
duration whatever is missing (embedded Temporal and S3 servers, an agent
worker and a tools worker) and stop what they started; ``filegate approvals /
approve / reject / respond / edit / status`` and ``filegate ui`` are plain
clients of any Temporal address. Every process shares one data converter
(:func:`filegate.worker.connect`).

The top layer: nothing else in Filegate imports it. Names load lazily.
"""

from typing import TYPE_CHECKING

from filegate._lazy import attach

if TYPE_CHECKING:
    from filegate.cli.commands import build_parser, main, run_cli
    from filegate.cli.errors import CliError

__getattr__, __dir__, __all__ = attach(
    __name__,
    {
        ".errors": ["CliError"],
        ".commands": ["build_parser", "main", "run_cli"],
    },
)
