"""One handler per hook that needs more than the generic call record.

Every handler takes the same arguments, in order: the processor (``w``: counts, rows,
token counters), what the worker remembers about the engine (``mem``), the engine's
metric label, the event (``contract.events.HookEvent``), and the store row and span
attributes of the call, which it fills in (unused ones are named ``_x``). It runs on the worker
thread; the processor guards each event, so a handler may raise (counted, logged once).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Callable, Dict, Optional

from ..contract import spans as a
from ..contract import vocabulary as v
from ..contract.events import ENGINE_META_ATTRIBUTE, MISSING, HookEvent, PruneCapture, as_messages, event_state
from ..contract.hooks import HOOK_SPECS
from ..contract.identifiers import identifier
from .messages import message_problem
from .selection import classify_selection
from .state import blocked_reasons, cooldown_ended_at, live_numbers, live_state, summary_failure
from .summary_usage import SummaryUsage, session_db_path
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


def on_session_start(w, mem, _label, ev, row, attrs) -> None:
    session = _arg(ev, 0, "session_id")
    if session is not None:
        mem.session_id = identifier(session)
    reason = ev.kwargs.get("boundary_reason")
    if isinstance(reason, str):
        attrs[a.SESSION_BOUNDARY_REASON] = identifier(reason)
    _set_model(mem, ev.kwargs.get("model"))
    _summary_usage_begin(mem, ev.engine)
    track_blocked(w, mem, ev.engine, row)


def bind_session_state(w, mem, _label, ev, row, _attrs) -> None:
    session = _arg(ev, 1, "session_id")
    if session:
        mem.session_id = identifier(session)
    _summary_usage_begin(mem, ev.engine)
    track_blocked(w, mem, ev.engine, row)


def update_model(w, mem, _label, ev, row, attrs) -> None:
    model = _arg(ev, 0, "model")
    if _set_model(mem, model):
        attrs[a.REQUEST_MODEL] = identifier(model)
    _state_columns(w, mem, event_state(ev), row, ev.engine)
    track_blocked(w, mem, ev.engine, row)


def on_session_reset(w, mem, _label, ev, row, _attrs) -> None:
    mem.last_selection = None
    mem.compacted = False
    _state_columns(w, mem, event_state(ev), row, ev.engine)
    track_blocked(w, mem, ev.engine, row)


def _state_columns(w, mem, raw_state, row, engine=None) -> None:
    """The engine's state numbers into the row, remembered for the decisions that follow."""
    w.state_columns(mem, raw_state, row, engine)
    if row.get("prompt_tokens") is not None:
        mem.last_prompt = row["prompt_tokens"]
    if row.get("threshold_tokens") is not None:
        mem.last_threshold = row["threshold_tokens"]


# -- automatic compression blocked ------------------------------------------------------------


def track_blocked(w, mem, engine, row) -> None:
    """A store row when a block (worker.state.blocked_reasons) begins or ends. A summary cooldown
    ends at the engine's own deadline, which is the row's time even when it is noticed later."""
    now = time.monotonic()
    reasons, _ = blocked_reasons(engine, now)
    current = mem.blocked
    if not reasons and not current:
        return
    if reasons == frozenset(current):
        return
    started: Dict[str, float] = dict(current) if isinstance(current, dict) else {}
    new = sorted(reasons - started.keys())
    for reason in sorted(started.keys() - reasons):   # ends first: one reason may follow another
        ts = row["ts"]
        if reason == v.BLOCKED_SUMMARY_COOLDOWN:
            ended = cooldown_ended_at(engine, now)
            if ended is not None:     # the engine's deadline, also when this event came before it
                ts = time.time() - (now - ended)
        began = started.pop(reason)
        w.event_row(mem, {"ts": ts}, "compress", v.EVENT_COMPRESSION_BLOCKED, v.BLOCK_ENDED, reason,
                    max(ts - began, 0.0))
    for reason in new:
        started[reason] = row["ts"]
        w.event_row(mem, row, "compress", v.EVENT_COMPRESSION_BLOCKED, v.BLOCK_STARTED, reason, None)
    mem.blocked = started


# -- the summary model's usage (Hermes' own records, read-only) ---------------------------------


def _summary_usage_begin(mem, engine) -> None:
    if mem.session_id is None:
        return
    if mem.aux is None or mem.aux.path != session_db_path(engine):
        path = session_db_path(engine)
        if path is None:
            return
        if mem.aux is not None:
            mem.aux.close()
        mem.aux = SummaryUsage(path)
    if mem.aux.session != mem.session_id:
        mem.aux.begin(mem.session_id)


# -- compression decisions ----------------------------------------------------------------------


def _plain_int(value) -> Optional[int]:
    return value if type(value) is int else int(value) if type(value) is float and value == value and abs(value) < 2 ** 53 else None


def _answer(result):
    """(True/False or None when not readable, the engine's reason or None) of a decision hook's
    return value, without running engine code (no __bool__ of an engine object)."""
    if type(result) is bool:
        return result, None
    if result is None:
        return False, None
    if type(result) in (int, float, str):
        return bool(result), None
    if type(result) is dict:     # should_compress_info on hosts that call it
        for key in ("should_compress", "compress", "decision", "result"):
            if key in result and type(result[key]) is bool:
                return result[key], engine_reason(result.get("reason"))
        return None, None
    if type(result) in (tuple, list) and result and type(result[0]) is bool:
        return result[0], engine_reason(result[1] if len(result) > 1 else None)
    return None, None


_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


def reason_word(text) -> Optional[str]:
    """The bounded word a host or engine reason starts with: the text before any ``:`` or ``(``
    detail ("cooldown:37", "text_response(finish_reason=stop)"), if it is an identifier of at most 64
    characters, else None. The detail never leaves the process (it may quote an error message)."""
    if type(text) is not str or not text:
        return None
    word = text.split("(", 1)[0].split(":", 1)[0].strip()
    return word if _WORD.fullmatch(word) else None


def engine_reason(reason) -> Optional[str]:
    """A decision hook's reason as a decision row's reason: the built-in's words as the blocked
    reasons (vocabulary.ENGINE_DECISION_REASONS: "cooldown:<s>" is summary_cooldown), another
    engine's word as it is, text that is not one word 'other'; None when the engine gave none."""
    if type(reason) is not str or not reason:
        return None
    word = reason_word(reason)
    if word is None:
        return v.BLOCKED_OTHER
    return v.ENGINE_DECISION_REASONS.get(word, word)


def compression_check(w, mem, label, ev, row, attrs) -> None:
    """should_compress, should_compress_preflight, should_compress_info,
    should_defer_preflight_to_real_usage: what was asked, the threshold, the answer and why."""
    hook = HOOK_SPECS[ev.hook].name
    engine = ev.engine
    if mem.aux is not None and mem.session_id is not None and mem.aux.session != mem.session_id:
        mem.aux.begin(mem.session_id)
    track_blocked(w, mem, engine, row)
    if ev.exc is not None:
        return
    live_threshold, live_window = live_numbers(engine)
    if live_threshold is MISSING or live_window is MISSING:   # a class attribute: resolved the slow way
        live = live_state(engine, mem.engine_class) or (None, None, None)
        live_threshold, live_window = live[1], live[2]
    threshold = _plain_int(live_threshold)
    if threshold is None:
        threshold = mem.last_threshold
    source = v.CHECKED_FROM_ARGUMENT
    if hook == "should_defer_preflight_to_real_usage":
        tokens = _plain_int(_arg(ev, 0, "rough_tokens"))
    elif hook == "should_compress_preflight":
        messages = _arg(ev, 0, "messages")
        tokens = w.tokens_for(mem).count_messages(as_messages(messages)) if type(messages) is list else None
    else:
        given = _arg(ev, 0, "prompt_tokens")
        if given is None and not ev.args:
            given = ev.kwargs.get("tokens")
        tokens = _plain_int(given)
        if given is None:   # the engine uses its own last_prompt_tokens: as last copied, else as it is now
            source = v.CHECKED_FROM_STATE
            if mem.last_prompt is not None:
                tokens = mem.last_prompt
            else:
                live = live_state(engine, mem.engine_class)
                tokens = _plain_int(live[0]) if live else None
    answer, reason = _answer(ev.result)
    if answer is None:
        return
    if hook == "should_defer_preflight_to_real_usage":
        decision = v.DECISION_DEFER if answer else v.DECISION_ESTIMATE
    else:
        decision = v.DECISION_COMPRESS if answer else v.DECISION_SKIP
    over = tokens is not None and threshold is not None and tokens >= threshold
    if reason is None and tokens is not None and threshold is not None:
        if not over:
            reason = v.DECISION_BELOW_THRESHOLD
        elif decision in (v.DECISION_SKIP, v.DECISION_ESTIMATE) and mem.blocked:
            # at/above the threshold while the engine blocks automatic compression: that is why
            # (0.19.0's host then does not even ask should_compress during a summary cooldown)
            reason = attrs[a.BLOCKED_REASON] = sorted(mem.blocked)[0]
        elif decision == v.DECISION_SKIP:
            reason = v.DECISION_BLOCKED_UNKNOWN
        else:
            reason = v.DECISION_AT_THRESHOLD
    row["decision"] = attrs[a.DECISION] = decision
    if reason is not None:
        row["reason"] = attrs[a.DECISION_REASON] = reason
    if tokens is not None:
        row["checked_tokens"] = attrs[a.CHECKED_TOKENS] = tokens
        if source is not v.CHECKED_FROM_ARGUMENT:     # (absent: the argument, the usual case)
            attrs[a.CHECKED_TOKENS_SOURCE] = source
    if threshold is not None:
        row["threshold_tokens"] = attrs[a.THRESHOLD_TOKENS] = threshold
    window = _plain_int(live_window)
    if window is not None:
        row["window_tokens"] = window
    # w.count("compression_checks", engine=label, hook=hook, decision=decision), its key built here:
    # the keyword call cost more than the rest of the count (this runs on every decision)
    w._counts[("compression_checks", "engine", "hook", "decision", label, hook, decision)] += 1


def update_from_response(w, mem, label, ev, row, attrs) -> None:
    values, problems = parse_usage(_arg(ev, 0, "usage"))
    counts = w._counts     # w.count("usage_tokens", n, engine=..., token_type=...), its key built here
    for token_type, n in values.items():
        if n:
            counts[("usage_tokens", "engine", "token_type", label, token_type)] += n
        row[USAGE_COLUMNS[token_type]] = n
    for problem in problems:
        w.bad_input(mem, label, "update_from_response", problem, row)
    if "prompt" in values:
        attrs[a.USAGE_INPUT_TOKENS] = values["prompt"]
    if "completion" in values:
        attrs[a.USAGE_OUTPUT_TOKENS] = values["completion"]
    prompt = values.get("prompt")
    if prompt:
        cache_read = values.get("cache_read", 0)
        attrs[a.CACHE_READ_RATIO] = round(cache_read / prompt, 4)
        if mem.compacted:
            # the first response after a compaction: the changed prefix had to be cached again
            cache_write = values.get("cache_write", 0)
            rewrite = cache_write if cache_write > 0 else max(prompt - cache_read, 0)
            mem.compacted = False
            row["cache_rewrite_tokens"] = attrs[a.CACHE_REWRITE_TOKENS] = rewrite
            if rewrite:
                w.count("cache_rewrite_tokens", rewrite, engine=label)
    _state_columns(w, mem, event_state(ev), row, ev.engine)
    track_blocked(w, mem, ev.engine, row)


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
    if ev.exc is None:
        _summary_model(w, mem, label, capture.summary, outcome == v.COMPRESSED or failed_summary is not None,
                       row, attrs)
    if outcome == v.COMPRESSED and (failed_summary is None or failed_summary[0] != v.ABORTED):
        mem.compacted = True      # (an aborted one hands the host its list unchanged: no new prefix)
    _state_columns(w, mem, capture.state, row, ev.engine)
    track_blocked(w, mem, ev.engine, row)
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


def _summary_model(w, mem, label, summary: Optional[tuple], summarised: bool, row, attrs) -> None:
    """The summary model (and provider) of a compress() call, and its tokens where Hermes recorded
    them (summary_usage.py); else the model the engine names (summary_model, "" meaning its main
    model), for a call that summarised (compressed, or reported a failed summary)."""
    used = mem.aux.take(mem.session_id) if mem.aux is not None and mem.session_id is not None else None
    if used is not None:
        model, provider, tokens = used
        for token_type, n in tokens.items():
            if n:
                w.count("summary_tokens", n, engine=label, token_type=token_type)
        row["summary_input_tokens"] = attrs[a.SUMMARY_INPUT_TOKENS] = tokens["prompt"]
        row["summary_output_tokens"] = attrs[a.SUMMARY_OUTPUT_TOKENS] = tokens["completion"]
    elif summarised and summary is not None and len(summary) >= 7:
        override, main, provider = summary[4:7]
        model = override if type(override) is str and override else main
    else:
        return
    if type(model) is str and model and model != "unknown":
        row["summary_model"] = attrs[a.SUMMARY_MODEL] = identifier(model)
    if type(provider) is str and provider:
        row["summary_provider"] = attrs[a.SUMMARY_PROVIDER] = identifier(provider)


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


# -- the hooks of Hermes 0.20+ ---------------------------------------------------------------


def prune_tool_results_only(w, mem, label, ev, row, attrs) -> None:
    """The cheap tool-result prune: what went in and came out, and whether the host commits it
    (``n and the list is not the input``, vocabulary.PRUNE_OUTCOMES)."""
    hook = "prune_tool_results_only"
    capture = ev.extra if type(ev.extra) is PruneCapture else PruneCapture(None, None)
    tokens = w.tokens_for(mem)
    row["tokenizer"] = attrs[a.TOKENIZER] = tokens.method
    current = _plain_int(_arg(ev, 1, "current_tokens"))
    if current is not None:
        row["checked_tokens"] = attrs[a.CURRENT_TOKENS] = current
    before = capture.before
    n_before = None
    if before is None:
        w.bad_input(mem, label, hook, "messages_not_a_list", row)
    else:
        problem = message_problem(before)
        if problem is not None:
            w.bad_input(mem, label, hook, problem, row)
        n_before = tokens.count_messages(as_messages(before))
        row["messages_before"], row["tokens_before"] = len(before), n_before
        attrs[a.MESSAGES_BEFORE], attrs[a.TOKENS_BEFORE] = len(before), n_before
    result = ev.result
    if ev.exc is not None:
        outcome = v.CALL_ERROR        # fail-open counted by the generic host_swallows path
    elif type(result) not in (tuple, list) or len(result) != 2:
        outcome = v.FAIL_OPEN         # the host cannot unpack it: it keeps its list
        w.fail_open(mem, label, hook, v.REASON_INVALID_RETURN, row)
        w.log_once(("prune_invalid", mem.name),
                   "observed-engine: engine %r prune_tool_results_only returned %s, not a (messages, n) pair; "
                   "the host keeps its messages", mem.name, type(result).__name__)
    else:
        pruned_list, n = result
        if type(n) is int or type(n) is bool:
            some = n != 0
            row["pruned_results"] = attrs[a.PRUNE_RESULTS] = int(n)
        else:
            some = n is not None
            w.bad_input(mem, label, hook, f"prune_count_{type(n).__name__}", row)
        messages = _arg(ev, 0, "messages")
        if not some:
            outcome = v.NOOP
        elif pruned_list is messages:
            outcome = v.UNCOMMITTED
        else:
            outcome = v.PRUNED
        attrs[a.PRUNE_COMMITTED] = outcome == v.PRUNED
        after = capture.after
        if after is None and outcome == v.PRUNED:
            w.bad_input(mem, label, hook, "messages_not_a_list", row)
        elif after is None and before is not None:      # the host keeps the list it had
            row["messages_after"], row["tokens_after"] = len(before), n_before
            attrs[a.MESSAGES_AFTER], attrs[a.TOKENS_AFTER] = len(before), n_before
        elif after is not None:
            n_after = tokens.count_messages(as_messages(after))
            row["messages_after"], row["tokens_after"] = len(after), n_after
            attrs[a.MESSAGES_AFTER], attrs[a.TOKENS_AFTER] = len(after), n_after
        if outcome == v.PRUNED:
            # a committed prune rewrites messages the provider has seen: a prompt-cache boundary,
            # like a compaction (the next response's cache rewrite is counted the same way)
            mem.compacted = True
            if row.get("pruned_results"):
                w.count("tool_result_prune_results", row["pruned_results"], engine=label)
            if n_before is not None and row.get("tokens_after") is not None:
                reclaimed = max(n_before - row["tokens_after"], 0)
                attrs[a.PRUNE_RECLAIMED_TOKENS] = reclaimed
                if reclaimed:
                    w.count("tool_result_prune_reclaimed_tokens", reclaimed, engine=label)
    row["outcome"] = attrs[a.PRUNE_OUTCOME] = outcome
    w.count("tool_result_prunes", engine=label, outcome=outcome)


def turn_exit_reason(raw) -> tuple:
    """(the store's word, the metric's label) of the host's turn_exit_reason: the word before its
    detail; a word outside vocabulary.TURN_EXIT_REASONS is labelled 'other', text that is no word is
    'other' in both, none given 'unspecified' in both."""
    if raw is None or raw == "":
        return v.UNSPECIFIED, v.UNSPECIFIED
    word = reason_word(raw)
    if word is None:
        return v.EXIT_REASON_OTHER, v.EXIT_REASON_OTHER
    return word, (word if word in v.TURN_EXIT_REASONS else v.EXIT_REASON_OTHER)


def _flag(value) -> Optional[bool]:
    return bool(value) if type(value) in (bool, int) else None


def on_turn_complete(w, mem, label, ev, row, attrs) -> None:
    """A finished user turn: completed / interrupted / failed, the host's exit reason (a bounded
    word, its detail left out), the provider calls, the usage given, the transcript's size."""
    kw = ev.kwargs
    interrupted, failed = _flag(kw.get("interrupted")), _flag(kw.get("failed"))
    outcome = v.TURN_INTERRUPTED if interrupted else v.TURN_FAILED if failed else v.TURN_COMPLETED
    word, exit_label = turn_exit_reason(kw.get("turn_exit_reason"))
    attrs[a.TURN_OUTCOME], attrs[a.TURN_EXIT_REASON] = outcome, word
    if interrupted is not None:
        attrs[a.TURN_INTERRUPTED] = interrupted
    if failed is not None:
        attrs[a.TURN_FAILED] = failed
    turn_id = kw.get("turn_id")
    if turn_id is not None:
        attrs[a.TURN_ID] = identifier(turn_id)
    if ev.exc is None:          # (a raising hook keeps its row's error outcome; the turn is counted)
        row["outcome"], row["reason"] = outcome, word
    calls = _plain_int(kw.get("api_call_count"))
    if calls is not None and calls >= 0:
        row["api_calls"] = attrs[a.TURN_API_CALLS] = calls
        w.record(w.instruments.turn_api_calls, calls, {"engine": label})
    # the usage of the turn's last response, which update_from_response has counted already: the
    # row and the span carry it, no counter adds it again
    values, problems = parse_usage(_arg(ev, 1, "usage"))
    for token_type, n in values.items():
        row[USAGE_COLUMNS[token_type]] = n
    for problem in problems:
        w.bad_input(mem, label, "on_turn_complete", problem, row)
    if "prompt" in values:
        attrs[a.USAGE_INPUT_TOKENS] = values["prompt"]
    if "completion" in values:
        attrs[a.USAGE_OUTPUT_TOKENS] = values["completion"]
    messages = _arg(ev, 0, "messages")
    if type(messages) is list:
        tokens = w.tokens_for(mem)
        n = tokens.count_messages(messages)
        row["messages_after"], row["tokens_after"], row["tokenizer"] = len(messages), n, tokens.method
        attrs[a.MESSAGES_AFTER], attrs[a.TOKENS_AFTER] = len(messages), n
    w.count("turns", engine=label, outcome=outcome, exit_reason=exit_label)


def clone_for_agent(w, mem, label, ev, row, attrs) -> None:
    """A per-agent copy (Hermes 0.22's plugin route): the clone comes back observed by this same
    pipeline (one worker and one store writer however many agents), or it does not."""
    if ev.exc is not None:
        outcome = v.CALL_ERROR
    else:
        clone = ev.result
        meta = getattr(type(clone), ENGINE_META_ATTRIBUTE, None) if clone is not None else None
        if clone is ev.engine:
            outcome = v.CLONE_SAME_ENGINE
        elif meta is not None and getattr(meta, "pipeline", None) is w.pipeline:
            outcome = v.CLONE_OBSERVED
        else:
            outcome = v.CLONE_UNOBSERVED
            w.log_once(("clone_unobserved", mem.name),
                       "observed-engine: clone_for_agent() of engine %r returned %s that is not observed here; "
                       "that agent's engine is not observed", mem.name, type(clone).__name__)
    row["outcome"] = attrs[a.CLONE_OUTCOME] = outcome
    w.count("clones", engine=label, outcome=outcome)


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
        except Exception:  # hot path (per event): arguments that cannot be written are left out
            pass


HANDLERS: Dict[str, Handler] = {
    fn.__name__: fn
    for fn in (on_session_start, bind_session_state, update_model, on_session_reset, update_from_response,
               compress, select_context, record_timeout_failure, handle_tool_call,
               prune_tool_results_only, on_turn_complete, clone_for_agent)
}
for _hook in ("should_compress", "should_compress_preflight", "should_compress_info",
              "should_defer_preflight_to_real_usage"):
    HANDLERS[_hook] = compression_check
