"""A real Hermes 0.19.0 agent run with ``context.engine: observed``.

A temporary HERMES_HOME whose config.yaml selects the observed engine, a
``run_agent.AIAgent`` talking to a local OpenAI-compatible server
(tests/support/fake_llm_server.py), several turns whose long replies push the
conversation past the compression threshold. The host must select the observed
engine (by the bundled-directory route or the entry-point route), compress
through it (the summariser's request reaches the fake server), carry on after
compression, and the telemetry (store rows, Prometheus metrics, spans) must
describe it with the inner engine's name, "compressor".
"""

from __future__ import annotations

import functools
import shutil
import time
from pathlib import Path

from support import agent_run
from support.agent_run import CONTEXT_LENGTH, PLUGIN_SRC, TURNS, chat, make_agent, write_config
from support.entry_points import simulate_observed_entry_point
from support.otel import Providers
from support.servers import free_port, scrape
from support.store_rows import read_rows

import observed_engine
from observed_engine import is_observed
from observed_engine import (
    plugin as plugin_side,  # register() (re-exported by hermes_plugin) looks build_engine up here
)

hermes_env, llm = agent_run.hermes_env, agent_run.llm      # fixtures: a private Hermes home, the fake LLM server


def _store_rows(home: Path):
    path = home / "observed" / "telemetry.sqlite"
    assert path.exists(), f"no store at {path}"
    return read_rows(path, order="ts")


def _assert_run(agent, llm, turns, home):
    from agent.context_compressor import ContextCompressor
    from agent.context_engine import ContextEngine

    engine = agent.context_compressor
    # the host selected the observed engine, around the real built-in compressor
    assert engine.name == "observed"
    assert is_observed(engine)
    assert isinstance(engine, ContextCompressor) and isinstance(engine, ContextEngine)
    assert engine.context_length == CONTEXT_LENGTH      # set by the host's update_model()
    # compression went through it, and the summariser's request reached the server
    assert engine.compression_count >= 1, turns
    assert llm.summary_requests, turns
    first = next(i for i, t in enumerate(turns) if t["compressions"])
    assert turns[first]["messages"] < turns[first - 1]["messages"] + 2, turns
    # the conversation continued after compression
    assert first < TURNS - 1, turns
    assert all(t["final"].startswith("Answer ") for t in turns), [t["final"][:30] for t in turns]
    assert len(llm.chat_requests) == TURNS

    assert observed_engine.flush(15)
    rows = _store_rows(home)
    compress = [r for r in rows if r["hook"] == "compress"]
    assert any(r["outcome"] == "compressed" for r in compress), compress
    assert {r["engine"] for r in rows} == {"compressor"}   # telemetry reports the inner's name
    done = next(r for r in compress if r["outcome"] == "compressed")
    assert done["messages_after"] < done["messages_before"]
    usage = [r for r in rows if r["hook"] == "update_from_response"]
    assert len(usage) >= TURNS and max(r["input_tokens"] or 0 for r in usage) > 40_000
    return rows


def test_agent_run_bundled_route(hermes_env, llm):
    """Operator path: settings-built exporters (store + Prometheus), no providers injected."""
    home, engines = hermes_env
    shutil.copytree(PLUGIN_SRC, engines / "observed")        # what `install --route bundled` does
    port = free_port()
    write_config(home, llm, route="bundled", prometheus_port=port)

    started = time.monotonic()
    agent = make_agent(llm)
    turns = chat(agent, llm)
    _assert_run(agent, llm, turns, home)

    metrics = scrape(port)
    compressed = [line for line in metrics.splitlines()
                  if line.startswith("hermes_context_compressions_total{")
                  and 'engine="compressor"' in line and 'outcome="compressed"' in line]
    assert compressed and float(compressed[0].rsplit(" ", 1)[1]) >= 1, metrics[:2000]
    assert time.monotonic() - started < 60


def test_agent_run_entry_point_route(hermes_env, llm, monkeypatch):
    """General plugin route (plugins.enabled: [observed]); spans and metrics read
    from SDK providers handed to observe() through the plugin's build_engine."""
    home, _engines = hermes_env
    simulate_observed_entry_point(monkeypatch.setattr)
    write_config(home, llm, route="entrypoint", prometheus_port=None)
    providers = Providers()
    monkeypatch.setattr(plugin_side, "build_engine", functools.partial(
        plugin_side.build_engine, tracer_provider=providers.tracer_provider, meter_provider=providers.meter_provider))

    agent = make_agent(llm)
    import hermes_cli.plugins as hp
    singleton = hp.get_plugin_context_engine()
    assert singleton is not None and singleton.name == "observed"
    assert agent.context_compressor is not singleton          # the host's per-agent deep copy
    turns = chat(agent, llm)
    _assert_run(agent, llm, turns, home)

    compress_spans = [s for s in providers.exporter.get_finished_spans() if s.name == "context_engine.compress"]
    assert compress_spans
    outcomes = {s.attributes.get("hermes.context.compress.outcome") for s in compress_spans}
    assert "compressed" in outcomes
    assert {s.attributes.get("hermes.context_engine.name") for s in compress_spans} == {"compressor"}

    points = [(a, p.value) for a, p in providers.points("hermes.context.compressions")]
    assert any(a.get("engine") == "compressor" and a.get("outcome") == "compressed" and v >= 1
               for a, v in points), points
