"""Bad input, as a table: odd ``usage`` values, malformed message lists for compress() and
select_context(), and garbage returned by select_context().

Each row: the host sees exactly what it sees from the bare engine (results, state,
exceptions, what the head host sends), the wrapper counts the oddity under its kind
(``hermes_context_engine_bad_input_total{kind}`` / ``..._fail_open_total{reason}``),
writes a store row for it, and logs one line however often it happens. Rows that are
fine (controls) must produce no bad-input count and no log line.
"""

from __future__ import annotations

import copy
import logging
import sqlite3

import pytest
from support.engines import LedgerEngine
from support.head_host import HeadHost
from support.logs import matching, our_records
from support.otel import Providers
from support.twins import render, run_hook, state_of

REPEAT = 3          # every input is given three times: counted three times, logged once


@pytest.fixture(autouse=True)
def _debug_logs(caplog):
    caplog.set_level(logging.DEBUG, logger="observed_engine")


@pytest.fixture
def pipeline(tmp_path):
    p = Providers({"store": {"path": str(tmp_path / "store.sqlite")}})
    yield p
    p.shutdown()


def _store_reasons(pipeline, event):
    path = pipeline.settings["store"]["path"]
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("SELECT reason FROM events WHERE event = ? ORDER BY id", (event,))]
    finally:
        conn.close()


def _same_for_host(bare, observed, hook, args, kwargs=None):
    kwargs = kwargs or {}
    got_b = run_hook(bare, hook, copy.deepcopy(args), copy.deepcopy(kwargs))
    got_o = run_hook(observed, hook, copy.deepcopy(args), copy.deepcopy(kwargs))
    assert got_o.describe() == got_b.describe()
    assert state_of(observed) == state_of(bare)
    return got_o


def _bad_input_log(caplog, kind):
    return matching(our_records(caplog, logging.WARNING), f"odd input ({kind})")


# --------------------------------------------------------------------------- usage

USAGE_CASES = [
    # id, usage, bad-input kinds, prompt tokens counted
    ("none", None, [], 0),
    ("empty-dict", {}, [], 0),
    ("list", [], ["usage_not_a_dict"], 0),
    ("string", "str", ["usage_not_a_dict"], 0),
    ("int", 42, ["usage_not_a_dict"], 0),
    ("string-field", {"prompt_tokens": "12"}, ["usage_field_prompt_tokens_str"], 0),
    ("negative", {"prompt_tokens": -5}, ["usage_field_prompt_tokens_negative"], 0),
    ("bool", {"prompt_tokens": True}, ["usage_field_prompt_tokens_bool"], 0),
    ("fraction", {"prompt_tokens": 1.5}, ["usage_field_prompt_tokens_float"], 0),
    ("nan", {"prompt_tokens": float("nan")}, ["usage_field_prompt_tokens_float"], 0),
    ("whole-float", {"prompt_tokens": 12.0}, [], 12),
    ("absurd-float", {"prompt_tokens": 1e300}, ["usage_field_prompt_tokens_too_large"], 0),
    ("beyond-64-bits", {"prompt_tokens": 10 ** 20}, ["usage_field_prompt_tokens_too_large"], 0),
    ("none-field", {"prompt_tokens": None}, [], 0),
    ("nested-dict", {"prompt_tokens": {"cached": 3}}, ["usage_field_prompt_tokens_dict"], 0),
    ("nested-list", {"completion_tokens": [1, 2]}, ["usage_field_completion_tokens_list"], 0),
    ("details-dict", {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 4}}, [], 10),
    ("fallback-key", {"prompt_tokens": "x", "input_tokens": 7}, ["usage_field_prompt_tokens_str"], 7),
    ("two-odd", {"prompt_tokens": -1, "reasoning_tokens": "lots"},
     ["usage_field_prompt_tokens_negative", "usage_field_reasoning_tokens_str"], 0),
]


@pytest.mark.parametrize("usage,kinds,prompt", [c[1:] for c in USAGE_CASES], ids=[c[0] for c in USAGE_CASES])
def test_odd_usage(usage, kinds, prompt, pipeline, caplog):
    bare, observed = LedgerEngine(), pipeline.observe(LedgerEngine())
    for _ in range(REPEAT):
        _same_for_host(bare, observed, "update_from_response", (usage,))
    pipeline.flush()
    for kind in kinds:
        assert pipeline.total("hermes.context_engine.bad_input", engine="ledger",
                              hook="update_from_response", kind=kind) == REPEAT
        assert len(_bad_input_log(caplog, kind)) == 1, kind
    assert pipeline.total("hermes.context_engine.bad_input") == REPEAT * len(kinds)
    assert sorted(_store_reasons(pipeline, "bad_input")) == sorted(kinds * REPEAT)
    assert pipeline.total("hermes.context_engine.usage_tokens", token_type="prompt") == REPEAT * prompt
    if not kinds:
        assert not matching(our_records(caplog, logging.WARNING), "odd input")
    # the call itself is a normal, successful hook call
    assert pipeline.total("hermes.context_engine.hook.calls", hook="update_from_response",
                          outcome="ok") == REPEAT


def test_a_value_sqlite_cannot_store_does_not_block_the_store(pipeline, caplog):
    """An engine whose state holds an int beyond 64 bits: that row is stored without it, and
    every later row still arrives (before: the batch failed forever and the store stopped)."""
    bare, observed = LedgerEngine(), pipeline.observe(LedgerEngine())
    for engine in (bare, observed):
        engine.last_prompt_tokens = 10 ** 20          # whatever the engine keeps, the host may write
    _same_for_host(bare, observed, "update_from_response", ({},))
    for engine in (bare, observed):
        engine.last_prompt_tokens = 5
    for i in range(REPEAT):
        _same_for_host(bare, observed, "update_from_response", ({"prompt_tokens": 100 + i},))
    pipeline.flush()
    path = pipeline.settings["store"]["path"]
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT prompt_tokens, input_tokens FROM events ORDER BY id").fetchall()
    finally:
        conn.close()
    assert rows == [(None, None)] + [(100 + i, 100 + i) for i in range(REPEAT)]
    pipeline.flush()    # the store's error reaches the counter through the worker
    assert pipeline.total("hermes.context_engine.telemetry_errors", flush=True, component="store") == 1
    assert len(matching(our_records(caplog, logging.WARNING), "a value SQLite cannot store")) == 1


def test_odd_usage_reaching_an_engine_that_raises(pipeline, caplog):
    """The built-in raises on some odd usage: the host gets that very exception, we count both."""
    from support.engines import TouchyEngine

    bare, observed = TouchyEngine(), pipeline.observe(TouchyEngine())
    got = _same_for_host(bare, observed, "update_from_response", ({"prompt_tokens": "12"},))
    assert got.exc is not None and type(got.exc).__name__ == "TouchyError"
    pipeline.flush()
    assert pipeline.total("hermes.context_engine.hook.calls", hook="update_from_response",
                          outcome="error") == 1
    assert pipeline.total("hermes.context_engine.bad_input",
                          kind="usage_field_prompt_tokens_str") == 1


# --------------------------------------------------------------------------- malformed messages

GOOD = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
MESSAGE_CASES = [
    # id, messages, bad-input kind (None: fine)
    ("none", None, "messages_not_a_list"),
    ("tuple", tuple(GOOD), "messages_not_a_list"),
    ("string", "hello", "messages_not_a_list"),
    ("non-dict-items", [GOOD[0], "hi", 3], "message_not_a_dict"),
    ("none-item", [GOOD[0], None], "message_not_a_dict"),
    ("no-role", [GOOD[0], {"content": "where is my role"}], "message_without_role"),
    ("role-not-a-string", [GOOD[0], {"role": 7, "content": "x"}], "message_without_role"),
    ("int-content", [GOOD[0], {"role": "user", "content": 42}], "message_content_int"),
    ("dict-content", [GOOD[0], {"role": "user", "content": {"text": "x"}}], "message_content_dict"),
    ("bytes-content", [GOOD[0], {"role": "user", "content": b"raw"}], "message_content_bytes"),
    ("tool-calls-not-a-list", [GOOD[0], {"role": "assistant", "content": None, "tool_calls": "call"}],
     "message_tool_calls_str"),
    # controls: unusual but well-formed
    ("multimodal", [GOOD[0], {"role": "user", "content": [{"type": "text", "text": "x"},
                                                          {"type": "image_url", "image_url": {"url": "u"}}]}], None),
    ("tool-exchange", [GOOD[0], {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}], None),
    ("empty-list", [], None),
]


class Passthrough(LedgerEngine):
    """Never raises on odd messages: returns the request (None from select_context)."""

    name = "passthrough"

    def compress(self, messages, current_tokens=None, focus_topic=None, force=False, memory_context=""):
        self.log.append(("compress", type(messages).__name__))
        return messages

    def select_context(self, request_messages, *, conversation_messages=None, incoming_message=None,
                       budget_tokens=0):
        self.log.append(("select", type(request_messages).__name__))
        return None


@pytest.mark.parametrize("hook", ["compress", "select_context"])
@pytest.mark.parametrize("messages,kind", [c[1:] for c in MESSAGE_CASES], ids=[c[0] for c in MESSAGE_CASES])
def test_malformed_messages(hook, messages, kind, pipeline, caplog):
    bare, observed = Passthrough(), pipeline.observe(Passthrough())
    kwargs = {"current_tokens": 100} if hook == "compress" else {"budget_tokens": 1000}
    for _ in range(REPEAT):
        got = _same_for_host(bare, observed, hook, (messages,), kwargs)
        assert got.exc is None
    pipeline.flush()
    if kind is None:
        assert pipeline.total("hermes.context_engine.bad_input") == 0
        assert not matching(our_records(caplog, logging.WARNING), "odd input")
    else:
        assert pipeline.total("hermes.context_engine.bad_input", engine="passthrough", hook=hook,
                              kind=kind) == REPEAT
        assert pipeline.total("hermes.context_engine.bad_input") == REPEAT
        assert _store_reasons(pipeline, "bad_input") == [kind] * REPEAT
        assert len(_bad_input_log(caplog, kind)) == 1
    assert pipeline.total("hermes.context_engine.hook.calls", hook=hook, outcome="ok") == REPEAT


# --------------------------------------------------------------------------- garbage select_context returns


class Returns(LedgerEngine):
    """select_context returns a fresh copy of ``value`` every time."""

    name = "garbage"

    def __init__(self, value):
        super().__init__()
        self.value = value

    def select_context(self, request_messages, *, conversation_messages=None, incoming_message=None,
                       budget_tokens=0):
        self.log.append(("select", len(request_messages)))
        return copy.deepcopy(self.value)


SELECT_CASES = [
    # id, returned, fail-open detail (None: not a fail-open), selection result
    ("empty-dict", {}, "a dict, not a list", "fail_open"),
    ("string", "x", "a str, not a list", "fail_open"),
    ("empty-list", [], "an empty list", "fail_open"),
    ("int-item", [1], "a list with a int item", "fail_open"),
    ("none-item", [None], "a list with a NoneType item", "fail_open"),
    ("dict-then-int", [{"role": "user"}, 3], "a list with a int item", "fail_open"),
    ("tuple", ({"role": "user", "content": "hi"},), "a tuple, not a list", "fail_open"),
    ("none", None, None, "unchanged"),
    ("a-selection", [{"role": "user", "content": "hi"}], None, "changed_selection"),
]


@pytest.mark.parametrize("returned,detail,result", [c[1:] for c in SELECT_CASES], ids=[c[0] for c in SELECT_CASES])
def test_garbage_select_context_returns(returned, detail, result, pipeline, caplog):
    bare, observed = Returns(returned), pipeline.observe(Returns(returned))
    host_b, host_o = HeadHost(bare), HeadHost(observed)
    for i in range(REPEAT):
        request = [{"role": "system", "content": "s"}, {"role": "user", "content": f"q{i}"}]
        sent_b = host_b.apply_selection(request, request[-1])
        sent_o = host_o.apply_selection(request, request[-1])
        assert render(sent_o) == render(sent_b)
        assert (sent_o is request) == (sent_b is request)
        assert state_of(observed) == state_of(bare)
    assert [w[:2] for w in host_o.warnings] == [w[:2] for w in host_b.warnings]
    pipeline.flush()
    fail_open = pipeline.total("hermes.context_engine.fail_open", engine="garbage",
                               hook="select_context", reason="invalid_return")
    logged = matching(our_records(caplog, logging.WARNING), "select_context returned an invalid value")
    if detail is None:
        assert fail_open == 0 and not logged
    else:
        assert fail_open == REPEAT
        assert len(logged) == 1 and detail in logged[0].getMessage()
        assert _store_reasons(pipeline, "fail_open") == ["invalid_return"] * REPEAT
    selections = pipeline.total("hermes.context.selections", engine="garbage", result=result)
    if result == "changed_selection":
        assert selections == 1      # the same selection again is a same_selection
        assert pipeline.total("hermes.context.selections", result="same_selection") == REPEAT - 1
    else:
        assert selections == REPEAT
