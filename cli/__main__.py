"""``python -m filegate.cli``: the command line (same as the ``filegate`` script)."""

import sys

from filegate.cli.commands import main

sys.exit(main())
