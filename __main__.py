"""``python -m filegate``: the command line (same as the ``filegate`` script)."""

import sys

from filegate.cli.commands import main

sys.exit(main())
