"""The store file's identity on disk, and setting aside what is left of a file that is gone.

The writer keeps the (device, inode) of the file it opened and of its ``-wal``/``-shm``, so it can
tell when the path names another file (deleted, renamed, replaced while this process had it open);
a ``-wal``/``-shm`` left behind by a file that is gone is moved aside before SQLite can read it as
the new file's (docs/store-schema.md).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

from ..contract.store_schema import ORPHAN_SUFFIX

logger = logging.getLogger(__name__)

SIDE_SUFFIXES = ("-wal", "-shm")


def file_id(path) -> Optional[tuple]:
    """(st_dev, st_ino) of ``path``, None when there is nothing there (or it cannot be looked at)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def file_ids(path) -> tuple:
    """:func:`file_id` of ``path``, its ``-wal`` and its ``-shm``."""
    return tuple(file_id(p) for p in (path, *(f"{path}{s}" for s in SIDE_SUFFIXES)))


def set_aside(path, suffixes) -> list:
    """Move ``path``+suffix to ``path``+suffix+ORPHAN_SUFFIX (replacing an older one); the names moved."""
    moved = []
    for suffix in suffixes:
        side = f"{path}{suffix}"
        if os.path.lexists(side):
            os.replace(side, side + ORPHAN_SUFFIX)
            moved.append(os.path.basename(side))
    return moved


def set_aside_stale_files(path: Path) -> None:
    """The main file is gone but its -wal/-shm (or a -journal) are still there: a store deleted
    while a process had it open, or a process killed with it open. SQLite would read them as the
    new file's (a "disk I/O error" on every batch while their process lives, or the deleted rows
    back from the -wal): move them aside (NAME-wal.orphaned, replacing an older one), log it."""
    if os.path.lexists(path):
        return
    moved = set_aside(path, (*SIDE_SUFFIXES, "-journal"))
    if moved:
        logger.warning("observed-engine store %s: the file is missing but a stale %s of it was left behind "
                       "(deleted while open, or a process killed with it open); moved aside to %s so a new "
                       "store can be created", path, " and ".join(moved),
                       " and ".join(m + ORPHAN_SUFFIX for m in moved))
