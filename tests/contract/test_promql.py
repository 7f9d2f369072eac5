"""observed_engine.contract.promql: the query shapes the Streamlit dashboard and the Grafana board share."""

from __future__ import annotations

import ast

import pytest
from support.paths import REPO

from observed_engine.contract import promql
from observed_engine.contract.catalogue import BY_KEY, prometheus_series_names

USERS = (REPO / "dashboard" / "prometheus_source.py", REPO / "deploy" / "grafana" / "build_dashboard.py")


def test_promql_shapes_for_dashboard_and_grafana():
    calls, dur = BY_KEY["hook_calls"].prom_name, BY_KEY["hook_duration"].prom_name
    assert promql.series(calls) == f"{calls}{{}}"
    assert promql.rate_sum(calls, ["engine", "hook"], 'engine=~"a"', "5m") == \
        f'sum by (engine, hook) (rate({calls}{{engine=~"a"}}[5m]))'
    assert promql.increase_sum(calls, [], "", "1h") == f"sum(increase({calls}{{}}[1h]))"
    assert promql.increase_sum(BY_KEY["compression_tokens"].prom_name, ["stage"], "", "1h", "_count") == \
        "sum by (stage) (increase(hermes_context_compression_tokens_count{}[1h]))"
    assert promql.gauge("max", BY_KEY["window_tokens"].prom_name, ["engine"], 'job="x"') == \
        'max by (engine) (hermes_context_window_tokens{job="x"})'
    assert promql.agg("max", ["engine"], promql.over("last_over_time", calls, "", "60s")) == \
        f"max by (engine) (last_over_time({calls}{{}}[60s]))"
    # le always leads the grouping, so the by-clause check of tests/deploy/test_static.py holds
    assert promql.quantile(0.95, dur, ["engine", "hook"], "", "$__rate_interval") == \
        f"histogram_quantile(0.95, sum by (le, engine, hook) (rate({dur}_bucket{{}}[$__rate_interval])))"
    assert promql.quantile(0.5, dur, ["engine"], "", "30s", fn="increase") == \
        f"histogram_quantile(0.5, sum by (le, engine) (increase({dur}_bucket{{}}[30s])))"


def test_promql_loads_without_the_package_for_the_grafana_generator():
    """build_dashboard.py loads promql.py by path with the standard library only."""
    tree = ast.parse((REPO / "observed_engine" / "contract" / "promql.py").read_text())
    imported = {n.module if isinstance(n, ast.ImportFrom) else a.name
                for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in (n.names if isinstance(n, ast.Import) else [None])}
    assert imported <= {"__future__", "typing"}, imported


def test_dashboard_and_grafana_write_no_query_shapes_of_their_own():
    """Rates, increases and percentiles go through observed_engine.contract.promql; metric names come from the catalogue."""
    names = prometheus_series_names()
    for path in USERS:
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(n)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docstrings:
                continue
            for shape in ("histogram_quantile(", "(rate(", "(increase(", *names):
                assert shape not in node.value, (path.name, node.value)


def test_string_literal_escapes_backslash_quote_and_control_characters():
    assert promql.string("topic-router") == '"topic-router"'
    assert promql.string("") == '""'
    assert promql.string('say "hi"') == r'"say \"hi\""'
    assert promql.string("back\\slash") == r'"back\\slash"'
    assert promql.string("trailing\\") == r'"trailing\\"'
    assert promql.string("new\nline\ttab\rcr") == r'"new\nline\ttab\rcr"'
    assert promql.string("\a\b\f\v\x00\x1f\x7f") == r'"\a\b\f\v\x00\x1f\x7f"'
    assert promql.string("it's ünïcødé-引擎 🙂") == "\"it's ünïcødé-引擎 🙂\""   # no escapes needed


def test_regex_escape_is_go_quotemeta():
    """A backslash before RE2's metacharacters only: never before '-', ' ', '"', letters or digits."""
    assert promql.regex_escape("topic-router") == "topic-router"
    assert promql.regex_escape("b.c") == r"b\.c"
    assert promql.regex_escape("a|b") == r"a\|b"
    assert promql.regex_escape("x.*") == r"x\.\*"
    assert promql.regex_escape(r"\d") == r"\\d"
    assert promql.regex_escape("(p)[q]{2}^$+?") == r"\(p\)\[q\]\{2\}\^\$\+\?"
    assert promql.regex_escape('say "hi" #1 ~&,-/:') == 'say "hi" #1 ~&,-/:'
    assert promql.regex_escape("ünïcødé-引擎") == "ünïcødé-引擎"


def test_matchers_for_one_and_several_values():
    assert promql.eq("engine", "topic-router") == 'engine="topic-router"'
    assert promql.eq("engine", 'a"b\\c') == r'engine="a\"b\\c"'
    # one value: an exact matcher, string escaping only
    assert promql.one_of("engine", ["b.c"]) == 'engine="b.c"'
    assert promql.one_of("engine", [r"\d"]) == r'engine="\\d"'
    assert promql.one_of("engine", ["x", "x"]) == 'engine="x"'
    # several: regex-escaped, joined, then string-escaped (a regex backslash is doubled)
    assert promql.one_of("engine", ["b.c", "a|b"]) == r'engine=~"b\\.c|a\\|b"'
    assert promql.one_of("engine", ["topic-router", "x.*"]) == r'engine=~"topic-router|x\\.\\*"'
    assert promql.one_of("engine", [r"\d", 'say "hi"']) == r'engine=~"\\\\d|say \"hi\""'
    assert promql.one_of("engine", ["trailing\\", "new\nline"]) == r'engine=~"trailing\\\\|new\nline"'
    with pytest.raises(ValueError):
        promql.one_of("engine", [])
    # the shapes take the matcher as it is
    assert promql.gauge("max", "m", ["engine"], promql.one_of("engine", ["b.c", "a|b"])) == \
        r'max by (engine) (m{engine=~"b\\.c|a\\|b"})'
