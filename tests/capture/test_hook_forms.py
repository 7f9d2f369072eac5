"""The two forms of a per-request (leaf) hook, and the self-call guard they share.

A leaf hook whose inner method is a plain function with named parameters is
generated with exactly those parameters (wrapper._make_exact_leaf_hook); any other
shape falls back to ``*args, **kwargs``. Both must be indistinguishable from the
bare engine: results, the very default objects, keyword/positional binding and
every TypeError message for a bad call.
"""

from __future__ import annotations

import functools
import threading

import pytest
from agent.context_engine import ContextEngine
from support.builtin import compressor
from support.engines import NarrowEngine
from support.engines import agent_transcript as transcript

HOOK_CALLS = "hermes.context_engine.hook.calls"
USAGE_TOKENS = "hermes.context_engine.usage_tokens"
SENTINEL = object()


def is_exact(engine, hook):
    filename = getattr(type(engine), hook).__code__.co_filename
    return filename.startswith("<observed-engine ") and f".{hook} #" in filename


class ShapesEngine(ContextEngine):
    """Leaf hooks with every parameter kind the exact form has to reproduce."""

    name = "shapes"

    def __init__(self):
        self.seen = []
        self.threshold_tokens = 100
        self.context_length = 1000

    def update_from_response(self, usage, /, *, source=SENTINEL):
        self.seen.append(("update_from_response", usage, source))
        self.last_prompt_tokens = usage.get("prompt_tokens", 0) if isinstance(usage, dict) else 0

    def should_compress(self, prompt_tokens=SENTINEL, extra=[]):   # noqa: B006 (the default object is the point)
        self.seen.append(("should_compress", prompt_tokens, extra))
        extra.append(1)
        return prompt_tokens is SENTINEL

    def should_defer_preflight_to_real_usage(this, rough_tokens, *, strict):
        this.seen.append(("defer", rough_tokens, strict))
        return strict

    def get_status(self, *args, **kwargs):          # variadic: the *args form
        self.seen.append(("get_status", args, kwargs))
        return {"args": args, "kwargs": kwargs}

    def has_content_to_compress(self, messages, _oe_clash=None):   # a name the generator reserves
        self.seen.append(("has_content", len(messages), _oe_clash))
        return bool(messages)

    def should_compress_preflight(self, len=None, *, Exception=None, BaseException=None):  # noqa: A002
        """Parameters named like the builtins the generated code uses."""
        self.seen.append(("preflight", len, Exception, BaseException))
        if len == "raise":
            raise ValueError("preflight")
        return len

    @staticmethod
    def is_available():                              # not a plain function on the class
        return True

    def compress(self, messages, current_tokens=None, **kwargs):
        return messages


def _decorated(fn):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        self.seen.append(("decorator", args, tuple(sorted(kwargs))))
        return fn(self, *args, **kwargs)
    return wrapper


class DecoratedEngine(ShapesEngine):
    name = "decorated"

    @_decorated
    def should_compress(self, prompt_tokens=None):
        self.seen.append(("should_compress", prompt_tokens))
        return False


class DeclaredSignatureEngine(ShapesEngine):
    """A method whose declared __signature__ names a parameter Python would not bind."""

    name = "declared"

    def update_from_response(self, x):
        self.seen.append(("update_from_response", x))

    import inspect as _inspect
    update_from_response.__signature__ = _inspect.Signature(
        [_inspect.Parameter("self", _inspect.Parameter.POSITIONAL_OR_KEYWORD),
         _inspect.Parameter("usage", _inspect.Parameter.POSITIONAL_OR_KEYWORD)])
    del _inspect


CALLS = [
    ("update_from_response", ({"prompt_tokens": 7},), {}),
    ("update_from_response", ({"prompt_tokens": 8},), {"source": "x"}),
    ("update_from_response", (), {"usage": {}}),                       # positional-only by name: TypeError
    ("update_from_response", ({}, "extra"), {}),                      # too many: TypeError
    ("update_from_response", (), {}),                                  # missing: TypeError
    ("update_from_response", (), {"x": {}}),                           # the real name (declared: accepted)
    ("should_compress", (), {}),                                       # both defaults, same objects
    ("should_compress", (5,), {}),
    ("should_compress", (), {"prompt_tokens": 6, "extra": []}),
    ("should_compress", (1, [], 3), {}),                               # TypeError
    ("should_compress", (), {"bogus": 1}),                             # TypeError
    ("should_compress", (1,), {"prompt_tokens": 2}),                   # multiple values: TypeError
    ("should_defer_preflight_to_real_usage", (10,), {"strict": True}),
    ("should_defer_preflight_to_real_usage", (10, True), {}),          # keyword-only given positionally
    ("should_defer_preflight_to_real_usage", (), {"rough_tokens": 1, "strict": False}),
    ("get_status", (1, 2), {"k": 3}),
    ("has_content_to_compress", ([1],), {"_oe_clash": "c"}),
    ("is_available", (), {}),
    ("should_compress_preflight", ([1, 2],), {"Exception": 1, "BaseException": 2}),
    ("should_compress_preflight", (), {}),
]


def run(engine, hook, args, kwargs):
    try:
        return ("ok", getattr(engine, hook)(*args, **kwargs))
    except TypeError as exc:
        return ("TypeError", str(exc))


@pytest.mark.parametrize("factory", [ShapesEngine, DecoratedEngine, DeclaredSignatureEngine])
def test_leaf_hooks_behave_like_the_bare_engine(factory, observe_engine):
    bare, observed = factory(), observe_engine(factory())
    for hook, args, kwargs in CALLS:
        assert run(observed, hook, args, kwargs) == run(bare, hook, args, kwargs), (hook, args, kwargs)
    assert observed.seen == bare.seen
    if factory is ShapesEngine:   # the generated defaults are the inner's very objects
        assert type(observed).should_compress.__defaults__[1] is ShapesEngine.should_compress.__defaults__[1]


def test_which_form_each_leaf_hook_takes(observe_engine):
    engine = observe_engine(ShapesEngine())
    assert is_exact(engine, "update_from_response")
    assert is_exact(engine, "should_compress")
    assert is_exact(engine, "should_defer_preflight_to_real_usage")
    assert is_exact(engine, "should_compress_preflight")      # parameters named like builtins
    assert not is_exact(engine, "get_status")                 # *args, **kwargs
    assert not is_exact(engine, "has_content_to_compress")    # reserved name
    assert not is_exact(engine, "is_available")               # staticmethod
    assert not is_exact(observe_engine(DeclaredSignatureEngine()), "update_from_response")
    decorated = observe_engine(DecoratedEngine())
    assert not is_exact(decorated, "should_compress")         # the wrapper's real signature is variadic
    builtin = observe_engine(compressor())
    assert is_exact(builtin, "should_compress") and is_exact(builtin, "update_from_response")


def test_both_forms_record_arguments_and_calls(observe_engine, metric_points):
    engine = observe_engine(ShapesEngine())
    engine.update_from_response({"prompt_tokens": 40, "completion_tokens": 2})      # exact form
    engine.get_status(1)                                                             # *args form
    # A call the inner's signature rejects: in the exact form Python rejects it before the
    # hook runs, so (the inner never ran) it is not a hook call; in the *args form the
    # inner's own function raises the TypeError inside the hook, recorded as an error.
    with pytest.raises(TypeError):
        engine.should_compress(1, [], 3)
    with pytest.raises(TypeError):
        engine.has_content_to_compress()
    points = {(dict(k)["hook"], dict(k)["outcome"]): v for k, v in metric_points(HOOK_CALLS).items()}
    assert points == {("update_from_response", "ok"): 1, ("get_status", "ok"): 1,
                      ("has_content_to_compress", "error"): 1}
    usage = {dict(k)["token_type"]: v for k, v in metric_points(USAGE_TOKENS, flush=False).items()}
    assert usage == {"prompt": 40, "completion": 2}


def test_state_numbers_come_from_the_instance_or_the_class(observe_engine, store_path):
    import sqlite3

    import observed_engine

    class ClassWindow(ShapesEngine):
        name = "class-window"
        context_length = 4000          # on the class only

        def __init__(self):
            super().__init__()
            del self.context_length

    engine = observe_engine(ClassWindow())
    engine.update_from_response({"prompt_tokens": 40})
    assert observed_engine.flush(10)
    with sqlite3.connect(store_path) as db:
        row = db.execute("select prompt_tokens, threshold_tokens, window_tokens from events "
                         "where hook='update_from_response'").fetchone()
    assert row == (40, 100, 4000)


class SelfCallingLeaf(NarrowEngine):
    name = "self-calling-leaf"

    def should_compress(self, prompt_tokens=None):
        self.get_status()               # a leaf calling another hook of its engine
        return super().should_compress(prompt_tokens)


class HelperCallingLeaf(NarrowEngine):
    name = "helper-calling-leaf"

    def should_compress(self, prompt_tokens=None):
        self._look()                    # the other hook is called by a helper, not named here
        return super().should_compress(prompt_tokens)

    def _look(self):
        return self.get_status()


def test_a_leaf_hook_that_names_another_hook_takes_the_guarded_form(observe_engine, metric_points):
    """A leaf hook whose own code calls another observed hook (the built-in's should_compress calls
    should_compress_info from Hermes 0.20 on) sets the guard: the inner call is the engine's own."""
    engine = observe_engine(SelfCallingLeaf())
    engine.should_compress(1)
    engine.get_status()                 # a host call of it is still traced
    calls = {dict(k)["hook"]: v for k, v in metric_points(HOOK_CALLS).items()}
    assert calls == {"should_compress": 1, "get_status": 1}


def test_a_hook_called_from_a_leaf_hook_through_a_helper_is_traced(observe_engine, metric_points):
    """Leaf hooks do not set the guard (that is what makes them cheap), and a call through a helper
    method is not seen in the hook's code: traced as a call of its own. Documented, pinned here."""
    engine = observe_engine(HelperCallingLeaf())
    engine.should_compress(1)
    calls = {dict(k)["hook"]: v for k, v in metric_points(HOOK_CALLS).items()}
    assert calls == {"should_compress": 1, "get_status": 1}


def test_guard_is_per_thread(observe_engine, metric_points):
    """While compress() runs in one thread (guard set there), another thread's calls on the
    same engine are host calls and are traced; the compressing thread's own are not."""
    inside, release = threading.Event(), threading.Event()

    class Slow(NarrowEngine):
        name = "slow"

        def compress(self, messages, current_tokens=None, focus_topic=None):
            self.should_compress(1)      # own call: untraced
            inside.set()
            assert release.wait(10)
            return super().compress(messages, current_tokens, focus_topic)

    engine = observe_engine(Slow())
    worker = threading.Thread(target=engine.compress, args=(transcript(10),))
    worker.start()
    assert inside.wait(10)
    engine.should_compress(2)            # the host, from another thread: traced
    engine.get_status()
    release.set()
    worker.join(10)
    engine.should_compress(3)            # after: traced
    calls = {dict(k)["hook"]: v for k, v in metric_points(HOOK_CALLS).items()}
    assert calls == {"compress": 1, "should_compress": 2, "get_status": 1}
    assert engine.calls["should_compress"] == 3


def _state_row(store_path):
    import sqlite3

    with sqlite3.connect(store_path) as db:
        return db.execute("select prompt_tokens, threshold_tokens, window_tokens from events "
                          "where hook='update_from_response' order by id desc limit 1").fetchone()


def test_state_read_falls_back_when_the_instance_stops_holding_a_number(observe_engine, store_path):
    import observed_engine

    class Later(ShapesEngine):
        name = "later"
        threshold_tokens = 55           # class default under the instance's value

    engine = observe_engine(Later())    # holds all three now: the one-call read is generated
    engine.update_from_response({"prompt_tokens": 1})
    assert observed_engine.flush(10)
    assert _state_row(store_path) == (1, 100, 1000)
    del engine.threshold_tokens         # now only the class has it
    engine.update_from_response({"prompt_tokens": 2})
    assert observed_engine.flush(10)
    assert _state_row(store_path) == (2, 55, 1000)


def test_state_read_runs_no_engine_code(observe_engine, store_path):
    """An engine overriding __getattribute__ sees exactly the lookups the bare engine sees."""
    import observed_engine

    class Watching(ShapesEngine):
        name = "watching"

        def __getattribute__(self, attr):
            if attr == "__dict__":
                object.__getattribute__(self, "seen").append(("__dict__ read",))
            return object.__getattribute__(self, attr)

    bare, observed = Watching(), observe_engine(Watching())
    for engine in (bare, observed):
        engine.update_from_response({"prompt_tokens": 3})
    assert observed.seen == bare.seen
    assert observed_engine.flush(10)
    assert _state_row(store_path) == (3, 100, 1000)


def test_an_exception_passes_through_the_exact_form_with_a_readable_traceback(observe_engine):
    import traceback

    engine = observe_engine(ShapesEngine())
    with pytest.raises(ValueError) as info:
        engine.should_compress_preflight("raise")
    text = "".join(traceback.format_exception(info.value))
    assert "_oe_result = _oe_original(" in text          # the hook's own line, from linecache
    assert 'raise ValueError("preflight")' in text       # and the engine's


@pytest.mark.parametrize("traces", [True, False])
def test_the_exact_form_with_a_full_queue_calls_through_and_counts_each_loss(traces):
    """The exact form checks the queue's bound before the call (issue 28): with the queue full, the
    call still goes to the inner, returns its very object, lets its exception through unchanged, and
    each lost event is counted; nothing is queued past the bound."""
    import observed_engine.api
    from observed_engine import Registry, observe

    registry = Registry()
    engine = observe(ShapesEngine(), settings={"store": False, "traces": traces, "queue_size": 3}, registry=registry)
    assert is_exact(engine, "should_compress") and is_exact(engine, "update_from_response")
    recorder = observed_engine.api.pipeline_of(engine).recorder
    release, taken = threading.Event(), threading.Event()
    process = recorder._process_batch

    def held(batch):               # the worker takes the first event, then waits
        taken.set()
        release.wait(10)
        process(batch)

    recorder._process_batch = held
    try:
        engine.should_compress(1)
        recorder._wake.set()
        assert taken.wait(10)
        for _ in range(3):
            engine.should_compress(2)
        assert len(recorder.queue) == 3 and recorder.dropped == 0
        extra = []
        assert engine.should_compress(7, extra) is False and extra == [1]
        usage = {"prompt_tokens": 9}
        assert engine.update_from_response(usage) is None
        with pytest.raises(ValueError, match="preflight") as info:
            engine.should_compress_preflight("raise")
        assert type(info.value) is ValueError
        # three hook events lost, exactly: the wake-up the first loss sends the worker
        # (pipeline._wake_worker) finds the queue full too and is not queued, nor counted as a loss
        assert len(recorder.queue) == 3 and recorder.dropped == 3
        assert engine.seen[-3:-1] == [("should_compress", 7, extra), ("update_from_response", usage, SENTINEL)]
    finally:
        release.set()
        recorder._process_batch = process
        registry.shutdown(5.0)
