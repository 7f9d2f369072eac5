"""Compression deadlines, watched by one thread for all calls.

``start()`` registers a running ``compress()`` with its deadline; ``finish()``
removes it and says whether it ran late. One daemon thread sleeps until the
earliest deadline; when a call is still running then, it reports
``deadline_exceeded`` at once -- the call itself may never return. The thread
never touches the engine, so a hung engine cannot hang the watchdog.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from ..failsafe import swallowed

logger = logging.getLogger(__name__)
_MAX_WAIT = min(3600.0, threading.TIMEOUT_MAX)


class _Call:
    __slots__ = ("seq", "engine", "engine_name", "span", "started", "deadline", "exceeded")

    def __init__(self, seq, engine, engine_name, span, started, deadline):
        self.seq = seq
        self.engine = engine
        self.engine_name = engine_name
        self.span = span
        self.started = started
        self.deadline = deadline
        self.exceeded = False


class CompressionWatchdog:
    def __init__(self, timeout_seconds: float, on_deadline: Callable[[_Call, float], None],
                 on_error: Callable[[str], None] = lambda _component: None) -> None:
        self.timeout_seconds = float(timeout_seconds)
        self._on_deadline = on_deadline
        self._on_error = on_error
        self._start_failed_logged = False
        self._lock = threading.Condition(threading.Lock())
        self._heap: List[Tuple[float, int]] = []
        self._running: Dict[int, _Call] = {}
        self._seq = itertools.count()
        self._thread: Optional[threading.Thread] = None
        self._stopped = False
        self.threads_started = 0

    def after_fork_in_child(self) -> None:
        """In a forked child: no thread, no call of the parent's is running here."""
        self._lock = threading.Condition(threading.Lock())
        self._heap = []
        self._running = {}
        self._thread = None

    # -- called on the hook path (compress is a cold hook) --------------------

    def start(self, engine, engine_name: str, span) -> _Call:
        now = time.monotonic()
        call = _Call(next(self._seq), engine, engine_name, span, now, now + self.timeout_seconds)
        with self._lock:
            self._running[call.seq] = call
            heapq.heappush(self._heap, (call.deadline, call.seq))
            if (self._thread is None or not self._thread.is_alive()) and not self._stopped:
                self._start_thread()
            elif self._heap[0][1] == call.seq:
                self._lock.notify()
        return call

    def _start_thread(self) -> None:
        """(Re)start the thread; under a thread limit, say so once and try again at the next call.
        The call itself is registered either way: a later start watches it too."""
        thread = threading.Thread(target=self._run, name="observed-engine-watchdog", daemon=True)
        try:
            thread.start()
        except RuntimeError as exc:      # "can't start new thread"
            self._on_error("watchdog")
            if not self._start_failed_logged:
                self._start_failed_logged = True
                logger.warning("observed-engine: cannot start the compression watchdog thread (%s); "
                               "compress() runs unwatched until a later call can start it", exc)
            return
        self._thread = thread
        self.threads_started += 1

    def finish(self, call: _Call) -> bool:
        """Remove the call; True when it had already passed its deadline."""
        with self._lock:
            self._running.pop(call.seq, None)
            return call.exceeded

    # -- read by the metric callbacks ------------------------------------------

    def snapshot(self) -> List[Tuple[str, float]]:
        """(engine name, age in seconds) of every call running now."""
        now = time.monotonic()
        with self._lock:
            return [(c.engine_name, now - c.started) for c in self._running.values()]

    def in_flight(self) -> int:
        with self._lock:
            return len(self._running)

    def stop(self, timeout: float = 2.0) -> None:
        """End the thread (calls still running are no longer watched)."""
        with self._lock:
            self._stopped = True
            thread = self._thread
            self._lock.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # -- the thread ---------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopped:
            due: List[_Call] = []
            with self._lock:
                while not self._stopped:
                    while self._heap and self._heap[0][1] not in self._running:
                        heapq.heappop(self._heap)      # finished in time
                    if not self._heap:
                        self._lock.wait(60.0)
                        continue
                    deadline, seq = self._heap[0]
                    wait = deadline - time.monotonic()
                    if wait > 0:
                        self._lock.wait(min(wait, _MAX_WAIT))   # a huge deadline must not overflow the timer
                        continue
                    heapq.heappop(self._heap)
                    call = self._running.get(seq)
                    if call is not None:
                        call.exceeded = True
                        due.append(call)
                    if not self._heap or self._heap[0][0] > time.monotonic():
                        break
            for call in due:
                with swallowed("watchdog"):
                    self._on_deadline(call, time.monotonic() - call.started)
