"""Moved: the test engines are in support/engines.py (the 0.19.0 host pieces in support/host.py,
bare-vs-observed comparison in support/twins.py). Only these names are re-exported, for the
importers not moved yet (tests/test_hardening.py and the script it runs)."""

from support.engines import KwargsEngine, NarrowEngine  # noqa: F401
from support.engines import agent_transcript as transcript  # noqa: F401
