"""``python -m loopwatch.dashboard.cli``: the ``loopwatch`` command."""

import sys

from . import main

sys.exit(main())
