"""The hooks Hermes 0.20+ calls, through the real host of each line (issue 26, item 3).

scripts/test.sh runs this file once per ``.venv-hermes-<version>`` with ``OBSERVED_HERMES_VERSION``
(like test_hermes_version.py); without that variable it is skipped. Every test is named after the
line it runs on (``[hermes-0.22.2.post1]``), and skips, saying why, on a line whose host does not
call the hook (``HOST_CALLS``): a line that should call it and does not fails.

A real ``AIAgent`` against the fake LLM on 127.0.0.1 (tests/support/fake_llm_server.py), with the engine
Hermes selects itself (``observed-engine install --route bundled`` or ``--route entrypoint`` into a
temporary HERMES_HOME, removed by ``uninstall``), each observed run beside a bare one that must do
the same. The plugin's pipeline takes the process's global OpenTelemetry providers (SDK providers
with in-memory readers here), so spans and metrics are read exactly, next to the store rows:

* ``prune_tool_results_only``: the host's post-tool prune, after a tool call (``read_file``) with
  large tool results in the history and ``compression.proactive_prune_tokens`` set;
* ``should_compress_info``: its decision rows on that path, once per host call (the built-in's
  ``should_compress`` delegates to it), with reasons and thresholds (0.20+ hold the threshold and
  the window behind properties);
* ``on_turn_complete`` and ``select_context``: an inner engine of the bundled directory
  (``turnwatch``, a ContextCompressor that defines both), two finished turns;
* ``clone_for_agent``: 50 agents built through the general plugin system (0.22 clones its one
  engine per agent; 0.20 deep-copies it): one pipeline, threads flat, a row and a count per clone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

TARGET = os.environ.get("OBSERVED_HERMES_VERSION")
if not TARGET:
    pytest.skip("run by scripts/test.sh with a .venv-hermes-<version> python and OBSERVED_HERMES_VERSION "
                "(the main suite covers the Hermes it runs on)", allow_module_level=True)

import observed_engine  # noqa: E402
from observed_engine import is_observed  # noqa: E402
from observed_engine.contract import spans as a  # noqa: E402
from observed_engine.contract import vocabulary as v  # noqa: E402
from observed_engine.contract.catalogue import BY_KEY  # noqa: E402

TESTS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TESTS))
from support.fake_llm_server import SUMMARY_MARKER, FakeLLMServer  # noqa: E402
from support.otel import Providers  # noqa: E402
from support.store_rows import read_rows  # noqa: E402

from observed_engine.loopback_llm import content_text  # noqa: E402

MODEL = "fake-model"
CONTEXT_LENGTH = 64_000
LINE = tuple(int(p) for p in TARGET.split(".")[:2])
# The first line whose host calls each hook (read in agent/conversation_loop.py, turn_preflight.py,
# turn_finalizer.py, turn_context*.py and agent_init.py of 0.20.1.2 and 0.22.2.post1).
HOST_CALLS = {
    "prune_tool_results_only": (0, 20), "should_compress_info": (0, 20), "on_turn_complete": (0, 20),
    "select_context": (0, 20), "clone_for_agent": (0, 22),
}

pytestmark = pytest.mark.parametrize("line", [TARGET], ids=[f"hermes-{TARGET}"])


def requires(hook: str) -> None:
    first = HOST_CALLS[hook]
    if first > LINE:
        how = ("deep-copies the plugin engine per agent (copy.deepcopy) instead"
               if hook == "clone_for_agent" else "never calls it")
        pytest.skip(f"Hermes {TARGET} does not call {hook} (from {'.'.join(map(str, first))} on); it {how}")


# -- the process's providers, the fake LLM, homes ------------------------------------------------

@pytest.fixture(scope="module")
def prov():
    """SDK providers set as the global ones: the plugin's pipeline (no exporter configured) uses them."""
    from opentelemetry import metrics, trace

    p = Providers()
    trace.set_tracer_provider(p.tracer_provider)
    metrics.set_meter_provider(p.meter_provider)
    if trace.get_tracer_provider() is not p.tracer_provider:
        pytest.fail("another test set the global OpenTelemetry providers first")
    yield p


class ToolLLM(FakeLLMServer):
    """Opens each turn with a ``read_file`` call (``notes``), then answers as FakeLLMServer does."""

    notes = ""

    def respond(self, body):
        messages = body.get("messages") or []
        texts = [content_text(m.get("content")) for m in messages if isinstance(m, dict)]
        tools = {t.get("function", {}).get("name") for t in body.get("tools") or []}
        if (self.notes and "read_file" in tools and messages and messages[-1].get("role") == "user"
                and not any(SUMMARY_MARKER in t for t in texts)):
            prompt = max(1, sum(len(t) for t in texts) // 4)
            with self._lock:
                self.requests.append(body)
                self.chat_requests.append(body)
                n = len(self.chat_requests)
            call = {"id": f"call_{n}", "type": "function",
                    "function": {"name": "read_file", "arguments": json.dumps({"path": self.notes})}}
            return ({"role": "assistant", "content": "", "tool_calls": [call]},
                    {"prompt_tokens": prompt, "completion_tokens": 12, "total_tokens": prompt + 12})
        return super().respond(body)


@pytest.fixture(scope="module")
def llm():
    with ToolLLM(model=MODEL, context_length=CONTEXT_LENGTH, reply_chars=300, varied=True) as server:
        yield server


def _cli(*args, home: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, HERMES_HOME=str(home))
    proc = subprocess.run([sys.executable, "-m", "observed_engine", *args], env=env,
                          capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, f"{args}: rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _config(llm, engine: str, extra: str = "") -> str:
    return ("model:\n"
            f"  default: {MODEL}\n  provider: custom\n  base_url: {llm.base_url}\n"
            f"  context_length: {CONTEXT_LENGTH}\n"
            f"context:\n  engine: {engine}\n"
            "compression:\n  protect_first_n: 1\n  protect_last_n: 2\n"
            "  proactive_prune_tokens: 1000\n  proactive_prune_min_result_chars: 1000\n"
            "  proactive_prune_min_reclaim_tokens: 500\n" + extra)


@pytest.fixture
def fresh_host(monkeypatch):
    for var in [name for name in os.environ if name.startswith("OTEL_") or name.endswith("_API_KEY")]:
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


def _homes(tmp_path: Path, llm, bare_engine: str, observed_extra: str = "", route: str = "bundled"):
    """A bare home and an observed one (installed on ``route``); same path lengths (the system prompt
    shows the home)."""
    bare, observed = tmp_path / "home-bare", tmp_path / "home-obsd"
    for home, engine, extra in ((bare, bare_engine, ""), (observed, "compressor", observed_extra)):
        home.mkdir()
        (home / "config.yaml").write_text(_config(llm, engine, extra), encoding="utf-8")
        (home / "notes.txt").write_text("a small note\n", encoding="utf-8")
    _cli("install", "--route", route, "--hermes-home", str(observed), home=observed)
    if observed_extra:      # install keeps the other keys; the observed section gets its inner
        text = (observed / "config.yaml").read_text(encoding="utf-8")
        assert "inner: compressor" in text, text
        (observed / "config.yaml").write_text(text.replace("inner: compressor", observed_extra), encoding="utf-8")
    return bare, observed


def _agent(llm, home: Path, monkeypatch, toolsets=("file",)):
    from run_agent import AIAgent

    monkeypatch.setenv("HERMES_HOME", str(home))
    llm.notes = str(home / "notes.txt") if toolsets else ""
    with llm._lock:
        llm._turn = 0            # the answers are numbered: each run from 1
    return AIAgent(base_url=llm.base_url, api_key="sk-fake", provider="custom", model=MODEL,
                   quiet_mode=True, skip_context_files=True, skip_memory=True, enabled_toolsets=list(toolsets),
                   max_iterations=4, save_trajectories=False)


def _history_with_big_tool_results(n: int = 4, chars: int = 20_000) -> list:
    history = []
    for i in range(n):
        call = f"old_{i}"
        history += [{"role": "user", "content": f"read file {i}"},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": call, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": call, "content": f"result {i} " + "data " * (chars // 5)},
                    {"role": "assistant", "content": f"done {i}"}]
    return history


def _store(home: Path) -> Path:
    return home / "observed" / "telemetry.sqlite"


def _spans(prov, hook: str) -> list:
    return [s for s in prov.spans() if s.name == f"context_engine.{hook}"]


# -- prune_tool_results_only and should_compress_info -------------------------------------------

def test_prune_on_the_post_tool_path(line, prov, llm, tmp_path, fresh_host, monkeypatch):
    requires("prune_tool_results_only")
    bare_home, observed_home = _homes(tmp_path, llm, "compressor")
    from agent.context_compressor import ContextCompressor

    host_info_calls = []
    info = ContextCompressor.should_compress_info

    def counting(self, *args, **kwargs):     # the bare run: host calls, not should_compress's own
        if sys._getframe(1).f_code.co_name != "should_compress":
            host_info_calls.append(args)
        return info(self, *args, **kwargs)

    try:
        runs = {}
        for kind, home in (("bare", bare_home), ("observed", observed_home)):
            if kind == "bare":
                ContextCompressor.should_compress_info = counting
            try:
                agent = _agent(llm, home, monkeypatch)
                assert is_observed(agent.context_compressor) is (kind == "observed")
                assert agent.context_compressor.proactive_prune_tokens == 1000      # the plugin built it so
                result = agent.run_conversation("look at the notes",
                                                conversation_history=_history_with_big_tool_results())
            finally:
                ContextCompressor.should_compress_info = info
            runs[kind] = [(m.get("role"), content_text(m.get("content"))) for m in result["messages"]]
        assert runs["observed"] == runs["bare"]
        tool_results = [text for role, text in runs["bare"] if role == "tool"]
        assert len(tool_results) == 5 and all(len(t) < 1000 for t in tool_results[:4]), [len(t) for t in tool_results]
        prov.flush()
        rows = read_rows(_store(observed_home))
    finally:
        _cli("uninstall", "--hermes-home", str(observed_home), home=observed_home, check=False)

    prune = [r for r in rows if r["hook"] == "prune_tool_results_only"]
    assert len(prune) == 1, prune
    row = prune[0]
    assert row["outcome"] == v.PRUNED and row["pruned_results"] == 4 and row["checked_tokens"] > 1000
    assert row["tokens_before"] > 15_000 > 1_000 > row["tokens_after"] and row["messages_before"] == row["messages_after"]
    span = _spans(prov, "prune_tool_results_only")[-1]
    attrs = dict(span.attributes)
    assert attrs[a.PRUNE_OUTCOME] == v.PRUNED and attrs[a.PRUNE_COMMITTED] is True and attrs[a.PRUNE_RESULTS] == 4
    assert attrs[a.PRUNE_RECLAIMED_TOKENS] == row["tokens_before"] - row["tokens_after"]
    assert prov.value(BY_KEY["tool_result_prunes"].otel_name, engine="compressor", outcome=v.PRUNED) >= 1
    assert prov.value(BY_KEY["tool_result_prune_results"].otel_name, engine="compressor") >= 4

    # should_compress_info: once per host call, its decision with a reason and the threshold
    infos = [r for r in rows if r["hook"] == "should_compress_info" and r["event"] == v.EVENT_CALL]
    assert len(infos) == len(host_info_calls) >= 1, (len(infos), host_info_calls)
    for r in infos:
        assert r["decision"] == v.DECISION_SKIP and r["reason"] == v.DECISION_BELOW_THRESHOLD
        assert r["threshold_tokens"] and r["checked_tokens"] < r["threshold_tokens"]
    assert {r["threshold_tokens"] for r in rows if r["hook"] == "should_compress"} == {infos[0]["threshold_tokens"]}
    # the usage chart's numbers (behind properties from 0.20 on) are in the rows
    usage = [r for r in rows if r["hook"] == "update_from_response"]
    assert usage and all(r["window_tokens"] == CONTEXT_LENGTH and r["threshold_tokens"] for r in usage), usage
    assert prov.value(BY_KEY["compression_checks"].otel_name, engine="compressor", hook="should_compress_info",
                      decision=v.DECISION_SKIP) >= len(infos)


# -- on_turn_complete and select_context: an inner engine that defines them ------------------------

TURNWATCH = '''
"""A test engine: the built-in compressor that also watches finished turns and requests."""
from agent.context_compressor import ContextCompressor


class TurnWatch(ContextCompressor):
    turns = []
    requests = []

    @property
    def name(self):
        return "turnwatch"

    def select_context(self, request_messages, *, conversation_messages=None, incoming_message=None,
                       budget_tokens=0):
        TurnWatch.requests.append(len(request_messages))
        return None

    def on_turn_complete(self, messages, usage=None, **kwargs):
        TurnWatch.turns.append((len(messages), kwargs.get("turn_exit_reason"), kwargs.get("api_call_count")))


def register(ctx):
    ctx.register_context_engine(TurnWatch("{model}", config_context_length={window}, quiet_mode=True))
'''


@pytest.fixture
def turnwatch():
    from observed_engine import host

    d = host.bundled_engines_dir() / "turnwatch"
    d.mkdir()
    (d / "__init__.py").write_text(textwrap.dedent(TURNWATCH).format(model=MODEL, window=CONTEXT_LENGTH),
                                   encoding="utf-8")
    (d / "plugin.yaml").write_text("name: turnwatch\ndescription: a test engine\n", encoding="utf-8")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_turns_and_selections_on_the_host_path(line, prov, llm, tmp_path, fresh_host, monkeypatch, turnwatch):
    requires("on_turn_complete")
    requires("select_context")
    bare_home, observed_home = _homes(tmp_path, llm, "turnwatch", observed_extra="inner: turnwatch")
    try:
        seen = {}
        for kind, home in (("bare", bare_home), ("observed", observed_home)):
            agent = _agent(llm, home, monkeypatch, toolsets=())
            module = sys.modules[type(agent.context_compressor).__module__]
            module.TurnWatch.turns.clear()
            module.TurnWatch.requests.clear()
            assert type(agent.context_compressor).__name__ == "TurnWatch"
            assert is_observed(agent.context_compressor) is (kind == "observed")
            history = None
            for i in range(2):
                result = agent.run_conversation(f"Question {i + 1}", conversation_history=history)
                history = result["messages"]
            seen[kind] = (list(module.TurnWatch.turns), list(module.TurnWatch.requests),
                          [(m.get("role"), content_text(m.get("content"))) for m in history])
        assert seen["observed"] == seen["bare"]
        turns, requests, _ = seen["bare"]
        assert len(turns) == 2 and len(requests) >= 2, seen["bare"][:2]
        prov.flush()
        rows = read_rows(_store(observed_home))
    finally:
        _cli("uninstall", "--hermes-home", str(observed_home), home=observed_home, check=False)

    turn_rows = [r for r in rows if r["hook"] == "on_turn_complete"]
    assert [(r["outcome"], r["reason"]) for r in turn_rows] == [(v.TURN_COMPLETED, "text_response")] * 2
    assert [r["api_calls"] for r in turn_rows] == [t[2] for t in turns]
    assert all(r["input_tokens"] and r["messages_after"] == n for r, (n, _, _) in zip(turn_rows, turns))
    for span in _spans(prov, "on_turn_complete")[-2:]:
        attrs = dict(span.attributes)
        assert attrs[a.TURN_OUTCOME] == v.TURN_COMPLETED and attrs[a.TURN_EXIT_REASON] == "text_response"
        assert attrs[a.ENGINE_NAME] == "turnwatch" and "finish_reason" not in json.dumps(dict(attrs))
    assert prov.value(BY_KEY["turns"].otel_name, engine="turnwatch", outcome=v.TURN_COMPLETED,
                      exit_reason="text_response") >= 2

    selections = [r for r in rows if r["hook"] == "select_context" and r["event"] == v.EVENT_CALL]
    assert len(selections) == len(requests)
    assert {r["outcome"] for r in selections} == {v.UNCHANGED} and all(r["tokens_before"] for r in selections)
    assert dict(_spans(prov, "select_context")[-1].attributes)[a.SELECTION_RESULT] == v.UNCHANGED
    assert prov.value(BY_KEY["selections"].otel_name, engine="turnwatch", result=v.UNCHANGED) >= len(requests)


# -- clone_for_agent: the general plugin system's one engine, copied per agent ----------------------

def test_fifty_agents_through_the_plugin_system(line, prov, llm, tmp_path, fresh_host, monkeypatch):
    requires("clone_for_agent")
    from observed_engine.api import pipeline_of

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(_config(llm, "compressor"), encoding="utf-8")
    _cli("install", "--route", "entrypoint", "--hermes-home", str(home), home=home)
    try:
        import importlib

        importlib.invalidate_caches()
        first = _agent(llm, home, monkeypatch, toolsets=())
        prov.flush()
        threads = threading.active_count()
        engines = [first.context_compressor] + [_agent(llm, home, monkeypatch, toolsets=()).context_compressor
                                                for _ in range(49)]
        prov.flush()
        assert threading.active_count() <= threads, "a pipeline (worker, writer) per agent?"
        assert len({id(e) for e in engines}) == 50 and all(is_observed(e) for e in engines)
        assert len({id(pipeline_of(e)) for e in engines}) == 1
        rows = read_rows(_store(home), "hook = 'clone_for_agent'")
    finally:
        _cli("uninstall", "--hermes-home", str(home), home=home, check=False)
    assert [r["outcome"] for r in rows] == [v.CLONE_OBSERVED] * 50
    assert prov.value(BY_KEY["clones"].otel_name, engine="compressor", outcome=v.CLONE_OBSERVED) >= 50
    assert dict(_spans(prov, "clone_for_agent")[-1].attributes)[a.CLONE_OUTCOME] == v.CLONE_OBSERVED
