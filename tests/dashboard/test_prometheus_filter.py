"""The dashboard's Prometheus source filtered by engine names that are awkward in PromQL.

Engine names are arbitrary strings. The engine filter becomes a label matcher whose value is a
Go-style double-quoted string holding an RE2 regex (``observed_engine.contract.promql.one_of``); a name
with a hyphen, a dot, a quote, a backslash or a regex operator must neither break the query
(Prometheus answers HTTP 400 to an unknown escape sequence) nor match other engines (``b.c`` is
not ``bxc``, ``a|b`` is not ``a``, ``\\d`` is not ``7``).

A real Prometheus scrapes the engines' own ``/metrics`` exporter. Every engine gets its own
numbers: a distinct prompt-token gauge (exact) and distinct call counts. The data is frozen
(the queries are pinned to a past instant), so a view filtered by one engine must show exactly
the rows the unfiltered view shows for that engine.
"""

from __future__ import annotations

import time

import pandas as pd
import pytest
from observed_engine.dashboard.prometheus_source import PrometheusSource
from observed_engine.dashboard.sources import Filters, make_filters
from support.engines import ScriptedEngine, transcript
from support.servers import PrometheusServer, free_port, wait_until

import observed_engine
from observed_engine import observe

NAMES = (
    "topic-router", "b.c", "bxc", "a|b", "a", "b", "x.*", "xyz", "\\d", "7", 'say "hi"', "back\\slash",
    "trailing\\", "ünïcødé-引擎", "(p)[q]{2}^$+?", "new\nline", "it's",
)
PROMPT = {name: 1000 * (i + 1) + 7 for i, name in enumerate(NAMES)}
CALLS = {name: i + 2 for i, name in enumerate(NAMES)}      # should_compress calls of the scraped pass


def _session(eng, name: str, calls: int) -> None:
    for t in range(calls):
        eng.should_compress(t)
    eng.compress(transcript(10), current_tokens=60_000)
    eng.record_timeout_failure("no progress", failure_kind="stalled")
    eng.update_from_response({"prompt_tokens": PROMPT[name], "completion_tokens": 10, "total_tokens": 10})


@pytest.fixture(scope="module")
def frozen(tmp_path_factory, request):
    """(source, end): Prometheus holding every engine's final values, queried at ``end``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HERMES_HOME", str(tmp_path_factory.mktemp("hermes_home")))
        port = free_port()
        settings = {"prometheus": {"enabled": True, "port": port}, "store": {"enabled": False},
                    "compress_timeout_seconds": 30.0}
        engines = {name: observe(ScriptedEngine(name), settings=settings) for name in NAMES}
        for name, eng in engines.items():             # every series exists before the first scrape
            _session(eng, name, 1)
        assert observed_engine.flush(10)

        prom = PrometheusServer(tmp_path_factory.mktemp("prometheus"), [f"127.0.0.1:{port}"])
        request.addfinalizer(prom.stop)
        prom.start()
        seen = wait_until(lambda: {r["metric"].get("engine") for r in prom.query(
            "group by (engine) (hermes_context_engine_hook_calls_total)")} == set(NAMES), 30, 0.25)
        assert seen, (prom.query("group by (engine) (hermes_context_engine_hook_calls_total)"), prom.log_tail())
        time.sleep(2.5)                                # flat samples first
        for name, eng in engines.items():             # the scraped pass: distinct counts per engine
            _session(eng, name, CALLS[name])
        assert observed_engine.flush(10)
        total = len(NAMES) + sum(CALLS.values())
        for expr, value in (('sum(hermes_context_engine_hook_calls_total{hook="should_compress"})', total),
                            ("sum(hermes_context_prompt_tokens)", sum(PROMPT.values()))):
            got = prom.wait_value(expr, value, timeout=30)
            assert got == value, (expr, got, value, prom.log_tail())
        time.sleep(2.5)
        end = time.time()
        observed_engine.shutdown(5.0)
    return PrometheusSource(prom.url), end


def _filters(end: float, engines=()) -> Filters:
    return make_filters(900, end, engines=engines, end=end)


def _rows(df: pd.DataFrame, column: str, names) -> pd.DataFrame:
    out = df[df[column].isin(list(names))]
    return out.sort_values(list(out.columns)).reset_index(drop=True)


def _same_rows(filtered: pd.DataFrame, unfiltered: pd.DataFrame, column: str, names) -> None:
    assert set(filtered[column]) == set(names), (names, filtered)
    pd.testing.assert_frame_equal(_rows(filtered, column, names), _rows(unfiltered, column, names),
                                  check_dtype=False)


@pytest.mark.prometheus
def test_every_name_has_its_own_series(frozen):
    src, end = frozen
    assert src.engines(_filters(end)) == sorted(NAMES)
    now = src.usage_now(_filters(end), [])
    assert dict(zip(now["engine"], now["prompt_tokens"])) == PROMPT


@pytest.mark.prometheus
@pytest.mark.parametrize("name", NAMES, ids=[ascii(n) for n in NAMES])
def test_filter_by_one_engine_shows_exactly_that_engine(frozen, name):
    src, end = frozen
    f, everything = _filters(end, (name,)), _filters(end)
    assert src.engines(f) == [name]

    now = src.usage_now(f, [])
    assert list(now["engine"]) == [name] and list(now["prompt_tokens"]) == [PROMPT[name]]

    lines, marks = src.usage(f, [name])
    assert not lines.empty and set(lines["series"]) == {name}
    assert set(lines["prompt_tokens"].dropna()) == {PROMPT[name]}     # every scrape saw the same value
    assert set(marks["series"]) <= {name}

    latency, _m = src.latency(f)
    all_latency, _m = src.latency(everything)
    _same_rows(latency, all_latency, "engine", [name])
    assert latency.set_index("hook").loc["should_compress", "calls"] >= CALLS[name]

    summary, _m = src.compressions(f)
    all_summary, _m = src.compressions(everything)
    _same_rows(summary, all_summary, "engine", [name])

    incidents = src.incident_counts(f)
    _same_rows(incidents, src.incident_counts(everything), "engine", [name])


@pytest.mark.prometheus
@pytest.mark.parametrize("names", [("b.c", "a|b"), ("a", "x.*"), ("\\d", 'say "hi"', "back\\slash"),
                                   tuple(NAMES)], ids=["dot-bar", "a-star", "escapes", "all"])
def test_filter_by_several_engines(frozen, names):
    src, end = frozen
    f, everything = _filters(end, names), _filters(end)
    assert src.engines(f) == sorted(names)
    now = src.usage_now(f, [])
    assert dict(zip(now["engine"], now["prompt_tokens"])) == {n: PROMPT[n] for n in names}
    latency, _m = src.latency(f)
    all_latency, _m = src.latency(everything)
    _same_rows(latency, all_latency, "engine", names)


def test_dashboard_selector_goes_through_promql():
    f = Filters(start=0.0, end=60.0, step=10, engines=("b.c", "a|b"))
    assert PrometheusSource._sel(f) == r'engine=~"b\\.c|a\\|b"'
    assert PrometheusSource._sel(Filters(0.0, 60.0, 10, engines=("topic-router",)), outcome="error") == \
        'outcome="error", engine="topic-router"'
    assert PrometheusSource._sel(Filters(0.0, 60.0, 10)) == ""


@pytest.mark.prometheus
def test_string_literal_round_trips_through_prometheus(frozen):
    """Prometheus' own parser reads promql.string(text) back as text (label_join's separator)."""
    from observed_engine.contract.promql import string

    src, _end = frozen
    texts = ["".join(map(chr, range(32))) + "\x7f", 'q"uo\'te', "\\", "a\\\\b\\", "\\d\\n", "ünïcødé-引擎 🙂",
             "$1 ${x}", "a|b.c*"]
    for text in texts:
        [r] = src.query(f'label_join(vector(1), "x", {string(text)}, "a", "b")')
        assert r["metric"]["x"] == text, (text, r)
