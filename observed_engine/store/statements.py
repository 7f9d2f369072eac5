"""The INSERT statements of the store's rows, grouped by the columns each row names.

Rows name their columns (``contract.store_schema.row_from``) and are bound with those only; rows of
one shape go in together, as multi-row ``INSERT ... VALUES (...), (...)`` statements (the reasons
and the measurements: ``Statements`` below and docs/performance.md).
"""

from __future__ import annotations

import sqlite3
from itertools import chain
from typing import Optional

from ..contract.store_schema import COLUMNS, INSERT_SQL, insert_sql
from .values import is_named_row


class Statements:
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
            known = [i for i, n in enumerate(names) if type(n) is str and n in COLUMN_SET]
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
        if is_named_row(row):
            names, values = row
            if len(names) != len(values):
                raise ValueError("a store row has not one value per name")
            with_id, without_id, pick = self._for(names)
            if pick is not None:
                values = [values[i] for i in pick]
        elif isinstance(row, (tuple, list)) and len(row) == len(COLUMNS):
            with_id, without_id, values = FULL_WIDTH_WITH_ID, INSERT_SQL, row
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


COLUMN_SET = frozenset(COLUMNS)
FULL_WIDTH_WITH_ID = ("id", *COLUMNS)
