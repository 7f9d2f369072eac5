"""The dashboard's panels of the hooks Hermes 0.20+ calls (issue 26, item 3), under Streamlit AppTest.

The store is written by a real observed engine (the worker's own rows): tool-result prunes of every
outcome, finished turns with exit reasons (one carrying text that must not show), per-agent copies,
one of them raising. Each panel's numbers are counted from the store with plain sqlite3; a store
without these rows shows none of the panels; the Prometheus source's frames have the same columns.
"""

from __future__ import annotations

import sqlite3

import pytest
from observed_engine.dashboard.format import fmt_int, fmt_tokens
from observed_engine.dashboard.sources import CLONE_COLUMNS, PRUNE_COLUMNS, TURN_COLUMNS
from support.dashboard_app import app, frame_with, metrics, run_ok, show, texts
from support.engines import CANARY, EngineError, NewHooksEngine, agent_transcript, prune_big_results

from observed_engine.contract import vocabulary as v

TURNS = [
    dict(interrupted=False, failed=False, turn_exit_reason="text_response(finish_reason=stop)", api_call_count=3),
    dict(interrupted=False, failed=False, turn_exit_reason="text_response(finish_reason=stop)", api_call_count=1),
    dict(interrupted=True, failed=False, turn_exit_reason="interrupted_by_user", api_call_count=2),
    dict(interrupted=False, failed=True, turn_exit_reason=f"local_processing_error({CANARY})", api_call_count=4),
]


@pytest.fixture
def hooks_store(prov, observe_engine, store_path):
    engine = observe_engine(NewHooksEngine("newer", {"prune_tool_results_only": prune_big_results}))
    for i in range(3):
        engine.prune_tool_results_only(agent_transcript(30, 3000, seed=f"p{i}"), current_tokens=50_000)
    engine.behaviour["prune_tool_results_only"] = lambda messages, current_tokens=None: (messages, 0)
    engine.prune_tool_results_only(agent_transcript(10, 100), current_tokens=2_000)
    engine.behaviour["prune_tool_results_only"] = lambda messages, current_tokens=None: None
    engine.prune_tool_results_only(agent_transcript(10, 100))
    for meta in TURNS:
        engine.on_turn_complete(agent_transcript(8, 200), usage=None, **meta)
    for _ in range(5):
        engine.clone_for_agent()

    def raising():
        raise EngineError("no copy")

    engine.behaviour["clone_for_agent"] = raising
    with pytest.raises(EngineError):
        engine.clone_for_agent()
    engine.update_from_response({"prompt_tokens": 1000})     # a hook-latency row of its own
    prov.flush()
    return store_path


def _counted(path, sql):
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(sql).fetchall()


def test_prune_panel_in_the_compressions_tab(monkeypatch, hooks_store):
    at = show(run_ok(app(monkeypatch, store=hooks_store)), "Compressions")
    (committed, calls, results, reclaimed), = _counted(hooks_store, (
        "SELECT SUM(outcome = 'pruned'), COUNT(*), SUM(CASE WHEN outcome = 'pruned' THEN pruned_results END), "
        "SUM(CASE WHEN outcome = 'pruned' THEN tokens_before - tokens_after END) FROM events "
        "WHERE hook = 'prune_tool_results_only' AND event = 'call'"))
    assert (committed, calls) == (3, 5) and results > 0 and reclaimed > 10_000
    m = metrics(at)
    assert m["Prunes committed"] == fmt_int(committed) and m["Prune calls"] == fmt_int(calls)
    assert m["Tool results pruned"] == fmt_int(results) and m["Tokens reclaimed"] == fmt_tokens(reclaimed)
    table = frame_with(at, "tokens reclaimed").set_index("engine")
    assert (table.loc["newer", v.PRUNED], table.loc["newer", v.NOOP], table.loc["newer", v.FAIL_OPEN]) == (3, 1, 1)
    assert table.loc["newer", "tokens reclaimed"] == reclaimed and table.loc["newer", "results pruned"] == results
    assert "Tool-result prunes" in texts(at)


def test_turn_panel_in_the_selection_tab(monkeypatch, hooks_store):
    at = show(run_ok(app(monkeypatch, store=hooks_store)), "select_context")
    m = metrics(at)
    assert m["Turns"] == "4" and m["Interrupted"] == "1" and m["Failed"] == "1"
    assert m["Provider calls per turn"] == f"{(3 + 1 + 2 + 4) / 4:.1f}"
    table = frame_with(at, "exit reason")
    got = {(r["outcome"], r["exit reason"]): (r["turns"], r["provider calls"]) for _, r in table.iterrows()}
    assert got == {(v.TURN_COMPLETED, "text_response"): (2, 4), (v.TURN_INTERRUPTED, "interrupted_by_user"): (1, 2),
                   (v.TURN_FAILED, "local_processing_error"): (1, 4)}
    shown = texts(at) + " ".join(str(x) for x in table.to_numpy().ravel())
    assert CANARY not in shown and "finish_reason" not in shown
    # no select_context rows: the selection panel says so, the turn panel is still there
    assert any("No select_context calls" in i.value for i in at.info)


def test_clone_panel_in_the_latency_tab(monkeypatch, hooks_store):
    at = show(run_ok(app(monkeypatch, store=hooks_store)), "Hook latency")
    m = metrics(at)
    assert (m["Copies"], m["Observed"], m["Not observed"]) == ("6", "5", "1")
    assert any("1 agent without an observed engine" in w.value for w in at.warning)
    table = frame_with(at, v.CLONE_SAME_ENGINE).set_index("engine")
    assert (table.loc["newer", v.CLONE_OBSERVED], table.loc["newer", v.CALL_ERROR], table.loc["newer", "total"]) == (5, 1, 6)


def test_no_panels_without_the_rows(monkeypatch, prov, observe_engine, store_path):
    engine = observe_engine(NewHooksEngine("older"))
    engine.update_from_response({"prompt_tokens": 10})
    engine.should_compress(10)
    prov.flush()
    for tab, label in (("Compressions", "Prune calls"), ("select_context", "Turns"), ("Hook latency", "Copies")):
        at = show(run_ok(app(monkeypatch, store=store_path)), tab)
        assert label not in metrics(at), tab


def test_prometheus_frames_have_the_store_columns():
    from observed_engine.dashboard.prometheus_source import PrometheusSource
    from observed_engine.dashboard.sources import make_filters

    class Answers(PrometheusSource):
        """The PromQL answers of a Prometheus that scraped these counters (no server)."""

        def __init__(self):
            pass

        def query(self, promql, at=None):  # noqa: ARG002
            if "hermes_context_tool_result_prunes_total" in promql:
                return [{"metric": {"engine": "e", "outcome": v.PRUNED}, "value": [0, "2"]},
                        {"metric": {"engine": "e", "outcome": v.NOOP}, "value": [0, "5"]}]
            if "prune_results_total" in promql:
                return [{"metric": {"engine": "e"}, "value": [0, "7"]}]
            if "reclaimed_tokens_total" in promql:
                return [{"metric": {"engine": "e"}, "value": [0, "1234.4"]}]
            if "hermes_context_turns_total" in promql:
                return [{"metric": {"engine": "e", "outcome": v.TURN_COMPLETED, "exit_reason": "text_response"},
                         "value": [0, "3"]}]
            if "hermes_context_engine_clones_total" in promql:
                return [{"metric": {"engine": "e", "outcome": v.CLONE_OBSERVED}, "value": [0, "50"]}]
            return []

    src, f = Answers(), make_filters(3600, 1_000_000.0)
    prunes, turns, clones = src.prunes(f), src.turns(f), src.clones(f)
    assert list(prunes.columns) == PRUNE_COLUMNS and list(turns.columns) == TURN_COLUMNS
    assert list(clones.columns) == CLONE_COLUMNS
    assert prunes.set_index("engine").loc["e", [v.PRUNED, v.NOOP, "total", "results_pruned", "tokens_reclaimed"]] \
        .tolist() == [2, 5, 7, 7, 1234]
    assert turns.iloc[0][["outcome", "exit_reason", "turns"]].tolist() == [v.TURN_COMPLETED, "text_response", 3]
    assert clones.set_index("engine").loc["e", [v.CLONE_OBSERVED, "total"]].tolist() == [50, 50]
