"""The background worker's side: events in, spans + metrics + store rows out.

Runs on the recorder's thread only. Every event is handled in its own
``try``: a failure here is counted as a telemetry error and never reaches the
host (which has long since moved on).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import traceback
from collections import defaultdict
from typing import Any, Dict, List, Optional

from opentelemetry.trace import Status, StatusCode

from . import engine_state
from .hooks import COMPRESS, HOOK_SPECS, SELECT, TOOL
from .messages import as_messages, message_problem
from .selection import classify_selection
from .store import make_row
from .usage import parse_usage

logger = logging.getLogger("observed_engine")

_NS = 1_000_000_000
# Components that count their failures without logging them: the worker logs them once.
_QUIET_COMPONENTS = ("tracing", "metrics", "gauge")
_REDACTED = "[redacted: observed.capture_content is off]"


_PACE_AFTER_S = 0.001     # the worker holds the GIL at most this long in one go ...
_PACE_SLEEP_S = 0.00005   # ... then sleeps this long (about 5 % of its throughput under a backlog)


class EngineState:
    """What the worker remembers about one engine instance."""

    __slots__ = ("name", "engine_class", "session_id", "tool_schemas_called", "last_selection",
                 "last_selection_obj", "model", "tokens")

    def __init__(self, name: str, engine_class: type = object) -> None:
        self.name = name
        self.engine_class = engine_class   # where a state number the instance lacks is looked up
        self.session_id: Optional[str] = None
        self.tool_schemas_called = False
        self.last_selection: Optional[tuple] = None
        self.last_selection_obj: Any = None
        self.model: Optional[str] = None
        self.tokens = None


class EventProcessor:
    def __init__(self, telemetry) -> None:
        self.telemetry = telemetry
        self.settings = telemetry.settings
        self.instruments = telemetry.instruments
        self.tracer = telemetry.tracer
        self.capture = self.settings.capture_content
        self.states: Dict[int, EngineState] = {}
        self._engine_labels: set = set()
        self._known_names: set = set()
        self._logged: set = set()
        self._token_counters: Dict[Optional[str], Any] = {}
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
        self.states.pop(key, None)

    # -- state ---------------------------------------------------------------------

    def state_for(self, engine) -> EngineState:
        st = self.states.get(id(engine))
        if st is None:
            from .wrapper import observed_meta

            meta = observed_meta(engine)
            name = meta.inner_name if meta else type(engine).__name__
            st = EngineState(name, type(engine))
            self.states[id(engine)] = st
            self._known_names.add(name)
            self.telemetry.register_engine(engine)   # copies made by deepcopy appear here first
        return st

    def tokens_for(self, st: EngineState):
        if st.tokens is None:
            st.tokens = self._token_counter(st.model)
        return st.tokens

    def _token_counter(self, model: Optional[str]):
        counter = self._token_counters.get(model)
        if counter is None:
            from .tokens import TokenCounter

            counter = TokenCounter(self.settings.tokenizer, model=model)
            self._token_counters[model] = counter
        return counter

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
                    self._hook_event(event)
                else:
                    self._internal_event(event)
            except Exception as exc:
                self.telemetry.count_error("worker")
                self._log_once(("worker", type(exc).__name__),
                               "observed-engine worker could not record an event (%s); counted in "
                               "hermes_context_engine_telemetry_errors_total{component='worker'}",
                               type(exc).__name__)   # the type only: the message may quote content
        self._flush_batch()

    def _flush_batch(self) -> None:
        errors, drops = self.telemetry.take_pending_errors()
        for component, n in errors.items():
            self._counts[("telemetry_errors", (("component", component),))] += n
            if component in _QUIET_COMPONENTS:   # counted where they happen, without a log line
                self._log_failure_once(component, None)
        for signal, n in drops.items():
            self._counts[("telemetry_dropped", (("signal", signal),))] += n
        counts, self._counts = self._counts, defaultdict(int)
        for (key, attrs), n in counts.items():
            try:
                self.instruments[key].add(n, dict(attrs))
            except Exception as exc:
                if key in ("telemetry_errors", "telemetry_dropped"):
                    # not counted again: with a meter that always fails that would never end
                    self._log_failure_once("metrics", exc)
                else:
                    self._telemetry_failed("metrics", exc)
        rows, self._rows = self._rows, []
        if rows and self.telemetry.store is not None:
            self.telemetry.store.submit(rows)

    def _count(self, key: str, n: int = 1, **attrs) -> None:
        self._counts[(key, tuple(attrs.items()))] += n

    def _log_once(self, key, msg, *args) -> None:
        if key in self._logged:
            return
        self._logged.add(key)
        logger.warning(msg, *args)

    def _telemetry_failed(self, component: str, exc: Optional[BaseException]) -> None:
        """Our own failure: counted every time, logged once per component."""
        self.telemetry.count_error(component)
        self._log_failure_once(component, exc)

    def _log_failure_once(self, component: str, exc: Optional[BaseException]) -> None:
        # the exception's type only: its message may quote what the engine was given
        self._log_once(("telemetry_failed", component),
                       "observed-engine: %s failed%s; the host is not affected. Counted in "
                       "hermes_context_engine_telemetry_errors_total{component=%r}; later failures are not logged",
                       component, f" ({type(exc).__name__})" if exc is not None else "", component)

    def _record(self, instrument, value, attrs) -> None:
        """A histogram measurement; a failing meter must not cost the event its row and span."""
        try:
            instrument.record(value, attrs)
        except Exception as exc:
            self._telemetry_failed("metrics", exc)

    def _epoch(self, perf_ns: int) -> int:
        return perf_ns + self.offset_ns

    # -- hook events ----------------------------------------------------------------------

    def _hook_event(self, event: tuple) -> None:
        idx, engine, t0, t1, exc, args, kwargs, result, ctx, extra = event
        spec = HOOK_SPECS[idx]
        hook = spec.name
        st = self.state_for(engine)
        label = self.engine_label(st.name)
        duration = (t1 - t0) / _NS
        outcome = "ok" if exc is None else "error"

        self._count("hook_calls", engine=label, hook=hook, outcome=outcome)
        self._record(self.instruments.hook_duration, duration, {"engine": label, "hook": hook})

        row: Dict[str, Any] = {
            "ts": self._epoch(t1) / _NS, "host": self.host, "pid": self.pid,
            "engine": st.name, "hook": hook, "event": "call", "outcome": outcome,
            "duration_s": duration,
        }
        attrs: Dict[str, Any] = {}
        if exc is not None:
            row["reason"] = type(exc).__name__

        handler = _HANDLERS.get(hook)
        if handler is not None:
            handler(self, st, label, args, kwargs, result, exc, extra, row, attrs)

        if exc is not None and spec.host_swallows:
            first_schema_call = hook == "get_tool_schemas" and not st.tool_schemas_called
            if not first_schema_call:
                self._fail_open(st, label, hook, "exception", row)
        if hook == "get_tool_schemas":
            st.tool_schemas_called = True

        row["session"] = st.session_id
        self._rows.append(make_row(**row))
        self._finish_span(spec, st, hook, t0, t1, exc, ctx, attrs)

    def _fail_open(self, st: EngineState, label: str, hook: str, reason: str, call_row: Dict[str, Any]) -> None:
        self._count("fail_open", engine=label, hook=hook, reason=reason)
        self._rows.append(make_row(
            ts=call_row["ts"], host=self.host, pid=self.pid, session=st.session_id, engine=st.name,
            hook=hook, event="fail_open", outcome="fail_open", reason=reason,
            duration_s=call_row.get("duration_s"),
        ))

    def _finish_span(self, spec, st, hook, t0, t1, exc, ctx, attrs) -> None:
        if not self.settings.traces:
            return
        base = {"hermes.context_engine.name": st.name, "hermes.context_engine.hook": hook}
        if st.session_id is not None:
            base["gen_ai.conversation.id"] = st.session_id
        base.update(attrs)
        try:
            if spec.kind in (COMPRESS, TOOL):
                span = ctx
                if span is None:
                    return
                span.set_attributes(base)
            else:
                span = self.tracer.start_span(f"context_engine.{hook}", context=ctx,
                                              start_time=self._epoch(t0), attributes=base)
            if exc is not None:
                self._record_exception(span, exc, t1)
            span.end(end_time=self._epoch(t1))
        except Exception as exc:
            self._telemetry_failed("tracing", exc)

    def _record_exception(self, span, exc: BaseException, t1: int) -> None:
        """Status ERROR and an exception event; the message only with capture_content (it may quote messages)."""
        message = str(exc) if self.capture else _REDACTED
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        span.add_event("exception", {
            "exception.type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "exception.message": message,
            "exception.stacktrace": "".join(traceback.format_tb(exc.__traceback__)),
            "exception.escaped": True,
        }, timestamp=self._epoch(t1))

    # -- internal events (watchdog) ------------------------------------------------------

    def _internal_event(self, event: tuple) -> None:
        kind = event[0]
        if kind == "deadline_exceeded":
            _, engine, t, age = event
            st = self.state_for(engine)
            label = self.engine_label(st.name)
            self._count("compression_timeouts", engine=label, kind="deadline_exceeded")
            self._count("compressions", engine=label, outcome="timeout")
            self._log_once(("deadline", st.name),
                           "observed-engine: compress() of engine %r still running after its %g s deadline "
                           "(the host will give up on it); later overruns are counted, not logged",
                           st.name, self.telemetry.compress_timeout)
            self._rows.append(make_row(
                ts=self._epoch(t) / _NS, host=self.host, pid=self.pid, session=st.session_id, engine=st.name,
                hook="compress", event="deadline_exceeded", outcome="timeout",
                reason="deadline_exceeded", duration_s=age,
            ))

    # -- per-hook handlers ---------------------------------------------------------------

    def on_session_start(self, st, label, args, kwargs, result, exc, extra, row, attrs):
        session = args[0] if args else kwargs.get("session_id")
        if session is not None:
            st.session_id = str(session)
        reason = kwargs.get("boundary_reason")
        if isinstance(reason, str):
            attrs["hermes.session.boundary_reason"] = reason
        model = kwargs.get("model")
        if isinstance(model, str) and model != st.model:
            st.model = model
            st.tokens = None

    def bind_session_state(self, st, label, args, kwargs, result, exc, extra, row, attrs):
        session = kwargs.get("session_id", args[1] if len(args) > 1 else None)
        if session:
            st.session_id = str(session)

    def update_model(self, st, label, args, kwargs, result, exc, extra, row, attrs):
        model = kwargs.get("model", args[0] if args else None)
        if isinstance(model, str) and model != st.model:
            st.model = model
            st.tokens = None
            attrs["gen_ai.request.model"] = model
        self._state_columns(st, extra, row)

    def on_session_reset(self, st, label, args, kwargs, result, exc, extra, row, attrs):
        st.last_selection = st.last_selection_obj = None
        self._state_columns(st, extra, row)

    def update_from_response(self, st, label, args, kwargs, result, exc, extra, row, attrs):
        usage = args[0] if args else kwargs.get("usage")
        values, problems = parse_usage(usage)
        for token_type, n in values.items():
            if n:
                self._count("usage_tokens", n, engine=label, token_type=token_type)
            row[_USAGE_COLUMNS[token_type]] = n
        for problem in problems:
            self._bad_input(st, label, "update_from_response", problem, row)
        if "prompt" in values:
            attrs["gen_ai.usage.input_tokens"] = values["prompt"]
        if "completion" in values:
            attrs["gen_ai.usage.output_tokens"] = values["completion"]
        self._state_columns(st, extra, row)

    def _state_columns(self, st, raw_state, row) -> None:
        state = engine_state.resolve(st.engine_class, raw_state)
        if not state:
            return
        prompt, threshold, window = state
        try:
            row["prompt_tokens"] = max(int(prompt), 0)
            row["threshold_tokens"] = int(threshold)
            row["window_tokens"] = int(window)
        except (TypeError, ValueError, OverflowError):   # e.g. an engine's float('inf') window
            pass

    def _bad_input(self, st, label, hook, kind, row) -> None:
        self._count("bad_input", engine=label, hook=hook, kind=kind)
        self._log_once(("bad_input", st.name, hook, kind),
                       "observed-engine: engine %r hook %s got odd input (%s); the call went through "
                       "unchanged, the value was not counted", st.name, hook, kind)
        self._rows.append(make_row(
            ts=row["ts"], host=self.host, pid=self.pid, session=st.session_id, engine=st.name,
            hook=hook, event="bad_input", outcome="bad_input", reason=kind,
        ))

    def compress(self, st, label, args, kwargs, result, exc, extra, row, attrs):
        before, after, late, state, summary = extra
        tokens = self.tokens_for(st)
        row["tokenizer"] = tokens.method
        attrs["hermes.context.tokenizer"] = tokens.method
        if before is None:
            self._bad_input(st, label, "compress", "messages_not_a_list", row)
        else:
            problem = message_problem(before)
            if problem is not None:
                self._bad_input(st, label, "compress", problem, row)
            n_tokens = tokens.count_messages(as_messages(before))
            row["messages_before"], row["tokens_before"] = len(before), n_tokens
            attrs["hermes.context.messages.before"] = len(before)
            attrs["hermes.context.tokens.before"] = n_tokens
        if after is not None:
            n_tokens = tokens.count_messages(as_messages(after))
            row["messages_after"], row["tokens_after"] = len(after), n_tokens
            attrs["hermes.context.messages.after"] = len(after)
            attrs["hermes.context.tokens.after"] = n_tokens
        current = kwargs.get("current_tokens", args[1] if len(args) > 1 else None)
        if isinstance(current, int) and not isinstance(current, bool):
            attrs["hermes.context.current_tokens"] = current
        if "force" in kwargs:
            attrs["hermes.context.compress.force"] = bool(kwargs["force"])
        focus = kwargs.get("focus_topic", args[2] if len(args) > 2 else None)
        if self.capture and focus:
            attrs["hermes.context.focus_topic"] = str(focus)
            row["content"] = json.dumps({"focus_topic": str(focus)})

        if exc is not None:
            outcome = "error"
        elif late:
            outcome = "timeout"
        elif after is not None and after == before:
            outcome = "noop"
        else:
            outcome = "compressed"
        row["outcome"] = outcome
        attrs["hermes.context.compress.outcome"] = outcome
        failed_summary = engine_state.summary_failure(summary) if exc is None else None
        if failed_summary is not None:
            kind, cause = failed_summary
            attrs["hermes.context.compress.summary_failure"] = kind
            attrs["hermes.context.compress.summary_failure_cause"] = cause
            self._count("summary_failures", engine=label, kind=kind, cause=cause)
            self._log_once(("summary_failure", st.name, kind, cause),
                           "observed-engine: compress() of engine %r returned after its summary model failed "
                           "(%s, cause: %s); counted in hermes_context_compression_summary_failures_total, "
                           "later ones are not logged", st.name, kind, cause)
            self._rows.append(make_row(
                ts=row["ts"], host=self.host, pid=self.pid, session=st.session_id, engine=st.name,
                hook="compress", event="summary_failure", outcome=kind, reason=cause,
                duration_s=row["duration_s"],
            ))
        self._state_columns(st, state, row)
        self._record(self.instruments.compression_duration, row["duration_s"], {"engine": label})
        if late:
            # counted as outcome=timeout when the deadline passed; now it is over
            self._count("compression_timeouts", engine=label, kind="late_completion")
            self._rows.append(make_row(
                ts=row["ts"], host=self.host, pid=self.pid, session=st.session_id, engine=st.name,
                hook="compress", event="late_completion", outcome="error" if exc is not None else "late",
                reason="late_completion", duration_s=row["duration_s"],
            ))
        else:
            self._count("compressions", engine=label, outcome=outcome)
        for stage in ("before", "after"):
            if row.get(f"tokens_{stage}") is not None:
                self._record(self.instruments.compression_tokens, row[f"tokens_{stage}"],
                             {"engine": label, "stage": stage})
                self._record(self.instruments.compression_messages, row[f"messages_{stage}"],
                             {"engine": label, "stage": stage})

    def select_context(self, st, label, args, kwargs, result, exc, extra, row, attrs):
        request = args[0] if args else kwargs.get("request_messages")
        problem = "messages_not_a_list" if type(request) is not list else message_problem(request)
        if problem is not None:
            self._bad_input(st, label, "select_context", problem, row)
        tokens = self.tokens_for(st)
        # extra: the selected list's items, copied on the hook path (the engine may edit its list later)
        verdict = classify_selection(request, result, exc, st.last_selection, st.last_selection_obj,
                                     snapshot=extra if type(extra) is tuple else None)
        if verdict.fail_open_reason == "invalid_return":
            # exceptions are counted by the generic host_swallows path
            self._fail_open(st, label, "select_context", "invalid_return", row)
            self._log_once(("select_invalid", st.name, verdict.detail),
                           "observed-engine: engine %r select_context returned an invalid value (%s); "
                           "the host falls back to the original request", st.name, verdict.detail)
        lost = 0
        if verdict.result == "changed_selection" and st.last_selection is not None:
            lost = tokens.count_messages_from(as_messages(st.last_selection), verdict.first_difference)
        if verdict.selection is not None:
            st.last_selection, st.last_selection_obj = verdict.selection, result
            n_sel = tokens.count_messages(as_messages(verdict.selection))
            row["messages_after"], row["tokens_after"] = len(verdict.selection), n_sel
            attrs["hermes.context.selection.messages"] = len(verdict.selection)
            attrs["hermes.context.selection.tokens"] = n_sel
        if type(request) is list:
            n_req = tokens.count_messages(as_messages(request))
            row["messages_before"], row["tokens_before"] = len(request), n_req
            attrs["hermes.context.request.tokens"] = n_req
        budget = kwargs.get("budget_tokens")
        if isinstance(budget, int) and not isinstance(budget, bool):
            attrs["hermes.context.selection.budget_tokens"] = budget
        self._count("selections", engine=label, result=verdict.result)
        if lost:
            self._count("cache_prefix_lost", lost, engine=label)
        row["outcome"] = verdict.result
        row["cache_lost_tokens"] = lost
        row["tokenizer"] = tokens.method
        attrs["hermes.context.selection.result"] = verdict.result
        attrs["hermes.context.selection.cache_prefix_lost_tokens"] = lost

    def record_timeout_failure(self, st, label, args, kwargs, result, exc, extra, row, attrs):
        kind = kwargs.get("failure_kind")
        reason = args[0] if args else kwargs.get("reason")
        self._count("compression_timeouts", engine=label, kind="host_reported")
        self._rows.append(make_row(
            ts=row["ts"], host=self.host, pid=self.pid, session=st.session_id, engine=st.name,
            hook="compress", event="host_reported", outcome="timeout",
            reason=str(kind) if kind is not None else "unspecified",
        ))
        if kind is not None:
            attrs["hermes.context.compress.failure_kind"] = str(kind)
        if self.capture and reason is not None:
            attrs["hermes.context.compress.failure_reason"] = str(reason)

    def handle_tool_call(self, st, label, args, kwargs, result, exc, extra, row, attrs):
        tool = args[0] if args else kwargs.get("name")
        row["reason"] = row.get("reason") or (str(tool) if tool is not None else None)
        if self.capture:
            tool_args = args[1] if len(args) > 1 else kwargs.get("args")
            try:
                attrs["gen_ai.tool.call.arguments"] = json.dumps(tool_args, default=str)[:4096]
                row["content"] = attrs["gen_ai.tool.call.arguments"]
            except Exception:
                pass


_USAGE_COLUMNS = {
    "prompt": "input_tokens", "completion": "output_tokens", "cache_read": "cache_read_tokens",
    "cache_write": "cache_write_tokens", "reasoning": "reasoning_tokens",
}

_HANDLERS = {
    name: getattr(EventProcessor, name)
    for name in ("on_session_start", "bind_session_state", "update_model", "on_session_reset",
                 "update_from_response", "compress", "select_context", "record_timeout_failure",
                 "handle_tool_call")
}
