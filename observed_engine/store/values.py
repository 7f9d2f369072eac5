"""Values SQLite can store, and telling a row's fault from the file's.

A batch that fails because of its data is never retried as it is (it would fail forever and block
every later row): its values are made storable once (``storable_row``), and the rows that still
fail are skipped one by one. ``is_data_error`` tells such a failure from one about the file
(locked, read-only, full), whose batch is kept and retried.
"""

from __future__ import annotations

import sqlite3

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


def storable_value(value):
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


def storable_row(row):
    """``row`` with lone surrogates in text replaced (U+FFFD) and every other value SQLite
    cannot store replaced by NULL; ``row`` itself (the same object) when nothing changed or
    when it is not a row at all (that one fails again, alone, and is skipped)."""
    if is_named_row(row):
        values = storable_row(row[1])
        return row if values is row[1] else (row[0], values)
    if not isinstance(row, (tuple, list)):
        return row
    out = tuple(map(storable_value, row))
    if all(a is b for a, b in zip(out, row)):
        return row
    return out


def is_named_row(row) -> bool:
    """A row as ``store_schema.row_from`` makes it: (column names, values)."""
    return type(row) is tuple and len(row) == 2 and type(row[0]) is tuple and isinstance(row[1], (tuple, list))


def is_data_error(exc: BaseException) -> bool:
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
