"""``python -m observed_engine ...``, the same as the ``observed-engine`` command."""

import sys

from .cli import main

sys.exit(main())
