"""Spans, checked with InMemorySpanExporter against docs/design/telemetry-contract.md."""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from support.builtin import compressor
from support.engines import (
    CANARY,
    EngineError,
    KwargsEngine,
    NarrowEngine,
    RaisingEngine,
    SelectingEngine,
)
from support.engines import (
    agent_transcript as transcript,
)

from observed_engine.tokens import TokenCounter

NAME = "hermes.context_engine.name"
HOOK = "hermes.context_engine.hook"
CONV = "gen_ai.conversation.id"
HOOK_CALLS = "hermes.context_engine.hook.calls"


def _attrs(span):
    return dict(span.attributes or {})


def _session(engine, messages, tracer=None):
    engine.update_model(model="gpt-4o", context_length=128_000)
    engine.on_session_start("sess-span", model="gpt-4o", platform="cli", conversation_id="conv-9")
    engine.update_from_response({"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940,
                                 "cache_read_tokens": 300})
    engine.should_compress(900)
    result = engine.compress(messages, current_tokens=900, focus_topic="auth")
    schemas = engine.get_tool_schemas()
    answer = engine.handle_tool_call("ctx_grep", {"query": "needle"}, messages=messages)
    engine.get_status()
    engine.on_session_end("sess-span", messages)
    engine.on_session_reset()
    return result, schemas, answer


HOOKS_IN_ORDER = ["update_model", "on_session_start", "update_from_response", "should_compress", "compress",
                  "get_tool_schemas", "handle_tool_call", "get_status", "on_session_end", "on_session_reset"]


def test_one_span_per_hook_call_children_of_the_current_span(tracer_provider, observe_engine, finished_spans):
    engine = observe_engine(KwargsEngine())
    messages = transcript(30)
    tracer = tracer_provider.get_tracer("test-host")
    with tracer.start_as_current_span("host.turn") as parent:
        result, schemas, answer = _session(engine, messages)
    assert result is engine.returned[0] and schemas is engine.schemas
    assert json.loads(answer)["tool"] == "ctx_grep"

    spans = [s for s in finished_spans() if s.name != "host.turn"]
    names = [s.name for s in sorted(spans, key=lambda s: s.start_time)]
    expected = [f"context_engine.{h}" if h != "handle_tool_call" else "execute_tool ctx_grep" for h in HOOKS_IN_ORDER]
    assert names == expected
    pctx = parent.get_span_context()
    for span in spans:
        assert span.parent is not None and span.parent.span_id == pctx.span_id, span.name
        assert span.context.trace_id == pctx.trace_id
        assert span.end_time >= span.start_time, span.name
        attrs = _attrs(span)
        assert attrs[NAME] == "kwargs-engine"
        hook = attrs[HOOK]
        assert span.name in (f"context_engine.{hook}", "execute_tool ctx_grep")
        if hook == "update_model":
            assert CONV not in attrs   # the session is not known yet
        else:
            assert attrs[CONV] == "sess-span", span.name
        assert span.status.status_code is not StatusCode.ERROR

    by_hook = {_attrs(s)[HOOK]: s for s in spans}
    usage = _attrs(by_hook["update_from_response"])
    assert usage["gen_ai.usage.input_tokens"] == 900 and usage["gen_ai.usage.output_tokens"] == 40

    compress = _attrs(by_hook["compress"])
    counter = TokenCounter("auto", model="gpt-4o")
    assert compress["hermes.context.messages.before"] == len(messages)
    assert compress["hermes.context.messages.after"] == len(result) == 4
    assert compress["hermes.context.tokens.before"] == counter.count_messages(messages)
    assert compress["hermes.context.tokens.after"] == counter.count_messages(result)
    assert compress["hermes.context.tokens.after"] < compress["hermes.context.tokens.before"]
    assert compress["hermes.context.compress.outcome"] == "compressed"

    tool = _attrs(by_hook["handle_tool_call"])
    assert tool["gen_ai.operation.name"] == "execute_tool"
    assert tool["gen_ai.tool.name"] == "ctx_grep"


def test_spans_are_roots_without_a_current_span(observe_engine, finished_spans):
    engine = observe_engine(NarrowEngine())
    engine.should_compress(1)
    engine.compress(transcript(12))
    spans = finished_spans()
    assert sorted(s.name for s in spans) == ["context_engine.compress", "context_engine.should_compress"]
    assert all(s.parent is None for s in spans)


def test_compress_noop_outcome_and_work_inside_compress_nests_under_it(tracer_provider, observe_engine,
                                                                      finished_spans):
    inner_tracer = tracer_provider.get_tracer("engine-internals")

    class Tracing(NarrowEngine):
        name = "tracing"

        def compress(self, messages, current_tokens=None, focus_topic=None):
            with inner_tracer.start_as_current_span("summarise"):
                return super().compress(messages, current_tokens, focus_topic)

    engine = observe_engine(Tracing())
    short = transcript(2)
    assert engine.compress(short) is short
    spans = {s.name: s for s in finished_spans()}
    assert spans["summarise"].parent.span_id == spans["context_engine.compress"].context.span_id
    assert _attrs(spans["context_engine.compress"])["hermes.context.compress.outcome"] == "noop"


def test_select_context_span_result(observe_engine, finished_spans):
    engine = observe_engine(SelectingEngine(script=["none", "drop:1", "empty"]))
    request = transcript(6)
    for _ in range(3):
        engine.select_context(request, conversation_messages=request[1:], incoming_message=request[-1],
                              budget_tokens=1000)
    spans = [s for s in finished_spans() if s.name == "context_engine.select_context"]
    assert [_attrs(s)["hermes.context.selection.result"] for s in sorted(spans, key=lambda s: s.start_time)] == \
        ["unchanged", "changed_selection", "fail_open"]


def _exception_events(span):
    return [e for e in span.events if e.name == "exception"]


def test_errors_are_recorded_and_reraised_unchanged(observe_engine, finished_spans):
    engine = observe_engine(RaisingEngine())
    tools = observe_engine(KwargsEngine())
    with pytest.raises(EngineError) as compress_exc:
        engine.compress(transcript(8), focus_topic="x")
    with pytest.raises(KeyError) as usage_exc:
        engine.update_from_response({"prompt_tokens": 1, "boom": "b"})
    with pytest.raises(OSError) as end_exc:
        engine.on_session_end("s", [])
    with pytest.raises(EngineError) as tool_exc:
        tools.handle_tool_call("explode", {"q": 1})
    assert compress_exc.value is engine.raised[0]
    assert usage_exc.value is engine.raised[1]
    assert end_exc.value is engine.raised[2] and end_exc.value.errno == 5
    assert tool_exc.value is tools.raised[0]

    spans = {s.name: s for s in finished_spans()}
    expected_types = {
        "context_engine.compress": "support.engines.EngineError",
        "context_engine.update_from_response": "builtins.KeyError",
        "context_engine.on_session_end": "builtins.OSError",
        "execute_tool explode": "support.engines.EngineError",
    }
    assert set(spans) == set(expected_types)
    for name, exc_type in expected_types.items():
        span = spans[name]
        assert span.status.status_code is StatusCode.ERROR, name
        events = _exception_events(span)
        assert len(events) == 1, name
        assert events[0].attributes["exception.type"] == exc_type


def _all_span_text(spans):
    parts = []
    for span in spans:
        parts.append(span.name)
        parts.extend(f"{k}={v}" for k, v in (span.attributes or {}).items())
        if span.status.description:
            parts.append(span.status.description)
        for event in span.events:
            parts.append(event.name)
            parts.extend(f"{k}={v}" for k, v in (event.attributes or {}).items())
        for link in span.links:
            parts.extend(f"{k}={v}" for k, v in (link.attributes or {}).items())
    return "\n".join(parts)


def _leaky_session(raising, tools, selecting):
    messages = transcript(20, text=CANARY)
    secret_topic = f"topic {CANARY}"
    with pytest.raises(EngineError):
        raising.compress(messages, focus_topic=secret_topic)   # the exception message quotes the topic
    tools.compress(messages, focus_topic=secret_topic, memory_context=CANARY)
    tools.handle_tool_call("ctx_grep", {"query": CANARY}, messages=messages)
    with pytest.raises(EngineError):
        tools.handle_tool_call("explode", {"query": CANARY})
    selecting.select_context(messages, conversation_messages=messages, incoming_message=messages[-1],
                             budget_tokens=5)
    tools.on_session_end("s", messages)
    tools.update_from_response({"prompt_tokens": 5, "note": CANARY})


def test_no_message_text_in_spans_without_capture_content(observe_engine, finished_spans):
    _leaky_session(observe_engine(RaisingEngine()), observe_engine(KwargsEngine()),
                   observe_engine(SelectingEngine(script=["drop:1"])))
    spans = finished_spans()
    assert len(spans) == 7
    text = _all_span_text(spans)
    assert CANARY not in text
    # the error is still recorded, just without the message
    compress = next(s for s in spans if s.name == "context_engine.compress" and s.status.status_code is StatusCode.ERROR)
    assert _exception_events(compress)[0].attributes["exception.type"] == "support.engines.EngineError"


def test_capture_content_on_puts_the_text_in(observe_engine, finished_spans):
    """The positive control for the test above: the canary does reach spans when allowed."""
    _leaky_session(observe_engine(RaisingEngine(), capture_content=True),
                   observe_engine(KwargsEngine(), capture_content=True),
                   observe_engine(SelectingEngine(script=["drop:1"]), capture_content=True))
    text = _all_span_text(finished_spans())
    assert f"hermes.context.focus_topic=topic {CANARY}" in text
    assert CANARY in text.split("gen_ai.tool.call.arguments=", 1)[1]
    n = len(transcript(20, text=CANARY))
    assert f"exception.message=compress failed on {n} messages, focus 'topic {CANARY}'" in text


def test_builtin_hook_calling_another_hook_is_one_span(observe_engine, finished_spans, metric_points):
    """ContextCompressor.on_session_start calls self.bind_session_state(): the host made one call."""
    engine = observe_engine(compressor())
    engine.on_session_start("s-1", model="gpt-4o")
    engine.bind_session_state(session_db=None, session_id="s-1")   # a real host call: traced
    spans = finished_spans()
    assert sorted(s.name for s in spans) == ["context_engine.bind_session_state", "context_engine.on_session_start"]
    calls = {dict(k)["hook"]: v for k, v in metric_points(HOOK_CALLS).items()}
    assert calls == {"on_session_start": 1, "bind_session_state": 1}


def test_engine_calling_its_own_hooks_inside_compress(observe_engine, finished_spans, metric_points):
    class SelfCalling(NarrowEngine):
        name = "self-calling"

        def compress(self, messages, current_tokens=None, focus_topic=None):
            if not self.should_compress(current_tokens):
                self.get_status()
            return super().compress(messages, current_tokens, focus_topic)

    engine = observe_engine(SelfCalling())
    engine.update_model(model="gpt-4o", context_length=1000)
    engine.compress(transcript(10), current_tokens=10)
    names = sorted(s.name for s in finished_spans())
    assert names == ["context_engine.compress", "context_engine.update_model"]
    calls = {dict(k)["hook"]: v for k, v in metric_points(HOOK_CALLS).items()}
    assert calls == {"update_model": 1, "compress": 1}
    assert engine.calls == {"compress": 1, "should_compress": 1, "get_status": 1}


def test_hook_calls_metric_counts_ok_and_error(observe_engine, metric_points):
    engine = observe_engine(RaisingEngine())
    for _ in range(3):
        engine.should_compress(1)
    with pytest.raises(EngineError):
        engine.compress([])
    points = {(dict(k)["hook"], dict(k)["outcome"]): v for k, v in metric_points(HOOK_CALLS).items()}
    assert points == {("should_compress", "ok"): 3, ("compress", "error"): 1}
    assert {dict(k)["engine"] for k in metric_points(HOOK_CALLS, flush=False)} == {"raising"}


def test_current_span_is_untouched_after_hooks(tracer_provider, observe_engine):
    engine = observe_engine(KwargsEngine())
    tracer = tracer_provider.get_tracer("t")
    with tracer.start_as_current_span("outer") as outer:
        engine.compress(transcript(10))
        engine.handle_tool_call("ctx_grep", {"query": "q"})
        with pytest.raises(EngineError):
            engine.handle_tool_call("explode", {})
        assert trace.get_current_span() is outer
    assert trace.get_current_span() is not outer


def test_clone_for_agent_span_is_a_child_of_the_current_span(tracer_provider, observe_engine, finished_spans):
    from support.engines import CloneableEngine

    engine = observe_engine(CloneableEngine())
    tracer = tracer_provider.get_tracer("test-host")
    with tracer.start_as_current_span("agent.init") as parent:
        clone = engine.clone_for_agent()
        clone.should_compress(1)
    spans = {s.name: s for s in finished_spans()}
    for name in ("context_engine.clone_for_agent", "context_engine.should_compress"):
        assert spans[name].parent is not None, name
        assert spans[name].parent.span_id == parent.get_span_context().span_id, name
    assert _attrs(spans["context_engine.clone_for_agent"])[NAME] == "cloneable"


def test_engine_name_attribute_is_the_inner_name_when_exposed_under_another(observe_engine, finished_spans):
    """The plugin exposes the engine as "observed"; spans still say which engine ran."""
    engine = observe_engine(NarrowEngine(), name="observed")
    assert engine.name == "observed"
    engine.should_compress(1)
    (span,) = finished_spans()
    assert _attrs(span)[NAME] == "narrow"


def test_odd_engine_state_numbers_do_not_cost_the_span(observe_engine, finished_spans, metric_points):
    """An engine whose window is float('inf') still gets its update_from_response span."""
    engine = observe_engine(NarrowEngine())
    engine.context_length = float("inf")
    engine.update_from_response({"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6})
    assert [s.name for s in finished_spans()] == ["context_engine.update_from_response"]
    assert metric_points("hermes.context_engine.telemetry_errors", flush=False) == {}
