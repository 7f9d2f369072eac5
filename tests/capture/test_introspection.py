"""What an engine finds when it looks at its own class: class-level patches made at any time,
``type(self).__dict__``, and pickling (issue 14, items 6, 8 and 9).

* A patch of the inner's class (incontext wraps ``ContextCompressor.should_defer_preflight_to_real_usage``
  with ``functools.wraps`` when it registers) reaches the observed engine whether it was made
  before or after observe(), and the hook still records the call.
* A forwarding wrapper that keeps a write local when the name is in ``type(self).__dict__``
  (hermes-context-tuner's ``__setattr__``) puts every write where it puts it bare.
* An observed engine pickles; the unpickled engine is the bare engine (its own class, its state),
  while copy.copy / copy.deepcopy keep producing observed copies.
"""

from __future__ import annotations

import copy
import functools
import inspect
import pickle
import threading
import time

import pytest
from agent.context_compressor import ContextCompressor
from agent.context_engine import ContextEngine
from support import agent_run
from support.agent_run import PLUGIN_SRC, chat, make_agent, write_config
from support.builtin import compressor
from support.engines import DuckEngine, NarrowEngine
from support.engines import agent_transcript as transcript

from observed_engine import is_observed
from observed_engine.capture import observed_meta
from observed_engine.contract.events import ENGINE_META_ATTRIBUTE

hermes_env, llm = agent_run.hermes_env, agent_run.llm      # fixtures: a Hermes home, the fake LLM server

HOOK_CALLS = "hermes.context_engine.hook.calls"


def _calls(metric_points, hook):
    return sum(v for k, v in metric_points(HOOK_CALLS).items() if dict(k)["hook"] == hook)


# -- item 6: class-level patches --------------------------------------------------------------

def _incontext_style_patch(monkeypatch, cls=ContextCompressor, name="should_defer_preflight_to_real_usage"):
    """Wrap ``cls.<name>`` the way a plugin does when it registers; returns the list of calls it saw."""
    original = getattr(cls, name)
    seen = []

    @functools.wraps(original)
    def deferring(self, *args, **kwargs):
        seen.append((args, kwargs))
        if getattr(self, "_test_defer_everything", True):
            return True
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, deferring)
    return seen


def _built_in():
    engine = compressor()
    engine.update_model(model="gpt-4o", context_length=200_000)
    return engine


def test_a_patch_made_after_observe_reaches_the_observed_engine(observe_engine, monkeypatch, metric_points):
    observed = observe_engine(_built_in())
    bare = _built_in()
    assert observed.should_defer_preflight_to_real_usage(10) is bare.should_defer_preflight_to_real_usage(10) is False

    seen = _incontext_style_patch(monkeypatch)
    assert bare.should_defer_preflight_to_real_usage(10) is True
    assert observed.should_defer_preflight_to_real_usage(10) is True
    assert observed.should_defer_preflight_to_real_usage(rough_tokens=11) is True
    assert len(seen) == 3
    # an engine observed after the patch (the generated class is cached with the pipeline) too
    later = observe_engine(_built_in())
    assert type(later) is type(observed)
    assert later.should_defer_preflight_to_real_usage(12) is True and len(seen) == 4
    # still observed: every call was recorded
    assert _calls(metric_points, "should_defer_preflight_to_real_usage") == 4

    monkeypatch.undo()                     # the patch removed: the original again
    assert observed.should_defer_preflight_to_real_usage(10) is bare.should_defer_preflight_to_real_usage(10) is False
    assert len(seen) == 4


def test_a_patch_made_before_observe_reaches_the_observed_engine(observe_engine, monkeypatch):
    first = observe_engine(_built_in())    # the class generated (and cached) before the patch
    seen = _incontext_style_patch(monkeypatch)
    second = observe_engine(_built_in())
    bare = _built_in()
    for engine in (first, second, bare):
        engine._test_defer_everything = False
        assert engine.should_defer_preflight_to_real_usage(10) is False   # the wrapper ran the original
    assert len(seen) == 3
    assert inspect.signature(second.should_defer_preflight_to_real_usage) == \
        inspect.signature(bare.should_defer_preflight_to_real_usage)


def test_a_patch_before_the_first_observe_and_of_a_guarded_hook(observe_engine, monkeypatch, finished_spans):
    seen = _incontext_style_patch(monkeypatch, name="get_status")
    seen_compress = _incontext_style_patch(monkeypatch, name="compress")
    observed, bare = observe_engine(_built_in()), _built_in()
    assert observed.get_status() is bare.get_status() is True
    assert observed.compress(transcript(4)) is bare.compress(transcript(4)) is True
    assert len(seen_compress) == 2 and len(seen) == 2
    assert [s.name for s in finished_spans()].count("context_engine.compress") == 1


def test_a_patch_that_changes_the_signature_is_called_as_bare(observe_engine, monkeypatch):
    """The exact form was generated for the old parameters: the first call after a patch is
    passed on as the host made it (defaults left out), later ones take the new function's form."""
    observed, bare = observe_engine(_built_in()), _built_in()
    seen = []

    def should_compress(self, prompt_tokens=123, *, margin=0):
        seen.append((prompt_tokens, margin))
        return prompt_tokens

    monkeypatch.setattr(ContextCompressor, "should_compress", should_compress)
    for engine in (bare, observed, observed):
        assert engine.should_compress() == 123
    assert observed.should_compress(7, margin=1) == bare.should_compress(7, margin=1) == 7
    assert seen == [(123, 0)] * 3 + [(7, 1)] * 2
    assert inspect.signature(observed.should_compress) == inspect.signature(bare.should_compress)
    with pytest.raises(TypeError):
        observed.should_compress(1, 2)


def test_a_patch_that_reads_the_engine_name_sees_the_engines_own(observe_engine, monkeypatch):
    """Under the plugin's name (item 7) a patched hook's code is the engine's own code too."""
    observed, bare = observe_engine(_built_in(), name="observed"), _built_in()
    original = ContextCompressor.get_status

    @functools.wraps(original)
    def get_status(self):
        return dict(original(self), patched_by=self.name)

    monkeypatch.setattr(ContextCompressor, "get_status", get_status)
    assert observed.get_status()["patched_by"] == bare.get_status()["patched_by"] == bare.name
    assert observed.name == "observed"


def test_a_patch_of_a_base_class_and_a_non_function_patch(observe_engine, monkeypatch):
    class Sub(NarrowEngine):
        name = "sub"

    observed, bare = observe_engine(Sub()), Sub()
    monkeypatch.setattr(NarrowEngine, "should_compress", lambda self, prompt_tokens=None: "base-patched")
    assert observed.should_compress(1) == bare.should_compress(1) == "base-patched"
    monkeypatch.setattr(Sub, "should_compress", staticmethod(lambda prompt_tokens=None: ("static", prompt_tokens)))
    assert observed.should_compress(2) == bare.should_compress(2) == ("static", 2)


def test_a_patch_while_other_threads_call_the_hook(observe_engine, monkeypatch):
    engines = [observe_engine(_built_in()) for _ in range(4)]
    started, patched, errors, after = threading.Barrier(5), threading.Event(), [], []

    def call(engine):
        try:
            started.wait(10)
            for _ in range(1500):
                was_patched = patched.is_set()
                result = engine.should_defer_preflight_to_real_usage(10)
                if was_patched:
                    after.append(result)
        except BaseException as exc:   # pragma: no cover - the failure is reported below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    started.wait(10)
    time.sleep(0.002)
    _incontext_style_patch(monkeypatch)
    patched.set()
    for t in threads:
        t.join(10)
    assert not errors and all(r is True for r in after)
    assert all(e.should_defer_preflight_to_real_usage(10) is True for e in engines)


# -- item 8: type(self).__dict__ --------------------------------------------------------------

class TunerStyleWrapper(ContextEngine):
    """Forwards to a wrapped engine; what its own class defines stays on the wrapper.

    Modelled on a tuner plugin's pattern: ``__setattr__`` keeps a write local when the name is
    in ``type(self).__dict__`` (its own settings and the names it overrides), else forwards it."""

    name = "tuner-style"
    threshold_percent = 0.5          # its own setting: a per-instance override stays here

    def __init__(self, inner):
        object.__setattr__(self, "_inner", inner)

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(object.__getattribute__(self, "_inner"), attr)

    def __setattr__(self, attr, value):
        if attr.startswith("_") or attr in type(self).__dict__:
            object.__setattr__(self, attr, value)
        else:
            setattr(self._inner, attr, value)

    def owns(self, attr):
        return attr in type(self).__dict__

    def update_from_response(self, usage):
        self._inner.update_from_response(usage)

    def should_compress(self, prompt_tokens=None):
        return self._inner.should_compress(prompt_tokens)

    def compress(self, messages, current_tokens=None, **kwargs):
        return self._inner.compress(messages, current_tokens, **kwargs)


def _writes(engine):
    engine.threshold_percent = 0.8          # the wrapper's own
    engine.last_prompt_tokens = 42          # the host's write: forwarded
    engine.threshold_tokens = 777
    engine.get_status = "shadow"            # a hook the wrapper does not define: forwarded
    engine.should_compress_info = "x"       # likewise
    engine.update_from_response({"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6})
    return (sorted(vars(engine).items(), key=str), sorted(vars(engine._inner).items(), key=str),
            engine.threshold_percent, engine.last_prompt_tokens)


@pytest.mark.parametrize("exposed", [None, "observed"], ids=["api", "plugin-name"])
def test_forwarding_wrapper_sees_the_class_dict_it_sees_bare(observe_engine, exposed):
    bare = TunerStyleWrapper(NarrowEngine())
    observed = observe_engine(TunerStyleWrapper(NarrowEngine()), name=exposed)
    assert is_observed(observed) and type(observed) is not TunerStyleWrapper
    own = ["threshold_percent", "name", "compress", "should_compress", "update_from_response", "__init__",
           "__slots__", "__doc__", "__module__", "get_status", "should_compress_info", "owns",
           ENGINE_META_ATTRIBUTE]
    for attr in own:
        assert observed.owns(attr) == bare.owns(attr), attr
    assert set(vars(type(observed))) == set(vars(TunerStyleWrapper))
    assert observed.__class__.__dict__ == TunerStyleWrapper.__dict__
    assert _writes(observed)[1:] == _writes(bare)[1:]
    assert sorted(vars(observed)) == sorted(vars(bare))
    # and the hooks are still the observed ones
    assert observed_meta(observed).hooks and "should_compress" in observed_meta(observed).hooks
    assert type(observed).should_compress is not TunerStyleWrapper.should_compress


def test_the_class_dict_of_the_real_compressor(observe_engine):
    observed = observe_engine(_built_in())
    assert type(observed).__dict__ == ContextCompressor.__dict__
    assert set(vars(type(observed))) == set(vars(ContextCompressor))
    assert dir(observed) == dir(_built_in())


# -- item 9: pickle ---------------------------------------------------------------------------

class PicklableEngine(NarrowEngine):
    name = "picklable"

    def __init__(self, seed=0):
        super().__init__()
        self.seed = seed


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_an_observed_engine_pickles_and_unpickles_bare(observe_engine, protocol):
    for factory in (_built_in, lambda: PicklableEngine(7), lambda: DuckEngine(PicklableEngine(8))):
        bare, observed = factory(), observe_engine(factory())
        for engine in (bare, observed):
            engine.update_from_response({"prompt_tokens": 70, "completion_tokens": 7, "total_tokens": 77})
        bare_copy = pickle.loads(pickle.dumps(bare, protocol))
        observed_copy = pickle.loads(pickle.dumps(observed, protocol))
        assert type(observed_copy) is type(bare_copy) is type(bare)
        assert not is_observed(observed_copy)
        assert sorted(vars(observed_copy)) == sorted(vars(bare_copy))
        assert observed_copy.last_prompt_tokens == 70
        assert observed_copy.name == bare.name
        assert observed_copy.should_compress(1) == bare_copy.should_compress(1)
        # the class by itself pickles as the inner's
        assert pickle.loads(pickle.dumps(type(observed), protocol)) is type(bare)
        # the observed engine is unchanged, and the unpickled one can be observed again
        assert is_observed(observed) and type(observed) is not type(bare)
        again = observe_engine(observed_copy)
        assert is_observed(again) and type(again) is type(observed)


def test_pickling_a_structure_holding_observed_engines(observe_engine):
    a, b = observe_engine(PicklableEngine(1)), observe_engine(PicklableEngine(2))
    out = pickle.loads(pickle.dumps({"engines": [a, b, a]}))
    assert out["engines"][0] is out["engines"][2]
    assert [type(e) for e in out["engines"]] == [PicklableEngine] * 3
    assert [e.seed for e in out["engines"]] == [1, 2, 1]


def test_copies_stay_observed_beside_pickling(observe_engine, finished_spans):
    engine = observe_engine(PicklableEngine(3))
    pickle.dumps(engine)
    for clone in (copy.copy(engine), copy.deepcopy(engine)):
        assert type(clone) is type(engine) and is_observed(clone)
        assert observed_meta(clone) is observed_meta(engine)
        clone.should_compress(1)
    assert [s.name for s in finished_spans()].count("context_engine.should_compress") == 2


# -- item 6 through a real AIAgent --------------------------------------------------------------

def test_a_plugin_patch_after_the_agent_is_built_holds_in_a_real_agent_run(hermes_env, llm, monkeypatch):
    """A real Hermes 0.19.0 AIAgent on the bundled route and a bare one (``context.engine:
    compressor``); after both agents (and so the observed engine) are built, a plugin-style patch
    makes the built-in never compress. Both runs must then go the same way: no compaction."""
    import shutil


    home, engines = hermes_env
    shutil.copytree(PLUGIN_SRC, engines / "observed")
    write_config(home, llm, route="bundled", prometheus_port=None)
    observed_agent = make_agent(llm)
    assert is_observed(observed_agent.context_compressor)
    config = home / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("engine: observed", "engine: compressor"),
                      encoding="utf-8")
    bare_agent = make_agent(llm)
    assert not is_observed(bare_agent.context_compressor)

    original = ContextCompressor.should_compress
    asked = []

    @functools.wraps(original)
    def never(self, *args, **kwargs):
        asked.append(is_observed(self))
        return False

    monkeypatch.setattr(ContextCompressor, "should_compress", never)
    bare_turns = chat(bare_agent, llm)
    observed_turns = chat(observed_agent, llm)
    assert [t["compressions"] for t in observed_turns] == [t["compressions"] for t in bare_turns] == [0] * len(bare_turns)
    assert [t["messages"] for t in observed_turns] == [t["messages"] for t in bare_turns]
    assert asked.count(True) == asked.count(False) > 0
