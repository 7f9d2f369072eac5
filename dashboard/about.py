"""The sidebar's about line: this package's version and the Hermes this Python runs, found as
``observed-engine doctor`` and ``--version`` find it (the host adapter's installation lookup: by
the importable ``ContextEngine``, under whatever distribution name installed it, or a source
checkout), and whether CI verifies it."""

from __future__ import annotations

import functools
import sys

from observed_engine import host
from observed_engine.version import __version__, hermes_verified


@functools.lru_cache(maxsize=1)
def about_line() -> str:
    """One line of plain text (the page shows it as a literal); looked up once per dashboard
    process (Hermes does not change under it). No Streamlit or pandas here: it runs anywhere."""
    found = host.hermes_installation()
    if found is None:
        hermes = f"Hermes: not importable from {sys.executable}"
    elif hermes_verified(found.distribution, found.version):
        hermes = f"Hermes: {found.describe()} (verified)"
    else:
        hermes = f"Hermes: {found.describe()} (not verified; `observed-engine doctor` lists what is)"
    return f"observed-engine {__version__} · {hermes}"
