"""Hermes' built-in ContextCompressor, offline: built the one way the tests build it, its summariser
faked with support/llm.py's FakeLLM, and a subclass that overrides private helpers."""

from __future__ import annotations

from typing import Optional, Type

from agent.context_compressor import ContextCompressor
from support.llm import SUMMARY_TEXT, FakeLLM, install_llm


def compressor(model: str = "gpt-4o", *, cls: Optional[Type[ContextCompressor]] = None, **kwargs) -> ContextCompressor:
    """The built-in (or ``cls``, a subclass): a fixed 200k window, quiet; other arguments as given.

    It calls ``agent.context_compressor.call_llm`` for its summaries: install a FakeLLM first
    (``install_llm``), or use :func:`real_compressor`."""
    kwargs.setdefault("config_context_length", 200_000)
    kwargs.setdefault("quiet_mode", True)
    return (cls or ContextCompressor)(model, **kwargs)


def eager_compressor(**kwargs) -> ContextCompressor:
    """:func:`compressor` that protects only the first 2 and the last 4 messages, so short
    transcripts compact too (other arguments as given)."""
    kwargs.setdefault("protect_first_n", 2)
    kwargs.setdefault("protect_last_n", 4)
    return compressor(**kwargs)


def real_compressor(monkeypatch, model: str = "gpt-4o", **kwargs) -> ContextCompressor:
    """:func:`compressor` with a fixed summary (``FakeLLM(SUMMARY_TEXT)``) installed as its LLM call."""
    install_llm(monkeypatch, FakeLLM(SUMMARY_TEXT))
    return compressor(model, **kwargs)


class PrivateHelperCompressor(ContextCompressor):
    """A subclass of the built-in that overrides private helpers."""

    def _serialize_for_summary(self, turns):
        self.helper_calls = getattr(self, "helper_calls", 0) + 1
        return "[custom serialisation]\n" + super()._serialize_for_summary(turns)

    def _protect_head_size(self, messages):
        self.head_size_calls = getattr(self, "head_size_calls", 0) + 1
        return super()._protect_head_size(messages)
