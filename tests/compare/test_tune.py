"""``observed-engine tune`` and engine variants (issue 29).

The recording is ``benchmarks/record_month.py`` at a small scale: real Hermes 0.19.0 agents play
seeded scripts (tool calls answered from the script) against the package's replay LLM into a real
``state.db``, with the CLI's toolsets, observed into a live store. The sweep must reproduce the
live compressions at the current settings, its recommendation must be the sums of individual
replays, the parallel run must agree with the serial one conversation by conversation, and an
interrupted or extended sweep must replay only what is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.paths import REPO

from observed_engine import host
from observed_engine.cli import main
from observed_engine.compare import config_copy, fidelity, objective, request_memo, sweep
from observed_engine.compare.replay import replay
from observed_engine.compare.report import summarise_replay
from observed_engine.compare.sessions import read_conversations
from observed_engine.compare.tune import run_tune
from observed_engine.compare.variants import VariantError, make, parse_variants

sys.path.insert(0, str(REPO / "benchmarks"))
import record_month  # noqa: E402

WINDOW = 64_000
GRID = ["target_ratio=0.1,0.4"]


# -- variants, grids, objectives (no replay) --------------------------------------------------

def test_variants_parse_with_their_settings_typed_and_labelled():
    vs = parse_variants("compressor@threshold=0.8,protect_last_n=10,compressor,lossless-hermes@fresh_tail_count=32")
    assert [v.label for v in vs] == ["compressor@threshold=0.8,protect_last_n=10", "compressor",
                                     "lossless-hermes@fresh_tail_count=32"]
    assert vs[0].as_dict() == {"threshold": 0.8, "protect_last_n": 10} and vs[1].current
    cfg = {"compression": {"threshold": 0.5, "target_ratio": 0.2}}
    assert vs[0].apply(cfg) == {} and cfg["compression"] == {"threshold": 0.8, "target_ratio": 0.2,
                                                               "protect_last_n": 10}
    assert vs[2].route == "env" and vs[2].apply({}) == {"LCM_FRESH_TAIL_COUNT": "32"}
    aux = make("compressor", [("auxiliary.compression.model", "small-model"), ("abort_on_summary_failure", "yes")])
    assert aux.config_yaml() == ("auxiliary:\n  compression:\n    model: small-model\n"
                                 "compression:\n  abort_on_summary_failure: true")
    assert parse_variants(["compressor@threshold=0.8", "compressor@threshold=0.80"])[0].label == "compressor@threshold=0.8"
    assert len(parse_variants(["compressor@threshold=0.8", "compressor@threshold=0.80"])) == 1


@pytest.mark.parametrize("text, message", [
    ("compressor@thresold=0.8", "unknown setting 'thresold'"),
    ("compressor@threshold=high", "threshold=high: must be a number"),
    ("compressor@threshold=1.5", "must be in (0, 1]"),
    ("compressor@target_ratio=0.95", "within 0.10-0.80"),
    ("compressor@protect_last_n=2.5", "must be an integer"),
    ("compressor@protect_last_n=-1", "must be >= 0"),
    ("compressor@in_place=maybe", "must be true or false"),
    ("compressor@threshold=nan", "finite"),
    ("threshold=0.8", "a setting before any engine"),
    ("observed@threshold=0.8", "this tool's own wrapper"),
    ("lossless-hermes@fresh_tail_count=0", "reads 0 as unset"),
    ("lossless-hermes@no_such_key=1", "unknown setting 'no_such_key'"),
    ("not-installed@x=1", "cannot validate settings for engine 'not-installed'"),
])
def test_a_bad_variant_is_one_clear_line(text, message):
    with pytest.raises(VariantError, match=None) as exc:
        parse_variants(text)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_an_engine_whose_plugin_yaml_is_broken_is_named_with_the_file(tmp_path, monkeypatch):
    """A pip engine whose plugin.yaml is not valid YAML: the line says so and names the file (it
    used to say that the engine ships no plugin.yaml)."""
    from support.entry_points import engine_plugin, forget_modules, on_path

    site = tmp_path / "site"
    module = engine_plugin(site, "yamlbroken")
    (site / "plugin.yaml").write_text("name: yamlbroken\nconfig:\n  keep: [1, 2\n", encoding="utf-8")
    on_path(monkeypatch, site)
    try:
        with pytest.raises(VariantError) as exc:
            parse_variants("yamlbroken@keep=3")
    finally:
        forget_modules(module)
    text = str(exc.value)
    assert "its plugin.yaml cannot be read" in text and str(site / "plugin.yaml") in text, text
    assert "\n" not in text


def test_bad_variants_and_grids_exit_2_with_one_line(tmp_path, capsys):
    home = tmp_path / "home"
    home.mkdir()
    (home / "state.db").write_text("")
    cases = [["compare", "--engines", "compressor@thresold=0.8"],
             ["tune", "--grid", "threshold=0.9:0.5:0.1"],
             ["tune", "--grid", "threshold"],
             ["tune", "--grid", "protect_last_n=4,x"],
             ["tune", "--objective", "overflow,speed"],
             ["tune", "--objective", "summary-tokens=1,cache-lost"],
             ["tune", "--engine", "lossless-hermes"],
             ["tune", "--jobs", "0"]]
    for argv in cases:
        assert main(argv + ["--hermes-home", str(home)]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, (argv, err)


def test_grids_span_every_combination():
    assert sweep._grid_values("threshold", "0.5:0.9:0.1") == ["0.5", "0.6", "0.7", "0.8", "0.9"]
    assert sweep._grid_values("protect_last_n", "4,8,12") == ["4", "8", "12"]
    vs = sweep.parse_grid("compressor", ["threshold=0.75:0.85:0.05", "protect_last_n=4,8"])
    assert [v.label for v in vs] == [f"compressor@threshold={t},protect_last_n={n}"
                                     for t in ("0.75", "0.8", "0.85") for n in (4, 8)]
    assert sweep.default_grid(128_000)[0] == "threshold=0.75,0.8,0.85,0.9"    # the built-in floors lower ones


def _cell(overflow=0, summary=0, cache=0, status="ok"):
    return {"status": status, "error": None, "over_window_turns": list(range(overflow)), "summary_tokens": summary,
            "cache_prefix_lost_tokens": cache, "prompt_tokens": 0, "compressions": 0, "summary_failures": 0,
            "final_tokens": 0}


def test_the_objective_ranks_and_overflow_never_wins():
    results = {"a": {"cur": _cell(summary=50, cache=10), "v1": _cell(summary=10, cache=90, overflow=1),
                     "v2": _cell(summary=40, cache=50), "v3": _cell(summary=40, cache=20)},
               "b": {"cur": _cell(summary=5), "v1": _cell(summary=1), "v2": _cell(summary=5), "v3": _cell(summary=5)}}
    labels = ["cur", "v1", "v2", "v3"]
    ranked = objective.rank(labels, results, objective.parse_objective("overflow,summary-tokens,cache-lost"), "cur")
    assert ranked["best"] == "v3" and ranked["ranking"] == ["v3", "v2", "cur"]
    assert not ranked["variants"]["v1"]["eligible"] and "overflow" in ranked["variants"]["v1"]["why_not"]
    assert ranked["best_per_conversation"] == {"a": "v3", "b": "v1"}     # in b alone v1 did not overflow
    weighted = objective.rank(labels, results, objective.parse_objective("summary-tokens=1,cache-lost=1"), "cur")
    # cur: 50+10 + 5 = 65, v3: 40+20 + 5 = 65: a tie goes to the current settings
    assert weighted["variants"]["v3"]["key"] == [65.0] == weighted["variants"]["cur"]["key"]
    assert weighted["best"] == "cur"
    results["b"]["v3"] = _cell(status="skipped")
    again = objective.rank(labels, results, objective.parse_objective(None), "cur")
    assert again["best"] == "v2" and "not replayed" in again["variants"]["v3"]["why_not"]


# -- the sweep over a small recorded month ----------------------------------------------------

@pytest.fixture(scope="module")
def month(tmp_path_factory):
    home = tmp_path_factory.mktemp("month") / "home"
    before = os.environ.get("HERMES_HOME")
    try:
        summary = record_month.record_month(home, conversations=3, min_turns=14, max_turns=18, window=WINDOW,
                                            seed=7, jobs=1, progress=None)
    finally:
        if before is None:
            os.environ.pop("HERMES_HOME", None)
        else:
            os.environ["HERMES_HOME"] = before
    assert sum(1 for s in summary["sessions"].values() if s["compressions"]) >= 2, summary
    return {"home": home, "live": summary["sessions"]}


def _jobs(out: Path) -> dict:
    found = {}
    for f in (out / sweep.JOBS_DIR).glob("*.json"):
        d = json.loads(f.read_text())
        found[(d["session_id"], d["variant"])] = d["result"]
    return found


@pytest.fixture(scope="module")
def serial(month, tmp_path_factory):
    out = tmp_path_factory.mktemp("tune") / "serial"
    rep = run_tune(hermes_home=str(month["home"]), grids=GRID, jobs=1, out=out, progress=None)
    return {"report": rep, "out": out, "memo": request_memo.last_stats, "config_copy": config_copy.last_stats}


def _shape(compressions):
    return [[c["tokens_before"], c["tokens_after"], c["messages_before"], c["messages_after"]] for c in compressions]


def test_the_current_settings_reproduce_the_live_compressions(month, serial):
    jobs = _jobs(serial["out"])
    for session, live in month["live"].items():
        current = jobs[(session, "compressor")]
        assert current["status"] == "ok" and not current["divergences"], current
        assert _shape(current["compression_list"]) == live["compressions"]
    rep = serial["report"]
    sizes = {c["session_id"]: c["prompt_size"] for c in rep["conversations"] if not c.get("skip")}
    assert all(s["difference_pct"] == 0.0 and s["replayed_requests"] == s["recorded_requests"] for s in sizes.values())
    skipped = {c["session_id"]: c["skip"] for c in rep["conversations"] if c.get("skip")}
    assert "runs that tool inside the agent" in skipped["month-todo"] and "multimodal" in skipped["month-image"]
    by_label = {v["label"]: v for v in rep["variants"]}
    assert by_label["compressor@target_ratio=0.1"]["engine_settings"]["summary_target_ratio"] == 0.1
    assert by_label["compressor@target_ratio=0.4"]["engine_settings"]["summary_target_ratio"] == 0.4


def test_the_recommendation_is_the_sum_of_individual_replays(month, serial):
    """The sweep replays with the request memo and the config copy on; the individual replays here
    without them."""
    memo = serial["memo"]
    assert memo is not None and memo["disabled"] is None and memo["hits"] > memo["misses"], memo
    copies = serial["config_copy"]
    assert copies is not None and copies["disabled"] is None and copies["copies"] > 100, copies
    rep = serial["report"]
    rec = rep["recommendation"]
    assert rec["best"] is not None and rec["current"] == "compressor"
    os.environ["HERMES_HOME"] = str(month["home"])
    user_config = host.load_config(log_errors=False)
    # the tools the sweep sent (availability checks are read once per run: the vision tools' depend on
    # the auxiliary provider's health of the last minute)
    toolsets = json.loads((serial["out"] / "toolsets.json").read_text())
    convs = [c for c in read_conversations(month["home"] / "state.db", summary_body=host.compaction_summary_body,
                                           inline_tools=host.AGENT_INLINE_TOOLS) if c.skip is None]
    sources = fidelity.recorded_usage(month["home"] / "state.db", convs)
    labels = {rec["best"], rec["current"]}
    variants = {v.label: v for v in [make("compressor", [])] + sweep.parse_grid("compressor", GRID)}
    alone = {}
    for label in labels:
        for conv in convs:
            raw = replay(conv, variants[label], user_config=user_config, context_length=WINDOW,
                         toolsets=toolsets[sources[conv.session_id]["source"] or "cli"])
            alone[(conv.session_id, label)] = objective.metrics_of(summarise_replay(raw, WINDOW))
    cells = {c["session_id"]: c["variants"] for c in rep["conversations"] if not c.get("skip")}
    totals = {v["label"]: v["totals"] for v in rep["variants"]}
    for label in labels:
        for conv in convs:
            cell = cells[conv.session_id][label]
            assert {k: cell[k] for k in alone[(conv.session_id, label)]} == alone[(conv.session_id, label)]
        for key in alone[(convs[0].session_id, label)]:
            assert totals[label][key] == sum(alone[(c.session_id, label)][key] for c in convs), (label, key)
    assert rec["margin_overall"] == {k: totals[rec["best"]][k] - totals[rec["current"]][k] for k in totals[rec["best"]]}
    for conv in convs:
        m = rec["margin_per_conversation"][conv.session_id]["margin"]
        assert m == {k: alone[(conv.session_id, rec["best"])][k] - alone[(conv.session_id, rec["current"])][k]
                     for k in m}
    md = (serial["out"] / "tune.md").read_text()
    assert rec["best"] in md and "Per conversation" in md and "Fidelity" in md


def test_the_parallel_sweep_agrees_with_the_serial_one(month, serial, tmp_path):
    rep = run_tune(hermes_home=str(month["home"]), grids=GRID, jobs=2, out=tmp_path / "parallel", progress=None)
    assert rep["throughput"]["jobs"] == 2
    pids = {r["pid"] for r in _jobs(tmp_path / "parallel").values()}
    assert pids and os.getpid() not in pids                  # worker processes did the work
    a = {c["session_id"]: c.get("variants") for c in serial["report"]["conversations"]}
    b = {c["session_id"]: c.get("variants") for c in rep["conversations"]}
    assert a == b
    assert rep["recommendation"] == serial["report"]["recommendation"]


def test_ctrl_c_keeps_what_is_done_and_the_same_command_resumes(month, tmp_path):
    out = tmp_path / "interrupted"
    argv = [sys.executable, "-m", "observed_engine", "tune", "--hermes-home", str(month["home"]), "--grid",
            GRID[0], "--jobs", "2", "--out", str(out), "--quiet"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(list((out / sweep.JOBS_DIR).glob("*.json"))) < 1:
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)        # Ctrl-C reaches the whole process group, workers too
    _, err = proc.communicate(timeout=60)
    kept = len(list((out / sweep.JOBS_DIR).glob("*.json")))
    if proc.returncode == 0:
        pytest.skip("the sweep finished before the interrupt")
    assert proc.returncode == 130 and "interrupted:" in err and "run the same command again" in err, err
    assert 1 <= kept < 9
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rep = json.loads((out / "tune.json").read_text())
    assert rep["throughput"]["reused"] == kept and rep["throughput"]["replayed"] == 9 - kept
    # the workers stopped mid-replay left their replay homes; the next sweep removed them
    from observed_engine.compare.replay import scratch_dir

    for left in Path(scratch_dir() or "/tmp").glob(sweep.SCRATCH_PREFIX + "*"):
        os.kill(int(left.name[len(sweep.SCRATCH_PREFIX):].split("-")[0]), 0)    # its process is alive


def test_a_lossless_hermes_variant_reaches_the_engine(month):
    pytest.importorskip("lossless_hermes")
    os.environ["HERMES_HOME"] = str(month["home"])
    [conv] = [c for c in read_conversations(month["home"] / "state.db", summary_body=host.compaction_summary_body,
                                            inline_tools=host.AGENT_INLINE_TOOLS) if c.skip is None][:1]
    raw = replay(conv, parse_variants("lossless-hermes@context_threshold=0.6")[0], user_config={},
                 context_length=WINDOW, toolsets={"enabled": []})
    assert raw["engine_class"].startswith("lossless_hermes.")
    assert raw["engine_settings"]["threshold_tokens"] == int(WINDOW * 0.6)
    assert "LCM_CONTEXT_THRESHOLD" not in os.environ                  # put back after the replay


def test_variants_with_the_same_settings_are_one_replay(month, serial, tmp_path):
    """A grid value equal to the current setting writes the same config: one replay answers both
    labels, kept under each label's own job file (so a resumed run finds either)."""
    os.environ["HERMES_HOME"] = str(month["home"])
    ratio = host.load_config(log_errors=False)["compression"]["target_ratio"]
    same = f"compressor@target_ratio={ratio}"
    grid = [f"target_ratio={ratio},0.4"]
    kept = _jobs(serial["out"])
    convs = {session for session, _ in kept}
    # from the serial sweep's results: the new label is the current one's, with no replay
    out = tmp_path / "from-kept"
    shutil.copytree(serial["out"], out)
    rep = run_tune(hermes_home=str(month["home"]), grids=grid, jobs=1, out=out, progress=None)
    t = rep["throughput"]
    assert (t["replayed"], t["shared"]) == (0, len(convs)), t
    jobs = _jobs(out)
    for session in convs:
        assert jobs[(session, same)] == jobs[(session, "compressor")] == kept[(session, "compressor")]
    # a fresh sweep: one replay per conversation for the two labels, in parallel workers too
    for n in (1, 2):
        fresh = tmp_path / f"fresh-{n}"
        rep = run_tune(hermes_home=str(month["home"]), grids=[f"target_ratio={ratio}"], jobs=n, out=fresh,
                       progress=None)
        t = rep["throughput"]
        assert (t["replayed"], t["shared"], t["reused"]) == (len(convs), len(convs), 0), t
        jobs = _jobs(fresh)
        assert len(jobs) == 2 * len(convs)
        for session in convs:
            a, b = dict(jobs[(session, same)]), dict(jobs[(session, "compressor")])
            assert a == b and _shape(a["compression_list"]) == _shape(kept[(session, "compressor")]["compression_list"])
        assert f"{len(convs)} answered by the replay of a variant with the same settings" in (fresh / "tune.md").read_text()


def test_a_second_run_replays_only_what_is_missing_or_new(month, serial, tmp_path):
    out = tmp_path / "resumed"
    shutil.copytree(serial["out"], out)
    files = sorted((out / sweep.JOBS_DIR).glob("*.json"))
    for f in files[:2]:
        f.unlink()
    rep = run_tune(hermes_home=str(month["home"]), grids=GRID, jobs=1, out=out, progress=None)
    assert (rep["throughput"]["replayed"], rep["throughput"]["reused"]) == (2, len(files) - 2)
    assert rep["recommendation"] == serial["report"]["recommendation"]
    # a new conversation in the store (the last test: it adds to the module's recording; a copied
    # home would not do, since some tool schemas name the home's path): only its replays run
    home = month["home"]
    os.environ["HERMES_HOME"] = str(home)
    tools = json.loads((out / "toolsets.json").read_text())["cli"]
    new = record_month.record_conversation(home, 99, 4242, 4, WINDOW, "cli", tools)
    rep = run_tune(hermes_home=str(home), grids=GRID, jobs=1, out=out, progress=None)
    assert (rep["throughput"]["replayed"], rep["throughput"]["reused"]) == (3, len(files))
    assert new["session_id"] in {c["session_id"] for c in rep["conversations"]}


def test_the_dashboard_shows_a_sweep_apart_from_live_data(month, serial, monkeypatch):
    from streamlit.testing.v1 import AppTest

    for var in ("OBSERVED_PROMETHEUS_URL", "OBSERVED_SOURCE", "OBSERVED_ALLOW_SOURCE_CHANGE", "OBSERVED_STORE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OBSERVED_STORE", str(month["home"] / "observed" / "telemetry.sqlite"))   # the live store
    monkeypatch.setenv("OBSERVED_TUNE_DIR", str(serial["out"].parent))
    monkeypatch.setattr(sys, "argv", ["app.py"])
    at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=120)
    at.session_state["view"] = "Compare engines"
    at.run()
    at.radio(key="compare_data").set_value("Sweep (observed-engine tune)")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Replay: these numbers come from replaying" in w.value for w in at.warning)
    rec = serial["report"]["recommendation"]
    text = " ".join(m.value for m in at.markdown)
    assert ("Recommendation: keep the current settings" in text if rec["is_current"]
            else f"Recommendation: ` {rec['best']} `" in text), text
    assert at.selectbox(key="tune_axis").value == "target_ratio"
    frames = [e.value for e in at.dataframe]
    variants = next(f for f in frames if "variant" in f.columns).set_index("variant")
    assert list(variants.index) == [v["label"] for v in serial["report"]["variants"]]
    assert variants.loc[rec["best"], "recommended"]
    convs = next(f for f in frames if "session" in f.columns)
    assert set(convs["session"]) >= {f"?session={s}" for s in month["live"]}
