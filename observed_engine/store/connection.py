"""Opening the store: refusing a file that is not ours, creating or migrating the schema, WAL.

``connect`` is what every writer (and, read-only, every reader) opens the file with. A file that
is not an observed-engine store (not SQLite, or another program's database: a mistyped
``store.path``) is refused before anything is written to it (``ForeignStoreError``).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from pathlib import Path
from typing import Optional
from urllib.parse import quote

from ..contract.store_schema import COLUMNS, SCHEMA_SQL, SCHEMA_VERSION, add_column_sql
from .files import set_aside_stale_files

logger = logging.getLogger(__name__)

# The writer's page cache, in KiB (SQLite's default is 2,000). A writer appends: it touches the
# right-most pages of the table and of each index, and one page per live session, which 256 KiB
# holds. With the default, a long-lived writer's resident memory grew with the file until 2 MB
# were cached (a gateway: +0.23 MB per 100 sessions; with 256 KiB: flat), at no measured cost per
# row (docs/performance.md, *Memory*).
WRITER_CACHE_KIB = 256


def readonly_uri(path: os.PathLike | str) -> str:
    """The ``file:`` URI that opens ``path`` read-only: the absolute path percent-quoted, so a
    ``#``, ``?`` or ``%`` in it is part of the path (unquoted, ``.../C#proj/x.sqlite`` opens
    ``.../C`` read-write and creates it)."""
    return "file:" + quote(os.fsencode(os.path.abspath(os.fspath(path)))) + "?mode=ro"


class ForeignStoreError(Exception):
    """The file at the store path is not an observed-engine store: another program's SQLite
    database, or not SQLite at all. ``connect`` leaves it exactly as it was."""


SQLITE_HEADER = b"SQLite format 3\x00"


def check_file(path: Path) -> None:
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


def check_ours(conn: sqlite3.Connection, path: Path) -> None:
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
    set_aside_stale_files(path)
    check_file(path)
    conn = sqlite3.connect(str(path), timeout=timeout, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            check_ours(conn, path)
            version, added = create_or_migrate(conn)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA cache_size=-{WRITER_CACHE_KIB}")
    except BaseException:
        close_quietly(conn)
        raise
    if added or (version is not None and version < SCHEMA_VERSION):
        logger.info("observed-engine store %s: schema version %s -> %s; added the columns its events table "
                    "lacked: %s", path, version, max(version or 0, SCHEMA_VERSION), ", ".join(added) or "none")
    return conn


def stored_version(conn: sqlite3.Connection) -> Optional[int]:
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


def create_or_migrate(conn: sqlite3.Connection):
    """Create the schema, or bring an older store up to it, inside the caller's transaction:
    every column of COLUMNS the events table lacks is added (whatever version added it), then
    the indexes (which may name those columns); meta.schema_version is raised, never lowered.
    Returns (the stored version or None, the columns added)."""
    version = stored_version(conn)
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


def close_quietly(conn: sqlite3.Connection) -> None:
    try:
        conn.close()
    except Exception:  # teardown: a connection that cannot close is dropped
        pass
