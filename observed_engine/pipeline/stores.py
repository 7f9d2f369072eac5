"""One store writer per store file in the process, shared by every pipeline that writes it.

An edited ``observed:`` section makes a new pipeline while agents built before the edit keep
theirs (``registry.py``); each used to bring a writer thread and an SQLite connection of its own
for the same file. A pipeline now attaches to the process's writer of its store path
(:func:`attach`) and gets a :class:`StoreClient`: what it submits goes into that writer's queue,
the drops at its submit are counted in its own counters, and the writer is closed when the last
pipeline detaches. The rows carry what their pipeline's worker put in them (its settings); the
writer only writes them. The writer follows the configuration attached most recently (retention,
queue bound). What the writer counts itself (a file error, a row it cannot store, rows lost at
the end) is counted by the first pipeline still attached, so nothing is counted twice.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Dict, List, Optional

from ..store import StoreWriter

_lock = threading.Lock()
_writers: Dict[str, _Shared] = {}


class _Shared:
    __slots__ = ("key", "writer", "clients")

    def __init__(self, key: str, writer: StoreWriter) -> None:
        self.key, self.writer = key, writer
        self.clients: List[StoreClient] = []

    def owner(self) -> Optional[StoreClient]:
        clients = self.clients
        return clients[0] if clients else None

    def on_error(self, component: str, exc: BaseException) -> None:
        owner = self.owner()
        if owner is not None:
            owner.on_error(component, exc)

    def on_drop(self, n: int) -> None:
        owner = self.owner()
        if owner is not None:
            owner.on_drop(n)


class StoreClient:
    """A pipeline's handle on the shared writer of its store file (the members Pipeline and the
    worker use of a ``StoreWriter``)."""

    __slots__ = ("_shared", "writer", "on_error", "on_drop", "_detached")

    def __init__(self, shared: _Shared, on_error: Callable[[str, BaseException], None],
                 on_drop: Callable[[int], None]) -> None:
        self._shared, self.writer = shared, shared.writer
        self.on_error, self.on_drop = on_error, on_drop
        self._detached = False

    def __getattr__(self, name):
        """Everything else of the writer, as it is (its queue, its thread: diagnostics and tests)."""
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.writer, name)

    # what the writer knows, as the pipeline reads it
    @property
    def path(self):
        return self.writer.path

    @property
    def rows_written(self) -> int:
        return self.writer.rows_written

    @property
    def rows_dropped(self) -> int:
        return self.writer.rows_dropped

    @property
    def failing(self) -> bool:
        return self.writer.failing

    @property
    def refused(self):
        return self.writer.refused

    def submit(self, rows) -> None:
        self.writer.submit(rows, on_drop=self.on_drop)

    def flush(self, timeout: float = 5.0) -> bool:
        return self.writer.flush(timeout)

    def undelivered(self) -> int:
        """Rows this pipeline would lose if it stopped now: the writer's undelivered rows when it is
        the last one attached (the writer stops with it), else none (the writer goes on)."""
        with _lock:
            last = self._shared.clients == [self] or (self._detached and not self._shared.clients)
        return self.writer.undelivered() if last else 0

    def close(self, timeout: float = 5.0) -> None:
        """Detach: deliver what is queued, and stop the writer if no other pipeline uses it."""
        with _lock:
            if self._detached:
                return
            self._detached = True
            shared = self._shared
            if self in shared.clients:
                shared.clients.remove(self)
            last = not shared.clients
            if last and _writers.get(shared.key) is shared:
                del _writers[shared.key]
        if last:
            self.writer.close(timeout)
        else:
            self.writer.flush(timeout)


def attach(path, *, retention_days: float, max_queue: int, on_error: Callable[[str, BaseException], None],
           on_drop: Callable[[int], None]) -> StoreClient:
    """The process's writer of ``path`` (made on first use), with this pipeline attached."""
    key = os.path.abspath(os.fspath(path))
    with _lock:
        shared = _writers.get(key)
        if shared is None:
            shared = _Shared(key, None)      # the writer's callbacks go through the attached pipelines
            shared.writer = StoreWriter(key, retention_days=retention_days, max_queue=max_queue,
                                        on_error=shared.on_error, on_drop=shared.on_drop)
            _writers[key] = shared
        else:
            shared.writer.reconfigure(retention_days=retention_days, max_queue=max_queue)
        client = StoreClient(shared, on_error, on_drop)
        shared.clients.append(client)
    return client


def writers() -> int:
    """How many store writers the process has now (tests, diagnostics)."""
    with _lock:
        return len(_writers)


def _after_fork_in_child() -> None:
    """The parent's writers and their connections are not this process's: pipelines attach anew."""
    global _lock
    _lock = threading.Lock()
    _writers.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
