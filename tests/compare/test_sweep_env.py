"""A serial sweep run inside another program (the CLI's process, a test process, a notebook)
leaves that program's environment as it found it: the replayer's token-counting and scratch
settings were left behind, so every later subprocess of that program counted tokens in-process
(a fresh-clone CI run's memory benchmark, started by a later test, found no token helper)."""

from __future__ import annotations

import os

from observed_engine.compare.replay import SCRATCH_ENV
from observed_engine.compare.sweep import Replayer

TOKENIZER_PROCESS_ENV = "OBSERVED_TOKENIZER_PROCESS"     # the token helper switch (tokens.helper)


def test_the_replayer_restores_the_environment(monkeypatch):
    monkeypatch.delenv(TOKENIZER_PROCESS_ENV, raising=False)
    monkeypatch.delenv(SCRATCH_ENV, raising=False)
    replayer = Replayer()
    try:
        assert os.environ[TOKENIZER_PROCESS_ENV] == "0"      # while it replays: in-process counting
    finally:
        replayer.close()
    assert TOKENIZER_PROCESS_ENV not in os.environ and SCRATCH_ENV not in os.environ


def test_an_operator_setting_is_kept(monkeypatch):
    monkeypatch.setenv(TOKENIZER_PROCESS_ENV, "1")
    replayer = Replayer()
    replayer.close()
    assert os.environ[TOKENIZER_PROCESS_ENV] == "1"
