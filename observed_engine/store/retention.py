"""Retention: rows older than ``retention_days`` deleted in small chunks between the writer's batches.

At most every RETENTION_PERIOD seconds a pass starts; it deletes one chunk of rows per writer
cycle, each its own short transaction, the cycles RETENTION_PAUSE apart while there is more, so
that no delete of a large backlog holds the write lock for long: other writers (and this one's own
batches) get in between.

The chunk is sized by time, not by a row count: a pass starts at RETENTION_FIRST_CHUNK rows,
doubles (up to RETENTION_CHUNK) while a chunk takes under half of RETENTION_CHUNK_S and halves
(down to RETENTION_MIN_CHUNK) when one takes longer, so the lock is held about RETENTION_CHUNK_S
at a time on a fast disk and on a starved, slow machine alike.
"""

from __future__ import annotations

import sqlite3
import time
from time import perf_counter
from typing import Callable, Optional

RETENTION_PERIOD = 600.0     # seconds between two retention passes
RETENTION_CHUNK = 5000       # at most this many rows deleted per transaction
RETENTION_FIRST_CHUNK = 500  # rows in a pass's first chunk
RETENTION_MIN_CHUNK = 50     # the smallest chunk
RETENTION_CHUNK_S = 0.05     # the time one chunk's transaction should take
RETENTION_PAUSE = 0.02       # seconds between two chunks of one pass
RETENTION_SQL = "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE ts < ? LIMIT ?)"


class Retention:
    """The retention passes of one writer (its thread only)."""

    __slots__ = ("days", "_last", "_cutoff", "chunk")

    def __init__(self, days: float) -> None:
        self.days = days
        self._last = 0.0
        self._cutoff: Optional[float] = None      # a pass under way (more chunks to delete)
        self.chunk = RETENTION_FIRST_CHUNK        # rows in the next chunk

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
            self.chunk = RETENTION_FIRST_CHUNK
        chunk = self.chunk
        t0 = perf_counter()
        try:
            deleted = conn.execute(RETENTION_SQL, (self._cutoff, chunk)).rowcount
        except Exception as exc:
            self._cutoff = None       # again in RETENTION_PERIOD
            on_error("retention", exc)
            return
        took = perf_counter() - t0
        if deleted < chunk:
            self._cutoff = None
        elif took > RETENTION_CHUNK_S:
            self.chunk = max(RETENTION_MIN_CHUNK, chunk // 2)
        elif took < RETENTION_CHUNK_S / 2:
            self.chunk = min(RETENTION_CHUNK, chunk * 2)
