"""Differential tests: a bare engine and its observed twin, driven the same way,
are indistinguishable to the host (hermes-host-contract.md, sections 1, 2, 5).

Compared: every return value (``==``) and, where the engine stashes them, the
identity of returned and raised objects; exception types and args; ``vars()``;
how often each of the inner's own functions ran; signatures; class-level
lookups; ``isinstance``; truthiness; deep copies.
"""

from __future__ import annotations

import copy
import inspect

import pytest
from agent.context_compressor import ContextCompressor
from agent.context_engine import ContextEngine
from agent.conversation_compression import compress_context
from support.builtin import PrivateHelperCompressor, compressor
from support.engines import (
    DuckEngine,
    EngineError,
    KwargsEngine,
    NarrowEngine,
    RaisingEngine,
    SelectingEngine,
    SqliteEngine,
)
from support.engines import (
    agent_transcript as transcript,
)
from support.host import MemoryManager, StandInAgent, host_compress_kwargs, scripted_session
from support.llm import install_llm
from support.twins import InnerCallCounter, deep_state

from observed_engine import is_observed


@pytest.fixture
def fake_llm(monkeypatch):
    return install_llm(monkeypatch)


# name -> (factory, classes whose functions are counted, scripted-session options)
ENGINES = {
    "narrow": (NarrowEngine, (NarrowEngine,), {}),
    "kwargs-tools": (KwargsEngine, (KwargsEngine,), {}),
    "raising": (RaisingEngine, (RaisingEngine,), {}),
    "selecting": (lambda: SelectingEngine(script=["drop:2", "keep", "raise"]), (SelectingEngine,), {}),
    "sqlite": (SqliteEngine, (SqliteEngine,), {}),
    "duck-narrow": (lambda: DuckEngine(NarrowEngine()), (DuckEngine, NarrowEngine), {}),
    "duck-kwargs": (lambda: DuckEngine(KwargsEngine()), (DuckEngine, KwargsEngine), {}),
    "duck-compressor": (lambda: DuckEngine(compressor()), (DuckEngine, ContextCompressor),
                        {"context_length": 64_000, "big": True}),
    "compressor": (compressor, (ContextCompressor,), {"context_length": 64_000, "big": True}),
    "private-helper-compressor": (lambda: compressor(cls=PrivateHelperCompressor), (PrivateHelperCompressor,),
                                  {"context_length": 64_000, "big": True}),
}


def _same_outcome(bare_entry, obs_entry):
    label, kind, value = bare_entry
    o_label, o_kind, o_value = obs_entry
    assert (label, kind) == (o_label, o_kind)
    if kind == "raise":
        assert type(o_value) is type(value), label
        assert o_value.args == value.args, label
    else:
        assert o_value == value, label
        assert type(o_value) is type(value), label


def _same_counts(obs_counts, bare_counts):
    """Every inner function ran as often under observation as bare.

    A forwarding ``__getattr__`` is the one exception allowed to run *less*: the host's
    ``engine.compress`` lookup goes through it on the bare wrapper engine, while the
    observed class defines ``compress`` itself. It must never run more (no reads the
    host did not make)."""
    assert sum(bare_counts.values()) > 0
    forwarding = {k for k in set(obs_counts) | set(bare_counts) if k.endswith(".__getattr__")}
    for key in forwarding:
        assert obs_counts[key] <= bare_counts[key], f"{key}: {obs_counts[key]} > {bare_counts[key]}"
    assert {k: v for k, v in obs_counts.items() if k not in forwarding} == \
        {k: v for k, v in bare_counts.items() if k not in forwarding}


def _state_of(engine):
    return deep_state(dict(vars(engine)))


def run_twins(observe_engine, factory, classes, driver):
    bare = factory()
    observed = observe_engine(factory())
    assert is_observed(observed)
    with InnerCallCounter(*classes) as bare_calls:
        bare_log = driver(bare)
    with InnerCallCounter(*classes) as obs_calls:
        obs_log = driver(observed)
    return bare, observed, bare_log, obs_log, bare_calls.counts, obs_calls.counts


@pytest.mark.parametrize("engine_name", list(ENGINES))
def test_scripted_session_is_indistinguishable(engine_name, observe_engine, fake_llm):
    factory, classes, options = ENGINES[engine_name]
    options = dict(options)
    big = options.pop("big", False)
    messages = transcript(60, 1200) if big else transcript(40)

    landed = []

    def record_landing(engine):
        target = engine._delegate if isinstance(engine, DuckEngine) else engine
        state = vars(target)
        landed.append((engine, state.get("last_prompt_tokens"), state.get("awaiting_real_usage_after_compression"),
                       state.get("last_compression_rough_tokens"), state.get("_verify_compaction_cleared_threshold")))

    def driver(engine):
        fake_llm.calls = 0
        return scripted_session(engine, messages, after_compress=record_landing, **options)

    bare, observed, bare_log, obs_log, bare_counts, obs_counts = run_twins(observe_engine, factory, classes, driver)

    assert [e[:2] for e in obs_log] == [e[:2] for e in bare_log]
    for b, o in zip(bare_log, obs_log):
        _same_outcome(b, o)
    _same_counts(obs_counts, bare_counts)
    assert _state_of(observed) == _state_of(bare)
    if big:   # the built-in really summarised (private helpers included)
        assert fake_llm.calls > 0
        assert any(k.endswith("._serialize_for_summary") for k in obs_counts)
    if isinstance(bare, DuckEngine):
        assert _state_of(observed._delegate) == _state_of(bare._delegate)
        assert type(observed._delegate) is type(bare._delegate), "the delegate must not be re-classed"

    # identity of what the inner returned / raised, where the inner stashes it
    inner_state = vars(observed._delegate) if isinstance(observed, DuckEngine) else vars(observed)
    returned = inner_state.get("returned", [])
    raised = inner_state.get("raised", [])
    for label, kind, value in obs_log:
        if kind == "raise" and isinstance(value, (EngineError, KeyError, OSError)):
            assert any(r is value for r in raised), f"{label}: the host got another exception object"
        if kind == "ok" and returned and value and label.startswith(("compress", "get_tool_schemas",
                                                                     "handle_tool_call:ctx")):
            assert any(r is value for r in returned), f"{label}: the host got another object than the inner returned"

    # the host's writes after a compaction landed on the inner's own state (its __dict__)
    compress_ok = [e for e in bare_log if e[0][:9] == "compress:" and e[0][9:].isdigit() and e[1] == "ok"]
    observed_landings = [entry[1:] for entry in landed if entry[0] is observed]
    assert len(observed_landings) == len(compress_ok) == len([e for e in landed if e[0] is bare])
    assert observed_landings == [(-1, True, 4242, True)] * len(compress_ok)


def test_compress_kwargs_reach_the_inner_exactly_as_filtered(observe_engine):
    """Narrow engines never receive force/memory_context; **kwargs engines receive everything."""
    narrow = observe_engine(NarrowEngine())
    kw = observe_engine(KwargsEngine())
    messages = transcript(12)
    shape = {"current_tokens": 1, "focus_topic": "x", "force": True, "memory_context": "m", "bypass_cooldown": True}
    narrow.compress(messages, **host_compress_kwargs(narrow, shape))
    kw.compress(messages, **host_compress_kwargs(kw, shape))
    assert narrow.seen[-1] == ("compress", {"current_tokens": 1, "focus_topic": "x"})
    assert kw.seen[-1] == ("compress", {"kwargs": sorted(shape.items())})
    with pytest.raises(TypeError):
        narrow.compress(messages, force=True)  # never accept-and-drop


def test_compress_result_is_the_inner_object_and_short_input_comes_back_as_is(observe_engine):
    engine = observe_engine(NarrowEngine())
    messages = transcript(20)
    result = engine.compress(messages)
    assert result is engine.last_result and result is not messages
    short = messages[:3]
    assert engine.compress(short) is short


def test_raised_exception_is_the_inner_instance_with_its_traceback(observe_engine):
    engine = observe_engine(RaisingEngine())
    messages = transcript(10)
    with pytest.raises(EngineError) as info:
        engine.compress(messages, focus_topic="f")
    assert info.value is engine.raised[-1]
    assert info.value.args == (f"compress failed on {len(messages)} messages, focus 'f'",)
    assert info.value.__cause__ is None and info.value.__context__ is None
    frames = [f.name for f in __import__("traceback").extract_tb(info.value.__traceback__)]
    assert frames[-1] == "_raising"


# --------------------------------------------------------------------------- the built-in through the real host path

def _drive_real_host(engine, llm):
    """0.19.0's compress_context() with a stand-in agent, three compactions and the host's bookkeeping."""
    llm.calls = 0
    llm.prompts.clear()
    agent = StandInAgent(engine, memory=MemoryManager())
    engine.update_model(model="gpt-4o", context_length=64_000, base_url="", api_key="", provider="openrouter",
                        api_mode="chat_completions")
    engine.on_session_start("sess-cc", hermes_home="/tmp/h", platform="cli", model="gpt-4o",
                            context_length=64_000, conversation_id="c-1")
    out = []
    snapshots = []
    messages = transcript(80, 1500, seed="a")
    for round_, kwargs in enumerate(({"approx_tokens": 60_000},
                                     {"approx_tokens": 61_000, "focus_topic": "the parser", "force": True},
                                     {"approx_tokens": 62_000, "task_id": "t-2"})):
        engine.update_from_response({"prompt_tokens": 60_000 + round_, "completion_tokens": 100,
                                     "total_tokens": 60_100 + round_})
        before = engine.should_compress(60_000 + round_)
        compressed, prompt = compress_context(agent, messages, "system message", **kwargs)
        state = vars(engine)   # the instance's own state: the host's writes must land here
        snapshots.append((before, state["last_prompt_tokens"], state["awaiting_real_usage_after_compression"],
                          state["_verify_compaction_cleared_threshold"], state["compression_count"]))
        out.append((compressed, prompt, compressed is messages))
        # the next real reading fits (verifies the compaction), then the transcript grows again
        engine.update_from_response({"prompt_tokens": 20_000 + round_, "completion_tokens": 50,
                                     "total_tokens": 20_050 + round_})
        state = vars(engine)
        snapshots.append((state["last_prompt_tokens"], state["awaiting_real_usage_after_compression"],
                          state["_verify_compaction_cleared_threshold"]))
        messages = compressed + transcript(60, 1500, seed=f"r{round_}")[1:]
    # a no-op round: short transcripts do not compress; the host returns the same list
    short = transcript(3)
    result, _ = compress_context(agent, short, "system message", force=True)
    out.append((result, None, result is short))
    return out, snapshots, agent, llm.calls


def test_builtin_compressor_through_real_compress_context(observe_engine, fake_llm):
    bare = compressor()
    observed = observe_engine(compressor())
    with InnerCallCounter(ContextCompressor) as bare_calls:
        bare_out, bare_snaps, bare_agent, bare_llm = _drive_real_host(bare, fake_llm)
    with InnerCallCounter(ContextCompressor) as obs_calls:
        obs_out, obs_snaps, obs_agent, obs_llm = _drive_real_host(observed, fake_llm)

    # it really compressed, three times, with the summariser
    assert bare_llm == 3 and obs_llm == 3
    assert [len(o[0]) < 100 for o in bare_out[:3]] == [True, True, True]
    assert bare.compression_count == 3
    # the host saw the same thing
    assert obs_out == bare_out
    assert obs_snaps == bare_snaps
    # host writes after each compaction landed on the inner's state: -1 "awaiting real usage",
    # record_completed_compaction() found on type(engine) armed the verification
    assert [s[1:4] for s in obs_snaps[0::2]] == [(-1, True, True)] * 3
    assert [s[0] for s in obs_snaps[0::2]] == [True] * 3
    assert [s for s in obs_snaps[1::2]] == [(20_000, False, False), (20_001, False, False), (20_002, False, False)]
    assert observed.compression_count == 3
    assert _state_of(observed) == _state_of(bare)
    _same_counts(obs_calls.counts, bare_calls.counts)
    assert obs_calls.counts["ContextCompressor.compress"] == 4
    assert obs_calls.counts["ContextCompressor._automatic_compression_blocked"] == \
        bare_calls.counts["ContextCompressor._automatic_compression_blocked"] > 0
    assert obs_agent.warnings == bare_agent.warnings
    assert obs_agent.statuses == bare_agent.statuses
    # the memory context reached the summary prompt through the signature filter
    assert obs_agent._memory_manager.pre_compress_calls == 4
    assert len(fake_llm.prompts) == 3
    assert all("The user prefers short answers." in p for p in fake_llm.prompts)
    assert "the parser" in fake_llm.prompts[1]   # focus_topic went through too


def test_host_blocked_compressor_returns_the_same_list(observe_engine, fake_llm):
    """Anti-thrash state set through the host's write path blocks the next automatic compaction."""
    results = []
    for engine in (compressor(), observe_engine(compressor())):
        agent = StandInAgent(engine)
        engine._ineffective_compression_count = 2   # a host-visible write, as after two no-op compactions
        messages = transcript(80, 1500)
        out, _ = compress_context(agent, messages, "sys")
        results.append((out is messages, engine.compression_count, fake_llm.calls, "_ineffective_compression_count"
                        in vars(engine)))
    assert results[0] == results[1] == (True, 0, 0, True)


# --------------------------------------------------------------------------- structure the host inspects

SIGNATURE_HOOKS = ("compress", "update_model", "on_session_start", "on_session_end", "update_from_response",
                   "should_compress", "handle_tool_call", "get_tool_schemas")

FACTORIES = {name: spec[0] for name, spec in ENGINES.items()}
FACTORIES["selecting-head"] = lambda: SelectingEngine(script=["none"])


@pytest.mark.parametrize("engine_name", list(FACTORIES))
def test_signatures_are_the_inner_ones(engine_name, observe_engine):
    bare = FACTORIES[engine_name]()
    observed = observe_engine(FACTORIES[engine_name]())
    for hook in SIGNATURE_HOOKS:
        assert inspect.signature(getattr(observed, hook)) == inspect.signature(getattr(bare, hook)), hook
    # and the host's kwarg filter gives the same answer for every shape
    from support.host import COMPRESS_SHAPES

    for shape in COMPRESS_SHAPES:
        assert host_compress_kwargs(observed, shape) == host_compress_kwargs(bare, shape)


CLASS_LEVEL = ("_automatic_compression_blocked", "get_active_compression_failure_cooldown",
               "_load_fallback_compression_streak", "_load_ineffective_compression_count",
               "record_completed_compaction", "_persist_fallback_compression_streak", "_serialize_for_summary")

PASS_THROUGH = ("should_compress_info", "prune_tool_results_only", "pending_compression_operation",
                "get_automatic_compaction_status_message", "clone_for_agent", "record_timeout_failure",
                "bind_session_state", "carry_over_new_session_context", "is_available", "select_context",
                "on_turn_complete", "should_compress_preflight", "should_defer_preflight_to_real_usage",
                "has_content_to_compress", "get_status")


@pytest.mark.parametrize("engine_name", list(FACTORIES))
def test_class_level_lookups_isinstance_and_optional_hooks(engine_name, observe_engine):
    bare = FACTORIES[engine_name]()
    observed = observe_engine(FACTORIES[engine_name]())
    for name in CLASS_LEVEL:
        assert hasattr(type(observed), name) == hasattr(type(bare), name), name
        if hasattr(type(bare), name):
            assert getattr(type(observed), name) is getattr(type(bare), name), name
    for name in PASS_THROUGH:
        assert hasattr(observed, name) == hasattr(bare, name), name
        assert callable(getattr(observed, name, None)) == callable(getattr(bare, name, None)), name
    assert isinstance(observed, type(bare))
    assert isinstance(observed, ContextEngine)
    assert isinstance(observed, ContextCompressor) == isinstance(bare, ContextCompressor)
    assert bool(observed) is bool(bare) is True
    assert observed.name == bare.name
    assert sorted(vars(observed)) == sorted(vars(bare))


def test_duck_typed_engine(observe_engine):
    delegate = NarrowEngine()
    duck = DuckEngine(delegate)
    assert not isinstance(duck, ContextEngine)
    observed = observe_engine(duck)
    assert isinstance(observed, ContextEngine) and isinstance(observed, DuckEngine)
    assert type(delegate) is NarrowEngine, "__class__ assignment was forwarded to the delegate"
    assert vars(observed) == {"_delegate": delegate}
    observed.last_prompt_tokens = -1          # host write, forwarded by the engine's own __setattr__
    observed.threshold_tokens = 777
    assert delegate.last_prompt_tokens == -1 and delegate.threshold_tokens == 777
    assert "last_prompt_tokens" not in vars(observed)
    assert observed.name == "narrow"
    assert observed.compress(transcript(10)) is delegate.last_result
    assert observed.should_compress(800) is True and delegate.calls["should_compress"] == 1


def test_observe_twice_does_not_double_instrument(observe_engine, finished_spans):
    engine = NarrowEngine()
    first = observe_engine(engine)
    cls = type(first)
    second = observe_engine(first)
    assert second is first and type(second) is cls
    # a second observe with other providers does not re-wrap either
    from observed_engine import observe

    third = observe(first)
    assert third is first and type(third) is cls
    first.should_compress(1)
    first.compress(transcript(10))
    spans = finished_spans()
    assert sorted(s.name for s in spans) == ["context_engine.compress", "context_engine.should_compress"]
    assert first.calls == {"should_compress": 1, "compress": 1}


def test_deepcopy_of_unpicklable_engine_fails_the_same_way(observe_engine):
    bare = SqliteEngine()
    observed = observe_engine(SqliteEngine())
    # before the connection exists both copy fine
    assert isinstance(copy.deepcopy(observed), SqliteEngine)
    copy.deepcopy(bare)
    for engine in (bare, observed):
        engine.on_session_start("s")
    with pytest.raises(Exception) as bare_exc:
        copy.deepcopy(bare)
    with pytest.raises(Exception) as obs_exc:
        copy.deepcopy(observed)
    assert type(obs_exc.value) is type(bare_exc.value) is TypeError
    assert str(obs_exc.value) == str(bare_exc.value)


def test_truthiness_follows_the_inner(observe_engine):
    class Empty(NarrowEngine):
        def __len__(self):
            return 0

    bare, observed = Empty(), observe_engine(Empty())
    assert bool(observed) is bool(bare) is False  # the inner's own rule, unchanged
    for factory in (NarrowEngine, KwargsEngine, compressor):
        assert bool(observe_engine(factory())) is True
