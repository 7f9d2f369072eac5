"""The telemetry of the hooks Hermes 0.20+ calls (issue 26, item 3), at the worker, on 0.19.0's ABC.

``prune_tool_results_only``, ``on_turn_complete`` and ``clone_for_agent`` used to get the generic
span and count only; ``should_compress_info`` was counted twice for every ``should_compress`` of an
engine that delegates to it (the built-in from 0.20 on). Here each hook is called as the newer host
calls it (tests/hermes_versions/test_new_hooks.py drives the real 0.20.1.2 / 0.22.2.post1 hosts) and
the spans, metrics and store rows the contract defines are checked, exact values where they are
known. The engines are ScriptedEngine's (support/engines.py): ``behaviour[hook]`` says what a hook
returns or raises.
"""

from __future__ import annotations

import threading

import pytest
from support.engines import CANARY, EngineError, NewHooksEngine, agent_transcript, prune_big_results
from support.otel import span_texts
from support.store_rows import read_rows

from observed_engine import is_observed
from observed_engine.contract import spans as a
from observed_engine.contract import vocabulary as v
from observed_engine.contract.catalogue import BY_KEY

PRUNES = BY_KEY["tool_result_prunes"].otel_name
PRUNE_RESULTS = BY_KEY["tool_result_prune_results"].otel_name
RECLAIMED = BY_KEY["tool_result_prune_reclaimed_tokens"].otel_name
TURNS = BY_KEY["turns"].otel_name
TURN_CALLS = BY_KEY["turn_api_calls"].otel_name
CLONES = BY_KEY["clones"].otel_name
FAIL_OPEN = BY_KEY["fail_open"].otel_name
USAGE = BY_KEY["usage_tokens"].otel_name
CHECKS = BY_KEY["compression_checks"].otel_name
HOOK_CALLS = BY_KEY["hook_calls"].otel_name


def _one(rows, **match):
    found = [r for r in rows if all(r.get(k) == val for k, val in match.items())]
    assert len(found) == 1, (match, rows)
    return found[0]


def _span(prov, hook):
    spans = [s for s in prov.spans() if s.name == f"context_engine.{hook}"]
    assert len(spans) == 1, [s.name for s in prov.spans()]
    return spans[0]


# -- prune_tool_results_only ------------------------------------------------------------------

def test_committed_prune_rows_span_and_counters(prov, observe_engine, store_path):
    engine = observe_engine(NewHooksEngine("pruner", {"prune_tool_results_only": prune_big_results}))
    messages = agent_transcript(40, 3000, seed="p")          # 5 tool results of ~3,000 chars
    tools = sum(1 for m in messages[:-4] if m["role"] == "tool")
    pruned, n = engine.prune_tool_results_only(messages, current_tokens=90_000)
    assert n == tools and pruned is not messages and len(pruned) == len(messages)
    at_call = len(messages)
    # the host goes on with the pruned list and appends the next iteration to it (and the input
    # list stays alive): the counts are of the lists as they were at the call
    pruned.extend(agent_transcript(30, 3000, seed="later"))
    messages.extend(agent_transcript(30, 3000, seed="later"))
    prov.flush()

    row = _one(read_rows(store_path), hook="prune_tool_results_only")
    assert row["outcome"] == v.PRUNED and row["pruned_results"] == tools and row["checked_tokens"] == 90_000
    assert row["messages_before"] == row["messages_after"] == at_call
    assert row["tokens_before"] > row["tokens_after"] > 0 and row["tokenizer"]
    reclaimed = row["tokens_before"] - row["tokens_after"]
    assert reclaimed > 900 * tools                           # ~3,000 chars (~1,000 tokens) each taken out

    span = _span(prov, "prune_tool_results_only")
    attrs = dict(span.attributes)
    assert attrs[a.PRUNE_OUTCOME] == v.PRUNED and attrs[a.PRUNE_COMMITTED] is True
    assert attrs[a.PRUNE_RESULTS] == tools and attrs[a.PRUNE_RECLAIMED_TOKENS] == reclaimed
    assert attrs[a.TOKENS_BEFORE] == row["tokens_before"] and attrs[a.TOKENS_AFTER] == row["tokens_after"]
    assert attrs[a.MESSAGES_BEFORE] == row["messages_before"] and attrs[a.CURRENT_TOKENS] == 90_000

    assert prov.value(PRUNES, engine="pruner", outcome=v.PRUNED) == 1
    assert prov.value(PRUNE_RESULTS, engine="pruner") == tools
    assert prov.value(RECLAIMED, engine="pruner") == reclaimed


@pytest.mark.parametrize("kind, behaviour, outcome, committed", [
    ("noop", lambda messages, current_tokens=None: (messages, 0), v.NOOP, False),
    # a count, but the input list itself: the host does not commit it (the engine edited in place)
    ("in-place", lambda messages, current_tokens=None: (messages.__setitem__(1, {"role": "user", "content": "x"})
                                                       or messages, 1), v.UNCOMMITTED, False),
])
def test_prunes_the_host_does_not_commit(prov, observe_engine, store_path, kind, behaviour, outcome, committed):
    engine = observe_engine(NewHooksEngine("pruner", {"prune_tool_results_only": behaviour}))
    messages = agent_transcript(20, 2000, seed=kind)
    before = len(messages)
    result = engine.prune_tool_results_only(messages, current_tokens=5)
    assert result[0] is messages
    messages.extend(agent_transcript(10, 2000, seed="later"))       # the host goes on with its list
    prov.flush()
    row = _one(read_rows(store_path), hook="prune_tool_results_only")
    assert row["outcome"] == outcome and row["messages_before"] == row["messages_after"] == before
    if outcome == v.NOOP:
        assert row["tokens_after"] == row["tokens_before"] and row["pruned_results"] == 0
    else:
        assert row["tokens_after"] < row["tokens_before"] and row["pruned_results"] == 1
    assert dict(_span(prov, "prune_tool_results_only").attributes)[a.PRUNE_COMMITTED] is committed
    assert prov.value(PRUNES, engine="pruner", outcome=outcome) == 1
    assert prov.value(RECLAIMED, engine="pruner") is None and prov.value(PRUNE_RESULTS, engine="pruner") is None


def test_prune_failures_are_fail_open_and_pass_through(prov, observe_engine, store_path):
    error = EngineError("prune failed")

    def raising(messages, current_tokens=None):
        raise error

    engine = observe_engine(NewHooksEngine("pruner", {"prune_tool_results_only": raising}))
    messages = agent_transcript(10, 500)
    with pytest.raises(EngineError) as caught:
        engine.prune_tool_results_only(messages, current_tokens=1)
    assert caught.value is error
    engine.behaviour["prune_tool_results_only"] = lambda messages, current_tokens=None: None   # not a pair
    assert engine.prune_tool_results_only(messages) is None
    prov.flush()
    rows = read_rows(store_path, "hook = 'prune_tool_results_only'")
    calls = [r for r in rows if r["event"] == v.EVENT_CALL]
    assert [r["outcome"] for r in calls] == [v.CALL_ERROR, v.FAIL_OPEN]
    assert sorted(r["reason"] for r in rows if r["event"] == v.FAIL_OPEN) == [v.REASON_EXCEPTION,
                                                                              v.REASON_INVALID_RETURN]
    assert prov.value(PRUNES, engine="pruner", outcome=v.CALL_ERROR) == 1
    assert prov.value(PRUNES, engine="pruner", outcome=v.FAIL_OPEN) == 1
    assert prov.value(FAIL_OPEN, engine="pruner", hook="prune_tool_results_only", reason=v.REASON_EXCEPTION) == 1
    assert prov.value(FAIL_OPEN, engine="pruner", hook="prune_tool_results_only",
                      reason=v.REASON_INVALID_RETURN) == 1


# -- on_turn_complete ------------------------------------------------------------------------

USAGE_OF_LAST_RESPONSE = {"prompt_tokens": 1200, "completion_tokens": 80, "total_tokens": 1280,
                          "cache_read_tokens": 1000}


def test_turn_outcomes_exit_reasons_and_calls(prov, observe_engine, store_path):
    engine = observe_engine(NewHooksEngine("turner"))
    messages = agent_transcript(12, 400)
    turns = [
        dict(interrupted=False, failed=False, turn_exit_reason="text_response(finish_reason=stop)", api_call_count=3),
        dict(interrupted=True, failed=False, turn_exit_reason="interrupted_by_user", api_call_count=1),
        dict(interrupted=False, failed=True, turn_exit_reason=f"local_processing_error({CANARY} in the error)",
             api_call_count=2),
        dict(interrupted=False, failed=False, turn_exit_reason="a_word_of_a_newer_hermes", api_call_count=4),
        dict(interrupted=False, failed=False, turn_exit_reason=f"{CANARY} free text, not a word!", api_call_count=1),
        dict(interrupted=False, failed=False, api_call_count=1),
    ]
    for i, meta in enumerate(turns):
        assert engine.on_turn_complete(list(messages), usage=dict(USAGE_OF_LAST_RESPONSE) if i == 0 else None,
                                       turn_id=f"turn-{i}", task_id="task-1", **meta) is None
    prov.flush()

    rows = read_rows(store_path, "hook = 'on_turn_complete'")
    assert [(r["outcome"], r["reason"], r["api_calls"]) for r in rows] == [
        (v.TURN_COMPLETED, "text_response", 3), (v.TURN_INTERRUPTED, "interrupted_by_user", 1),
        (v.TURN_FAILED, "local_processing_error", 2), (v.TURN_COMPLETED, "a_word_of_a_newer_hermes", 4),
        (v.TURN_COMPLETED, v.EXIT_REASON_OTHER, 1), (v.TURN_COMPLETED, v.UNSPECIFIED, 1)]
    first = rows[0]
    assert (first["input_tokens"], first["output_tokens"], first["cache_read_tokens"]) == (1200, 80, 1000)
    assert first["messages_after"] == len(messages) and first["tokens_after"] > 0
    assert all(r["input_tokens"] is None for r in rows[1:])

    def key(outcome, exit_reason):
        return frozenset({"engine": "turner", "outcome": outcome, "exit_reason": exit_reason}.items())

    assert prov.by_attributes(TURNS) == {
        key(v.TURN_COMPLETED, "text_response"): 1, key(v.TURN_INTERRUPTED, "interrupted_by_user"): 1,
        key(v.TURN_FAILED, "local_processing_error"): 1, key(v.TURN_COMPLETED, v.EXIT_REASON_OTHER): 2,
        key(v.TURN_COMPLETED, v.UNSPECIFIED): 1}
    count, total, low, high = prov.histogram(TURN_CALLS, engine="turner")
    assert (count, total, low, high) == (6, 12, 1, 4)
    # the usage is the last response's, which update_from_response counts: not counted again
    assert prov.value(USAGE, engine="turner", token_type="prompt") is None

    spans = sorted((s for s in prov.spans() if s.name == "context_engine.on_turn_complete"),
                   key=lambda s: s.start_time)
    attrs = dict(spans[0].attributes)
    assert attrs[a.TURN_OUTCOME] == v.TURN_COMPLETED and attrs[a.TURN_EXIT_REASON] == "text_response"
    assert attrs[a.TURN_API_CALLS] == 3 and attrs[a.TURN_ID] == "turn-0"
    assert attrs[a.TURN_INTERRUPTED] is False and attrs[a.TURN_FAILED] is False
    assert attrs[a.USAGE_INPUT_TOKENS] == 1200 and attrs[a.MESSAGES_AFTER] == len(messages)
    # the detail of an exit reason (an error's text) never leaves the process
    for span in spans:
        assert not any(CANARY in t or "finish_reason" in t for t in span_texts(span))
    for r in rows:
        assert not any(CANARY in str(val) for val in r.values())
    assert not any(CANARY in t for t in prov.metric_names_and_labels())


def test_a_raising_turn_hook_still_counts_the_turn(prov, observe_engine, store_path):
    error = EngineError("index failed")

    def raising(messages, usage=None, **kwargs):
        raise error

    engine = observe_engine(NewHooksEngine("turner", {"on_turn_complete": raising}))
    with pytest.raises(EngineError) as caught:
        engine.on_turn_complete([], usage=None, interrupted=False, failed=False, turn_exit_reason="guardrail_halt",
                                api_call_count=1)
    assert caught.value is error
    prov.flush()
    call = _one(read_rows(store_path, "hook = 'on_turn_complete'"), event=v.EVENT_CALL)
    assert call["outcome"] == v.CALL_ERROR and call["reason"] == "EngineError" and call["api_calls"] == 1
    assert prov.value(TURNS, engine="turner", outcome=v.TURN_COMPLETED, exit_reason="guardrail_halt") == 1
    assert prov.value(FAIL_OPEN, engine="turner", hook="on_turn_complete", reason=v.REASON_EXCEPTION) == 1


# -- clone_for_agent ------------------------------------------------------------------------------

def test_clones_share_the_pipeline_and_threads_stay_flat(prov, observe_engine, store_path):
    from observed_engine.api import pipeline_of

    engine = observe_engine(NewHooksEngine("shared"))
    first = engine.clone_for_agent()
    prov.flush()
    threads = threading.active_count()
    clones = [engine.clone_for_agent() for _ in range(49)]
    for i, clone in enumerate([first, *clones]):
        clone.update_from_response({"prompt_tokens": 100 + i})
    prov.flush()
    assert threading.active_count() <= threads          # no thread per clone (a pipeline each would add two)
    assert all(is_observed(c) and c is not engine and pipeline_of(c) is pipeline_of(engine) for c in clones)
    assert prov.value(CLONES, engine="shared", outcome=v.CLONE_OBSERVED) == 50
    rows = read_rows(store_path)
    assert sum(1 for r in rows if r["hook"] == "clone_for_agent" and r["outcome"] == v.CLONE_OBSERVED) == 50
    assert sum(1 for r in rows if r["hook"] == "update_from_response") == 50     # one store for all
    assert dict(_span_of_first_clone(prov).attributes)[a.CLONE_OUTCOME] == v.CLONE_OBSERVED


def _span_of_first_clone(prov):
    return sorted((s for s in prov.spans() if s.name == "context_engine.clone_for_agent"),
                  key=lambda s: s.start_time)[0]


def test_clone_outcomes_same_engine_and_error(prov, observe_engine, store_path):
    engine = observe_engine(NewHooksEngine("cl", {"clone_for_agent": lambda: engine}))
    assert engine.clone_for_agent() is engine
    error = EngineError("cannot copy a connection")

    def raising():
        raise error

    engine.behaviour["clone_for_agent"] = raising
    with pytest.raises(EngineError) as caught:
        engine.clone_for_agent()
    assert caught.value is error
    prov.flush()
    assert [r["outcome"] for r in read_rows(store_path, "hook = 'clone_for_agent'")] == [v.CLONE_SAME_ENGINE,
                                                                                        v.CALL_ERROR]
    assert prov.value(CLONES, engine="cl", outcome=v.CLONE_SAME_ENGINE) == 1
    assert prov.value(CLONES, engine="cl", outcome=v.CALL_ERROR) == 1


# -- should_compress_info ---------------------------------------------------------------------

class DelegatingEngine(NewHooksEngine):
    """should_compress answers through should_compress_info, as the built-in does from 0.20 on."""

    def should_compress(self, prompt_tokens=None):
        return self.should_compress_info(prompt_tokens)[0]


def test_should_compress_counts_once_and_info_reasons_are_words(prov, observe_engine, store_path):
    engine = observe_engine(DelegatingEngine("delegating"))
    assert engine.should_compress(60_000) is True
    engine.behaviour["should_compress_info"] = lambda tokens: (False, "cooldown:37")
    assert engine.should_compress_info(60_000) == (False, "cooldown:37")
    engine.behaviour["should_compress_info"] = lambda tokens: (False, f"{CANARY} is not a word!")
    engine.should_compress_info(60_000)
    prov.flush()
    rows = read_rows(store_path, "event = 'call'")
    assert [(r["hook"], r["decision"], r["reason"]) for r in rows] == [
        ("should_compress", v.DECISION_COMPRESS, v.DECISION_AT_THRESHOLD),
        ("should_compress_info", v.DECISION_SKIP, v.BLOCKED_SUMMARY_COOLDOWN),
        ("should_compress_info", v.DECISION_SKIP, v.BLOCKED_OTHER)]
    assert prov.value(HOOK_CALLS, engine="delegating", hook="should_compress_info", outcome="ok") == 2
    assert prov.value(CHECKS, engine="delegating", hook="should_compress", decision=v.DECISION_COMPRESS) == 1


class PropertyStateEngine(NewHooksEngine):
    """threshold_tokens and context_length behind lazy properties, as in Hermes 0.20+'s built-in."""

    def __init__(self):
        self._resolved_context_length = 0
        self._threshold_tokens = None
        super().__init__("lazy", context_length=100_000)       # (through the setters)
        self._threshold_tokens = None                          # lazy: computed when first read

    @property
    def context_length(self):
        return self._resolved_context_length

    @context_length.setter
    def context_length(self, value):
        self._resolved_context_length = value

    @property
    def threshold_tokens(self):
        if self._threshold_tokens is None:
            self._threshold_tokens = self._resolved_context_length // 2
        return self._threshold_tokens

    @threshold_tokens.setter
    def threshold_tokens(self, value):
        self._threshold_tokens = value


def test_state_behind_properties_reaches_rows_and_decisions(prov, observe_engine, store_path):
    engine = observe_engine(PropertyStateEngine())
    assert engine.threshold_tokens == 50_000                     # the host reads it: computed now
    engine.update_from_response({"prompt_tokens": 20_000})
    engine.should_compress(20_000)
    prov.flush()
    usage, check = read_rows(store_path, "event = 'call'")
    assert (usage["prompt_tokens"], usage["threshold_tokens"], usage["window_tokens"]) == (20_000, 50_000, 100_000)
    assert (check["decision"], check["reason"], check["threshold_tokens"]) == (v.DECISION_SKIP,
                                                                               v.DECISION_BELOW_THRESHOLD, 50_000)
    assert prov.value(BY_KEY["threshold_tokens"].otel_name, engine="lazy") == 50_000
    assert prov.value(BY_KEY["window_tokens"].otel_name, engine="lazy") == 100_000
