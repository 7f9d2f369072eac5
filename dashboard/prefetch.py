"""Background warm-up of the tabs that are not open (the store source only)."""

from __future__ import annotations

import threading
from typing import Optional

from .options import SQLITE
from .sources import Filters, Source

_PREFETCHED: dict = {}
_LOCK = threading.Lock()
METHODS = ("compressions", "incident_counts", "selections", "latency")


def forget() -> None:
    """Forget which ranges were warmed (the benchmark starts every run cold)."""
    with _LOCK:
        _PREFETCHED.clear()


def prefetch(src: Source, f: Filters) -> Optional[threading.Thread]:
    """Warm the source's own caches for the other tabs, once per source and range, on a
    background thread: the first click on a tab then only queries the newest buckets.
    (The store source keeps closed buckets in memory; Prometheus needs no warming.)"""
    if src.kind != SQLITE:
        return None
    key = (src.cache_key(), f.span // f.step, f.step, f.engines)
    with _LOCK:
        if key in _PREFETCHED:
            return None
        _PREFETCHED[key] = True
        if len(_PREFETCHED) > 64:
            _PREFETCHED.clear()

    def work():
        for method in METHODS:
            try:
                getattr(src, method)(f)
            except Exception:            # a prefetch failure shows up when the tab really runs
                return

    t = threading.Thread(target=work, name="dashboard-prefetch", daemon=True)
    t.start()
    return t
