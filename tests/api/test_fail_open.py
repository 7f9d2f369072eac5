"""Fail-open events, classified exactly as the host classifies them, and the wrapper's own errors.

``host_select`` below follows the head host's rules for ``select_context``
(docs/design/host-contract.md): an exception, ``[]``, a non-list or a
list with a non-dict item fall open to the original request (warning);
``None`` passes it through silently; a non-empty list of dicts is sent as is.
The tests compare what the host receives from the observed engine with what
the bare engine returned (same object, same exception) and count the events.
"""

from __future__ import annotations

import contextlib
import logging

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from support.engines import ScriptedEngine, SelectingEngine, transcript
from support.store_rows import read_rows

import observed_engine
from observed_engine import observe

FAIL_OPEN = "hermes.context_engine.fail_open"


@pytest.fixture
def store(tmp_path):
    return tmp_path / "fail_open.sqlite"


def observed(inner, prov, store=None, tracer_provider=None):
    settings = {"store": {"path": str(store)} if store else {"enabled": False}}
    return observe(inner, tracer_provider=tracer_provider or prov.tracer_provider,
                   meter_provider=prov.meter_provider, settings=settings)


def flush():
    assert observed_engine.flush(10.0)


def host_select(engine, request):
    """What the head host sends after calling select_context: (messages sent, fell_open)."""
    try:
        result = engine.select_context(request, conversation_messages=request, incoming_message=request[-1],
                                       budget_tokens=10_000)
    except Exception:
        return request, True
    if result is None:
        return request, False
    if not isinstance(result, list) or not result or any(not isinstance(m, dict) for m in result):
        return request, True
    return result, False


class Boom(Exception):
    pass


# -- select_context ---------------------------------------------------------------------


def test_select_context_is_classified_like_the_host(prov, store, caplog):
    caplog.set_level(logging.WARNING, logger="observed_engine")
    request = transcript(6)
    good = [request[0], request[-1]]
    boom = Boom("index unavailable")
    script = [
        ("raises", boom),
        ("empty", []),
        ("tuple", tuple(good)),          # a non-list
        ("string", "just text"),         # a non-list
        ("non_dict", [request[0], "x"]),  # a list with a non-dict item
        ("none", None),
        ("good", good),
        ("good_again", good),            # the same object again
    ]
    returned = iter(script)

    def select(request_messages, **kw):
        _label, value = next(returned)
        if isinstance(value, BaseException):
            raise value
        return value

    eng = observed(SelectingEngine("selector", {"select_context": select}), prov, store)
    outcomes = []
    for label, value in script:
        if isinstance(value, BaseException):
            with pytest.raises(Boom) as info:
                eng.select_context(request, conversation_messages=request, incoming_message=request[-1],
                                   budget_tokens=10_000)
            assert info.value is value           # the very exception, unchanged
            outcomes.append((label, True))
            continue
        got = eng.select_context(request, conversation_messages=request, incoming_message=request[-1],
                                 budget_tokens=10_000)
        assert got is value                      # the very object the inner returned
        outcomes.append((label, host_select(SelectingEngine("bare", {"select_context": lambda *a, v=value, **k: v}),
                                            request)[1]))
    flush()

    expected_fell_open = {"raises": True, "empty": True, "tuple": True, "string": True, "non_dict": True,
                          "none": False, "good": False, "good_again": False}
    assert dict(outcomes) == expected_fell_open
    points = {(a["hook"], a["reason"]): dp.value for a, dp in prov.points(FAIL_OPEN)}
    assert points == {("select_context", "exception"): 1, ("select_context", "invalid_return"): 4}
    assert prov.by_label("hermes.context.selections", "result") == {
        "fail_open": 5, "unchanged": 1, "changed_selection": 1, "same_selection": 1}
    rows = read_rows(store, "event = 'fail_open'")
    assert [(r["hook"], r["reason"]) for r in rows] == [("select_context", "exception")] + \
        [("select_context", "invalid_return")] * 4
    # one warning per kind of invalid value
    invalid = [r.getMessage() for r in caplog.records if "invalid value" in r.getMessage()]
    assert len(invalid) == 4, invalid


def test_select_context_none_is_a_pass_through_not_a_failure(prov):
    eng = observed(SelectingEngine("quiet", {"select_context": lambda *a, **k: None}), prov)
    request = transcript(4)
    for _ in range(3):
        assert host_select(eng, request) == (request, False)
    flush()
    assert prov.total(FAIL_OPEN) == 0
    assert prov.by_label("hermes.context.selections", "result") == {"unchanged": 3}


# -- hooks whose exceptions the host swallows ---------------------------------------------------------


SWALLOWED = {
    "on_session_start": lambda e: e.on_session_start("s1", platform="cli"),
    "on_session_end": lambda e: e.on_session_end("s1", transcript(2)),
    "on_session_reset": lambda e: e.on_session_reset(),
    "handle_tool_call": lambda e: e.handle_tool_call("ctx_search", {"q": "x"}, messages=[]),
    "bind_session_state": lambda e: e.bind_session_state(session_db=None, session_id="s1"),
    "on_turn_complete": lambda e: e.on_turn_complete(transcript(2), usage={}, turn_id="t1"),
}


@pytest.mark.parametrize("hook", sorted(SWALLOWED))
def test_swallowed_hook_exception_is_a_fail_open_and_reraised_unchanged(prov, store, hook):
    boom = Boom(f"{hook} failed")

    def raise_it(*a, **k):
        raise boom

    eng = observed(SelectingEngine("fragile", {hook: raise_it}), prov, store)
    with pytest.raises(Boom) as info:
        SWALLOWED[hook](eng)
    assert info.value is boom
    flush()
    assert {(a["hook"], a["reason"]): dp.value for a, dp in prov.points(FAIL_OPEN)} == {(hook, "exception"): 1}
    assert prov.value("hermes.context_engine.hook.calls", engine="fragile", hook=hook, outcome="error") == 1
    [row] = read_rows(store, "event = 'fail_open'")
    assert (row["hook"], row["reason"], row["engine"]) == (hook, "exception", "fragile")


def test_swallowed_hooks_that_succeed_are_not_fail_open(prov):
    eng = observed(SelectingEngine("fine"), prov)
    for call in SWALLOWED.values():
        call(eng)
    flush()
    assert prov.total(FAIL_OPEN) == 0
    assert prov.total("hermes.context_engine.hook.calls", outcome="ok") == len(SWALLOWED)


def test_get_tool_schemas_fails_open_only_on_refresh(prov):
    n = {"a": 0, "b": 0}

    def second_call_raises(*a):
        n["a"] += 1
        if n["a"] == 2:
            raise Boom("refresh failed")
        return [{"name": "t"}]

    def always_raises(*a):
        n["b"] += 1
        raise Boom("no schemas")

    refresh = observed(ScriptedEngine("refresh", {"get_tool_schemas": second_call_raises}), prov)
    init = observed(ScriptedEngine("init", {"get_tool_schemas": always_raises}), prov)
    assert refresh.get_tool_schemas() == [{"name": "t"}]
    with pytest.raises(Boom):
        refresh.get_tool_schemas()
    assert refresh.get_tool_schemas() == [{"name": "t"}]
    with pytest.raises(Boom):
        init.get_tool_schemas()      # at agent init: the host does not swallow this one
    flush()
    assert {a["engine"]: dp.value for a, dp in prov.points(FAIL_OPEN)} == {"refresh": 1}
    with pytest.raises(Boom):
        init.get_tool_schemas()      # a refresh now
    flush()
    assert {a["engine"]: dp.value for a, dp in prov.points(FAIL_OPEN)} == {"refresh": 1, "init": 1}


def test_exceptions_the_host_does_not_swallow_are_not_fail_open(prov):
    boom = Boom("x")

    def raise_it(*a, **k):
        raise boom

    eng = observed(ScriptedEngine("strict", {h: raise_it for h in ("update_from_response", "compress",
                                                                    "should_compress")}), prov)
    for call in (lambda: eng.update_from_response({"prompt_tokens": 1}),
                 lambda: eng.compress(transcript(6)),
                 lambda: eng.should_compress(10)):
        with pytest.raises(Boom) as info:
            call()
        assert info.value is boom
    flush()
    assert prov.total(FAIL_OPEN) == 0
    assert prov.total("hermes.context_engine.hook.calls", outcome="error") == 3


# -- the wrapper's own failures ------------------------------------------------------------------------


class BrokenSpan(NonRecordingSpan):
    def __init__(self):
        super().__init__(SpanContext(0x1234, 0x5678, is_remote=False, trace_flags=TraceFlags(1)))

    def is_recording(self):
        return True

    def _boom(self, *a, **k):
        raise RuntimeError("span exporter backend exploded")

    set_attribute = set_attributes = add_event = set_status = record_exception = update_name = end = _boom


class BrokenTracer(trace.Tracer):
    def start_span(self, name, context=None, kind=trace.SpanKind.INTERNAL, attributes=None, links=None,
                   start_time=None, record_exception=True, set_status_on_exception=True):
        return BrokenSpan()

    @contextlib.contextmanager
    def start_as_current_span(self, name, *args, **kwargs):
        span = BrokenSpan()
        with trace.use_span(span, end_on_exit=False):
            yield span


class BrokenTracerProvider(trace.TracerProvider):
    def get_tracer(self, *args, **kwargs):
        return BrokenTracer()


def test_broken_spans_do_not_reach_the_host_and_are_counted(prov):
    request = transcript(6)
    selection = [request[0], request[-1]]
    boom = Boom("inner failure")

    def failing_reset():
        raise boom

    inner = SelectingEngine("traced", {"select_context": lambda *a, **k: selection,
                                       "on_session_reset": failing_reset})
    eng = observed(inner, prov, tracer_provider=BrokenTracerProvider())
    assert [eng.should_compress(t) for t in (10, 60_000, 20)] == [False, True, False]
    out = eng.compress(request, current_tokens=10)
    assert [m["content"] for m in out] == [request[0]["content"], "summary"]
    assert host_select(eng, request) == (selection, False)
    assert host_select(eng, request)[0] is selection
    assert eng.handle_tool_call("ctx_search", {"q": 1}) == '{"ok": true}'
    with pytest.raises(Boom) as info:
        eng.on_session_reset()
    assert info.value is boom
    flush()
    hook_calls = prov.total("hermes.context_engine.hook.calls")
    assert hook_calls == 8
    # one swallowed tracing failure per hook call, nothing else
    assert {a["component"]: dp.value for a, dp in prov.points("hermes.context_engine.telemetry_errors")} == \
        {"tracing": hook_calls}
    # metrics are unaffected by the broken tracer
    assert prov.value("hermes.context.compressions", engine="traced", outcome="compressed") == 1
    assert prov.value(FAIL_OPEN, engine="traced", hook="on_session_reset", reason="exception") == 1
