"""The background worker: hook events in, spans + metrics + store rows out.

Runs on the recorder's thread only. Every event is handled in its own ``try``: a
failure here is counted as a telemetry error and never reaches the host (which has
long since moved on). Hook-specific work lives in ``handlers.py``, one function per
hook; what the worker remembers per engine in ``memory.py``.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import traceback
from collections import defaultdict
from typing import Any, Dict, List, Optional

from opentelemetry.trace import Status, StatusCode

from .. import tokens as token_counting
from ..contract import spans as a
from ..contract import vocabulary as v
from ..contract.events import DEADLINE_EXCEEDED, ENGINE_META_ATTRIBUTE, DeadlineExceeded, HookEvent
from ..contract.hooks import HOOK_SPECS, LIVE_SPAN_KINDS
from ..contract.identifiers import identifier
from ..contract.store_schema import row_from
from ..tokens.counter import take_estimated
from .handlers import HANDLERS
from .histograms import HistogramBatch
from .memory import EngineMemory
from .pipeline_side import WorkerPipeline
from .spans import DirectSpans
from .state import resolve

logger = logging.getLogger(__name__)

_NS = 1_000_000_000
# Components that count their failures without logging them: the worker logs them once.
_QUIET_COMPONENTS = ("tracing", "metrics", "gauge")


_as_hook_event = tuple.__new__     # HookEvent._make without its classmethod call and length check
_SPAN_NAMES = tuple(a.hook_span_name(spec.name) for spec in HOOK_SPECS)   # by hook index

_PACE_AFTER_S = 0.001     # the worker holds the GIL at most this long in one go ...
_PACE_SLEEP_S = 0.00005   # ... then sleeps this long (about 5 % of its throughput under a backlog)


class EventProcessor:
    """Turns batches of events into counts, histogram records, spans and store rows.

    Its pipeline is passed in as a :class:`~.pipeline_side.WorkerPipeline`, the members it
    uses named there; the worker never imports the pipeline, and meets the capture side only
    through ``contract.events``.
    """

    def __init__(self, pipeline: WorkerPipeline) -> None:
        self.pipeline = pipeline
        self.settings = pipeline.settings
        self.instruments = pipeline.instruments
        self.tracer = pipeline.tracer
        self._direct_spans = DirectSpans(self.tracer)    # spans opened and closed at once, cheaply
        self._histograms = HistogramBatch()              # histogram values, recorded per batch
        self._call_keys: Dict[tuple, tuple] = {}         # (label, hook index, outcome) -> metric keys
        self.capture = self.settings.capture_content
        self.memories: Dict[int, EngineMemory] = {}
        self._engine_labels: set = set()
        self._known_names: set = set()
        self._logged: set = set()
        self.rows_submitted = 0          # store rows handed to the writer (undelivered = this - written - dropped)
        self.offset_ns = time.time_ns() - time.perf_counter_ns()
        self._offset_at = time.monotonic()
        self.host = socket.gethostname()
        self.pid = os.getpid()
        # per batch
        self._counts: Dict[tuple, int] = defaultdict(int)
        self._rows: List[tuple] = []

    # -- labels ------------------------------------------------------------------

    def engine_label(self, name: str) -> str:
        if name in self._engine_labels:
            return name
        if len(self._engine_labels) >= self.settings.max_label_values:
            return "other"
        self._engine_labels.add(name)
        return name

    def known_engine_names(self) -> List[str]:
        return list(self._known_names)

    def forget(self, key: int) -> None:
        self.memories.pop(key, None)

    # -- what the worker remembers ----------------------------------------------------

    def memory_for(self, engine) -> EngineMemory:
        mem = self.memories.get(id(engine))
        if mem is None:
            meta = getattr(type(engine), ENGINE_META_ATTRIBUTE, None)
            name = meta.inner_name if meta is not None else identifier(type(engine).__name__)
            mem = EngineMemory(name, type(engine))
            self.memories[id(engine)] = mem
            self._known_names.add(name)
            self.pipeline.register_engine(engine)   # copies made by deepcopy appear here first
        return mem

    def tokens_for(self, mem: EngineMemory):
        """The token counter for the engine's model's encoding."""
        if mem.tokens is None:
            # one counter (and one count cache) per encoding, shared by every model that uses it
            mem.tokens = token_counting.counter_for(self.settings.tokenizer, mem.model)
        return mem.tokens

    def _prewarm_tokens(self, mem: EngineMemory, row: Dict[str, Any]) -> None:
        """Half-way to the compression threshold, have the counter's helper process load the encoding
        (it does not wait), so it is ready when the first compression is counted, loaded while the
        host waits for its provider rather than during that compression's turn."""
        prompt, threshold = row.get("prompt_tokens"), row.get("threshold_tokens")
        if (type(prompt) is int and type(threshold) is int and threshold > 0 and 2 * prompt >= threshold
                and self.settings.tokenizer != v.TOKENIZER_ESTIMATE and token_counting.helper.enabled()):
            self.tokens_for(mem)

    # -- the batch loop ----------------------------------------------------------------

    def process_batch(self, batch: List[tuple]) -> None:
        if time.monotonic() - self._offset_at > 60:
            self.offset_ns = time.time_ns() - time.perf_counter_ns()
            self._offset_at = time.monotonic()
        clock, sleep = time.perf_counter, time.sleep
        held_since = clock()
        for event in batch:
            # Pacing: the worker shares the GIL with the host. Left alone, a thread that wants it
            # back waits for Python's switch interval (5 ms) while a backlog is processed; a short
            # sleep after each millisecond of work lets it in at once (measured: the slowest host
            # call during a 20,000-event backlog went from 6-25 ms to 1.4-3.5 ms).
            if clock() - held_since > _PACE_AFTER_S:
                sleep(_PACE_SLEEP_S)
                held_since = clock()
            try:
                if type(event[0]) is int:
                    self._hook_event(_as_hook_event(HookEvent, event))
                else:
                    self._internal_event(event)
            except Exception as exc:
                self.pipeline.count_error("worker")
                self.log_once(("worker", type(exc).__name__),
                               "observed-engine worker could not record an event (%s); counted in "
                               "hermes_context_engine_telemetry_errors_total{component='worker'}",
                               type(exc).__name__)   # the type only: the message may quote content
        self._flush_batch()

    def _flush_batch(self) -> None:
        errors, drops = self.pipeline.take_pending_errors()
        for component, n in errors.items():
            self._counts[("telemetry_errors", "component", component)] += n
            if component in _QUIET_COMPONENTS:   # counted where they happen, without a log line
                self._log_failure_once(component, None)
        for signal, n in drops.items():
            self._counts[("telemetry_dropped", "signal", signal)] += n
        self._histograms.record_all(self._histogram_failed)
        counts, self._counts = self._counts, defaultdict(int)
        for flat, n in counts.items():
            key, k = flat[0], (len(flat) - 1) // 2
            try:
                self.instruments[key].add(n, dict(zip(flat[1:1 + k], flat[1 + k:])))
            except Exception as exc:
                if key in ("telemetry_errors", "telemetry_dropped"):
                    # not counted again: with a meter that always fails that would never end
                    self._log_failure_once("metrics", exc)
                else:
                    self._telemetry_failed("metrics", exc)
        rows, self._rows = self._rows, []
        if rows and self.pipeline.store is not None:
            self.rows_submitted += len(rows)
            self.pipeline.store.submit(rows)

    # -- what handlers use ---------------------------------------------------------------

    def count(self, key: str, n: int = 1, **attrs) -> None:
        """Add ``n`` to the catalogue counter ``key`` (summed per batch, added once per batch)."""
        # flat (key, names..., values...): a tuple of strings hashes in a fraction of the time a
        # tuple of pairs takes (tuple hashes are not cached), and this runs several times per event.
        # The hottest callers (handlers: decisions, usage) build this key themselves: the same tuple.
        self._counts[(key, *attrs, *attrs.values())] += n

    def log_once(self, key, msg, *args) -> None:
        if key in self._logged:
            return
        self._logged.add(key)
        logger.warning(msg, *args)

    def record(self, instrument, value, attrs) -> None:
        """A histogram measurement, recorded with the others of its batch at the batch's end
        (``histograms.HistogramBatch``); a failing meter must not cost the event its row and span."""
        self._histograms.add(instrument, value, attrs)

    def _histogram_failed(self, exc: BaseException) -> None:
        self._telemetry_failed("metrics", exc)

    def event_row(self, mem: EngineMemory, call_row: Dict[str, Any], hook: str, event: str,
                  outcome: Optional[str], reason: Optional[str], duration_s: Optional[float]) -> None:
        """A store row for an event of the call (fail-open, bad input, timeouts, summary failure)."""
        self._rows.append(row_from(dict(
            ts=call_row["ts"], host=self.host, pid=self.pid, session=mem.session_id, engine=mem.name,
            hook=hook, event=event, outcome=outcome, reason=reason, duration_s=duration_s,
        )))

    def fail_open(self, mem: EngineMemory, label: str, hook: str, reason: str, call_row: Dict[str, Any]) -> None:
        self.count("fail_open", engine=label, hook=hook, reason=reason)
        self.event_row(mem, call_row, hook, v.FAIL_OPEN, v.FAIL_OPEN, reason, call_row.get("duration_s"))

    def bad_input(self, mem: EngineMemory, label: str, hook: str, kind: str, row: Dict[str, Any]) -> None:
        kind = identifier(kind)    # may quote a key or type name of the host's input
        self.count("bad_input", engine=label, hook=hook, kind=kind)
        self.log_once(("bad_input", mem.name, hook, kind),
                      "observed-engine: engine %r hook %s got odd input (%s); the call went through "
                      "unchanged, the value was not counted", mem.name, hook, kind)
        self.event_row(mem, row, hook, v.EVENT_BAD_INPUT, v.EVENT_BAD_INPUT, kind, None)

    def state_columns(self, mem: EngineMemory, raw_state, row: Dict[str, Any], engine=None) -> None:
        """The engine's state numbers (copied on the hook path) into the row (``engine``: where a
        number is a property's, its backing field is read now)."""
        state = resolve(mem.engine_class, raw_state, engine)
        if not state:
            return
        prompt, threshold, window = state
        if type(prompt) is int and type(threshold) is int and type(window) is int:
            row["prompt_tokens"] = prompt if prompt > 0 else 0
            row["threshold_tokens"] = threshold
            row["window_tokens"] = window
            return
        try:
            row["prompt_tokens"] = max(int(prompt), 0)
            row["threshold_tokens"] = int(threshold)
            row["window_tokens"] = int(window)
        except (TypeError, ValueError, OverflowError):   # e.g. an engine's float('inf') window
            pass

    def _estimated_in_delivery(self, label: str, row: Dict[str, Any], attrs: Dict[str, Any]) -> None:
        """A session end was waiting and the token-counting helper had not answered by its deadline
        (tokens.helper.hurry): the counts of this call are the estimate, and its row and span say so.
        Not an error of ours (nothing failed; a busy machine gave the helper no CPU): counted apart."""
        row["tokenizer"] = v.TOKENIZER_ESTIMATE
        if a.TOKENIZER in attrs:
            attrs[a.TOKENIZER] = v.TOKENIZER_ESTIMATE
        self.count("token_estimates", engine=label, reason=v.ESTIMATE_HELPER_BUSY)
        self.log_once(("tokenizer", "hurried"),
                      "observed-engine: the token-counting helper process had not answered when a session "
                      "end delivered what was queued (a busy machine: it runs at the lowest CPU priority); "
                      "the counts of that call are estimates (tokenizer='estimate' in its row and span). "
                      "Counted in hermes_context_engine_token_estimates_total{reason='helper_busy'}")

    # -- our own failures ------------------------------------------------------------------

    def _telemetry_failed(self, component: str, exc: Optional[BaseException]) -> None:
        """Our own failure: counted every time, logged once per component."""
        self.pipeline.count_error(component)
        self._log_failure_once(component, exc)

    def _log_failure_once(self, component: str, exc: Optional[BaseException]) -> None:
        # the exception's type only: its message may quote what the engine was given
        self.log_once(("telemetry_failed", component),
                      "observed-engine: %s failed%s; the host is not affected. Counted in "
                      "hermes_context_engine_telemetry_errors_total{component=%r}; later failures are not logged",
                      component, f" ({type(exc).__name__})" if exc is not None else "", component)

    def _epoch(self, perf_ns: int) -> int:
        return perf_ns + self.offset_ns

    # -- hook events ----------------------------------------------------------------------

    def _hook_event(self, ev: HookEvent) -> None:
        spec = HOOK_SPECS[ev.hook]
        hook = spec.name
        mem = self.memory_for(ev.engine)
        label = self.engine_label(mem.name)
        duration = (ev.t1 - ev.t0) / _NS
        outcome = v.CALL_OK if ev.exc is None else v.CALL_ERROR

        keys = self._call_keys.get((label, ev.hook, outcome))
        if keys is None:
            keys = self._keys_for_call(label, hook, ev.hook, outcome)
        self._counts[keys[0]] += 1                       # hook_calls{engine, hook, outcome}
        self._histograms.add_keyed(keys[1], duration)     # hook_duration{engine, hook}

        row: Dict[str, Any] = {
            "ts": (ev.t1 + self.offset_ns) / _NS, "host": self.host, "pid": self.pid,
            "engine": mem.name, "hook": hook, "event": v.EVENT_CALL, "outcome": outcome,
            "duration_s": duration,
        }
        attrs: Dict[str, Any] = {}
        if ev.exc is not None:
            row["reason"] = identifier(type(ev.exc).__name__)

        handler = HANDLERS.get(hook)
        if handler is not None:
            handler(self, mem, label, ev, row, attrs)
            if "tokenizer" in row and take_estimated():
                self._estimated_in_delivery(label, row, attrs)
        if mem.tokens is None and hook == "update_from_response":
            self._prewarm_tokens(mem, row)

        if ev.exc is not None and spec.host_swallows:  # noqa: SIM102  (the host swallows; then the rule)
            if not (spec.first_call_propagates and hook not in mem.hooks_seen):
                self.fail_open(mem, label, hook, v.REASON_EXCEPTION, row)
        mem.hooks_seen.add(hook)

        row["session"] = mem.session_id
        self._rows.append(row_from(row))
        if self.settings.traces:
            self._finish_span(spec, mem, ev, attrs)

    def _keys_for_call(self, label: str, hook: str, index: int, outcome: str) -> tuple:
        """The hook_calls counter key and the hook_duration histogram key of a call (kept per engine
        label, hook and outcome: the label set is bounded by max_label_values)."""
        keys = (("hook_calls", "engine", "hook", "outcome", label, hook, outcome),
                self._histograms.key(self.instruments.hook_duration, {"engine": label, "hook": hook}))
        self._call_keys[(label, index, outcome)] = keys
        return keys

    def _finish_span(self, spec, mem: EngineMemory, ev: HookEvent, attrs: Dict[str, Any]) -> None:
        base = {a.ENGINE_NAME: mem.name, a.HOOK: spec.name}
        if mem.session_id is not None:
            base[a.CONVERSATION_ID] = mem.session_id
        base.update(attrs)
        end = ev.t1 + self.offset_ns      # epoch ns (_epoch)
        try:
            if spec.kind in LIVE_SPAN_KINDS:
                span = ev.span_or_parent
                if span is None:
                    return
                span.set_attributes(base)
            else:
                name, start = _SPAN_NAMES[ev.hook], ev.t0 + self.offset_ns
                if ev.exc is None and self._direct_spans.emit(name, ev.span_or_parent, base, start, end):
                    return
                span = self.tracer.start_span(name, context=ev.span_or_parent, start_time=start, attributes=base)
            if ev.exc is not None:
                self._record_exception(span, ev.exc, ev.t1)
            span.end(end_time=end)
        except Exception as exc:
            self._telemetry_failed("tracing", exc)

    def _record_exception(self, span, exc: BaseException, t1: int) -> None:
        """Status ERROR and an exception event; the message only with capture_content (it may quote messages)."""
        message = str(exc) if self.capture else a.REDACTED
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        span.add_event(a.EXCEPTION_EVENT, {
            a.EXCEPTION_TYPE: f"{type(exc).__module__}.{type(exc).__qualname__}",
            a.EXCEPTION_MESSAGE: message,
            a.EXCEPTION_STACKTRACE: "".join(traceback.format_tb(exc.__traceback__)),
            a.EXCEPTION_ESCAPED: True,
        }, timestamp=self._epoch(t1))

    # -- internal events (watchdog) ------------------------------------------------------

    def _internal_event(self, event: tuple) -> None:
        if event[0] == DEADLINE_EXCEEDED:
            ev = DeadlineExceeded._make(event)
            mem = self.memory_for(ev.engine)
            label = self.engine_label(mem.name)
            self.count("compression_timeouts", engine=label, kind=v.DEADLINE_EXCEEDED)
            self.count("compressions", engine=label, outcome=v.TIMEOUT)
            self.log_once(("deadline", mem.name),
                          "observed-engine: compress() of engine %r still running after its %g s deadline "
                          "(the host will give up on it); later overruns are counted, not logged",
                          mem.name, self.pipeline.compress_timeout)
            self.event_row(mem, {"ts": self._epoch(ev.t) / _NS}, "compress", v.DEADLINE_EXCEEDED,
                           v.TIMEOUT, v.DEADLINE_EXCEEDED, ev.age)
