"""Moved: the test engines are in support/engines.py (the 0.19.0 host pieces in support/host.py,
bare-vs-observed comparison in support/twins.py). No test imports this module any more; it stays,
re-exporting the names the last importers used, until docs/design (which names tests/engines.py)
and any work in flight have moved too."""

from support.engines import KwargsEngine, NarrowEngine  # noqa: F401
from support.engines import agent_transcript as transcript  # noqa: F401
