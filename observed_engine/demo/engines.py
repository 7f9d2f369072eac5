"""The demo's engines: the topic router (the built-in plus ``select_context``), and the offline
engines the test feeds drive hook by hook."""

from __future__ import annotations

import random
import threading
import time
from types import SimpleNamespace
from typing import Any, Dict, Optional

from .. import host
from .llm import CHAT_MODEL

TOPICS = ("billing", "deploy", "search", "auth", "cache")


WORDS = ("context", "token", "engine", "summary", "request", "provider", "window", "cache",
         "session", "prompt", "latency", "retry", "budget", "message", "compress", "select")


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


class TopicSelection:
    """``select_context`` of both demo routers: per-request retrieval by the topic tag of the
    incoming message; now and then garbage (the host falls open)."""

    def _init_selection(self, garbage_rate: float) -> None:
        self.garbage_rate = garbage_rate
        self._selection: Optional[list] = None
        self._topic: Optional[str] = None
        self._rng = random.Random(7)

    def select_context(self, request_messages, *, conversation_messages=None,  # noqa: ARG002
                       incoming_message=None, budget_tokens=0):  # noqa: ARG002 (head's call)
        roll = self._rng.random()
        if roll < self.garbage_rate:
            return {"oops": "not a list"}          # the host falls open
        text = str((incoming_message or {}).get("content", "")) if isinstance(incoming_message, dict) else ""
        topic = next((t for t in TOPICS if text.startswith(f"[{t}]")), None)   # the tag only
        if topic is None:
            return None                             # leave the request unchanged
        if topic == self._topic and self._selection is not None:
            return self._selection                  # same selection: cache-friendly
        self._topic = topic
        picked = [m for m in request_messages if topic in str(m.get("content", ""))][-12:]
        self._selection = request_messages[:1] + picked + request_messages[-1:]
        return self._selection


def make_topic_router(context_length: int = 128_000):
    """The router: Hermes' built-in compressor (its real summarising ``compress``) under another
    name, plus ``select_context`` (per-request retrieval by topic)."""
    Compressor = host.context_compressor_class()

    class TopicRouterEngine(TopicSelection, Compressor):
        """Demo engine: routes each request to the messages of its topic; the built-in compresses."""

        @property
        def name(self) -> str:
            return "topic-router"

        def __init__(self, garbage_rate: float = 0.05) -> None:
            super().__init__(CHAT_MODEL, threshold_percent=0.6, protect_first_n=1, protect_last_n=2,
                             config_context_length=context_length, quiet_mode=True)
            self._init_selection(garbage_rate)

    return TopicRouterEngine


def router_engine(settings: Dict[str, Any], context_length: int):
    """The topic router, observed with the same settings as the plugin's engine (one pipeline)."""
    from ..api import observe

    return observe(make_topic_router(context_length)(), settings={**settings, "name": "observed"})


def make_trimming_router(context_length: int = 128_000):
    """The offline router of the test feeds: select_context as the demo's, its own trimming compress."""
    ContextEngine = host.context_engine_abc()

    class TopicRouterEngine(TopicSelection, ContextEngine):
        """Demo engine: routes each request to the messages of its topic; trims on compress."""

        name = "topic-router"

        def __init__(self, garbage_rate: float = 0.05) -> None:
            self.context_length = context_length
            self.threshold_percent = 0.6
            self.threshold_tokens = int(context_length * self.threshold_percent)
            self._init_selection(garbage_rate)

        def update_from_response(self, usage):
            self.last_prompt_tokens = usage.get("prompt_tokens", 0)
            self.last_completion_tokens = usage.get("completion_tokens", 0)
            self.last_total_tokens = usage.get("total_tokens", 0)

        def should_compress(self, prompt_tokens=None):
            tokens = prompt_tokens if prompt_tokens is not None else self.last_prompt_tokens
            return tokens >= self.threshold_tokens

        def compress(self, messages, current_tokens=None, focus_topic=None):  # noqa: ARG002 (the host filters kwargs by this signature)
            self.compression_count += 1
            keep = max(6, len(messages) // 3)
            return messages[:2] + messages[-keep:]

    return TopicRouterEngine


class OfflineSummariser:
    """Stands in for the LLM behind ``call_llm(task="compression")``; sometimes slow, sometimes failing."""

    def __init__(self, slow_every: int, slow_seconds: float, fail_every: int = 0) -> None:
        self.calls = 0
        self.failures = 0
        self.slow_every = slow_every
        self.slow_seconds = slow_seconds
        self.fail_every = fail_every
        self._lock = threading.Lock()

    def __call__(self, *args, **kwargs):  # noqa: ARG002 (call_llm's signature; the demo answers any call)
        with self._lock:
            self.calls += 1
            n = self.calls
            failing = bool(self.fail_every) and n % self.fail_every == 0
            if failing:
                self.failures += 1
                nth_failure = self.failures
        if failing:
            time.sleep(0.05)
            if nth_failure % 2:
                raise RuntimeError("offline summariser: simulated 503 Service Unavailable")
            raise ConnectionError("offline summariser: simulated connection reset")
        if self.slow_every and n % self.slow_every == 0:
            time.sleep(self.slow_seconds)
        else:
            time.sleep(0.05)
        summary = ("## Goal\nKeep the demo conversation going.\n## Progress\n"
                   f"Summarised turns (summary #{n}).\n## Next steps\nContinue.")
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=summary))],
                               usage=None, model="offline-summariser")


def build_engines(settings: Dict[str, Any], summariser: OfflineSummariser, context_length: int) -> Dict[str, Any]:
    from ..api import observe

    cc = host.compressor_module()

    cc.call_llm = summariser       # the only LLM call of the built-in compressor, answered offline
    compressor = cc.ContextCompressor(
        "gpt-4o", threshold_percent=0.5, protect_first_n=1, protect_last_n=6,
        config_context_length=context_length, quiet_mode=True,
    )
    router = make_trimming_router(context_length)()
    return {"compressor": observe(compressor, settings=settings), "topic-router": observe(router, settings=settings)}
