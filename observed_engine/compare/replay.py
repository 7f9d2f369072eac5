"""One recorded conversation replayed through one engine, in the real Hermes host path.

A fresh Hermes home in a temporary directory (its config.yaml: the recorded model behind the
replay LLM, ``context.engine: <engine>``, the operator's ``compression:`` and ``plugins:``
sections and the engine's own section, ``auxiliary:`` too with ``summary="configured"``), a real
``AIAgent`` built by the host (so the host selects and loads the engine as it would in
production, and falls back to the built-in when it cannot), with a session store of its own in
that home. The engine is observed with a registry of its own writing to a store in the same
temporary directory: nothing reaches the operator's telemetry, Prometheus or OTLP. Each
recorded user message is sent with ``run_conversation`` and each request the agent makes is
answered by the replay LLM with the next recorded reply, so preflight, ``compress_context``,
the real-usage sentinels and the cooldowns run as in production. The recorded tool calls are
answered with the recorded results (``host.replay_tool_results``): no tool runs.

Replays run one at a time: each sets HERMES_HOME and the built-in's ``call_llm`` for the process
while it runs (and puts them back).
"""

from __future__ import annotations

import copy
import io
import os
import shutil
import sqlite3
import tempfile
import time
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

import yaml

from .. import host
from ..api import observe
from ..pipeline import Registry
from .replay_server import ReplayServer
from .sessions import Conversation, tool_names, tool_results

BUILTIN = "compressor"
OBSERVED = "observed"


class EngineUnavailable(Exception):
    """The host could not load the engine (it fell back to the built-in)."""


def stand_in_summary(prompt: str) -> str:
    """The offline summary past the recorded ones: fixed text that depends on the prompt's size."""
    return ("## Goal\nContinue the conversation.\n## Progress\n"
            f"Earlier turns ({len(prompt)} characters of transcript) were summarised offline by the "
            "replay.\n## Next steps\nAnswer the latest user message.")


class OfflineSummariser:
    """Stands in for ``call_llm`` (the built-in's summary call): the recorded summaries in order,
    then :func:`stand_in_summary`. No network."""

    def __init__(self, recorded: List[str]) -> None:
        self.recorded = list(recorded)
        self.calls = 0

    def text(self, prompt: str) -> str:
        self.calls += 1
        if self.calls <= len(self.recorded):
            return self.recorded[self.calls - 1]
        return stand_in_summary(prompt)

    def __call__(self, *args, **kwargs):  # noqa: ARG002 (call_llm's signature)
        messages = kwargs.get("messages") or [{"content": ""}]
        content = self.text(str(messages[0].get("content", "")))
        message = SimpleNamespace(content=content, role="assistant", tool_calls=None)
        return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason="stop")], usage=None)


@contextmanager
def _hermes_home(home: Path):
    before = os.environ.get("HERMES_HOME")
    os.environ["HERMES_HOME"] = str(home)
    host.reset_plugin_discovery()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HERMES_HOME", None)
        else:
            os.environ["HERMES_HOME"] = before
        host.reset_plugin_discovery()


@contextmanager
def _summariser(fn):
    if fn is None:
        yield
        return
    cc = host.compressor_module()
    before = cc.call_llm
    cc.call_llm = fn
    try:
        yield
    finally:
        cc.call_llm = before


def replay_config(user_config: Dict[str, Any], engine: str, *, model: str, base_url: str,
                  context_length: int, summary: str) -> Dict[str, Any]:
    cfg: Dict[str, Any] = {
        "model": {"default": model, "provider": "custom", "base_url": base_url,
                  "context_length": int(context_length)},
        "context": {"engine": engine},
    }
    for section in ("compression",) + (("auxiliary",) if summary == "configured" else ()):
        if isinstance(user_config.get(section), dict):
            cfg[section] = copy.deepcopy(user_config[section])
    if engine != BUILTIN:
        plugins = copy.deepcopy(user_config.get("plugins")) if isinstance(user_config.get("plugins"), dict) else {}
        enabled = [p for p in (plugins.get("enabled") or []) if p != OBSERVED]
        if engine not in enabled:
            enabled.append(engine)
        plugins["enabled"] = enabled
        cfg["plugins"] = plugins
        if isinstance(user_config.get(engine), dict):
            cfg[engine] = copy.deepcopy(user_config[engine])
    return cfg


def _count(model: str, messages: List[Any]) -> Optional[int]:
    try:
        from ..tokens import counter_for

        return counter_for("auto", model).count_messages(messages)
    except Exception:
        return None


def _store_rows(path: Path) -> List[Dict[str, Any]]:
    if not path.exists():
        return []
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM events ORDER BY ts")]
    finally:
        conn.close()


def _run_turns(agent: Any, server: ReplayServer, turns: List[Dict[str, Any]], out: Dict[str, Any]) -> None:
    """Send each recorded user message; the replay LLM answers each request with the next
    recorded reply. A turn that made more or fewer requests than the recording is noted and
    the next turn starts at its own replies."""
    expected = 0
    for n, turn in enumerate(turns, 1):
        server.turn = n
        recorded = sum(1 for r in turn["replies"] if r["role"] == "assistant")
        result = agent.run_conversation(turn["user"], conversation_history=out.get("history"))
        out["history"] = result.get("messages") or out.get("history")
        made = server._next - expected + server.unanswered
        expected += recorded
        if made != recorded:
            out["divergences"].append(f"turn {n}: the agent made {made} requests, the recording has "
                                      f"{recorded} replies")
        server._next = expected
        server.unanswered = 0
        out["turns_done"] = n


def replay(conv: Conversation, engine: str, *, user_config: Dict[str, Any], context_length: int,
           summary: str = "offline", usage: str = "tiktoken") -> Dict[str, Any]:
    """Replay ``conv`` through ``engine``; the raw result (rows, requests, turns, errors).

    Raises :class:`EngineUnavailable` when the host cannot load the engine; any other
    exception of the host (an engine that raises into it) ends the replay and is reported in
    ``error`` with what was measured until then."""
    tmp = Path(tempfile.mkdtemp(prefix="observed-compare-"))
    home = tmp / "home"
    home.mkdir()
    store = tmp / "telemetry.sqlite"
    turns = conv.turns
    replies = [r for t in turns for r in t["replies"] if r["role"] == "assistant"]
    offline = OfflineSummariser(conv.summaries) if summary == "offline" else None
    model = conv.model or "replay-model"
    out: Dict[str, Any] = {"error": None, "divergences": [], "turns_done": 0, "turns": len(turns)}
    registry = Registry()
    try:
        with ReplayServer(replies, model=model, context_length=context_length, usage=usage,
                          summarise=(offline.text if offline else stand_in_summary)) as server:
            cfg = replay_config(user_config, engine, model=model, base_url=server.base_url,
                                context_length=context_length, summary=summary)
            (home / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
            with _hermes_home(home), _summariser(offline), redirect_stdout(io.StringIO()):
                agent = host.ai_agent_class()(
                    base_url=server.base_url, api_key="sk-replay", provider="custom", model=model,
                    quiet_mode=True, skip_context_files=True, skip_memory=True, enabled_toolsets=[],
                    max_iterations=max([len(t["replies"]) for t in turns] + [1]) + 2,
                    save_trajectories=False, session_db=host.session_db(home / "state.db"))
                inner = agent.context_compressor
                loaded = getattr(inner, "name", None)
                if engine == BUILTIN:
                    if not isinstance(inner, host.context_compressor_class()):
                        raise EngineUnavailable(f"the host did not build its built-in compressor (got {loaded!r})")
                elif loaded != engine:
                    raise EngineUnavailable(
                        f"the host could not load engine {engine!r} (not installed, not enabled, or it failed "
                        f"to load) and fell back to {loaded!r}")
                out["engine_class"] = f"{type(inner).__module__}.{type(inner).__qualname__}"
                observe(inner, settings={"traces": False, "metrics": False,
                                         "store": {"path": str(store), "retention_days": 36500},
                                         "prometheus": {"enabled": False}, "otlp": {"enabled": False}},
                        registry=registry)
                if conv.system_prompt:
                    agent._cached_system_prompt = conv.system_prompt   # the recorded prompt, verbatim
                started = time.monotonic()
                try:
                    with host.replay_tool_results(agent, tool_results(conv.messages), tool_names(conv.messages)):
                        _run_turns(agent, server, turns, out)
                except Exception as exc:   # an engine that raises into the host: reported, the rest goes on
                    out["error"] = f"{type(exc).__name__}: {exc}"
                out["seconds"] = time.monotonic() - started
                history = out.get("history") or []
                out["final_messages"] = len(history)
                out["final_tokens"] = _count(model, history)
                out["summary_calls"] = offline.calls if offline else None
                out["compression_count"] = getattr(inner, "compression_count", None)
        out["requests"] = list(server.requests)
        out["summary_requests_to_replay_llm"] = server.summary_requests
        registry.flush(15)
    finally:
        registry.shutdown(5)
        out["rows"] = _store_rows(store)
        shutil.rmtree(tmp, ignore_errors=True)
    return out
