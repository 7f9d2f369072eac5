"""One recorded conversation replayed through one engine, in the real Hermes host path.

A fresh Hermes home per replay (the recorded model behind the replay LLM, ``context.engine``, the
operator's relevant sections), a real ``AIAgent`` built by the host, each recorded user message
sent with ``run_conversation`` and each request answered with the next recorded reply; recorded
tool calls get their recorded results (no tool runs). The engine is observed into a store of the
replay's own: nothing reaches the operator's telemetry. One replay at a time per process (it sets
HERMES_HOME, ``call_llm`` and a variant's variables while it runs).

The full account: docs/design/internals.md, *observed_engine/compare/replay.py*.
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
from typing import Any, Dict, List, Mapping, Optional

import yaml

from .. import host
from ..api import observe
from ..pipeline import Registry
from .replay_server import ReplayServer
from .replay_tls import trust_nothing_environment
from .sessions import Conversation, tool_names, tool_results
from .variants import BUILTIN, OBSERVED, Variant, as_variant

__all__ = ["BUILTIN", "OBSERVED", "EngineUnavailable", "replay", "replay_config"]


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


class SummaryMeter:
    """Wraps the built-in's ``call_llm`` (the offline summariser or the configured one) and
    counts what each summary call costs: the tokens of the messages it sends and of the summary
    it gets back, counted as the replay LLM counts usage."""

    def __init__(self, call, count_text) -> None:
        self.call, self.count_text = call, count_text
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        for m in kwargs.get("messages") or []:
            if isinstance(m, dict):
                self.prompt_tokens += self.count_text(_text(m.get("content")))
        response = self.call(*args, **kwargs)
        try:
            self.completion_tokens += self.count_text(_text(response.choices[0].message.content))
        except Exception:  # a reply without text: no completion tokens to add
            pass
        return response


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


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
def _summariser(fn, count_text):
    """The built-in's ``call_llm`` metered (``fn`` in its place when given) while the replay runs."""
    cc = host.compressor_module()
    before = cc.call_llm
    meter = SummaryMeter(fn if fn is not None else before, count_text)
    cc.call_llm = meter
    try:
        yield meter
    finally:
        cc.call_llm = before


@contextmanager
def _environment(env: Mapping[str, str]):
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def replay_config(user_config: Dict[str, Any], engine: str | Variant, *, model: str, base_url: str,
                  context_length: int, summary: str, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """The replay home's config.yaml; a variant's settings written into it (its variables, for
    an engine that reads the environment, into ``env``)."""
    variant = as_variant(engine)
    engine = variant.engine
    cfg: Dict[str, Any] = {
        "model": {"default": model, "provider": "custom", "base_url": base_url,
                  "context_length": int(context_length)},
        "context": {"engine": engine},
        # Hermes' background skill review forks an agent after some turns; it never touches the
        # conversation, and its requests would take recorded replies: off in the replay.
        "skills": {"creation_nudge_interval": 0},
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
    # Hermes 0.22 titles a session from inside the agent's turn (earlier lines only from their
    # CLI and gateway): an auxiliary request to the main endpoint, i.e. the replay LLM, where it
    # would take a recorded reply. A title is session metadata, never part of what the engine
    # sees: off in the replay, whatever the user's auxiliary section says.
    # Hermes' file logs of a replay go into its home, deleted afterwards, and nothing reads them:
    # INFO lines cost the replay ~8 % of its CPU (each record redacted and formatted twice on the
    # log thread). Warnings and errors are still written, while the replay runs.
    cfg["logging"] = {"level": "WARNING"}
    aux = cfg.setdefault("auxiliary", {})
    if not isinstance(aux.get("title_generation"), dict):
        aux["title_generation"] = {}
    aux["title_generation"]["enabled"] = False
    variables = variant.apply(cfg)
    if env is not None:
        env.update(variables)
    return cfg


SCRATCH_ENV = "OBSERVED_REPLAY_SCRATCH"   # a sweep's worker: its own directory, removed with the pool


def scratch_dir() -> Optional[str]:
    """Where replay homes go: a memory file system when there is one (``/dev/shm``: Hermes'
    session store commits after every message, and a replay's store is thrown away), else the
    default temporary directory."""
    given = os.environ.get(SCRATCH_ENV)
    if given and os.path.isdir(given):
        return given
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return None


def _count(model: str, messages: List[Any]) -> Optional[int]:
    try:
        from ..tokens import counter_for

        return counter_for("auto", model).count_messages(messages)
    except Exception:  # no tokenizer for the model, or content it cannot encode: final_tokens is None
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


ENGINE_SETTINGS = ("threshold_tokens", "threshold_percent", "protect_first_n", "protect_last_n",
                   "summary_target_ratio", "context_length")


def _engine_settings(inner: Any) -> Dict[str, Any]:
    """What the engine made of its settings (the built-in floors and clamps some): the
    attributes it holds after the host built it."""
    out = {}
    for name in ENGINE_SETTINGS:
        value = getattr(inner, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    return out


def replay(conv: Conversation, engine: str | Variant, *, user_config: Dict[str, Any], context_length: int,
           summary: str = "offline", usage: str = "tiktoken", toolsets: Optional[Mapping[str, Any]] = None,
           server: Optional[ReplayServer] = None, tool_delay: float = 0.0) -> Dict[str, Any]:
    """Replay ``conv`` through ``engine`` (an engine name or a :class:`Variant`); the raw result
    (rows, requests, turns, errors).

    ``toolsets``: ``{"enabled": [...], "disabled": [...], "schemas": [...]}`` for the agent
    (default: what ``user_config`` enables for the CLI; ``schemas``, when given, replace the ones
    the agent builds: see ``fidelity``); ``server``: a running replay LLM to reuse (reset here);
    ``tool_delay``: the agent's pause between the tool calls of one reply (Hermes up to 0.19
    sleeps a second there by default; a replay answers with recorded results, so it waits for
    nothing: the pause only makes a sweep slower and changes no request; not passed to a host
    that no longer sleeps there, where it is deprecated).
    Raises :class:`EngineUnavailable` when the host cannot load the engine; any other
    exception of the host (an engine that raises into it) ends the replay and is reported in
    ``error`` with what was measured until then."""
    variant = as_variant(engine)
    engine = variant.engine
    if toolsets is None:
        toolsets = host.configured_toolsets(user_config, "cli")
    tmp = Path(tempfile.mkdtemp(prefix="observed-compare-", dir=scratch_dir()))
    home = tmp / "home"
    home.mkdir()
    store = tmp / "telemetry.sqlite"
    turns = conv.turns
    replies = [r for t in turns for r in t["replies"] if r["role"] == "assistant"]
    offline = OfflineSummariser(conv.summaries) if summary == "offline" else None
    model = conv.model or "replay-model"
    out: Dict[str, Any] = {"error": None, "divergences": [], "turns_done": 0, "turns": len(turns),
                           "variant": variant.label, "settings": variant.as_dict(),
                           "toolsets": list(toolsets.get("enabled") or [])}
    registry = Registry()
    summarise = offline.text if offline else stand_in_summary
    own_server = server is None
    try:
        if own_server:
            server = ReplayServer(replies, model=model, context_length=context_length, usage=usage,
                                  summarise=summarise).start()
        else:
            server.reset(replies, model=model, context_length=context_length, summarise=summarise)
        try:
            env: Dict[str, str] = trust_nothing_environment(tmp)   # no CA bundle per request
            cfg = replay_config(user_config, variant, model=model, base_url=server.base_url,
                                context_length=context_length, summary=summary, env=env)
            (home / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
            with _hermes_home(home), host.replay_logs(home), _environment(env), \
                    _summariser(offline, server.count_text) as meter, redirect_stdout(io.StringIO()):
                agent = host.ai_agent_class()(
                    base_url=server.base_url, api_key="sk-replay", provider="custom", model=model,
                    quiet_mode=True, skip_context_files=True, skip_memory=True,
                    enabled_toolsets=list(toolsets.get("enabled") or []),
                    disabled_toolsets=list(toolsets.get("disabled") or []) or None,
                    max_iterations=max([len(t["replies"]) for t in turns] + [1]) + 2,
                    save_trajectories=False, session_db=host.session_db(home / "state.db"),
                    **host.tool_delay_kwargs(tool_delay))
                inner = agent.context_compressor
                loaded = getattr(inner, "name", None)
                if engine == BUILTIN:
                    if not isinstance(inner, host.context_compressor_class()):
                        raise EngineUnavailable(f"the host did not build its built-in compressor (got {loaded!r})")
                elif loaded != engine:
                    raise EngineUnavailable(
                        f"the host could not load engine {engine!r} (not installed, not enabled, or it failed "
                        f"to load) and fell back to {loaded!r}")
                if toolsets.get("schemas") is not None:
                    host.use_tool_schemas(agent, toolsets["schemas"])
                out["engine_class"] = f"{type(inner).__module__}.{type(inner).__qualname__}"
                out["engine_settings"] = _engine_settings(inner)
                out["agent_tools"] = sorted(n for n in (getattr(agent, "valid_tool_names", None) or ()) if n)
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
                out["summary_llm_calls"] = meter.calls + server.summary_requests
                out["summary_prompt_tokens"] = meter.prompt_tokens + server.summary_prompt_tokens
                out["summary_completion_tokens"] = meter.completion_tokens + server.summary_completion_tokens
                out["compression_count"] = getattr(inner, "compression_count", None)
                out["tools_sent"] = server.tools_sent
            out["requests"] = list(server.requests)
            out["summary_requests_to_replay_llm"] = server.summary_requests
        finally:
            if own_server:
                server.stop()
        registry.flush(15)
    finally:
        registry.shutdown(5)
        out["rows"] = _store_rows(store)
        shutil.rmtree(tmp, ignore_errors=True)
    return out
