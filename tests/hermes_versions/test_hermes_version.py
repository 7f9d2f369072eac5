"""The fast check of one older Hermes release (issue 14, item 2).

scripts/test.sh runs this file once per ``.venv-hermes-<version>`` (scripts/setup_hermes_versions.sh:
hermes-agent of that version, this checkout, pytest) with ``OBSERVED_HERMES_VERSION=<version>``, in
parallel with the main suite; without that variable (the main 0.19.0 run) it is skipped, the main
suite covers 0.19.0 in full. On that Hermes, with its own code:

* observed_engine and the plugin module import, and ``python -m observed_engine --help`` runs;
* ``observed-engine install --route bundled`` into a temporary HERMES_HOME writes the plugin into
  that Hermes' ``plugins/context_engine/`` (removed again by ``uninstall`` at the end) and
  ``doctor`` passes;
* Hermes' own ``load_context_engine("observed")`` returns an observed engine around that
  version's built-in ``ContextCompressor``;
* a differential through that version's own ``compress_context`` (``AIAgent._compress_context``):
  a bare and an observed agent compress the same transcript to the same messages;
* a real ``AIAgent`` run against the fake LLM server (tests/fake_llm_server.py on 127.0.0.1):
  the same turns, compressions and summary requests as bare, and the telemetry recorded them.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

TARGET = os.environ.get("OBSERVED_HERMES_VERSION")
if not TARGET:
    pytest.skip("run by scripts/test.sh with a .venv-hermes-<version> python and OBSERVED_HERMES_VERSION "
                "(the main suite covers the Hermes it runs on)", allow_module_level=True)

import observed_engine  # noqa: E402
from observed_engine import is_observed  # noqa: E402

TESTS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TESTS))
from fake_llm_server import FakeLLMServer  # noqa: E402
from support.engines import agent_transcript  # noqa: E402

MODEL = "fake-model"
CONTEXT_LENGTH = 64_000
TURNS = 7


def _cli(*args, home: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, HERMES_HOME=str(home))
    proc = subprocess.run([sys.executable, "-m", "observed_engine", *args], env=env,
                          capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, f"{args}: rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _config(llm: FakeLLMServer, engine: str) -> str:
    return ("model:\n"
            f"  default: {MODEL}\n  provider: custom\n  base_url: {llm.base_url}\n"
            f"  context_length: {CONTEXT_LENGTH}\n"
            f"context:\n  engine: {engine}\n"
            "compression:\n  protect_first_n: 1\n  protect_last_n: 2\n")


@pytest.fixture(scope="module")
def llm():
    with FakeLLMServer(model=MODEL, context_length=CONTEXT_LENGTH, reply_chars=40_000) as server:
        yield server


@pytest.fixture(scope="module")
def homes(tmp_path_factory, llm):
    """A bare home (context.engine: compressor) and one `observed-engine install --route bundled` set up."""
    root = tmp_path_factory.mktemp("hermes")
    bare, observed = root / "home-bare", root / "home-obsd"   # same length: the system prompt shows it
    bare.mkdir()
    observed.mkdir()
    (bare / "config.yaml").write_text(_config(llm, "compressor"), encoding="utf-8")
    (observed / "config.yaml").write_text(_config(llm, "compressor"), encoding="utf-8")
    installed = _cli("install", "--route", "bundled", "--hermes-home", str(observed), home=observed)
    try:
        yield {"bare": bare, "observed": observed, "install": installed}
    finally:
        _cli("uninstall", "--hermes-home", str(observed), home=observed, check=False)


@pytest.fixture
def fresh_host(monkeypatch):
    """A fresh plugin manager and no cached plugin modules for each test, no stray OTEL/API keys."""
    for var in [v for v in os.environ if v.startswith("OTEL_") or v.endswith("_API_KEY")]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("HERMES_SAFE_MODE", raising=False)
    import hermes_cli.plugins as hplugins

    monkeypatch.setattr(hplugins, "_plugin_manager", None)
    before = {n for n in sys.modules if n.startswith("plugins.context_engine.")}
    observed_engine.shutdown(5)
    yield
    observed_engine.shutdown(5)
    for name in [n for n in sys.modules if n.startswith("plugins.context_engine.")]:
        if name not in before:
            sys.modules.pop(name, None)


def _agent(llm: FakeLLMServer, home: Path, monkeypatch, quiet: bool = True):
    from run_agent import AIAgent

    monkeypatch.setenv("HERMES_HOME", str(home))
    return AIAgent(base_url=llm.base_url, api_key="sk-fake", provider="custom", model=MODEL,
                   quiet_mode=quiet, skip_context_files=True, skip_memory=True, enabled_toolsets=[],
                   max_iterations=4, save_trajectories=False)


# ------------------------------------------------------------------------------------------------

def test_the_targeted_hermes_is_the_one_installed():
    assert md.version("hermes-agent") == TARGET
    from observed_engine import host

    assert host.hermes_version() == TARGET
    assert host.context_engine_abc() is not None and host.bundled_engines_dir() is not None
    import observed_engine.hermes_plugin  # noqa: F401  (what the entry point names)

    help_text = _cli("--help", home=Path.cwd()).stdout
    assert "install" in help_text and "doctor" in help_text


def test_install_bundled_then_doctor_passes(homes, fresh_host):
    from observed_engine import host

    plugin_dir = host.bundled_engines_dir() / "observed"
    assert (plugin_dir / "__init__.py").exists(), homes["install"].stdout
    doc = _cli("doctor", "--hermes-home", str(homes["observed"]), home=homes["observed"], check=False)
    assert doc.returncode == 0, doc.stdout + doc.stderr
    assert f"hermes version: {TARGET} is in the tested range" in doc.stdout
    assert "inner engine: compressor via builtin" in doc.stdout


def test_hermes_own_loader_returns_an_observed_engine(homes, fresh_host, monkeypatch):
    from agent.context_compressor import ContextCompressor
    from plugins.context_engine import load_context_engine

    monkeypatch.setenv("HERMES_HOME", str(homes["observed"]))
    engine = load_context_engine("observed")
    assert engine is not None, "Hermes' loader found no engine instance"
    assert is_observed(engine) and engine.name == "observed"
    assert isinstance(engine, ContextCompressor)


def test_compress_context_differential(homes, llm, fresh_host, monkeypatch):
    bare = _agent(llm, homes["bare"], monkeypatch)
    observed = _agent(llm, homes["observed"], monkeypatch)
    assert not is_observed(bare.context_compressor) and is_observed(observed.context_compressor)
    assert observed.context_compressor.context_length == bare.context_compressor.context_length == CONTEXT_LENGTH

    messages = agent_transcript(80, 1500, seed="v")
    results = []
    for agent in (bare, observed):
        summaries = len(llm.summary_requests)
        compressed, _prompt = agent._compress_context(list(messages), "You are a test agent.",
                                                      approx_tokens=60_000, task_id="t-1")
        results.append((compressed, agent.context_compressor.compression_count,
                        len(llm.summary_requests) - summaries))
    assert results[0][1] == 1 and results[0][2] == 1 and len(results[0][0]) < len(messages), results[0][1:]
    assert results[1] == results[0]


def test_agent_run_same_turns_as_bare(homes, llm, fresh_host, monkeypatch):
    runs = {}
    for kind in ("bare", "observed"):
        agent = _agent(llm, homes[kind], monkeypatch)
        start_chats, start_summaries = len(llm.chat_requests), len(llm.summary_requests)
        with llm._lock:
            llm._turn = 0            # the answers are numbered: each run from 1
        history, turns = None, []
        for i in range(TURNS):
            result = agent.run_conversation(f"Question {i + 1}: go on. " + "detail " * 300,
                                            conversation_history=history)
            history = result.get("messages")
            turns.append((result.get("final_response"), len(history or []),
                          agent.context_compressor.compression_count))
        runs[kind] = (turns, len(llm.chat_requests) - start_chats, len(llm.summary_requests) - start_summaries)
        if kind == "observed":
            assert is_observed(agent.context_compressor)
            assert observed_engine.flush(15)
    assert runs["bare"][0][-1][2] >= 1, runs["bare"]          # it compressed
    assert runs["observed"] == runs["bare"]

    store = homes["observed"] / "observed" / "telemetry.sqlite"
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        outcomes = [r[0] for r in conn.execute("SELECT outcome FROM events WHERE hook = 'compress'")]
    finally:
        conn.close()
    assert "compressed" in outcomes, outcomes
