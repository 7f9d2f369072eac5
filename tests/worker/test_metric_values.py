"""Exact metric values after scripted sessions (InMemoryMetricReader).

The real ContextCompressor runs offline (its summariser replaced by a fake), plus
small scripted engines for the odd cases. Every assertion is on a value the
engine must have produced, not on the mere presence of a series.
"""

from __future__ import annotations

import logging

import pytest
from support.builtin import real_compressor
from support.engines import ScriptedEngine, transcript
from support.otel import Providers

import observed_engine
from observed_engine import observe
from observed_engine.tokens import TokenCounter

NO_STORE = {"store": {"enabled": False}}


def flush():
    assert observed_engine.flush(10.0), "observed_engine.flush() timed out"


def observed(inner, prov, **settings):
    merged = dict(NO_STORE)
    merged.update(settings)
    return observe(inner, tracer_provider=prov.tracer_provider, meter_provider=prov.meter_provider,
                   settings=merged)


# -- a session through the real compressor ------------------------------------------------


def test_scripted_session_with_the_real_compressor(prov, monkeypatch):
    eng = observed(real_compressor(monkeypatch, model="gpt-4o"), prov)
    name = "compressor"
    assert eng.name == name

    eng.on_session_start("sess-1", model="gpt-4o", context_length=200_000, platform="cli")
    eng.update_from_response({"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500,
                              "cache_read_tokens": 800, "reasoning_tokens": 50})
    eng.update_from_response({"prompt_tokens": 5000, "completion_tokens": 700, "total_tokens": 5700,
                              "cache_write_tokens": 100})
    assert [eng.should_compress(t) for t in (6000, 7000, 8000)] == [False, False, False]

    long_msgs = transcript(60)
    short_msgs = transcript(2)
    compressed = eng.compress(long_msgs, current_tokens=100_000)
    assert len(compressed) < len(long_msgs)
    unchanged = eng.compress(short_msgs, current_tokens=100)
    assert unchanged == short_msgs
    eng.on_session_end("sess-1", compressed)
    flush()

    # hook calls per hook and outcome: what the host called (the 0.19.0 compressor's
    # on_session_start calls self.bind_session_state itself; that nested call is not a host call)
    assert prov.by_label("hermes.context_engine.hook.calls", "hook") == {
        "on_session_start": 1, "update_from_response": 2, "should_compress": 3, "compress": 2, "on_session_end": 1,
    }
    assert prov.total("hermes.context_engine.hook.calls", outcome="error") == 0
    assert prov.value("hermes.context_engine.hook.calls", engine=name, hook="should_compress", outcome="ok") == 3
    # one latency sample per call
    assert prov.histogram("hermes.context_engine.hook.duration", engine=name, hook="should_compress")[0] == 3
    assert prov.histogram("hermes.context_engine.hook.duration", engine=name, hook="compress")[0] == 2

    # usage tokens per token type
    assert prov.by_label("hermes.context_engine.usage_tokens", "token_type") == {
        "prompt": 6200, "completion": 1000, "cache_read": 800, "cache_write": 100, "reasoning": 50,
    }

    # compressions by outcome
    assert prov.value("hermes.context.compressions", engine=name, outcome="compressed") == 1
    assert prov.value("hermes.context.compressions", engine=name, outcome="noop") == 1
    assert prov.total("hermes.context.compressions", outcome="error") == 0
    assert prov.histogram("hermes.context.compression.duration", engine=name)[0] == 2

    # tokens before / after, counted the way the engine's tokenizer counts them
    counter = TokenCounter("auto", model="gpt-4o")
    before = counter.count_messages(long_msgs) + counter.count_messages(short_msgs)
    after = counter.count_messages(compressed) + counter.count_messages(unchanged)
    count, total, _, _ = prov.histogram("hermes.context.compression.tokens", engine=name, stage="before")
    assert (count, total) == (2, before)
    count, total, _, _ = prov.histogram("hermes.context.compression.tokens", engine=name, stage="after")
    assert (count, total) == (2, after)
    assert after < before
    count, total, _, _ = prov.histogram("hermes.context.compression.messages", engine=name, stage="before")
    assert (count, total) == (2, len(long_msgs) + len(short_msgs))
    count, total, _, _ = prov.histogram("hermes.context.compression.messages", engine=name, stage="after")
    assert (count, total) == (2, len(compressed) + len(unchanged))

    # compress span carries the same numbers
    spans = [s for s in prov.exporter.get_finished_spans() if s.name == "context_engine.compress"]
    assert [s.attributes["hermes.context.compress.outcome"] for s in spans] == ["compressed", "noop"]
    assert spans[0].attributes["hermes.context.tokens.before"] == counter.count_messages(long_msgs)
    assert spans[0].attributes["gen_ai.conversation.id"] == "sess-1"


def test_gauges_follow_the_engines_real_state_including_host_writes(prov, monkeypatch):
    eng = observed(real_compressor(monkeypatch), prov)
    eng.update_from_response({"prompt_tokens": 5000, "completion_tokens": 10, "total_tokens": 5010})
    flush()
    threshold = eng.threshold_tokens
    assert 0 < threshold < 200_000 and eng.context_length == 200_000
    assert prov.value("hermes.context.prompt_tokens", engine="compressor") == 5000
    assert prov.value("hermes.context.threshold_tokens", engine="compressor") == threshold
    assert prov.value("hermes.context.window_tokens", engine="compressor") == 200_000
    assert prov.value("hermes.context.usage_ratio", engine="compressor") == pytest.approx(0.025)

    # The host writes these attributes directly (no hook runs): the gauges still follow.
    eng.last_prompt_tokens = -1            # "awaiting real usage" sentinel
    eng.threshold_tokens = 123_456
    eng.context_length = 400_000
    assert prov.value("hermes.context.prompt_tokens", engine="compressor") == 0
    assert prov.value("hermes.context.usage_ratio", engine="compressor") == 0
    assert prov.value("hermes.context.threshold_tokens", engine="compressor") == 123_456
    assert prov.value("hermes.context.window_tokens", engine="compressor") == 400_000

    eng.last_prompt_tokens = 300_000
    assert prov.value("hermes.context.prompt_tokens", engine="compressor") == 300_000
    assert prov.value("hermes.context.usage_ratio", engine="compressor") == pytest.approx(0.75)
    # the writes landed on the real engine's state
    assert vars(eng)["threshold_tokens"] == 123_456


def test_compress_error_is_counted_and_reraised_unchanged(prov):
    boom = RuntimeError("summary model unavailable")

    def failing(messages, current_tokens=None):
        raise boom

    eng = observed(ScriptedEngine("failing", {"compress": failing}), prov)
    with pytest.raises(RuntimeError) as info:
        eng.compress(transcript(10), current_tokens=10)
    assert info.value is boom
    with pytest.raises(RuntimeError):
        eng.compress(transcript(10))    # the next one raises too
    flush()
    assert prov.value("hermes.context.compressions", engine="failing", outcome="error") == 2
    assert prov.value("hermes.context_engine.hook.calls", engine="failing", hook="compress", outcome="error") == 2
    assert prov.total("hermes.context.compressions", outcome="compressed") == 0
    # tokens before are still recorded (the input was valid); there is no "after"
    assert prov.histogram("hermes.context.compression.tokens", engine="failing", stage="before")[0] == 2
    assert prov.histogram("hermes.context.compression.tokens", engine="failing", stage="after") is None
    # an error raised by compress is the host's to see: not a fail-open
    assert prov.total("hermes.context_engine.fail_open") == 0


def test_odd_usage_dicts_count_what_is_valid_and_report_the_rest(prov, caplog):
    caplog.set_level(logging.WARNING, logger="observed_engine")
    eng = observed(ScriptedEngine("usage_probe"), prov)
    usages = [
        {},                                                        # missing fields: nothing, no problem
        {"prompt_tokens": None, "completion_tokens": 5},          # None: absent, not a problem
        {"prompt_tokens": "12", "completion_tokens": 7},          # string
        {"prompt_tokens": -3, "completion_tokens": 2, "cache_read_tokens": 4},   # negative
        {"prompt_tokens": True, "completion_tokens": 1},          # bool is not a count
        {"prompt_tokens": "12", "completion_tokens": 1},          # the same string again
        {"prompt_tokens": 10, "input_tokens": 10, "completion_tokens": 2.5},     # one prompt figure; float 2.5
        "not a dict",
    ]
    for usage in usages:
        eng.update_from_response(usage)
    flush()

    assert prov.by_label("hermes.context_engine.usage_tokens", "token_type") == {
        "prompt": 10, "completion": 16, "cache_read": 4,
    }
    bad = {a["kind"]: v for a, v in ((a, dp.value) for a, dp in prov.points("hermes.context_engine.bad_input"))}
    assert bad == {
        "usage_field_prompt_tokens_str": 2,
        "usage_field_prompt_tokens_negative": 1,
        "usage_field_prompt_tokens_bool": 1,
        "usage_field_completion_tokens_float": 1,
        "usage_not_a_dict": 1,
    }
    for a, _dp in prov.points("hermes.context_engine.bad_input"):
        assert a["engine"] == "usage_probe" and a["hook"] == "update_from_response"
    # every call still went through and was counted ok
    assert prov.value("hermes.context_engine.hook.calls", engine="usage_probe", hook="update_from_response",
                      outcome="ok") == len(usages)

    lines = [r.getMessage() for r in caplog.records if "odd input" in r.getMessage()]
    for kind in bad:
        assert sum(kind in line for line in lines) == 1, (kind, lines)
    assert len(lines) == len(bad)


def test_engine_label_values_are_capped_into_other():
    prov = Providers()
    try:
        engines = [observed(ScriptedEngine(n), prov, max_label_values=2) for n in ("alpha", "beta", "gamma")]
        for eng in engines:
            eng.should_compress(1)
            flush()   # one at a time: the first two names take the two label slots
        engines[2].should_compress(2)
        flush()
        calls = {a["engine"]: dp.value for a, dp in prov.points("hermes.context_engine.hook.calls")}
        assert calls == {"alpha": 1, "beta": 1, "other": 2}
        assert set(prov.by_label("hermes.context.window_tokens", "engine")) == {"alpha", "beta", "other"}
        # the real name is kept where it is not a label: the span
        names = {s.attributes["hermes.context_engine.name"] for s in prov.exporter.get_finished_spans()}
        assert names == {"alpha", "beta", "gamma"}
    finally:
        observed_engine.shutdown(5.0)
        prov.shutdown()
