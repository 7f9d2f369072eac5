"""Scratch directories for the benchmarks: made under $TMPDIR, removed when the process that made
them exits, so a run leaves nothing behind (they used to pile up: 1.5 GB over a few days of runs).

A forked or ``os._exit``-ing child removes nothing: what it needs is made by its parent. Set
``OBSERVED_BENCH_KEEP=1`` to keep them (to look at a run's store or Hermes home afterwards).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

_made: list = []
_owner = os.getpid()


def kept() -> bool:
    """Does this run keep its scratch directories (``OBSERVED_BENCH_KEEP=1``)?"""
    return os.environ.get("OBSERVED_BENCH_KEEP") == "1"


def scratch_dir(prefix: str) -> str:
    path = tempfile.mkdtemp(prefix=prefix)
    _made.append(path)
    return path


@atexit.register
def _remove() -> None:
    if os.getpid() != _owner or kept():
        return
    for path in _made:
        shutil.rmtree(path, ignore_errors=True)
