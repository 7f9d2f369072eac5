"""``python -m observed_engine.cli ...`` (docs/use-with-hermes.md), the same as ``observed-engine ...``."""

import sys

from . import main

sys.exit(main())
