"""Reading the embedded store in tests."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Dict, List


def read_rows(path: Path, where: str = "1=1", params: tuple = (), order: str = "id") -> List[Dict[str, Any]]:
    """The ``events`` rows (as dicts) matching ``where``, in ``order`` (the table's order by default)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(f"SELECT * FROM events WHERE {where} ORDER BY {order}", params)]
    finally:
        conn.close()


def count_rows(path: Path, where: str = "1=1", params: tuple = ()) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(f"SELECT COUNT(*) FROM events WHERE {where}", params).fetchone()[0]
    finally:
        conn.close()
