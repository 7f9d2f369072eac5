"""Issue 15 items 1-4 through a real Hermes 0.19.0 ``AIAgent`` against the fake LLM server on
127.0.0.1 (tests/support/fake_llm_server.py): every compression decision, the blocked state, the summary
model and its tokens, the prompt-cache read ratio and the rewrite after a compaction.

Three summarisers: a healthy, cache-reporting one that names its own model; one that answers
401 (the built-in aborts the compaction and pauses summaries: automatic compression is blocked);
a slow one (2 s per summary). The Hermes home has a real SessionDB (as the CLI and the gateway
do), so Hermes records the summariser's usage itself, which the worker reads read-only.
"""

from __future__ import annotations

import functools
import os
import re
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from support.entry_points import hermes_agent_home, simulate_observed_entry_point
from support.otel import Providers
from support.store_rows import read_rows

import observed_engine
from observed_engine import plugin as plugin_side

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.fake_llm_server import FakeLLMServer

MODEL = "fake-model"
SUMMARISER = "fake-summariser"
CONTEXT_LENGTH = 64_000      # threshold 85 % = 54,400 tokens
THRESHOLD = 54_400


@pytest.fixture
def hermes_env(tmp_path, monkeypatch):
    with hermes_agent_home(tmp_path, monkeypatch) as (home, _engines):
        simulate_observed_entry_point(monkeypatch.setattr)
        providers = Providers()
        monkeypatch.setattr(plugin_side, "build_engine", functools.partial(
            plugin_side.build_engine, tracer_provider=providers.tracer_provider,
            meter_provider=providers.meter_provider))
        _forget_unhealthy_providers()
        yield home, providers
        _forget_unhealthy_providers()
        observed_engine.shutdown(5)          # before its providers
        providers.shutdown()


def _forget_unhealthy_providers() -> None:
    """Hermes keeps, per process, the auxiliary providers that failed (a 401 marks one unhealthy)
    and cached clients: one test's failing summariser must not be the next test's."""
    import agent.auxiliary_client as aux

    aux._reset_aux_unhealthy_cache()
    with aux._client_cache_lock:
        aux._client_cache.clear()


def _config(home: Path, llm: FakeLLMServer) -> None:
    (home / "config.yaml").write_text(
        "model:\n"
        f"  default: {MODEL}\n  provider: custom\n  base_url: {llm.base_url}\n  context_length: {CONTEXT_LENGTH}\n"
        "context:\n  engine: observed\n"
        "compression:\n  protect_first_n: 1\n  protect_last_n: 2\n"
        "plugins:\n  enabled:\n    - observed\n"
        "observed:\n  inner: compressor\n",
        encoding="utf-8",
    )


def _agent(llm: FakeLLMServer):
    from hermes_state import SessionDB
    from run_agent import AIAgent

    return AIAgent(base_url=llm.base_url, api_key="sk-fake", provider="custom", model=MODEL,
                   quiet_mode=True, skip_context_files=True, skip_memory=True, enabled_toolsets=[],
                   max_iterations=4, save_trajectories=False,
                   session_db=SessionDB(db_path=Path(os.environ["HERMES_HOME"]) / "state.db"))


def _chat(agent, turns: int = 8):
    history = None
    prompts = []
    for i in range(turns):
        result = agent.run_conversation(f"Question {i + 1}: go on. " + "detail " * 300, conversation_history=history)
        history = result.get("messages")
        prompts.append(vars(agent.context_compressor).get("last_prompt_tokens"))
    return prompts


def _rows(home: Path):
    return read_rows(home / "observed" / "telemetry.sqlite", order="ts, id")


def _blocked(providers: Providers):
    return {(a["engine"], a["reason"]): p.value for a, p in providers.points("hermes.context.compression.blocked")}


def test_decisions_summary_model_and_cache_rewrite_healthy_cache_reporting(hermes_env):
    home, providers = hermes_env
    with FakeLLMServer(model=MODEL, context_length=CONTEXT_LENGTH, cache=True, summary_model=SUMMARISER) as llm:
        _config(home, llm)
        agent = _agent(llm)
        _chat(agent)
        assert agent.context_compressor.compression_count >= 1
    providers.flush()
    rows = _rows(home)

    # 1. every decision: tokens asked about, the threshold then, the answer and why
    decisions = [r for r in rows if r["hook"] in ("should_compress", "should_defer_preflight_to_real_usage")
                 and r["event"] == "call"]
    assert decisions and all(r["decision"] is not None and r["checked_tokens"] is not None
                             and r["threshold_tokens"] == THRESHOLD for r in decisions)
    should = [r for r in decisions if r["hook"] == "should_compress"]
    assert {r["decision"] for r in should} == {"compress", "skip"}
    assert {r["decision"] for r in decisions if r["hook"] != "should_compress"} <= {"defer", "estimate"}
    fired = next(r for r in should if r["decision"] == "compress")
    assert fired["checked_tokens"] >= THRESHOLD and fired["reason"] == "at_or_above_threshold"
    assert all(r["reason"] == "below_threshold" and r["checked_tokens"] < THRESHOLD
               for r in should if r["decision"] == "skip")
    checks = providers.by_label("hermes.context.compression.checks", "decision")
    assert checks["compress"] >= 1 and checks["skip"] >= 1 and checks["estimate"] >= 1
    assert sum(checks.values()) == len(decisions)
    spans = [s for s in providers.exporter.get_finished_spans() if s.name == "context_engine.should_compress"]
    span = next(s for s in spans if s.attributes.get("hermes.context.decision") == "compress")
    assert span.attributes["hermes.context.checked_tokens"] == fired["checked_tokens"]
    assert "hermes.context.checked_tokens.source" not in span.attributes      # the argument: the usual case
    assert span.attributes["hermes.context.threshold_tokens"] == THRESHOLD

    # 3. the summariser: model and provider as Hermes recorded them, its tokens
    compress = next(r for r in rows if r["hook"] == "compress" and r["outcome"] == "compressed")
    assert compress["summary_model"] == SUMMARISER          # response.model, not the main model
    assert compress["summary_provider"]
    assert compress["summary_input_tokens"] > 1000 and compress["summary_output_tokens"] > 0
    with sqlite3.connect(home / "state.db") as db:
        recorded = db.execute("SELECT SUM(input_tokens), SUM(output_tokens) FROM session_model_usage "
                              "WHERE task = 'compression'").fetchone()
    assert (compress["summary_input_tokens"], compress["summary_output_tokens"]) == tuple(recorded)
    tokens = providers.by_label("hermes.context.compression.summary_tokens", "token_type")
    assert tokens["prompt"] == recorded[0] and tokens["completion"] == recorded[1]
    cspan = next(s for s in providers.exporter.get_finished_spans() if s.name == "context_engine.compress"
                 and s.attributes.get("hermes.context.compress.outcome") == "compressed")
    assert cspan.attributes["hermes.context.summary.model"] == SUMMARISER
    assert cspan.attributes["hermes.context.summary.input_tokens"] == recorded[0]

    # 4. cache: the read ratio per response, the rewrite after the compaction
    usage = [r for r in rows if r["hook"] == "update_from_response"]
    assert usage[1]["cache_read_tokens"] > 0
    uspans = [s for s in providers.exporter.get_finished_spans() if s.name == "context_engine.update_from_response"]
    ratios = [s.attributes.get("hermes.context.cache_read_ratio") for s in uspans]
    assert ratios[0] == 0 and all(0 < r <= 1 for r in ratios[1:])
    after = [r for r in usage if r["ts"] > compress["ts"]]
    rewrite = after[0]
    assert rewrite["cache_rewrite_tokens"] == rewrite["input_tokens"] - rewrite["cache_read_tokens"] > 5000
    assert all(r["cache_rewrite_tokens"] is None for r in after[1:] + [r for r in usage if r["ts"] < compress["ts"]])
    assert providers.total("hermes.context.compaction.cache_rewrite_tokens") == rewrite["cache_rewrite_tokens"]
    # 2. nothing blocked in a healthy run
    assert set(_blocked(providers).values()) == {0}
    assert not [r for r in rows if r["event"] == "compression_blocked"]


def test_failing_summariser_blocks_compression_and_says_why(hermes_env):
    """A 401 from the summariser: the built-in aborts, pauses summaries; the prompt outgrows the
    window while the host no longer asks should_compress. The gauge, the store rows and the
    decisions say why; /new (reset_session_state) lifts the block and the row says so."""
    home, providers = hermes_env
    with FakeLLMServer(model=MODEL, context_length=CONTEXT_LENGTH, summary_status=401) as llm:
        _config(home, llm)
        agent = _agent(llm)
        prompts = _chat(agent, turns=9)
        assert llm.summary_requests and agent.context_compressor.compression_count == 0
        assert max(prompts) > CONTEXT_LENGTH          # grown past the window
        providers.flush()
        assert _blocked(providers)[("compressor", "summary_cooldown")] == 1
        assert {v for k, v in _blocked(providers).items() if k[1] != "summary_cooldown"} == {0}
        rows = _rows(home)
        started = [r for r in rows if r["event"] == "compression_blocked"]
        assert [(r["outcome"], r["reason"]) for r in started] == [("started", "summary_cooldown")]
        failure = next(r for r in rows if r["event"] == "summary_failure")
        assert (failure["outcome"], failure["reason"]) == ("aborted", "auth")
        assert abs(started[0]["ts"] - failure["ts"]) < 1
        # every decision over the threshold after the failure names the block
        later = [r for r in rows if r["decision"] and r["ts"] > failure["ts"] and r["checked_tokens"] >= THRESHOLD]
        assert later and all(r["reason"] == "summary_cooldown" and r["decision"] in ("skip", "estimate")
                             for r in later)
        compress = next(r for r in rows if r["hook"] == "compress" and r["event"] == "call")
        assert compress["summary_model"] == MODEL and compress["summary_input_tokens"] is None

        t_reset = time.time()
        agent.session_id = "after-new"                # what /new does: a new session id, then the reset
        agent.reset_session_state()                   # (the same id would reload the durable cooldown)
        agent.run_conversation("Question after /new", conversation_history=None)
    providers.flush()
    assert set(_blocked(providers).values()) == {0}
    ended = [r for r in _rows(home) if r["event"] == "compression_blocked" and r["outcome"] == "ended"]
    assert len(ended) == 1 and ended[0]["reason"] == "summary_cooldown"
    assert ended[0]["ts"] >= t_reset and ended[0]["duration_s"] > 0


def test_slow_summariser_still_shows_its_model_tokens_and_latency(hermes_env):
    home, providers = hermes_env
    with FakeLLMServer(model=MODEL, context_length=CONTEXT_LENGTH, summary_delay=2.0) as llm:
        _config(home, llm)
        agent = _agent(llm)
        _chat(agent)
    providers.flush()
    compress = next(r for r in _rows(home) if r["hook"] == "compress" and r["outcome"] == "compressed")
    assert compress["duration_s"] >= 2.0
    assert compress["summary_model"] == MODEL and compress["summary_input_tokens"] > 1000
    assert providers.total("hermes.context.compression.summary_tokens", token_type="completion") > 0


def test_a_cooldown_that_runs_out_ends_at_the_engines_deadline(prov, observe_engine, store_path):
    """The end row of a summary cooldown carries the engine's own deadline as its time, even when
    the worker only notices it at the next call (the state is set as compress() sets it)."""
    from support.builtin import compressor

    engine = observe_engine(compressor())
    engine.update_model(model="gpt-4o", context_length=64_000)
    engine.on_session_start("sess-cd", model="gpt-4o")
    vars(engine)["_summary_failure_cooldown_until"] = time.monotonic() + 0.3
    deadline = time.time() + 0.3
    engine.update_from_response({"prompt_tokens": 60_000, "completion_tokens": 1, "total_tokens": 60_001})
    assert engine.should_compress(60_000) is False        # the built-in: blocked
    observed_engine.flush(10)                             # (the worker looks while it is)
    time.sleep(0.6)
    assert engine.should_compress(60_000) is True
    observed_engine.flush(10)
    with sqlite3.connect(store_path) as db:
        db.row_factory = sqlite3.Row
        blocked = [dict(r) for r in db.execute("SELECT * FROM events WHERE event='compression_blocked' ORDER BY ts")]
        decisions = [dict(r) for r in db.execute("SELECT * FROM events WHERE hook='should_compress' ORDER BY ts")]
    assert [(r["outcome"], r["reason"]) for r in blocked] == [("started", "summary_cooldown"), ("ended", "summary_cooldown")]
    assert abs(blocked[1]["ts"] - deadline) < 0.05 and decisions[1]["ts"] - blocked[1]["ts"] > 0.2
    assert [(r["decision"], r["reason"]) for r in decisions] == [("skip", "summary_cooldown"),
                                                                 ("compress", "at_or_above_threshold")]


def test_should_compress_without_tokens_reports_the_state_the_engine_used(prov, observe_engine, store_path):
    from support.builtin import compressor

    engine = observe_engine(compressor())
    engine.update_model(model="gpt-4o", context_length=64_000)
    engine.update_from_response({"prompt_tokens": 57_600, "completion_tokens": 1, "total_tokens": 57_601})
    vars(engine)["_ineffective_compression_count"] = 2          # as update_from_response sets it
    assert engine.should_compress() is False
    observed_engine.flush(10)
    vars(engine)["_ineffective_compression_count"] = 0
    assert engine.should_compress() is True
    observed_engine.flush(10)
    with sqlite3.connect(store_path) as db:
        rows = db.execute("SELECT checked_tokens, threshold_tokens, decision, reason FROM events "
                          "WHERE hook='should_compress' ORDER BY ts").fetchall()
    threshold = engine.threshold_tokens
    assert rows == [(57_600, threshold, "skip", "ineffective_compression"),
                    (57_600, threshold, "compress", "at_or_above_threshold")]
    spans = [s for s in prov.exporter.get_finished_spans() if s.name == "context_engine.should_compress"]
    assert spans[0].attributes["hermes.context.checked_tokens.source"] == "state"
    assert spans[0].attributes["hermes.context.compression.blocked_reason"] == "ineffective_compression"


def test_observing_changes_nothing_the_host_or_the_summariser_sees(hermes_env, tmp_path, monkeypatch):
    """The same 8 turns with the bare built-in (context.engine: compressor) and with the observed one
    reading Hermes' usage records: the same requests reach the provider (the summariser's included),
    and Hermes records the same summary usage."""
    home, providers = hermes_env
    runs = {}
    for engine in ("compressor", "observed"):
        run_home = tmp_path / f"home-{engine}"
        run_home.mkdir()
        monkeypatch.setenv("HERMES_HOME", str(run_home))
        _forget_unhealthy_providers()
        with FakeLLMServer(model=MODEL, context_length=CONTEXT_LENGTH, cache=True, summary_model=SUMMARISER) as llm:
            _config(run_home, llm)
            if engine == "compressor":
                text = (run_home / "config.yaml").read_text().replace("engine: observed", "engine: compressor")
                (run_home / "config.yaml").write_text(text)
            agent = _agent(llm)
            assert observed_engine.is_observed(agent.context_compressor) == (engine == "observed")
            _chat(agent)
            requests = [[(m.get("role"), m.get("content")) for m in body.get("messages", [])] for body in llm.requests]
        with sqlite3.connect(run_home / "state.db") as db:
            usage = db.execute("SELECT model, input_tokens, output_tokens, api_call_count FROM session_model_usage "
                               "WHERE task = 'compression'").fetchall()
        runs[engine] = (requests, usage, agent.context_compressor.compression_count)
    providers.flush()
    assert runs["compressor"][2] == runs["observed"][2] >= 1
    assert runs["compressor"][1] == runs["observed"][1] and runs["observed"][1]
    bare, observed = runs["compressor"][0], runs["observed"][0]
    assert len(bare) == len(observed)
    # the session id (a timestamp) and the summariser prompt's own timestamps aside, the requests are equal
    strip = re.compile(r"\d{8}_\d{6}_[0-9a-f]{6}|\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d)?")
    assert [[(r, strip.sub("#", str(c))) for r, c in req] for req in bare] == \
        [[(r, strip.sub("#", str(c).replace("home-observed", "home-compressor"))) for r, c in req] for req in observed]


def test_engine_reasons_info_results_preflight_and_an_engine_reported_block(prov, observe_engine, store_path):
    """Other engines: should_compress_info's reason (dict or pair), should_compress_preflight's messages
    counted, an engine's own compression_blocked_reason (known and unknown), odd results left alone."""
    from support.engines import ScriptedEngine

    class InfoEngine(ScriptedEngine):
        answers: list = []

        def should_compress_info(self, prompt_tokens=None):
            return self.answers.pop(0)

        def should_compress_preflight(self, messages):
            return False

    engine = observe_engine(InfoEngine("info", context_length=100_000, threshold_tokens=50_000))
    InfoEngine.answers = [{"should_compress": False, "reason": "waiting_for_tool_results"},
                          (True, "over_budget"), object(), False]
    assert engine.should_compress_info(60_000)["reason"] == "waiting_for_tool_results"
    assert engine.should_compress_info(60_000) == (True, "over_budget")
    engine.should_compress_info(60_000)                           # not a readable answer: no decision
    vars(engine)["compression_blocked_reason"] = "attempts_exhausted"
    assert engine.should_compress_info(60_000) is False
    observed_engine.flush(10)
    vars(engine)["compression_blocked_reason"] = "quota_for_today"
    assert engine.should_compress_preflight([{"role": "user", "content": "word " * 2000}]) is False
    observed_engine.flush(10)
    vars(engine)["compression_blocked_reason"] = None
    engine.should_compress(1_000)
    observed_engine.flush(10)
    with sqlite3.connect(store_path) as db:
        decisions = db.execute("SELECT hook, decision, reason, checked_tokens, threshold_tokens FROM events "
                               "WHERE event='call' AND hook LIKE 'should_%' ORDER BY ts").fetchall()
        blocks = db.execute("SELECT outcome, reason FROM events WHERE event='compression_blocked' ORDER BY ts, id").fetchall()
    assert decisions[0] == ("should_compress_info", "skip", "waiting_for_tool_results", 60_000, 50_000)
    assert decisions[1] == ("should_compress_info", "compress", "over_budget", 60_000, 50_000)
    assert decisions[2][1:3] == (None, None)
    assert decisions[3] == ("should_compress_info", "skip", "attempts_exhausted", 60_000, 50_000)
    preflight = decisions[4]
    assert preflight[0] == "should_compress_preflight" and preflight[1] == "skip" and 1_000 < preflight[3] < 50_000
    assert preflight[2] == "below_threshold"
    assert decisions[5] == ("should_compress", "skip", "below_threshold", 1_000, 50_000)
    assert blocks == [("started", "attempts_exhausted"), ("ended", "attempts_exhausted"), ("started", "other"),
                      ("ended", "other")]
    checks = prov.by_label("hermes.context.compression.checks", "decision")
    assert checks == {"skip": 4, "compress": 1}
