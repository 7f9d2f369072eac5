"""A delivery (a session end) does not wait for a token-counting helper that gets no CPU, and the
helper's pipe stays in step afterwards: an answer it owes is read and discarded, not taken as the
next batch's."""

from __future__ import annotations

import os
import signal
import time

import pytest

from observed_engine.tokens import TokenCounter, provisioning
from observed_engine.tokens import counter as counter_module
from observed_engine.tokens import helper as helper_module

TEXTS = ["hello world", "the quick brown fox jumps over the lazy dog", "x" * 5000]


@pytest.fixture
def encoder():
    if not helper_module.enabled():
        pytest.skip("no helper process on this system")
    helper = helper_module.HelperEncoder("o200k_base", provisioning.prepare_offline("o200k_base"))
    try:
        yield helper
    finally:
        try:
            os.kill(helper.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        helper.close()
        helper._proc.wait(10)


def _exact(texts):
    return [len(provisioning._load_encoding("o200k_base").encode(t, disallowed_special=())) for t in texts]


def test_a_stopped_helper_gives_up_at_the_deadline_and_stays_in_step(encoder):
    assert encoder.count_batch(["warm"]) == _exact(["warm"])        # loaded and answering
    os.kill(encoder.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    with helper_module.hurry(time.monotonic() + 0.3), pytest.raises(helper_module.HelperBusy):
        encoder.count_batch(TEXTS)            # written; its answer is owed
    assert 0.25 <= time.monotonic() - t0 < 2.0
    assert encoder._owed == 4 * len(TEXTS)
    os.kill(encoder.pid, signal.SIGCONT)
    other = ["a different batch", "of two"]
    assert encoder.count_batch(other) == _exact(other)      # not the owed answer
    assert encoder._owed == 0 and encoder._failed is None


def test_a_helper_still_loading_is_not_waited_for_past_the_deadline():
    if not helper_module.enabled():
        pytest.skip("no helper process on this system")
    helper = helper_module.HelperEncoder("o200k_base", provisioning.prepare_offline("o200k_base"))
    os.kill(helper.pid, signal.SIGSTOP)       # before it could say OK
    try:
        counter = TokenCounter("o200k_base")
        counter._state.encoder = helper        # the counter counts through this helper
        counter_module.take_estimated()
        with helper_module.hurry(time.monotonic() + 0.2):
            n = counter.count_messages([{"role": "user", "content": "hello world"}])
        assert n == 3                                    # ceil(11 / 4): the estimate
        assert counter_module.take_estimated() == 1 and counter_module.take_estimated() == 0
        assert counter.cache_size() == 0                 # an estimate is never cached as a count
        os.kill(helper.pid, signal.SIGCONT)
        assert counter.count_messages([{"role": "user", "content": "hello world"}]) == _exact(["hello world"])[0]
        assert counter.cache_size() == 1
    finally:
        os.kill(helper.pid, signal.SIGCONT)
        helper.close()
        helper._proc.wait(10)
