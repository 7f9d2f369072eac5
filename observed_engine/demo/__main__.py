"""``python -m observed_engine.demo``: the demo (what ``observed-engine demo`` runs)."""

import sys

from .run import main

sys.exit(main())
