"""compress() calls that return normally although the summary model failed.

The built-in compressor never raises when its summariser fails: it inserts a
deterministic fallback summary (messages dropped without a real summary) or, for
access/quota and network failures, aborts and returns the messages unchanged. Both
would look like ordinary `compressed` / `noop` outcomes; the wrapper reads the per-call
fields the engine itself exposes to its host (no engine code runs) and counts them in
hermes_context_compression_summary_failures_total{kind, cause}.

Driven through the real 0.19.0 compress_context() with call_llm faked (the only fake).
"""

from __future__ import annotations

import sqlite3

import pytest
from agent.conversation_compression import compress_context
from support.builtin import compressor
from support.engines import NarrowEngine
from support.engines import agent_transcript as transcript
from support.host import StandInAgent
from support.llm import FakeLLM, ProviderError, install_llm

SUMMARY_FAILURES = "hermes.context.compression.summary_failures"
COMPRESSIONS = "hermes.context.compressions"


def run_compaction(engine):
    agent = StandInAgent(engine)
    engine.update_model(model="gpt-4o", context_length=64_000)
    engine.on_session_start("sess-sf", model="gpt-4o")
    engine.update_from_response({"prompt_tokens": 60_000, "completion_tokens": 10, "total_tokens": 60_010})
    messages = transcript(80, 1500, seed="sf")
    out, _ = compress_context(agent, messages, "system message", approx_tokens=60_000)
    return messages, out


def counts(metric_points, name, *labels):
    return {tuple(dict(k)[name] for name in labels): v for k, v in metric_points(name).items()}


CASES = [
    # error the summariser raises -> what the built-in does -> (kind, cause)
    ("server-error", RuntimeError("upstream exploded (500)"), ("fallback_summary", "other")),
    ("auth", ProviderError("Error code: 401 - invalid api key", status_code=401), ("aborted", "auth")),
    ("network", ConnectionError("Connection reset by peer"), ("aborted", "network")),
]


@pytest.mark.parametrize("name,error,expected", CASES, ids=[c[0] for c in CASES])
def test_failed_summary_is_counted(name, error, expected, observe_engine, metric_points,
                                   finished_spans, store_path, monkeypatch):
    bare_llm, observed_llm = FakeLLM(error=error), FakeLLM(error=error)
    install_llm(monkeypatch, bare_llm)
    bare_in, bare_out = run_compaction(compressor())
    install_llm(monkeypatch, observed_llm)
    engine = observe_engine(compressor())
    messages, out = run_compaction(engine)
    # the host sees what it sees without us
    assert observed_llm.calls == bare_llm.calls > 0
    assert (out is messages) == (bare_out is bare_in)
    assert [m.get("role") for m in out] == [m.get("role") for m in bare_out]
    assert (vars(engine)["_last_compress_aborted"], vars(engine)["_last_summary_fallback_used"]) == \
        ((expected[0] == "aborted"), (expected[0] == "fallback_summary"))

    assert counts(metric_points, SUMMARY_FAILURES, "kind", "cause") == {expected: 1}
    # The compress outcome only says what happened to the list: an aborted compression returns
    # the messages after the built-in's tool-result pruning, so it reads "compressed" (and the
    # host then keeps its original list) -- which is exactly why the failure has its own counter.
    assert counts(metric_points, COMPRESSIONS, "outcome") == {("compressed",): 1}
    span = next(s for s in finished_spans() if s.name == "context_engine.compress")
    assert span.attributes["hermes.context.compress.summary_failure"] == expected[0]
    assert span.attributes["hermes.context.compress.summary_failure_cause"] == expected[1]
    with sqlite3.connect(store_path) as db:
        rows = db.execute("select outcome, reason, content from events where event='summary_failure'").fetchall()
    assert rows == [(expected[0], expected[1], None)]
    # the provider's error text is not exported (it may quote the request)
    for s in finished_spans():
        assert not any("invalid api key" in str(v) or "exploded" in str(v) for v in s.attributes.values())


def test_working_summariser_counts_nothing(observe_engine, metric_points, monkeypatch):
    install_llm(monkeypatch, FakeLLM())
    engine = observe_engine(compressor())
    messages, out = run_compaction(engine)
    assert len(out) < len(messages)
    assert metric_points(SUMMARY_FAILURES) == {}
    assert counts(metric_points, COMPRESSIONS, "outcome") == {("compressed",): 1}


def test_a_later_success_after_a_failure_counts_only_the_failure(observe_engine, metric_points, monkeypatch):
    """The auth flag is sticky in the built-in until a summary succeeds; per-call fields decide."""
    install_llm(monkeypatch, FakeLLM(error=ProviderError("401", status_code=401)))
    engine = observe_engine(compressor())
    run_compaction(engine)
    install_llm(monkeypatch, FakeLLM())
    engine._summary_failure_cooldown_until = 0.0      # as a manual /compress (force) would clear it
    run_compaction(engine)
    assert counts(metric_points, SUMMARY_FAILURES, "kind", "cause") == {("aborted", "auth"): 1}


def test_engines_that_do_not_report_summaries_count_nothing(observe_engine, metric_points):
    engine = observe_engine(NarrowEngine())
    engine._last_summary_fallback_used = "yes"        # not a bool True: not the built-in's field
    engine.compress(transcript(10))
    assert metric_points(SUMMARY_FAILURES) == {}
