"""The built-in compressor's one LLM call, faked: ``FakeLLM`` stands in for
``agent.context_compressor.call_llm``; ``ProviderError`` is what a provider SDK raises.

One fake for every test: a fixed summary (``FakeLLM(SUMMARY_TEXT)``), a summary that
depends only on the prompt (``FakeLLM()``, the default: a bare engine and its observed
twin asked with the same prompt get the same summary), or an error raised on every call
(``FakeLLM(error=...)``). Each instance counts its calls and keeps the tasks and prompts
it was asked with.
"""

from __future__ import annotations

import hashlib
from types import SimpleNamespace
from typing import Callable, List, Optional, Union

SUMMARY_TEXT = "SUMMARY: the user and the assistant discussed numbered messages."


class ProviderError(Exception):
    """What an OpenAI-style SDK raises for an HTTP error: the status code on the exception
    (the built-in reads ``status_code``)."""

    def __init__(self, message: str, status_code: Optional[int] = None) -> None:
        super().__init__(message)
        self.status_code = status_code


def prompt_summary(prompt: str) -> str:
    """A summary that depends only on the prompt (its length and a digest)."""
    digest = hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return (f"## Goal\nFinish the task.\n## Progress\nSummarised {len(prompt)} chars ({digest}).\n"
            f"## Next steps\nContinue.")


def summary_response(content: str) -> SimpleNamespace:
    """A chat-completion-shaped answer carrying ``content`` (the built-in reads ``choices[0].message``)."""
    message = SimpleNamespace(content=content, role="assistant", tool_calls=None)
    return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason="stop")], usage=None)


class FakeLLM:
    """Stands in for ``agent.context_compressor.call_llm``.

    ``summary``: the summary text, or a function of the prompt giving it (default
    :func:`prompt_summary`); ``error``: raised instead of answering, after the call is counted.
    """

    def __init__(self, summary: Union[str, Callable[[str], str]] = prompt_summary,
                 error: Optional[BaseException] = None) -> None:
        self.summary = summary
        self.error = error
        self.calls = 0
        self.tasks: List[Optional[str]] = []
        self.prompts: List[str] = []

    def __call__(self, *args, **kwargs):
        self.calls += 1
        self.tasks.append(kwargs.get("task"))
        messages = kwargs.get("messages") or [{"content": ""}]
        prompt = str(messages[0].get("content", ""))
        self.prompts.append(prompt)
        if self.error is not None:
            raise self.error
        return summary_response(self.summary if isinstance(self.summary, str) else self.summary(prompt))


def install_llm(monkeypatch, llm: Optional[FakeLLM] = None) -> FakeLLM:
    """Make ``llm`` (default: a new ``FakeLLM()``) the compressor's ``call_llm``; returns it."""
    import agent.context_compressor as cc

    llm = FakeLLM() if llm is None else llm
    monkeypatch.setattr(cc, "call_llm", llm)
    return llm
