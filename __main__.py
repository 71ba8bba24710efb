"""``python -m filegate``: the command line (same as the ``filegate`` script)."""

import sys

from filegate.worker import main

sys.exit(main())
