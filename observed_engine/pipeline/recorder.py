"""The hand-off between the hook path and the background worker.

Hooks append one tuple to a bounded deque (dropped and counted when full); a daemon thread
drains it in batches into the processor. When editing: recorders of pipelines that write the
same store file share one :class:`WorkerThread` (``share_key``), served in turn, each recorder
keeping its own queue, bound, processor and flush markers.

The full account: docs/design/internals.md, *observed_engine/pipeline/recorder.py*.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections import deque
from typing import Callable, Dict, List, Optional

logger = logging.getLogger(__name__)


_PR_SET_TIMERSLACK, _PR_GET_TIMERSLACK = 29, 30     # prctl(2) options (Linux)
WORKER_TIMER_SLACK_NS = 1_000


def _tighten_timer_slack(ns: int):
    """Set the calling thread's timer slack to ``ns`` (Linux; this thread only) and return what the
    kernel then reports, or None where that cannot be done. The worker's pacing sleeps of 50 µs
    (``worker.processor``) took 136 µs at the kernel's default slack of 50 µs, so under a backlog the
    worker lost 12 % of its time to them instead of 5 %; with 1 µs of slack, 85 µs. Other threads,
    the host's among them, keep their own slack."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes  # imported by Hermes anyway

        prctl = ctypes.CDLL(None, use_errno=True).prctl
        if prctl(_PR_SET_TIMERSLACK, ns, 0, 0, 0) != 0:
            return None
        return prctl(_PR_GET_TIMERSLACK, 0, 0, 0, 0)
    except Exception:  # no ctypes/libc prctl here (or refused): None, the kernel's default slack stays
        return None


class _FlushMarker:
    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


BATCH_SIZE = 4096

_threads_lock = threading.Lock()
_shared_threads: Dict[object, WorkerThread] = {}


class WorkerThread:
    """One worker thread serving one or more recorders; it ends when the last one stops."""

    def __init__(self, interval: float, key: object = None) -> None:
        self.interval = interval
        self.key = key
        self.recorders: List[Recorder] = []
        self.wake = threading.Event()
        self.timer_slack_ns = None     # the thread's, once it runs (None: the system's default)
        self.thread = threading.Thread(target=self._run, name="observed-engine-worker", daemon=True)
        self.started = False
        self.ended = False             # served its last recorder: a new one gets a new thread

    def detach(self, recorder: Recorder) -> bool:
        """Stop serving ``recorder``; True when no recorder is left (the thread ends)."""
        with _threads_lock:
            if recorder in self.recorders:
                self.recorders.remove(recorder)
            last = not self.recorders
            if last and self.key is not None and _shared_threads.get(self.key) is self:
                del _shared_threads[self.key]
        self.wake.set()
        return last

    def _serving(self) -> List[Recorder]:
        with _threads_lock:
            serving = [r for r in self.recorders if not r._stopped]
            if not serving:
                self.ended = True
                if self.key is not None and _shared_threads.get(self.key) is self:
                    del _shared_threads[self.key]
        return serving

    def _run(self) -> None:
        self.timer_slack_ns = _tighten_timer_slack(WORKER_TIMER_SLACK_NS)
        while True:
            recorders = self._serving()
            if not recorders:
                return
            self.wake.wait(min(r.interval for r in recorders))
            self.wake.clear()
            busy = True
            while busy:                     # a batch of each queue in turn, until all are empty
                busy = False
                for recorder in recorders:
                    if recorder.queue and not recorder._stopped:
                        recorder._drain_batch()
                        busy = True


def attach_recorder(recorder: Recorder) -> WorkerThread:
    """Serve ``recorder`` from the worker thread of its ``share_key`` (started on first use; a
    thread of its own for key None)."""
    key = recorder.share_key
    with _threads_lock:
        worker = _shared_threads.get(key) if key is not None else None
        if worker is None or worker.ended:
            worker = WorkerThread(recorder.interval, key)
            if key is not None:
                _shared_threads[key] = worker
        worker.recorders.append(recorder)
        start = not worker.started
        worker.started = True
    if start:
        worker.thread.start()
    return worker


def worker_threads() -> int:
    """How many shared worker threads the process has now (tests, diagnostics)."""
    with _threads_lock:
        return len(_shared_threads)


def _after_fork_in_child() -> None:
    global _threads_lock
    _threads_lock = threading.Lock()
    _shared_threads.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Recorder:
    def __init__(self, process_batch: Callable[[List[tuple]], None], capacity: int = 100_000,
                 enabled: bool = True, interval: float = 0.05,
                 on_drop: Callable[[int], None] = lambda _n: None, share_key: Optional[object] = None) -> None:
        self.queue: deque = deque()
        self.capacity = capacity
        self.enabled = enabled
        self.interval = interval
        self.dropped = 0
        self.processed = 0
        self.share_key = share_key
        self._process_batch = process_batch
        self._on_drop = on_drop
        self._drop_lock = threading.Lock()
        self._stopped = False
        self._worker: Optional[WorkerThread] = None
        if enabled:   # disabled: no hook records anything, so no thread is started at all
            self._attach()

    def _attach(self) -> None:
        self._worker = attach_recorder(self)

    # the worker thread, as callers (tests, benchmarks) saw it when each recorder had its own
    @property
    def _thread(self) -> threading.Thread:
        worker = self._worker
        return worker.thread if worker is not None else threading.Thread(target=lambda: None)

    @property
    def _wake(self) -> threading.Event:
        worker = self._worker
        return worker.wake if worker is not None else threading.Event()

    @property
    def timer_slack_ns(self):
        worker = self._worker
        return worker.timer_slack_ns if worker is not None else None

    def after_fork_in_child(self) -> None:
        """In a forked child: the parent's worker thread does not exist here, and the events
        queued before the fork are the parent's to deliver. Same deque (the generated hooks hold
        its ``append``), emptied; fresh locks; a worker thread of the child's own (shared again
        by the child's recorders of one store file)."""
        self.queue.clear()
        self._drop_lock = threading.Lock()
        self._worker = None
        if self.enabled and not self._stopped:
            self._attach()

    # -- hook side ----------------------------------------------------------------

    def push(self, event: tuple) -> None:
        if len(self.queue) < self.capacity:
            self.queue.append(event)
        else:
            self.note_dropped()

    def push_wake_up(self, event: tuple) -> None:
        """Queue a no-op event that has the worker run (e.g. publish pending counts). With the
        queue full nothing is queued and nothing counted as lost: a full queue wakes the worker
        anyway, and only hook events count in telemetry_dropped{signal="event"}."""
        if len(self.queue) < self.capacity:
            self.queue.append(event)
        self._wake.set()

    def note_dropped(self) -> None:
        with self._drop_lock:
            self.dropped += 1
        self._on_drop(1)

    # -- control ------------------------------------------------------------------

    def flush(self, timeout: float = 5.0) -> bool:
        """Block until every event pushed before this call has been processed."""
        if not self.enabled:
            return True     # nothing is ever recorded
        if self._stopped or not self._thread.is_alive():
            return False
        marker = _FlushMarker()
        self.queue.append(marker)
        self._wake.set()
        return marker.done.wait(min(max(timeout, 0.0), threading.TIMEOUT_MAX))

    def stop(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        self._stopped = True
        worker = self._worker
        if worker is not None and worker.detach(self) and worker.thread.is_alive():
            worker.thread.join(timeout)

    # -- worker -------------------------------------------------------------------

    def _drain_batch(self) -> None:
        """(worker thread) One batch of up to BATCH_SIZE events, or up to a flush marker."""
        queue = self.queue
        popleft = queue.popleft
        batch: List[tuple] = []
        markers: List[_FlushMarker] = []
        item = None
        while queue and len(batch) < BATCH_SIZE:
            item = popleft()
            if type(item) is _FlushMarker:
                markers.append(item)
                break
            batch.append(item)
        if batch:
            try:
                self._process_batch(batch)
            except BaseException:  # the processor guards each event; this is a last resort
                logger.exception("observed-engine worker failed on a batch of %d events", len(batch))
            self.processed += len(batch)
        # the events hold their engines: an engine the host dropped must not be kept alive by
        # the worker's last batch until its next wake (its pipeline could not be retired)
        batch = item = None
        for marker in markers:
            marker.done.set()
