"""Deep copies, clone_for_agent and many sessions on many threads.

The general plugin route deep-copies the registered engine for every agent (head:
``clone_for_agent()`` when offered); gateway sessions run hooks on pool threads.
"""

from __future__ import annotations

import copy
import threading
from collections import Counter

import pytest
from agent.context_engine import ContextEngine
from support.builtin import compressor
from support.engines import (
    CloneableEngine,
    DuckEngine,
    KwargsEngine,
    NarrowEngine,
)
from support.engines import (
    agent_transcript as transcript,
)
from support.twins import deep_state

import observed_engine
from observed_engine import REGISTRY, is_observed
from observed_engine.capture import observed_meta

HOOK_CALLS = "hermes.context_engine.hook.calls"
COMPRESSIONS = "hermes.context.compressions"
CONV = "gen_ai.conversation.id"


@pytest.mark.parametrize("factory", [NarrowEngine, KwargsEngine, compressor, lambda: DuckEngine(NarrowEngine())],
                         ids=["narrow", "kwargs", "compressor", "duck"])
def test_deepcopy_is_independent_instrumented_and_shares_the_pipeline(factory, observe_engine, finished_spans):
    engine = observe_engine(factory())
    engine.update_model(model="gpt-4o", context_length=100_000)
    engine.update_from_response({"prompt_tokens": 70, "completion_tokens": 7, "total_tokens": 77})
    pipelines, threads = len(REGISTRY.pipelines()), threading.active_count()

    clone = copy.deepcopy(engine)

    assert clone is not engine and type(clone) is type(engine) and is_observed(clone)
    assert isinstance(clone, ContextEngine)
    assert observed_meta(clone) is observed_meta(engine)
    assert observed_meta(clone).pipeline is observed_meta(engine).pipeline
    assert len(REGISTRY.pipelines()) == pipelines and threading.active_count() == threads
    if isinstance(engine, DuckEngine):
        assert deep_state(vars(clone._delegate)) == deep_state(vars(engine._delegate))
    else:
        assert deep_state(vars(clone)) == deep_state(vars(engine))
    # independent state: the copy's counters move, the original's do not
    clone.last_prompt_tokens = 12_345
    clone.compression_count = 99
    clone.update_from_response({"prompt_tokens": 555, "completion_tokens": 5, "total_tokens": 560})
    assert engine.last_prompt_tokens == 70 and engine.compression_count == 0
    assert clone.last_prompt_tokens == 555 and clone.compression_count == 99
    if isinstance(engine, DuckEngine):
        assert clone._delegate is not engine._delegate and type(clone._delegate) is NarrowEngine

    # still instrumented: the copy's calls are spans, the original's spans are not multiplied
    spans = finished_spans()
    assert [s.name for s in spans].count("context_engine.update_from_response") == 2
    clone.should_compress(1)
    spans = finished_spans()
    assert [s.name for s in spans].count("context_engine.should_compress") == 1


def test_deepcopy_after_hooks_queued_events_and_a_running_watchdog(observe_engine):
    """Copying never reaches telemetry objects (locks, threads, deques), whatever is in flight."""
    engine = observe_engine(NarrowEngine())
    for _ in range(50):
        engine.should_compress(1)
    engine.compress(transcript(10))
    telemetry = observed_meta(engine).pipeline
    memo = {}
    clone = copy.deepcopy(engine, memo)
    copied_types = {type(v) for v in memo.values()}
    assert not {type(threading.Lock()), threading.Thread, threading.Event} & copied_types
    assert all(v is not telemetry for v in memo.values())
    assert clone.calls == engine.calls == {"should_compress": 50, "compress": 1}


def test_clone_for_agent_returns_an_observed_clone(observe_engine, finished_spans, metric_points):
    engine = observe_engine(CloneableEngine(seed=1))
    clone = engine.clone_for_agent()
    assert clone is engine.last_result      # the inner's object, not a wrapper around it
    assert clone is not engine and clone.seed == 2
    assert is_observed(clone) and isinstance(clone, CloneableEngine) and isinstance(clone, ContextEngine)
    assert observed_meta(clone).pipeline is observed_meta(engine).pipeline
    clone.should_compress(3)
    clone.compress(transcript(10))
    assert clone.calls == {"should_compress": 1, "compress": 1}
    assert engine.calls == {"clone_for_agent": 1}
    names = sorted(s.name for s in finished_spans())
    assert names == ["context_engine.clone_for_agent", "context_engine.compress", "context_engine.should_compress"]
    engines = {dict(k)["engine"] for k in metric_points(HOOK_CALLS, flush=False)}
    assert engines == {"cloneable"}


def test_clone_for_agent_returning_a_deepcopy(observe_engine, finished_spans):
    class CopyCloning(NarrowEngine):
        name = "copy-cloning"

        def clone_for_agent(self):
            return copy.deepcopy(self)

    engine = observe_engine(CopyCloning())
    clone = engine.clone_for_agent()
    assert type(clone) is type(engine) and clone is not engine
    clone.should_compress(1)
    assert sorted(s.name for s in finished_spans()) == ["context_engine.clone_for_agent",
                                                         "context_engine.should_compress"]


THREADS = 16
SESSIONS = 200
HOOKS_PER_SESSION = ("update_model", "on_session_start", "update_from_response", "should_compress", "compress",
                     "get_status", "on_session_end")


def test_many_threads_many_sessions_on_deep_copies(observe_engine, span_exporter, metric_points):
    template = observe_engine(NarrowEngine())
    messages = transcript(10)
    errors = []
    results = Counter()
    barrier = threading.Barrier(THREADS)

    def worker(t):
        try:
            barrier.wait()
            for s in range(SESSIONS):
                engine = copy.deepcopy(template)
                sid = f"t{t}-s{s}"
                engine.update_model(model="gpt-4o", context_length=1000)
                engine.on_session_start(sid, model="gpt-4o")
                engine.update_from_response({"prompt_tokens": 600 + s, "completion_tokens": 3, "total_tokens": 603 + s})
                wants = engine.should_compress(600 + s)
                out = engine.compress(messages, current_tokens=600 + s)
                status = engine.get_status()
                engine.on_session_end(sid, out)
                assert wants is True and len(out) == 6 and out is engine.returned[0]
                assert status["last_prompt_tokens"] == 600 + s and engine.calls["compress"] == 1
                results[t] += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append((t, exc))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors[:3]
    assert sum(results.values()) == THREADS * SESSIONS
    assert template.calls == {}, "copies must not write through to the template"

    # 22,400 events for one worker: on a loaded machine that takes a while
    assert observed_engine.flush(120.0), "the worker did not drain in 120 s"
    points = metric_points(HOOK_CALLS, flush=False)
    per_hook = Counter()
    for key, value in points.items():
        attrs = dict(key)
        assert attrs["outcome"] == "ok" and attrs["engine"] == "narrow"
        per_hook[attrs["hook"]] += value
    assert per_hook == {h: THREADS * SESSIONS for h in HOOKS_PER_SESSION}
    compressions = {dict(k)["outcome"]: v for k, v in metric_points(COMPRESSIONS, flush=False).items()}
    assert compressions == {"compressed": THREADS * SESSIONS}

    spans = span_exporter.get_finished_spans()
    assert len(spans) == THREADS * SESSIONS * len(HOOKS_PER_SESSION)
    assert Counter(s.name for s in spans) == {f"context_engine.{h}": THREADS * SESSIONS for h in HOOKS_PER_SESSION}
    # every copy kept its own session: six spans per conversation id (update_model comes before it)
    per_conversation = Counter(s.attributes.get(CONV) for s in spans)
    assert per_conversation.pop(None) == THREADS * SESSIONS
    assert len(per_conversation) == THREADS * SESSIONS
    assert set(per_conversation.values()) == {len(HOOKS_PER_SESSION) - 1}
    telemetry = observed_meta(template).pipeline
    assert telemetry.recorder.dropped == 0
    assert metric_points("hermes.context_engine.telemetry_errors", flush=False) == {}
