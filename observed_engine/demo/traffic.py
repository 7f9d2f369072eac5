"""The demo's traffic: real Hermes agents (``AIAgent.run_conversation``) in concurrent sessions."""

from __future__ import annotations

import copy
import random
import sys
import threading
import time
from typing import Any, Dict, List

from .. import host
from ..loopback_llm import content_text
from .engines import TOPICS, _text
from .llm import CHAT_MODEL, DemoLLM


class Traffic:
    """Sessions of the real Hermes ``AIAgent`` loop (``run_conversation``), one thread per
    concurrent session. Most sessions run the host's own choice (the observed engine around the
    built-in compressor, from config.yaml); every ``router_every``-th session gets the topic
    router instead, set the way the host sets a plugin engine (``context_compressor``, then
    ``update_model``). 0.19.0 never calls ``select_context``: the demo calls the router's from
    Hermes' ``pre_api_request`` plugin hook, before every provider request, as head Hermes does
    (the result is not applied to the request)."""

    def __init__(self, llm: DemoLLM, router, sessions: int, turn_delay: float, seed: int = 1,
                 router_every: int = 3, turns=(8, 14)) -> None:
        self.llm = llm
        self.router = router
        self.sessions = sessions
        self.turn_delay = turn_delay
        self.seed = seed
        self.router_every = router_every
        self.turn_range = turns
        self.turns = 0
        self.finished = 0
        self.errors = 0
        self.started = 0
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._routed: Dict[str, Any] = {}        # session id -> the router engine of that agent
        self.agents: List[Any] = []              # the latest agent of each worker (the test reads them)

    @property
    def compressions(self) -> int:
        return sum(int(getattr(getattr(a, "context_compressor", None), "compression_count", 0) or 0)
                   for a in list(self.agents)) + self._done_compressions

    _done_compressions = 0

    def on_request(self, **kw) -> None:
        """Hermes' pre_api_request hook: head's select_context call, for a router session."""
        engine = self._routed.get(kw.get("session_id") or "")
        if engine is None:
            return
        request = list(kw.get("request_messages") or [])
        user = {"role": "user", "content": str(kw.get("user_message") or "")}
        try:
            engine.select_context(request, conversation_messages=list(kw.get("conversation_history") or []),
                                  incoming_message=user, budget_tokens=int(engine.threshold_tokens or 0))
        except Exception:  # the demo's selection is decoration; the turn goes on
            pass

    def run_session(self, worker: int) -> None:
        rng = random.Random(self.seed * 1000 + worker)
        while not self.stop.is_set():
            with self._lock:
                self.started += 1
                n = self.started
            try:
                self._one_session(rng, f"demo-{worker}-{int(time.time() * 1000) % 10**9}",
                                  routed=bool(self.router_every) and n % self.router_every == 0, worker=worker)
            except Exception as exc:         # an agent that cannot start: counted, the next one tries again
                with self._lock:
                    self.errors += 1
                print(f"\ndemo: session failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                self.stop.wait(1.0)

    def _one_session(self, rng: random.Random, session_id: str, *, routed: bool, worker: int) -> None:
        AIAgent = host.ai_agent_class()
        agent = AIAgent(base_url=self.llm.base_url, api_key="sk-demo", provider="custom", model=CHAT_MODEL,
                        quiet_mode=True, skip_context_files=True, skip_memory=True, enabled_toolsets=[],
                        max_iterations=2, save_trajectories=False, session_id=session_id, platform="demo")
        agent.suppress_status_output = True       # the host's status lines would bury the progress line
        if routed:
            engine = copy.deepcopy(self.router)              # the host deep-copies plugin engines per agent
            agent.context_compressor = engine
            engine.update_model(model=agent.model, context_length=self.llm.context_length, base_url=agent.base_url,
                                api_key="sk-demo", provider=agent.provider, api_mode=agent.api_mode)
            bind = getattr(engine, "bind_session_state", None)      # as the host's agent init does
            if callable(bind):
                bind(session_db=getattr(agent, "_session_db", None), session_id=session_id)
            self._routed[session_id] = engine
        while len(self.agents) <= worker:
            self.agents.append(None)
        self.agents[worker] = agent
        history = None
        try:
            for _ in range(rng.randint(*self.turn_range)):
                if self.stop.is_set():
                    break
                topic = rng.choice(TOPICS)
                tag = f"[{topic}] " if rng.random() < 0.8 else ""   # untagged: select_context returns None
                result = agent.run_conversation(tag + _text(rng, rng.randint(150, 400)), conversation_history=history)
                history = result.get("messages") or history
                if sum(len(content_text(m.get("content"))) for m in history if isinstance(m, dict)) > \
                        8 * self.llm.context_length:     # ~2x the window: a session that cannot shrink ends
                    break
                with self._lock:
                    self.turns += 1
                self.stop.wait(self.turn_delay * rng.uniform(0.5, 1.5))
        finally:
            agent.shutdown_memory_provider(history or [])         # the host's session end: on_session_end
            self._routed.pop(session_id, None)
            with self._lock:
                self.finished += 1
                self._done_compressions += int(getattr(agent.context_compressor, "compression_count", 0) or 0)
                self.agents[worker] = None
