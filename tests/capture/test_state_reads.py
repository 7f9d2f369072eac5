"""The state numbers the exact leaf hooks copy (H26) are read without running engine code.

Where the class holds no descriptor of their names and overrides neither ``__getattribute__`` nor
``__getattr__``, the generated hook reads them as the instance's attributes (cheaper than the
instance dict); anywhere else it reads the instance dict. An instance that later lacks one must
not make the hook call the class's descriptor or ``__getattr__``: the host did not ask for it.
"""

from __future__ import annotations

import functools
import linecache
import sqlite3

from support.engines import NarrowEngine

import observed_engine


def _generated_source(engine, hook: str) -> str:
    code = getattr(type(engine), hook).__code__
    return "".join(linecache.getlines(code.co_filename))


class InstanceState(NarrowEngine):
    """Holds the three numbers in its instance dict, as the built-in does."""

    name = "instance-state"

    def __init__(self):
        super().__init__()
        self.last_prompt_tokens, self.threshold_tokens, self.context_length = 0, 100, 1000


class CachedWindow(InstanceState):
    name = "cached-window"
    window_reads = 0

    @functools.cached_property
    def context_length(self):        # a non-data descriptor: the instance dict's value shadows it
        type(self).window_reads += 1
        return 4000


class ForwardingState(InstanceState):
    name = "forwarding-state"
    getattr_calls = 0

    def __getattr__(self, name):
        type(self).getattr_calls += 1
        if name == "context_length":
            return 4000
        raise AttributeError(name)


def _row(store_path):
    with sqlite3.connect(store_path) as db:
        return db.execute("select prompt_tokens, threshold_tokens, window_tokens from events "
                          "where hook='update_from_response' order by id").fetchall()


def test_a_plain_engine_is_read_by_attribute_and_gives_the_same_numbers(observe_engine, store_path):
    engine = observe_engine(InstanceState())
    assert "self.last_prompt_tokens, self.threshold_tokens, self.context_length" in \
        _generated_source(engine, "update_from_response")
    engine.update_from_response({"prompt_tokens": 40})
    del engine.context_length          # now the ABC's plain class value (0), as the worker fills it in
    engine.update_from_response({"prompt_tokens": 50})
    assert observed_engine.flush(10)
    assert _row(store_path) == [(40, 100, 1000), (50, 100, 0)]


def test_a_descriptor_of_a_state_name_is_never_run_by_the_hook(observe_engine, store_path):
    inner = CachedWindow()
    del inner.__dict__["context_length"]
    assert inner.context_length == 4000 and CachedWindow.window_reads == 1     # now in the instance dict
    engine = observe_engine(inner)
    assert "self.context_length" not in _generated_source(engine, "update_from_response")
    del engine.__dict__["context_length"]                # the instance lacks it again
    engine.update_from_response({"prompt_tokens": 40})
    assert observed_engine.flush(10)
    assert CachedWindow.window_reads == 1                # the hook did not run the cached_property
    assert len(_row(store_path)) == 1                    # the call is recorded (the chart loses its point)


def test_an_engines_getattr_is_never_run_by_the_hook(observe_engine, store_path):
    engine = observe_engine(ForwardingState())
    assert "self.context_length" not in _generated_source(engine, "update_from_response")
    del engine.__dict__["context_length"]
    ForwardingState.getattr_calls = 0
    engine.update_from_response({"prompt_tokens": 40})
    assert observed_engine.flush(10)
    assert ForwardingState.getattr_calls == 0
    assert _row(store_path)[0][0] == 40
