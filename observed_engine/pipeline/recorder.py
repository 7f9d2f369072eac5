"""The hand-off between the hook path and the background worker.

Hooks append one tuple to a deque (thread-safe, lock-free in CPython) as long
as it holds fewer than ``capacity`` items; past that the event is dropped and
counted. One daemon thread drains the deque in batches and hands them to the
processor, which builds spans, metrics and store rows.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import deque
from typing import Callable, List

logger = logging.getLogger("observed_engine.recorder")


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
        import ctypes   # imported by Hermes anyway

        prctl = ctypes.CDLL(None, use_errno=True).prctl
        if prctl(_PR_SET_TIMERSLACK, ns, 0, 0, 0) != 0:
            return None
        return prctl(_PR_GET_TIMERSLACK, 0, 0, 0, 0)
    except Exception:
        return None


class _FlushMarker:
    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


class Recorder:
    def __init__(self, process_batch: Callable[[List[tuple]], None], capacity: int = 100_000,
                 enabled: bool = True, interval: float = 0.05,
                 on_drop: Callable[[int], None] = lambda _n: None) -> None:
        self.queue: deque = deque()
        self.capacity = capacity
        self.enabled = enabled
        self.interval = interval
        self.dropped = 0
        self.processed = 0
        self._process_batch = process_batch
        self._on_drop = on_drop
        self._drop_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = False
        self.timer_slack_ns = None     # the worker thread's, once it runs (None: the system's default)
        self._thread = threading.Thread(target=self._run, name="observed-engine-worker", daemon=True)
        if enabled:   # disabled: no hook records anything, so no thread is started at all
            self._thread.start()

    def after_fork_in_child(self) -> None:
        """In a forked child: the parent's worker thread does not exist here, and the events
        queued before the fork are the parent's to deliver. Same deque (the generated hooks hold
        its ``append``), emptied; fresh locks; a worker thread of the child's own."""
        self.queue.clear()
        self._drop_lock = threading.Lock()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="observed-engine-worker", daemon=True)
        if self.enabled and not self._stopped:
            self._thread.start()

    # -- hook side ----------------------------------------------------------------

    def push(self, event: tuple) -> None:
        if len(self.queue) < self.capacity:
            self.queue.append(event)
        else:
            self.note_dropped()

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
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # -- worker -------------------------------------------------------------------

    def _run(self) -> None:
        self.timer_slack_ns = _tighten_timer_slack(WORKER_TIMER_SLACK_NS)
        queue = self.queue
        popleft = queue.popleft
        while not self._stopped:
            self._wake.wait(self.interval)
            self._wake.clear()
            while queue:
                batch: List[tuple] = []
                markers: List[_FlushMarker] = []
                while queue and len(batch) < 4096:
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
