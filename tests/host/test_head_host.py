"""Head's select_context / on_turn_complete rules, applied by tests/support/head_host.py to
bare and observed engines alike (hermes-host-contract.md, section 1).

Two host flavours:
* "0.19": the installed ABC, which has neither hook: any engine method counts.
* "head": ``agent.context_engine.ContextEngine`` replaced by ``HeadContextEngine``
  (default no-op hooks), so the identity skip is really exercised -- by the
  harness and by the wrapper, which both look the ABC up at call time.
"""

from __future__ import annotations

import agent.context_engine as context_engine_module
import pytest
from support.engines import (
    DuckEngine,
    EngineError,
    HeadContextEngine,
    HeadPlainEngine,
    HeadSelectingEngine,
    NarrowEngine,
    SelectingEngine,
)
from support.head_host import HeadHost, engine_overrides

from observed_engine.tokens import TokenCounter

SELECTIONS = "hermes.context.selections"
FAIL_OPEN = "hermes.context_engine.fail_open"
CACHE_LOST = "hermes.context.selection.cache_prefix_lost_tokens"
HOOK_CALLS = "hermes.context_engine.hook.calls"


@pytest.fixture
def head_abc(monkeypatch):
    """Make the installed Hermes look like head: its ContextEngine has the default hooks."""
    monkeypatch.setattr(context_engine_module, "ContextEngine", HeadContextEngine)
    return HeadContextEngine


@pytest.fixture(params=["0.19", "head"])
def flavour(request, monkeypatch):
    if request.param == "head":
        monkeypatch.setattr(context_engine_module, "ContextEngine", HeadContextEngine)
    return request.param


# One select_context action per provider request; turns are (text, requests, failed, early_exit).
SCRIPT = ["none",                      # t1: None -> original, silently
          "drop:2", "keep",            # t2 + retry: a new selection, then the very same object
          "copy",                      # t3: an equal copy of the last selection
          "raise", "empty", "tuple",   # t4 + 2 retries: exception, [], a non-list
          "nondict",                   # t5: a list with a non-dict item (the turn fails too)
          "same",                      # t6: the request object itself
          "drop:1", "drop:1",          # t7 + retry: a changed selection, then an equal one
          "drop:3"]                    # t8: changed again (early exit: no on_turn_complete)
TURNS = [("hello", 1, False, False), ("second", 2, False, False), ("third", 1, False, False),
         ("fourth", 3, False, False), ("fifth", 1, True, False), ("sixth", 1, False, False),
         ("seventh", 2, False, False), ("eighth", 1, False, True)]
EXPECTED_RESULTS = ["unchanged", "changed_selection", "same_selection", "same_selection",
                    "fail_open", "fail_open", "fail_open", "fail_open",
                    "unchanged", "changed_selection", "same_selection", "changed_selection"]


def drive(engine) -> HeadHost:
    engine.update_model(model="gpt-4o", context_length=128_000)
    engine.on_session_start("head-session", model="gpt-4o", platform="cli")
    host = HeadHost(engine)
    for i, (text, requests, failed, early_exit) in enumerate(TURNS):
        host.run_turn(f"{text} " + "lorem ipsum dolor " * (5 + i), requests=requests, turn_id=f"t{i}",
                      failed=failed, early_exit=early_exit)
    return host


def _engine_state(engine):
    return vars(engine._delegate) if isinstance(engine, DuckEngine) else vars(engine)


def _expected_cache_lost(host: HeadHost, inner_state, model="gpt-4o") -> int:
    """The churn model of the contract, computed independently: for every changed
    selection, tokens of the previous selection from the first differing message on."""
    counter = TokenCounter("auto", model=model)
    returned = iter(inner_state["returned"])
    previous = None
    lost = 0
    for action, entry in zip(SCRIPT, host.sent):
        if action == "raise":
            continue
        value = next(returned)
        if not (isinstance(value, list) and value and all(isinstance(m, dict) for m in value)):
            continue
        if value is entry["request"]:
            continue
        if previous is not None and value is not previous and value != previous:
            first = 0
            while first < min(len(previous), len(value)) and previous[first] == value[first]:
                first += 1
            lost += counter.count_messages(previous[first:])
        previous = value
    return lost


def _by(points, label):
    return {dict(k)[label]: v for k, v in points.items()}


@pytest.mark.parametrize("duck", [False, True], ids=["class", "duck"])
def test_select_context_fail_open_table_bare_vs_observed(flavour, duck, observe_engine, metric_points):
    engine_cls = HeadSelectingEngine if flavour == "head" else SelectingEngine

    def make():
        inner = engine_cls(script=SCRIPT)
        return DuckEngine(inner) if duck else inner

    bare = make()
    observed = observe_engine(make())
    bare_host = drive(bare)
    obs_host = drive(observed)

    # host-visible results: identical, request by request
    assert len(obs_host.sent) == len(bare_host.sent) == len(SCRIPT)
    for b, o in zip(bare_host.sent, obs_host.sent):
        assert o["sent"] == b["sent"]
        assert o["is_request"] == b["is_request"]
    assert [w[:2] for w in obs_host.warnings] == [w[:2] for w in bare_host.warnings] == [
        ("select_context failed", EngineError),
        ("select_context returned an invalid value", list),
        ("select_context returned an invalid value", tuple),
        ("select_context returned an invalid value", list),
        ("on_turn_complete failed", EngineError),
    ]
    # the exception the host caught is the very object the engine raised
    raised = _engine_state(observed)["raised"]
    assert obs_host.warnings[0][2] is raised[0] and obs_host.warnings[-1][2] is raised[1]
    # a valid selection is sent as that exact object
    returned = iter(_engine_state(observed)["returned"])
    for action, entry in zip(SCRIPT, obs_host.sent):
        if action == "raise":
            continue
        value = next(returned)
        if action.startswith("drop") or action in ("keep", "copy", "same"):
            assert entry["sent"] is value, action
        else:
            assert entry["sent"] is entry["request"], action
    # same calls, same counts
    assert obs_host.calls == bare_host.calls == {"select_context": 12, "on_turn_complete": 7}
    assert obs_host.skipped == bare_host.skipped == {}
    assert _engine_state(observed)["calls"] == _engine_state(bare)["calls"]
    assert _engine_state(observed)["turns"] == _engine_state(bare)["turns"]

    # what the observed engine recorded
    name = bare.name
    selections = _by(metric_points(SELECTIONS), "result")
    expected = {r: EXPECTED_RESULTS.count(r) for r in set(EXPECTED_RESULTS)}
    assert selections == expected
    fail_open = {(dict(k)["hook"], dict(k)["reason"]): v for k, v in metric_points(FAIL_OPEN, flush=False).items()}
    assert fail_open == {("select_context", "exception"): 1, ("select_context", "invalid_return"): 3,
                         ("on_turn_complete", "exception"): 1}
    assert {dict(k)["engine"] for k in metric_points(SELECTIONS, flush=False)} == {name}
    lost = metric_points(CACHE_LOST, flush=False)
    want = _expected_cache_lost(obs_host, _engine_state(observed))
    assert want > 0
    assert lost == {frozenset({("engine", name)}): want}


def test_cache_prefix_lost_counts_previous_selection_tail(observe_engine, metric_points):
    """A hand-checked case: the second selection differs from the first at index 2."""
    messages = [{"role": "system", "content": "sys"}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i} " + "word " * (10 * i)}
        for i in range(8)
    ]
    first = messages[:6]
    second = messages[:2] + [{"role": "user", "content": "a brand new message"}] + messages[6:]

    class Scripted(SelectingEngine):
        name = "scripted"

        def select_context(self, request_messages, **kw):
            self._note("select_context")
            return self._returning([first, second, second, first][self.step_next()])

        def step_next(self):
            self.step += 1
            return self.step - 1

    engine = observe_engine(Scripted())
    engine.update_model(model="gpt-4o", context_length=128_000)
    host = HeadHost(engine)
    for _ in range(4):
        host.run_turn("go")
    counter = TokenCounter("auto", model="gpt-4o")
    want = counter.count_messages(first[2:]) + counter.count_messages(second[2:])
    assert [e["sent"] for e in host.sent] == [first, second, second, first]
    assert _by(metric_points(SELECTIONS), "result") == {"changed_selection": 3, "same_selection": 1}
    assert metric_points(CACHE_LOST, flush=False) == {frozenset({("engine", "scripted")}): want}


@pytest.mark.parametrize("factory", [HeadPlainEngine, lambda: DuckEngine(HeadPlainEngine())], ids=["class", "duck"])
def test_identity_skip_of_unoverridden_hooks_on_head(head_abc, factory, observe_engine, finished_spans):
    bare = factory()
    observed = observe_engine(factory())
    for engine in (bare, observed):
        assert getattr(engine.select_context, "__func__", None) is HeadContextEngine.select_context
        assert getattr(engine.on_turn_complete, "__func__", None) is HeadContextEngine.on_turn_complete
        assert not engine_overrides(engine, "select_context")
        assert not engine_overrides(engine, "on_turn_complete")
    bare_host, obs_host = drive(bare), drive(observed)
    assert obs_host.skipped == bare_host.skipped == {"select_context": 12, "on_turn_complete": 7}
    assert obs_host.calls == bare_host.calls == {}
    assert [e["is_request"] for e in obs_host.sent] == [True] * 12
    names = {s.name for s in finished_spans()}
    assert "context_engine.update_from_response" in names
    assert not {"context_engine.select_context", "context_engine.on_turn_complete"} & names


def test_overriding_engine_is_called_on_head(head_abc, observe_engine, finished_spans):
    observed = observe_engine(HeadSelectingEngine(script=["none"]))
    assert engine_overrides(observed, "select_context") and engine_overrides(observed, "on_turn_complete")
    host = drive(observed)
    assert host.calls == {"select_context": 12, "on_turn_complete": 7}
    spans = finished_spans()
    assert sum(s.name == "context_engine.select_context" for s in spans) == 12
    assert sum(s.name == "context_engine.on_turn_complete" for s in spans) == 7


def test_on_0_19_every_defined_hook_is_called(observe_engine, finished_spans):
    """No default on the 0.19.0 ABC: an engine inheriting head-like no-ops is called, bare or observed."""
    bare, observed = HeadPlainEngine(), observe_engine(HeadPlainEngine())
    bare_host, obs_host = drive(bare), drive(observed)
    assert obs_host.calls == bare_host.calls == {"select_context": 12, "on_turn_complete": 7}
    assert [e["is_request"] for e in obs_host.sent] == [True] * 12
    spans = [s for s in finished_spans() if s.name == "context_engine.select_context"]
    assert len(spans) == 12
    assert {s.attributes["hermes.context.selection.result"] for s in spans} == {"unchanged"}


def test_engine_without_head_hooks(flavour, observe_engine):
    bare, observed = NarrowEngine(), observe_engine(NarrowEngine())
    for engine in (bare, observed):
        assert not hasattr(engine, "select_context") and not hasattr(engine, "on_turn_complete")
    bare_host, obs_host = drive(bare), drive(observed)
    assert obs_host.skipped == bare_host.skipped == {"select_context": 12, "on_turn_complete": 7}
    assert vars(observed)["calls"] == vars(bare)["calls"]


def test_selection_mutated_in_place_is_a_changed_selection(observe_engine, metric_points):
    """An engine keeping one window list and editing it in place: the same object, other content."""
    base = [{"role": "system", "content": "sys"}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "token " * (8 * (i + 1))}
        for i in range(6)
    ]

    class Windowed(SelectingEngine):
        name = "windowed"

        def __init__(self):
            super().__init__()
            self.window = list(base[:5])

        def select_context(self, request_messages, **kw):
            self._note("select_context")
            if self.step == 1:
                self.window[2:] = [{"role": "user", "content": "a replacement"}]   # in place
            elif self.step == 2:
                self.window.append({"role": "assistant", "content": "appended"})
            self.step += 1
            return self._returning(self.window)

    engine = observe_engine(Windowed())
    engine.update_model(model="gpt-4o", context_length=128_000)
    host = HeadHost(engine)
    for _ in range(4):
        host.run_turn("go")
    assert all(e["sent"] is engine.window for e in host.sent)
    counter = TokenCounter("auto", model="gpt-4o")
    # call 1: first selection; call 2: base[2:5] replaced in place; call 3: appended (prefix kept); call 4: same
    assert _by(metric_points(SELECTIONS), "result") == {"changed_selection": 3, "same_selection": 1}
    assert metric_points(CACHE_LOST, flush=False) == {
        frozenset({("engine", "windowed")}): counter.count_messages(base[2:5])}
