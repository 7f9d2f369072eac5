"""The store as a dashboard source: SQL aggregation over ``events``, read-only.

Implements ``sources.Source``; the parts live in ``sqlite/``. When editing: keep it fast on a
million rows (aggregate in SQLite, query through the store's indexes; see
``benchmarks/dashboard_bench.py``); a row with text in a numeric column is left out and counted
(``sources.skipped``); the connection is ``mode=ro`` with ``PRAGMA query_only``.

The full account: docs/design/internals.md, *dashboard/sqlite_source.py*.
"""

from __future__ import annotations

import os
from typing import ContextManager, Optional, Sequence, Tuple

import pandas as pd

from .sources import CAP_CONTENT, CAP_EVENTS, CAP_EXACT, CAP_SESSIONS, Filters, SourceError, Status
from .sqlite import alerts as _alerts
from .sqlite import compressions as _compressions
from .sqlite import decisions as _decisions
from .sqlite import incidents as _incidents
from .sqlite import latency as _latency
from .sqlite import newer_hooks as _newer_hooks
from .sqlite import selections as _selections
from .sqlite import timeline as _timeline
from .sqlite.buckets import BucketCache
from .sqlite.percentiles import Percentiles
from .sqlite.reader import StoreReader
from .sqlite.usage import Usage


class SQLiteSource:
    kind = "sqlite"
    capabilities = frozenset({CAP_SESSIONS, CAP_EVENTS, CAP_CONTENT, CAP_EXACT})

    def __init__(self, path: os.PathLike | str, *, probe: bool = True) -> None:
        self.db = StoreReader(path, probe=probe)
        self.path = self.db.path
        self.label = self.path
        self._buckets = BucketCache(self.db)
        self._pct = Percentiles(self.db)
        self._usage = Usage(self.db)

    def supports(self, cap: str) -> bool:
        return cap in self.capabilities

    def cache_key(self) -> str:
        return f"{self.kind}:{self.db.probe}:{self.label}"

    def snapshot(self) -> ContextManager:
        return self.db.snapshot()

    def close(self) -> None:
        self.db.close()

    # -- status and lists ------------------------------------------------------------

    def status(self) -> Status:
        if self.db.missing():
            return Status("missing", f"No store at {self.path} yet.")
        try:
            # SQLite orders text after every number: MIN(ts) is a number if any row has one, and
            # ts >= '' are the rows whose time is text (an index range)
            first, count, bad_ts = self.db.rows(
                "SELECT (SELECT MIN(ts) FROM events), (SELECT COUNT(*) FROM events), "
                "(SELECT COUNT(*) FROM events WHERE ts >= '')")[0]
        except SourceError as exc:
            return Status("error", str(exc))
        if not count:
            return Status("empty", f"The store at {self.path} has no events yet.", events=0)
        if not isinstance(first, (int, float)):
            return Status("empty", f"The store at {self.path} has no events with a time.", events=count,
                          skipped=bad_ts)
        return Status("ok", "", first_ts=first, events=count, skipped=bad_ts)

    def engines(self, f: Optional[Filters] = None) -> list:  # noqa: ARG002 (every engine the store has seen)
        return self.db.engines()

    def sessions(self, f: Filters) -> pd.DataFrame:
        return self._usage.sessions(f)

    # -- the views ----------------------------------------------------------------------

    def usage(self, f: Filters, series: Sequence[str]) -> Tuple[pd.DataFrame, pd.DataFrame]:
        return self._usage.usage(f, series)

    def usage_now(self, f: Filters, series: Sequence[str]) -> pd.DataFrame:
        return self._usage.usage_now(f, series)

    def content(self, f: Filters, limit: int = 50) -> pd.DataFrame:
        return self._usage.content(f, limit)

    def decisions(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        return _decisions.decisions(self.db, f)

    def timeline(self, f: Filters, limit: int = _timeline.TIMELINE_LIMIT) -> pd.DataFrame:
        return _timeline.timeline(self.db, f, limit)

    def compressions(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        return _compressions.compressions(self.db, self._buckets, self._pct, f)

    def selections(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        return _selections.selections(self.db, self._buckets, f)

    def latency(self, f: Filters) -> Tuple[pd.DataFrame, pd.DataFrame]:
        return _latency.latency(self.db, self._buckets, self._pct, f)

    def prunes(self, f: Filters) -> pd.DataFrame:
        return _newer_hooks.prunes(self.db, f)

    def turns(self, f: Filters) -> pd.DataFrame:
        return _newer_hooks.turns(self.db, f)

    def clones(self, f: Filters) -> pd.DataFrame:
        return _newer_hooks.clones(self.db, f)

    def incidents(self, f: Filters, limit: int = 500) -> pd.DataFrame:
        return _incidents.incidents(self.db, f, limit)

    def incident_counts(self, f: Filters) -> pd.DataFrame:
        return _incidents.incident_counts(self.db, self._buckets, f)

    def alerts(self, f: Filters, now: float) -> pd.DataFrame:
        return _alerts.alerts(self.db, self.incident_counts, f, now)
