"""What every tab gets: :class:`Ctx` (the source, the filters, the page state) and its queries.

Data comes only through ``Ctx.q`` (``st.cache_data`` keyed by source, method and filters; the
filters end on the refresh tick, so every browser session viewing the same range shares one
query per refresh).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple

import pandas as pd
import streamlit as st

from .format import literal, plural
from .sources import CAP_EXACT, Filters, Source, SourceError, Status, skipped

_STATUS: Dict[str, Tuple[int, Status]] = {}
_STATUS_LOCK = threading.Lock()


def status_of(src: Source) -> Status:
    """The source's status, shared by the sidebar, the panel and every session within one second
    (one COUNT(*)). Only a good status is reused: a store that appears is found on the next run."""
    key, second = src.cache_key(), int(time.time())
    with _STATUS_LOCK:
        hit = _STATUS.get(key)
    if hit is not None and hit[0] == second:
        return hit[1]
    try:
        status = src.status()
    except SourceError as exc:
        return Status("error", str(exc))
    if status.ok:
        with _STATUS_LOCK:
            if len(_STATUS) > 64:
                _STATUS.clear()
            _STATUS[key] = (second, status)
    return status


@st.cache_data(ttl=600, max_entries=512, show_spinner=False)
def cached(source_key: str, method: str, fkey: tuple, args: tuple, _src: Source, _f: Filters):  # noqa: ARG001
    """``source_key`` and ``fkey`` are the cache key (Streamlit hashes the arguments; ``_src`` and
    ``_f`` it does not)."""
    return getattr(_src, method)(_f, *args)


@dataclass
class Ctx:
    src: Source
    f: Filters
    now: float
    refresh: float
    status: Status
    max_series: int = 4
    all_engines: Sequence[str] = ()
    alerts_from: Optional[Source] = None      # Prometheus next to the store, for its rule alerts
    alerts_error: Optional[str] = None
    alerts: Optional[pd.DataFrame] = None     # what the banner found (the alerts tab lists them)

    def q(self, method: str, *args, f: Optional[Filters] = None):
        f = f or self.f
        return cached(self.src.cache_key(), method, f.key(), args, _src=self.src, _f=f)

    @property
    def x_domain(self) -> tuple:
        """The selected range in epoch seconds (over-time charts are pinned to it)."""
        return (self.f.start, min(self.f.end, max(self.now, self.f.start + 1)))

    @property
    def exact(self) -> bool:
        return self.src.supports(CAP_EXACT)


def chart(spec: dict) -> None:
    st.vega_lite_chart(spec=spec, width="stretch")


def guard(fn: Callable, *args, **kwargs):
    """Run a view; a source failure becomes a warning in place, not a crash."""
    try:
        return fn(*args, **kwargs)
    except SourceError as exc:
        st.warning(f"The source could not answer: {literal(exc)}")
    return None


def note_skipped(*frames) -> None:
    """Say how many store rows a view left out because a numeric column held something else."""
    n = sum(skipped(df) for df in frames)
    if n:
        st.caption(f"{plural(n, 'row')} skipped: a numeric column holds a value that is not a number.")
