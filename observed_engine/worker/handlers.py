"""One handler per hook that needs more than the generic call record.

Every handler takes the same arguments, in order: the processor (``w``: counts, rows,
token counters), what the worker remembers about the engine (``mem``), the engine's
metric label, the event (``contract.events.HookEvent``), and the store row and span
attributes of the call, which it fills in (unused ones are named ``_x``). It runs on the worker
thread; the processor guards each event, so a handler may raise (counted, logged once).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict

from ..contract import spans as a
from ..contract import vocabulary as v
from ..contract.events import HookEvent, as_messages
from ..contract.identifiers import identifier
from .messages import message_problem
from .selection import classify_selection
from .state import summary_failure
from .usage import parse_usage

Handler = Callable[..., None]

# update_from_response: token_type -> store column
USAGE_COLUMNS: Dict[str, str] = {
    "prompt": "input_tokens", "completion": "output_tokens", "cache_read": "cache_read_tokens",
    "cache_write": "cache_write_tokens", "reasoning": "reasoning_tokens",
}


def _arg(ev: HookEvent, position: int, name: str, default: Any = None) -> Any:
    """The host's argument ``name``, passed by keyword or at ``position``."""
    if name in ev.kwargs:
        return ev.kwargs[name]
    return ev.args[position] if len(ev.args) > position else default


def _set_model(mem, model) -> bool:
    if isinstance(model, str) and model != mem.model:
        mem.model = model
        mem.tokens = None      # a new model may mean another encoding
        return True
    return False


def on_session_start(_w, mem, _label, ev, _row, attrs) -> None:
    session = _arg(ev, 0, "session_id")
    if session is not None:
        mem.session_id = identifier(session)
    reason = ev.kwargs.get("boundary_reason")
    if isinstance(reason, str):
        attrs[a.SESSION_BOUNDARY_REASON] = identifier(reason)
    _set_model(mem, ev.kwargs.get("model"))


def bind_session_state(_w, mem, _label, ev, _row, _attrs) -> None:
    session = _arg(ev, 1, "session_id")
    if session:
        mem.session_id = identifier(session)


def update_model(w, mem, _label, ev, row, attrs) -> None:
    model = _arg(ev, 0, "model")
    if _set_model(mem, model):
        attrs[a.REQUEST_MODEL] = identifier(model)
    w.state_columns(mem, ev.extra, row)


def on_session_reset(w, mem, _label, ev, row, _attrs) -> None:
    mem.last_selection = None
    w.state_columns(mem, ev.extra, row)


def update_from_response(w, mem, label, ev, row, attrs) -> None:
    values, problems = parse_usage(_arg(ev, 0, "usage"))
    for token_type, n in values.items():
        if n:
            w.count("usage_tokens", n, engine=label, token_type=token_type)
        row[USAGE_COLUMNS[token_type]] = n
    for problem in problems:
        w.bad_input(mem, label, "update_from_response", problem, row)
    if "prompt" in values:
        attrs[a.USAGE_INPUT_TOKENS] = values["prompt"]
    if "completion" in values:
        attrs[a.USAGE_OUTPUT_TOKENS] = values["completion"]
    w.state_columns(mem, ev.extra, row)


def compress(w, mem, label, ev, row, attrs) -> None:
    capture = ev.extra      # contract.events.CompressCapture
    before, after = capture.before, capture.after
    tokens = w.tokens_for(mem)
    row["tokenizer"] = attrs[a.TOKENIZER] = tokens.method
    if before is None:
        w.bad_input(mem, label, "compress", "messages_not_a_list", row)
    else:
        problem = message_problem(before)
        if problem is not None:
            w.bad_input(mem, label, "compress", problem, row)
        n_tokens = tokens.count_messages(as_messages(before))
        row["messages_before"], row["tokens_before"] = len(before), n_tokens
        attrs[a.MESSAGES_BEFORE], attrs[a.TOKENS_BEFORE] = len(before), n_tokens
    if after is not None:
        n_tokens = tokens.count_messages(as_messages(after))
        row["messages_after"], row["tokens_after"] = len(after), n_tokens
        attrs[a.MESSAGES_AFTER], attrs[a.TOKENS_AFTER] = len(after), n_tokens
    current = _arg(ev, 1, "current_tokens")
    if isinstance(current, int) and not isinstance(current, bool):
        attrs[a.CURRENT_TOKENS] = current
    if "force" in ev.kwargs:
        attrs[a.COMPRESS_FORCE] = bool(ev.kwargs["force"])
    focus = _arg(ev, 2, "focus_topic")
    if w.capture and focus:
        attrs[a.FOCUS_TOPIC] = str(focus)
        row["content"] = json.dumps({"focus_topic": str(focus)})

    if ev.exc is not None:
        outcome = v.CALL_ERROR
    elif capture.late:
        outcome = v.TIMEOUT
    elif after is not None and after == before:
        outcome = v.NOOP
    else:
        outcome = v.COMPRESSED
    row["outcome"] = attrs[a.COMPRESS_OUTCOME] = outcome
    failed_summary = summary_failure(capture.summary) if ev.exc is None else None
    if failed_summary is not None:
        kind, cause = failed_summary
        attrs[a.SUMMARY_FAILURE], attrs[a.SUMMARY_FAILURE_CAUSE] = kind, cause
        w.count("summary_failures", engine=label, kind=kind, cause=cause)
        w.log_once(("summary_failure", mem.name, kind, cause),
                   "observed-engine: compress() of engine %r returned after its summary model failed "
                   "(%s, cause: %s); counted in hermes_context_compression_summary_failures_total, "
                   "later ones are not logged", mem.name, kind, cause)
        w.event_row(mem, row, "compress", v.EVENT_SUMMARY_FAILURE, kind, cause, row["duration_s"])
    w.state_columns(mem, capture.state, row)
    w.record(w.instruments.compression_duration, row["duration_s"], {"engine": label})
    if capture.late:
        # counted as outcome=timeout when the deadline passed; now it is over
        w.count("compression_timeouts", engine=label, kind=v.LATE_COMPLETION)
        w.event_row(mem, row, "compress", v.LATE_COMPLETION,
                    v.CALL_ERROR if ev.exc is not None else v.LATE, v.LATE_COMPLETION, row["duration_s"])
    else:
        w.count("compressions", engine=label, outcome=outcome)
    for stage in v.STAGES:
        if row.get(f"tokens_{stage}") is not None:
            w.record(w.instruments.compression_tokens, row[f"tokens_{stage}"], {"engine": label, "stage": stage})
            w.record(w.instruments.compression_messages, row[f"messages_{stage}"],
                     {"engine": label, "stage": stage})


def select_context(w, mem, label, ev, row, attrs) -> None:
    request = _arg(ev, 0, "request_messages")
    problem = "messages_not_a_list" if type(request) is not list else message_problem(request)
    if problem is not None:
        w.bad_input(mem, label, "select_context", problem, row)
    tokens = w.tokens_for(mem)
    # extra: the selected list's items, copied on the hook path (the engine may edit its list later)
    verdict = classify_selection(request, ev.result, ev.exc, mem.last_selection,
                                 snapshot=ev.extra if type(ev.extra) is tuple else None)
    if verdict.fail_open_reason == v.REASON_INVALID_RETURN:
        # exceptions are counted by the generic host_swallows path
        w.fail_open(mem, label, "select_context", v.REASON_INVALID_RETURN, row)
        w.log_once(("select_invalid", mem.name, verdict.detail),
                   "observed-engine: engine %r select_context returned an invalid value (%s); "
                   "the host falls back to the original request", mem.name, verdict.detail)
    lost = 0
    if verdict.result == v.CHANGED_SELECTION and mem.last_selection is not None:
        lost = tokens.count_messages_from(as_messages(mem.last_selection), verdict.first_difference)
    if verdict.selection is not None:
        mem.last_selection = verdict.selection
        n_sel = tokens.count_messages(as_messages(verdict.selection))
        row["messages_after"], row["tokens_after"] = len(verdict.selection), n_sel
        attrs[a.SELECTION_MESSAGES], attrs[a.SELECTION_TOKENS] = len(verdict.selection), n_sel
    if type(request) is list:
        n_req = tokens.count_messages(as_messages(request))
        row["messages_before"], row["tokens_before"] = len(request), n_req
        attrs[a.REQUEST_TOKENS] = n_req
    budget = ev.kwargs.get("budget_tokens")
    if isinstance(budget, int) and not isinstance(budget, bool):
        attrs[a.SELECTION_BUDGET_TOKENS] = budget
    w.count("selections", engine=label, result=verdict.result)
    if lost:
        w.count("cache_prefix_lost", lost, engine=label)
    row["outcome"] = attrs[a.SELECTION_RESULT] = verdict.result
    row["cache_lost_tokens"] = attrs[a.SELECTION_CACHE_PREFIX_LOST] = lost
    row["tokenizer"] = tokens.method


def record_timeout_failure(w, mem, label, ev, row, attrs) -> None:
    kind = ev.kwargs.get("failure_kind")
    reason = _arg(ev, 0, "reason")
    w.count("compression_timeouts", engine=label, kind=v.HOST_REPORTED)
    kind = identifier(kind) if kind is not None else None
    w.event_row(mem, row, "compress", v.HOST_REPORTED, v.TIMEOUT, kind if kind is not None else v.UNSPECIFIED, None)
    if kind is not None:
        attrs[a.FAILURE_KIND] = kind
    if w.capture and reason is not None:
        attrs[a.FAILURE_REASON] = identifier(reason)


def handle_tool_call(w, _mem, _label, ev, row, attrs) -> None:
    tool = _arg(ev, 0, "name")
    row["reason"] = row.get("reason") or (identifier(tool) if tool is not None else None)
    if w.capture:
        tool_args = _arg(ev, 1, "args")
        try:
            attrs[a.TOOL_CALL_ARGUMENTS] = row["content"] = json.dumps(tool_args, default=str)[:4096]
        except Exception:
            pass


HANDLERS: Dict[str, Handler] = {
    fn.__name__: fn
    for fn in (on_session_start, bind_session_state, update_model, on_session_reset, update_from_response,
               compress, select_context, record_timeout_failure, handle_tool_call)
}
