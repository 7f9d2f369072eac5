"""The store writer: rows in batches on its own thread, into one SQLite file (WAL).

Several Hermes processes may write the same file: each batch is one short
transaction and SQLite's busy timeout serialises writers. The dashboard reads the
same file read-only. The schema is part of the contract
(``observed_engine.contract.store_schema``; docs/store-schema.md says what the writer
does with bad rows, a deleted or replaced file, older stores and files that are not
stores). What the thread uses, one concept per module: ``files`` (the file's identity,
setting aside what a deleted file left), ``connection`` (refusing foreign files, the
schema and its migration), ``values`` (storable values, data faults against file faults),
``statements`` (grouped multi-row INSERTs), ``retention`` (chunked deletes by age).
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Iterable, Optional

from .connection import ForeignStoreError, close_quietly, connect
from .files import SIDE_SUFFIXES, file_ids, set_aside
from .retention import RETENTION_PAUSE, Retention
from .statements import Statements
from .values import is_data_error, storable_row

logger = logging.getLogger(__name__)


class StoreWriter:
    """Writes rows in batches on its own thread; never blocks the caller.

    ``submit`` appends to a bounded queue (rows beyond ``max_queue`` are
    dropped and counted); the thread commits a batch every ``flush_interval``
    seconds. Failures (locked file, read-only file, full disk) are logged once
    per kind and counted through ``on_error``; the rows of a failed batch are
    kept and retried up to ``max_queue`` in total, so a short lock loses nothing.

    A batch that fails because of its data is never retried as it is: its values are made
    storable once (lone surrogates -> U+FFFD, an int beyond 64 bits or an odd type -> NULL;
    counted through ``on_error`` and logged once), and if it still fails its rows are inserted
    one by one: a row that still fails is skipped, counted as dropped (``on_drop``, i.e.
    ``telemetry_dropped_total{signal="store_row"}``) and logged once; the others are written.

    Neither the constructor nor ``submit``/``flush``/``close`` raise into the caller, and
    the thread does not die: if it cannot be started (``RuntimeError: can't start new
    thread``), rows are queued and the start is retried at the next ``submit``/``flush``
    (counted and logged once); a callback that raises is ignored.
    """

    def __init__(
        self,
        path: os.PathLike | str,
        *,
        retention_days: float = 14.0,
        max_queue: int = 100_000,
        flush_interval: float = 0.25,
        on_error: Optional[Callable[[str, BaseException], None]] = None,
        on_drop: Optional[Callable[[int], None]] = None,
    ) -> None:
        # absolute once: a later chdir of the host must not make the path name another file
        self.path = Path(os.path.abspath(os.fspath(path)))
        self.retention_days = retention_days
        self.max_queue = max_queue
        self.flush_interval = flush_interval
        self._on_error = on_error
        self._on_drop = on_drop
        self._queue: deque = deque()
        self._pending: list = []           # rows of a batch that failed, retried first
        self._wake = threading.Event()
        self._stop = False
        self._conn: Optional[sqlite3.Connection] = None
        self._file_ids: tuple = (None, None, None)    # (st_dev, st_ino) of the open file, its -wal, its -shm
        self.refused: Optional[ForeignStoreError] = None  # the path is not our store: nothing is written
        self._retention = Retention(retention_days)
        self._logged_errors: set = set()
        self._statements = Statements()
        self.rows_written = 0
        self.rows_dropped = 0
        self.rows_offered = 0              # rows given to submit (undelivered = offered - written - dropped)
        # the last batch failed (locked, read-only, full, unreachable directory) and is held for a retry:
        # a caller with a budget (Pipeline.deliver) does not wait for a write that is not going to happen
        self.failing = False
        self._idle = threading.Condition()
        self._busy = False
        self._count_lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._thread_lock = threading.Lock()
        self._thread_failed = False        # a failed start was logged and counted (once)
        self._start_thread()

    host = socket.gethostname()

    def _start_thread(self) -> bool:
        """Start the writer thread unless it runs; False when it cannot be started (now)."""
        with self._thread_lock:
            t = self._thread
            if t is not None and t.is_alive():
                return True
            if self._stop:
                return False
            t = threading.Thread(target=self._run, name="observed-engine-store", daemon=True)
            try:
                t.start()
            except Exception as exc:       # RuntimeError: can't start new thread (threads, memory)
                if not self._thread_failed:
                    self._thread_failed = True
                    try:
                        logger.warning("observed-engine store %s: cannot start the writer thread (%s); rows are "
                                       "queued (up to %d) and the start is retried at the next submit",
                                       self.path, exc, self.max_queue)
                    except Exception:  # logging is the last resort: the failure is counted
                        pass
                    self._notify_error(exc)
                return False
            self._thread = t
            return True

    def _thread_running(self) -> bool:
        t = self._thread
        return t is not None and t.is_alive()

    def _notify_error(self, exc: BaseException) -> None:
        if self._on_error:
            try:
                self._on_error("store", exc)
            except Exception:  # the counter is the last resort: nothing is left to tell
                pass

    def _count_dropped(self, n: int, on_drop: Optional[Callable[[int], None]] = None) -> None:
        with self._count_lock:
            self.rows_dropped += n
        on_drop = on_drop or self._on_drop
        if on_drop:
            try:
                on_drop(n)
            except Exception:  # the counter is the last resort: rows_dropped still holds it
                pass

    def submit(self, rows: Iterable[tuple], on_drop: Optional[Callable[[int], None]] = None) -> None:
        """Queue ``rows``. Rows beyond ``max_queue`` are dropped and counted: in ``rows_dropped`` and
        through ``on_drop`` when given (the submitting pipeline of a shared writer), else the
        writer's own ``on_drop``."""
        try:
            if self.refused is not None:            # nothing will ever be written: count, keep nothing
                rows = rows if isinstance(rows, (list, tuple)) else list(rows)
                if rows:
                    self.rows_offered += len(rows)
                    self._count_dropped(len(rows), on_drop)
                return
            q = self._queue
            dropped = accepted = 0
            for row in rows:
                if len(q) >= self.max_queue:
                    dropped += 1
                    continue
                q.append(row)
                accepted += 1
            self.rows_offered += accepted + dropped
            if dropped:
                self._count_dropped(dropped, on_drop)
            if not self._stop and not self._thread_running():
                self._start_thread()
        except Exception as exc:           # never into the caller
            self._error("submit", exc)

    def reconfigure(self, *, retention_days: Optional[float] = None, max_queue: Optional[int] = None) -> None:
        """Take a newer configuration's retention and queue bound (a shared writer follows the
        pipeline most recently attached to it: the operator's latest ``observed:`` section)."""
        if retention_days is not None:
            self.retention_days = self._retention.days = retention_days
        if max_queue is not None:
            self.max_queue = max_queue

    def undelivered(self) -> int:
        """Rows submitted and neither written nor counted as dropped (queued, or in a batch under way)."""
        return max(0, self.rows_offered - self.rows_written - self.rows_dropped)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything submitted so far is committed (or failed)."""
        deadline = time.monotonic() + timeout
        if not self._thread_running() and (self._stop or not self._start_thread()):
            return not (self._queue or self._pending)
        self._wake.set()
        with self._idle:
            while self._queue or self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._wake.set()
                self._idle.wait(min(left, 0.05))
        return True

    def close(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        self._stop = True
        self._wake.set()
        t = self._thread
        if t is not None:
            t.join(timeout)
        if not self._thread_running() and self._conn is not None:
            conn, self._conn = self._conn, None
            close_quietly(conn)

    # -- the file under the connection ------------------------------------------

    def _current_ids(self) -> tuple:
        return file_ids(self.path)

    def _replaced(self) -> bool:
        """The path no longer names the file the connection has open (deleted, or replaced by
        another file): one stat() per batch."""
        try:
            st = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            return True
        except OSError:
            return False                    # cannot tell (permissions): keep writing
        opened = self._file_ids[0]
        return opened is not None and (st.st_dev, st.st_ino) != opened

    def _drop_replaced(self, conn: sqlite3.Connection) -> None:
        """Close the connection to the file that is no longer at the path. SQLite neither
        checkpoints nor removes the -wal/-shm of a file moved or unlinked under it, so they stay
        at the path: if they are still the ones this connection opened (not a newer store's,
        which another process may have created since), they are the old file's and are moved
        aside, so that the file now at the path (or the one created there) is not read with them.
        A passive checkpoint first copies what is committed into the old file itself, so a store
        that was renamed (mv) keeps its last rows."""
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except Exception:  # a checkpoint is a courtesy to a renamed file; closing follows
            pass
        close_quietly(conn)
        now = self._current_ids()
        ours = [suffix for suffix, opened, current in zip(SIDE_SUFFIXES, self._file_ids[1:], now[1:])
                if opened is not None and opened == current]
        try:
            set_aside(self.path, ours)
        except OSError:
            pass

    # -- the writer thread ---------------------------------------------------

    _MESSAGES = {
        "value": "observed-engine store %(path)s: a row held a value SQLite cannot store as it is (%(exc)s); "
                 "stored with lone surrogates as U+FFFD and unstorable values as NULL",
        "row": "observed-engine store %(path)s: skipped a row that cannot be stored (%(exc)s); such rows are "
               "counted in hermes_context_engine_telemetry_dropped_total{signal=\"store_row\"}, the rest of "
               "their batch is written",
        "replaced": "observed-engine store %(path)s was deleted or replaced while this process had it open; "
                    "reopening the path (a new store is created if nothing is there)",
    }

    def _log_once(self, kind: str, exc: BaseException) -> None:
        try:
            if kind not in self._logged_errors:
                self._logged_errors.add(kind)
                template = self._MESSAGES.get(kind)
                if template is None:
                    logger.warning("observed-engine store %s failed (%s): %s; rows are kept in memory up to %d "
                                   "and retried", self.path, kind, exc, self.max_queue)
                else:
                    logger.warning(template, {"path": self.path, "exc": exc})
        except Exception:  # logging is the last resort: the failure is counted
            pass

    def _error(self, kind: str, exc: BaseException) -> None:
        """Log the first failure of each kind, count every one (``on_error``); never raises."""
        self._log_once(kind, exc)
        self._notify_error(exc)

    def _run(self) -> None:
        while not self._stop:
            try:
                self._wake.wait(RETENTION_PAUSE if self._retention.under_way else self.flush_interval)
                self._wake.clear()
                with self._idle:
                    self._busy = True
                try:
                    self._write_batch()
                except BaseException as exc:  # never let the thread die
                    self._error(type(exc).__name__, exc)
                finally:
                    with self._idle:
                        self._busy = False
                        self._idle.notify_all()
            except BaseException:              # the bookkeeping itself failed (memory): go on
                time.sleep(0.05)

    def _write_batch(self) -> None:
        q = self._queue
        batch = self._pending
        self._pending = []
        while q:
            batch.append(q.popleft())
        if self.refused is not None:
            if batch:
                self._count_dropped(len(batch))
            return
        if not batch:
            self._maybe_retention()
            return
        try:
            if self._conn is not None and self._replaced():
                conn, self._conn = self._conn, None
                self._drop_replaced(conn)
                self._error("replaced", FileNotFoundError(f"{self.path} is not the file that was opened"))
            if self._conn is None:
                self._conn = connect(self.path)
                self._statements.use_connection(self._conn)
                self._file_ids = self._current_ids()
            written, repaired, skipped = self._insert(self._conn, batch)
            if None in self._file_ids[1:]:
                # the -wal/-shm exist once the first transaction in WAL mode ran
                self._file_ids = (self._file_ids[0], *self._current_ids()[1:])
            self.rows_written += written
            self.failing = False
            self._logged_errors.discard("write")
            if repaired is not None:
                self._error("value", repaired)
            if skipped:
                self._log_once("row", skipped[1])
                self._count_dropped(skipped[0])
        except ForeignStoreError as exc:
            self._refuse(exc, len(batch))
            return
        except Exception as exc:
            keep = batch[: self.max_queue]
            lost = len(batch) - len(keep)
            if lost:
                self._count_dropped(lost)
            self._pending = keep
            self.failing = True
            if self._conn is not None and isinstance(exc, sqlite3.DatabaseError) and "locked" not in str(exc):
                conn, self._conn = self._conn, None
                close_quietly(conn)
            self._error("write", exc)
            # back off a little so a locked or full disk is not hammered
            time.sleep(min(1.0, self.flush_interval * 2))
            return
        self._maybe_retention()

    def _refuse(self, exc: ForeignStoreError, n_rows: int) -> None:
        """The path is not our store: write nothing to it for the life of this writer (the
        setting is fixed by a restart); rows are dropped and counted, nothing piles up."""
        self.refused = exc
        try:
            logger.error("observed-engine store refused: %s. Nothing is written to it (its tables and journal "
                         "mode are left as they are); store rows are dropped and counted in "
                         "hermes_context_engine_telemetry_dropped_total{signal=\"store_row\"}. Point "
                         "observed.store.path at a new file (or an observed-engine store) and restart.", exc)
        except Exception:  # logging is the last resort: the refusal is counted
            pass
        self._notify_error(exc)
        self._count_dropped(n_rows)

    def _insert(self, conn: sqlite3.Connection, batch: list):
        """Insert ``batch`` in one transaction: (rows written, the error that made values be
        repaired or None, (rows skipped, the first error) or None). A failure about the file
        raises (the caller keeps the batch); one about the data never makes the batch fail."""
        repaired = skipped = None
        conn.execute("BEGIN IMMEDIATE")
        try:
            try:
                written = self._insert_grouped(conn, batch)
            except Exception as exc:
                if not is_data_error(exc):
                    raise
                # Retried as it is, this batch would fail forever and block every later row.
                conn.execute("ROLLBACK")
                fixed = [storable_row(row) for row in batch]
                if any(a is not b for a, b in zip(fixed, batch)):
                    repaired = exc
                conn.execute("BEGIN IMMEDIATE")
                try:
                    written = self._insert_grouped(conn, fixed)
                except Exception as exc2:
                    if not is_data_error(exc2):
                        raise
                    conn.execute("ROLLBACK")
                    conn.execute("BEGIN IMMEDIATE")
                    written, n_skipped, first = 0, 0, None
                    for row in fixed:                  # one by one: isolate the rows that cannot be stored
                        try:
                            conn.execute(*self._statements.bind(row, None))
                            written += 1
                        except Exception as exc3:
                            if not is_data_error(exc3):
                                raise
                            n_skipped += 1
                            first = first or exc3
                    if n_skipped:
                        skipped = (n_skipped, first)
            conn.execute("COMMIT")
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise
        return written, repaired, skipped

    def _insert_grouped(self, conn: sqlite3.Connection, rows: list) -> int:
        """The rows of each distinct set of columns together (``Statements.insert_all``). The ids
        are given in the order the rows came (the next ones after the table's largest, read inside
        this write transaction, so another process's writer cannot take them), so the table's
        order is the arrival order, as if the rows had been inserted one after the other."""
        row_id = conn.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0]
        groups = self._statements.grouped(rows, row_id)
        for columns, params in groups.items():
            self._statements.insert_all(conn, columns, params)
        return len(rows)

    def _maybe_retention(self) -> None:
        """The next chunk of a retention pass, when one is due (``retention.Retention``)."""
        self._retention.step(self._conn, self._error)
