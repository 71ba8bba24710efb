"""``python -m filegate``: the command line (same as the ``filegate`` script)."""

import sys

from filegate.cli import main

sys.exit(main())
