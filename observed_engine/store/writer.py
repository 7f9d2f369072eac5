"""The store writer: rows in batches on its own thread, into one SQLite file (WAL).

Several Hermes processes may write the same file: each batch is one short
transaction and SQLite's busy timeout serialises writers. The dashboard reads the
same file read-only. The schema is part of the contract
(``observed_engine.contract.store_schema``; docs/store-schema.md says what the writer
does with bad rows, a deleted or replaced file, older stores and files that are not
stores).
"""


from __future__ import annotations

import logging
import os
import socket
import sqlite3
import stat
import threading
import time
from collections import deque
from itertools import chain
from pathlib import Path
from typing import Callable, Iterable, Optional
from urllib.parse import quote

from ..contract.store_schema import (COLUMNS, INSERT_SQL, ORPHAN_SUFFIX, SCHEMA_SQL, SCHEMA_VERSION,
                                     add_column_sql, insert_sql)

logger = logging.getLogger("observed_engine.store")

_SIDE_SUFFIXES = ("-wal", "-shm")


def _file_id(path) -> Optional[tuple]:
    """(st_dev, st_ino) of ``path``, None when there is nothing there (or it cannot be looked at)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _set_aside(path, suffixes) -> list:
    """Move ``path``+suffix to ``path``+suffix+ORPHAN_SUFFIX (replacing an older one); the names moved."""
    moved = []
    for suffix in suffixes:
        side = f"{path}{suffix}"
        if os.path.lexists(side):
            os.replace(side, side + ORPHAN_SUFFIX)
            moved.append(os.path.basename(side))
    return moved


def _set_aside_stale_files(path: Path) -> None:
    """The main file is gone but its -wal/-shm (or a -journal) are still there: a store deleted
    while a process had it open, or a process killed with it open. SQLite would read them as the
    new file's (a "disk I/O error" on every batch while their process lives, or the deleted rows
    back from the -wal): move them aside (NAME-wal.orphaned, replacing an older one), log it."""
    if os.path.lexists(path):
        return
    moved = _set_aside(path, (*_SIDE_SUFFIXES, "-journal"))
    if moved:
        logger.warning("observed-engine store %s: the file is missing but a stale %s of it was left behind "
                       "(deleted while open, or a process killed with it open); moved aside to %s so a new "
                       "store can be created", path, " and ".join(moved),
                       " and ".join(m + ORPHAN_SUFFIX for m in moved))



def readonly_uri(path: os.PathLike | str) -> str:
    """The ``file:`` URI that opens ``path`` read-only: the absolute path percent-quoted, so a
    ``#``, ``?`` or ``%`` in it is part of the path (unquoted, ``.../C#proj/x.sqlite`` opens
    ``.../C`` read-write and creates it)."""
    return "file:" + quote(os.fsencode(os.path.abspath(os.fspath(path)))) + "?mode=ro"


class ForeignStoreError(Exception):
    """The file at the store path is not an observed-engine store: another program's SQLite
    database, or not SQLite at all. ``connect`` leaves it exactly as it was."""


SQLITE_HEADER = b"SQLite format 3\x00"


def _check_file(path: Path) -> None:
    """Refuse what is at ``path`` unless it is nothing, an empty file, or an SQLite file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise ForeignStoreError(f"{path} is not a regular file")
    if st.st_size == 0:
        return
    with open(path, "rb") as f:
        head = f.read(len(SQLITE_HEADER))
    if head != SQLITE_HEADER:
        raise ForeignStoreError(f"{path} is not an SQLite database (it starts with {head[:12]!r})")


def _check_ours(conn: sqlite3.Connection, path: Path) -> None:
    """Inside the opening transaction, before anything is written: raise ForeignStoreError
    unless the database is empty or ours (a ``meta`` table with an integer ``schema_version``,
    and an ``events`` table with our ``ts`` and ``event`` columns, or no other table at all)."""
    objects = [name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")]
    if not objects:
        return                                  # an empty database: ours to create
    tables = {name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")}
    shown = ", ".join(sorted(tables)[:5]) or ", ".join(sorted(objects)[:5])
    if "meta" not in tables:
        raise ForeignStoreError(f"{path} is not an observed-engine store: it has tables ({shown}) and no meta table")
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        int(row[0])                             # no row (TypeError) or not a number (ValueError)
    except (sqlite3.OperationalError, TypeError, ValueError):
        row = None
    if row is None:
        raise ForeignStoreError(f"{path} is not an observed-engine store: its meta table ({shown}) holds no "
                                f"schema_version of ours")
    if "events" in tables:
        columns = {r[1] for r in conn.execute("PRAGMA table_info(events)")}
        if not {"ts", "event"} <= columns:
            raise ForeignStoreError(f"{path} is not an observed-engine store: its events table is another's "
                                    f"(columns {', '.join(sorted(columns)[:8])})")
    elif tables - {"meta"}:
        raise ForeignStoreError(f"{path} is not an observed-engine store: it has other tables ({shown}) "
                                f"and no events table")


def connect(path: os.PathLike | str, *, readonly: bool = False, timeout: float = 5.0) -> sqlite3.Connection:
    """Open the store. Writers create the schema (or migrate an older store); readers open
    read-only (URI mode=ro).

    A writer raises ForeignStoreError, and changes nothing, when the file is not ours: not SQLite,
    or another program's database (a mistyped store.path). Only then, and after the schema is
    in place, is the journal mode switched to WAL."""
    path = Path(path)
    if readonly:
        return sqlite3.connect(readonly_uri(path), uri=True, timeout=timeout, check_same_thread=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    _set_aside_stale_files(path)
    _check_file(path)
    conn = sqlite3.connect(str(path), timeout=timeout, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            _check_ours(conn, path)
            version, added = _create_or_migrate(conn)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    except BaseException:
        _close(conn)
        raise
    if added or (version is not None and version < SCHEMA_VERSION):
        logger.info("observed-engine store %s: schema version %s -> %s; added the columns its events table "
                    "lacked: %s", path, version, max(version or 0, SCHEMA_VERSION), ", ".join(added) or "none")
    return conn


def _stored_version(conn: sqlite3.Connection) -> Optional[int]:
    """``meta.schema_version`` of the store (None when there is none yet)."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.OperationalError:          # no meta table yet
        return None
    if row is None:
        return None
    try:
        return int(row[0])
    except (TypeError, ValueError):
        return None


def _create_or_migrate(conn: sqlite3.Connection):
    """Create the schema, or bring an older store up to it, inside the caller's transaction:
    every column of COLUMNS the events table lacks is added (whatever version added it), then
    the indexes (which may name those columns); meta.schema_version is raised, never lowered.
    Returns (the stored version or None, the columns added)."""
    version = _stored_version(conn)
    for stmt in SCHEMA_SQL:
        if stmt.startswith("CREATE TABLE"):
            conn.execute(stmt)
    have = {row[1] for row in conn.execute("PRAGMA table_info(events)")}
    added = [c for c in COLUMNS if c not in have]
    for column in added:
        conn.execute(add_column_sql(column))
    for stmt in SCHEMA_SQL:
        if not stmt.startswith("CREATE TABLE"):
            conn.execute(stmt)
    if version is None:
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    elif version < SCHEMA_VERSION:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
    return version, added


_INT64 = (-(2 ** 63), 2 ** 63 - 1)


def storable_text(text: str) -> str:
    """``text`` as a string SQLite can store (UTF-8): each lone surrogate becomes U+FFFD
    (a pair of surrogates, which is one character in UTF-16, is joined into it)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _storable_value(value):
    if value is None or type(value) is float or type(value) is bytes:
        return value
    if isinstance(value, str):
        fixed = storable_text(value)
        return value if fixed == value else fixed
    if isinstance(value, int):
        return value if _INT64[0] <= value <= _INT64[1] else None
    if isinstance(value, float):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return None


def _storable(row):
    """``row`` with lone surrogates in text replaced (U+FFFD) and every other value SQLite
    cannot store replaced by NULL; ``row`` itself (the same object) when nothing changed or
    when it is not a row at all (that one fails again, alone, and is skipped)."""
    if _is_named_row(row):
        values = _storable(row[1])
        return row if values is row[1] else (row[0], values)
    if not isinstance(row, (tuple, list)):
        return row
    out = tuple(map(_storable_value, row))
    if all(a is b for a, b in zip(out, row)):
        return row
    return out


def _is_named_row(row) -> bool:
    """A row as ``store_schema.row_from`` makes it: (column names, values)."""
    return type(row) is tuple and len(row) == 2 and type(row[0]) is tuple and isinstance(row[1], (tuple, list))


class _Statements:
    """The INSERTs of each distinct tuple of column names rows give, made (and checked) once.

    A row is bound with only the columns it has (binding the NULLs of the other columns cost as
    much as the rest of the insert). Names that are not columns are left out, as ``make_row``
    promises. A full-width tuple in COLUMNS order (what rows were before) is still taken.

    Rows of one shape are inserted many at a time, by one multi-row ``INSERT ... VALUES (...),
    (...)``, not by ``executemany``: the sqlite3 module releases the GIL around every step, and
    ``executemany`` steps once per row, so with any busy Python thread in the process (the host,
    our own worker under a backlog) each row waited for the interpreter's switch interval to get the
    GIL back: 3 ms per row measured here, against 20 µs this way (and 3.2 against 5.3 µs of CPU per
    row with nothing else running). The row counts per statement are powers of two, so each shape
    has at most a handful of statements for the sqlite3 module's statement cache."""

    LIMIT = 1024          # distinct name tuples kept; past that the cache starts again
    MAX_ROWS = 256        # rows per statement (fewer where the build's variable limit is lower)

    def __init__(self) -> None:
        self._by_names: dict = {}
        self._many: dict = {}             # (columns with id, rows) -> its INSERT
        self._max_variables = 999         # SQLite's smallest default; read from the connection

    def use_connection(self, conn: sqlite3.Connection) -> None:
        try:
            self._max_variables = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        except Exception:       # an sqlite3 module without getlimit: the smallest default
            self._max_variables = 999

    def _for(self, names: tuple):
        found = self._by_names.get(names)
        if found is None:
            if len(self._by_names) >= self.LIMIT:
                self._by_names.clear()
                self._many.clear()
            known = [i for i, n in enumerate(names) if type(n) is str and n in _COLUMN_SET]
            kept = tuple(names[i] for i in known)
            if len(set(kept)) != len(kept):
                raise ValueError("a store row names a column twice")
            if not kept:     # (an INSERT naming no column is not even SQL: it would fail as a file error)
                raise ValueError("a store row names no column")
            pick = None if len(known) == len(names) else known
            found = self._by_names[names] = (("id", *kept), insert_sql(kept), pick)
        return found

    def bind(self, row, row_id: Optional[int]):
        """(the columns with ``id`` first, its parameters with ``row_id`` first) for ``row``; with
        ``row_id`` None, (the one-row INSERT without ``id``, its parameters)."""
        if _is_named_row(row):
            names, values = row
            if len(names) != len(values):
                raise ValueError("a store row has not one value per name")
            with_id, without_id, pick = self._for(names)
            if pick is not None:
                values = [values[i] for i in pick]
        elif isinstance(row, (tuple, list)) and len(row) == len(COLUMNS):
            with_id, without_id, values = _FULL_WIDTH_WITH_ID, INSERT_SQL, row
        else:
            raise ValueError("not a store row")
        if row_id is None:
            return without_id, values
        return with_id, (row_id, *values)

    def grouped(self, rows: list, row_id: int) -> dict:
        """{columns with ``id`` first: the parameters of its rows}, the rows getting the ids after
        ``row_id`` in their order."""
        groups: dict = {}
        known = self._by_names.get
        for row in rows:
            row_id += 1
            # the worker's rows, of a shape seen before: what bind() does, without its checks and calls
            found = known(row[0]) if type(row) is tuple and len(row) == 2 and type(row[0]) is tuple else None
            if found is not None and found[2] is None and type(row[1]) is tuple and len(row[1]) == len(row[0]):
                columns, params = found[0], (row_id, *row[1])
            else:
                columns, params = self.bind(row, row_id)
            group = groups.get(columns)
            if group is None:
                groups[columns] = [params]
            else:
                group.append(params)
        return groups

    def insert_all(self, conn: sqlite3.Connection, columns: tuple, params: list) -> None:
        """Insert the rows ``params`` (each in ``columns`` order) in as few statements as fit."""
        per = self.MAX_ROWS
        while per > 1 and per * len(columns) > self._max_variables:
            per //= 2
        i, n = 0, len(params)
        while i < n:
            k = per
            while k > n - i:
                k //= 2
            sql = self._many.get((columns, k))
            if sql is None:
                sql = self._many[(columns, k)] = insert_sql(columns, k)
            conn.execute(sql, list(chain.from_iterable(params[i:i + k])) if k > 1 else params[i])
            i += k


_COLUMN_SET = frozenset(COLUMNS)
_FULL_WIDTH_WITH_ID = ("id", *COLUMNS)


def _is_data_error(exc: BaseException) -> bool:
    """True when ``exc`` is about the values of a row (that row fails again however often it is
    retried: a lone surrogate, an unbindable type, a NOT NULL column without a value, the wrong
    number of values), False when it is about the file (locked, read-only, full, I/O, corrupt)."""
    if isinstance(exc, (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError)):
        return True
    if isinstance(exc, sqlite3.ProgrammingError):
        return "closed" not in str(exc)
    if isinstance(exc, sqlite3.Error):
        return False
    return isinstance(exc, (ValueError, TypeError, OverflowError))      # UnicodeEncodeError is a ValueError


RETENTION_PERIOD = 600.0     # seconds between two retention passes
RETENTION_CHUNK = 5000       # rows deleted per transaction
RETENTION_PAUSE = 0.02       # seconds between two chunks of one pass
RETENTION_SQL = "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE ts < ? LIMIT ?)"


def _close(conn: sqlite3.Connection) -> None:
    try:
        conn.close()
    except Exception:
        pass


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
        self._last_retention = 0.0
        self._retention_cutoff: Optional[float] = None   # a retention pass under way (more chunks to delete)
        self._logged_errors: set = set()
        self._statements = _Statements()
        self.rows_written = 0
        self.rows_dropped = 0
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
                    except Exception:
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
            except Exception:
                pass

    def _count_dropped(self, n: int) -> None:
        with self._count_lock:
            self.rows_dropped += n
        if self._on_drop:
            try:
                self._on_drop(n)
            except Exception:
                pass

    def submit(self, rows: Iterable[tuple]) -> None:
        try:
            if self.refused is not None:            # nothing will ever be written: count, keep nothing
                rows = rows if isinstance(rows, (list, tuple)) else list(rows)
                if rows:
                    self._count_dropped(len(rows))
                return
            q = self._queue
            dropped = 0
            for row in rows:
                if len(q) >= self.max_queue:
                    dropped += 1
                    continue
                q.append(row)
            if dropped:
                self._count_dropped(dropped)
            if not self._stop and not self._thread_running():
                self._start_thread()
        except Exception as exc:           # never into the caller
            self._error("submit", exc)

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
            _close(conn)

    # -- the file under the connection ------------------------------------------

    def _current_ids(self) -> tuple:
        return tuple(_file_id(p) for p in (self.path, *(f"{self.path}{s}" for s in _SIDE_SUFFIXES)))

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
        except Exception:
            pass
        _close(conn)
        now = self._current_ids()
        ours = [suffix for suffix, opened, current in zip(_SIDE_SUFFIXES, self._file_ids[1:], now[1:])
                if opened is not None and opened == current]
        try:
            _set_aside(self.path, ours)
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
        except Exception:
            pass

    def _error(self, kind: str, exc: BaseException) -> None:
        """Log the first failure of each kind, count every one (``on_error``); never raises."""
        self._log_once(kind, exc)
        self._notify_error(exc)

    def _run(self) -> None:
        while not self._stop:
            try:
                self._wake.wait(self.flush_interval if self._retention_cutoff is None else RETENTION_PAUSE)
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
                _close(conn)
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
        except Exception:
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
                if not _is_data_error(exc):
                    raise
                # Retried as it is, this batch would fail forever and block every later row.
                conn.execute("ROLLBACK")
                fixed = [_storable(row) for row in batch]
                if any(a is not b for a, b in zip(fixed, batch)):
                    repaired = exc
                conn.execute("BEGIN IMMEDIATE")
                try:
                    written = self._insert_grouped(conn, fixed)
                except Exception as exc2:
                    if not _is_data_error(exc2):
                        raise
                    conn.execute("ROLLBACK")
                    conn.execute("BEGIN IMMEDIATE")
                    written, n_skipped, first = 0, 0, None
                    for row in fixed:                  # one by one: isolate the rows that cannot be stored
                        try:
                            conn.execute(*self._statements.bind(row, None))
                            written += 1
                        except Exception as exc3:
                            if not _is_data_error(exc3):
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
        """The rows of each distinct set of columns together (``_Statements.insert_all``). The ids
        are given in the order the rows came (the next ones after the table's largest, read inside
        this write transaction, so another process's writer cannot take them), so the table's
        order is the arrival order, as if the rows had been inserted one after the other."""
        row_id = conn.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0]
        groups = self._statements.grouped(rows, row_id)
        for columns, params in groups.items():
            self._statements.insert_all(conn, columns, params)
        return len(rows)

    def _maybe_retention(self) -> None:
        """At most every RETENTION_PERIOD seconds, delete the rows older than ``retention_days``:
        one chunk of RETENTION_CHUNK rows per writer cycle, each its own short transaction, the
        cycles RETENTION_PAUSE apart while there is more, so that no delete of a large backlog
        holds the write lock for long: other writers (and this one's own batches) get in between."""
        if not self.retention_days or self._conn is None:
            return
        if self._retention_cutoff is None:
            now = time.time()
            if now - self._last_retention < RETENTION_PERIOD:
                return
            self._last_retention = now
            self._retention_cutoff = now - self.retention_days * 86400.0
        try:
            deleted = self._conn.execute(RETENTION_SQL, (self._retention_cutoff, RETENTION_CHUNK)).rowcount
        except Exception as exc:
            self._retention_cutoff = None       # again in RETENTION_PERIOD
            self._error("retention", exc)
            return
        if deleted < RETENTION_CHUNK:
            self._retention_cutoff = None


