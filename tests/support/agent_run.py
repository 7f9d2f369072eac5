"""A real Hermes agent run against the fake LLM on 127.0.0.1: a private Hermes home whose
config.yaml selects the observed engine, an ``AIAgent`` and ``TURNS`` turns whose long replies
push the conversation past the compression threshold (tests/e2e/test_agent_run.py). Fixtures:
``llm`` (the server) and ``hermes_env`` (the home and its context-engine plugin directory)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.entry_points import hermes_agent_home
from support.fake_llm_server import FakeLLMServer
from support.paths import REPO

PLUGIN_SRC = REPO / "plugins" / "context_engine" / "observed"
MODEL = "fake-model"
CONTEXT_LENGTH = 64_000      # Hermes' minimum; threshold 85% = 54,400 tokens
TURNS = 8


@pytest.fixture
def llm():
    with FakeLLMServer(model=MODEL, context_length=CONTEXT_LENGTH, reply_chars=40_000) as server:
        yield server


@pytest.fixture
def hermes_env(tmp_path, monkeypatch):
    with hermes_agent_home(tmp_path, monkeypatch) as env:
        yield env


def write_config(home: Path, llm: FakeLLMServer, *, route: str, prometheus_port: int | None) -> None:
    prom = (f"  prometheus:\n    enabled: true\n    host: 127.0.0.1\n    port: {prometheus_port}\n"
            if prometheus_port else "")
    plugins = "plugins:\n  enabled:\n    - observed\n" if route == "entrypoint" else ""
    (home / "config.yaml").write_text(
        "# test Hermes home\n"
        "model:\n"
        f"  default: {MODEL}\n"
        "  provider: custom\n"
        f"  base_url: {llm.base_url}\n"
        f"  context_length: {CONTEXT_LENGTH}\n"
        "context:\n"
        "  engine: observed\n"
        "compression:\n"
        "  protect_first_n: 1\n"
        "  protect_last_n: 2\n"
        f"{plugins}"
        "observed:\n"
        "  inner: compressor\n"
        f"{prom}",
        encoding="utf-8",
    )


def make_agent(llm: FakeLLMServer):
    from run_agent import AIAgent

    return AIAgent(
        base_url=llm.base_url, api_key="sk-fake", provider="custom", model=MODEL,
        quiet_mode=True, skip_context_files=True, skip_memory=True, enabled_toolsets=[],
        max_iterations=4, save_trajectories=False,
    )


def chat(agent, llm: FakeLLMServer):
    history = None
    turns = []
    for i in range(TURNS):
        result = agent.run_conversation(f"Question {i + 1}: go on. " + "detail " * 300,
                                        conversation_history=history)
        history = result.get("messages")
        turns.append({
            "final": result.get("final_response") or "",
            "messages": len(history or []),
            "compressions": agent.context_compressor.compression_count,
            "summaries": len(llm.summary_requests),
        })
    return turns
