"""Retention: rows older than ``retention_days`` deleted in small chunks between the writer's batches.

At most every RETENTION_PERIOD seconds a pass starts; it deletes one chunk of RETENTION_CHUNK rows
per writer cycle, each its own short transaction, the cycles RETENTION_PAUSE apart while there is
more, so that no delete of a large backlog holds the write lock for long: other writers (and this
one's own batches) get in between.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Callable, Optional

RETENTION_PERIOD = 600.0     # seconds between two retention passes
RETENTION_CHUNK = 5000       # rows deleted per transaction
RETENTION_PAUSE = 0.02       # seconds between two chunks of one pass
RETENTION_SQL = "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE ts < ? LIMIT ?)"


class Retention:
    """The retention passes of one writer (its thread only)."""

    __slots__ = ("days", "_last", "_cutoff")

    def __init__(self, days: float) -> None:
        self.days = days
        self._last = 0.0
        self._cutoff: Optional[float] = None      # a pass under way (more chunks to delete)

    @property
    def under_way(self) -> bool:
        """A pass has more chunks to delete: the writer comes back after RETENTION_PAUSE."""
        return self._cutoff is not None

    def step(self, conn: Optional[sqlite3.Connection], on_error: Callable[[str, BaseException], None]) -> None:
        """Start a pass when one is due, and delete its next chunk."""
        if not self.days or conn is None:
            return
        if self._cutoff is None:
            now = time.time()
            if now - self._last < RETENTION_PERIOD:
                return
            self._last = now
            self._cutoff = now - self.days * 86400.0
        try:
            deleted = conn.execute(RETENTION_SQL, (self._cutoff, RETENTION_CHUNK)).rowcount
        except Exception as exc:
            self._cutoff = None       # again in RETENTION_PERIOD
            on_error("retention", exc)
            return
        if deleted < RETENTION_CHUNK:
            self._cutoff = None
