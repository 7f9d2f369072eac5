"""``observed-engine compare`` (issue 17): recorded conversations replayed through several engines.

The recording is made here by a real Hermes 0.19.0 ``AIAgent`` (the local fake provider of
tests/support/fake_llm_server.py, a 64K window, the built-in compressor with its summariser answered by
support/llm.FakeLLM, a real ``SessionDB`` writing ``state.db``), observed into a store of its
own: that store holds the live run's compressions. The comparison replays it through the
built-in, ``lossless-hermes`` (a real engine from PyPI, in the test extra), a directory engine
whose ``compress`` raises, and an engine that is not installed. The built-in's replay must
reproduce the live compressions exactly.
"""

from __future__ import annotations

import io
import json
import sys
import textwrap
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from support.fake_llm_server import FakeLLMServer
from support.llm import install_llm
from support.paths import REPO
from support.store_rows import read_rows

from observed_engine import host
from observed_engine.api import observe
from observed_engine.cli import main
from observed_engine.compare import CompareError, run_compare
from observed_engine.compare.sessions import read_conversations
from observed_engine.pipeline import Registry

MODEL = "fake-model"
WINDOW = 64_000
TURNS = 15

RAISING_ENGINE = textwrap.dedent('''
    from agent.context_engine import ContextEngine


    class RaisingEngine(ContextEngine):
        """Compresses at 50 % of the window, and its compress() always raises."""

        @property
        def name(self):
            return "raising-engine"

        def __init__(self):
            self.context_length = 64000
            self.threshold_tokens = 32000
            self.last_prompt_tokens = 0
            self.last_completion_tokens = 0
            self.last_total_tokens = 0
            self.compression_count = 0

        def update_model(self, model, context_length, **kwargs):
            self.context_length = context_length
            self.threshold_tokens = context_length // 2

        def update_from_response(self, usage):
            self.last_prompt_tokens = usage.get("prompt_tokens", 0)

        def should_compress(self, prompt_tokens=None):
            tokens = self.last_prompt_tokens if prompt_tokens is None else prompt_tokens
            return tokens >= self.threshold_tokens

        def compress(self, messages, current_tokens=None, **kwargs):
            raise RuntimeError("raising-engine always fails")


    def register(ctx):
        ctx.register_context_engine(RaisingEngine())
''')


def _rows(path: Path):
    return read_rows(path, order="ts")


def _record(base: Path, *, in_place: bool = True) -> dict:
    """A Hermes home whose state.db holds one conversation of TURNS turns with several
    compactions (in place, Hermes' default, or by session rotation), and the live run's
    compress rows."""
    mp = pytest.MonkeyPatch()
    home = base / "home"
    home.mkdir()
    mp.setenv("HERMES_HOME", str(home))
    install_llm(mp)
    host.reset_plugin_discovery()
    registry = Registry()
    try:
        with FakeLLMServer(model=MODEL, context_length=WINDOW, reply_chars=40_000) as llm:
            (home / "config.yaml").write_text(
                f"model:\n  default: {MODEL}\n  provider: custom\n  base_url: {llm.base_url}\n"
                f"  context_length: {WINDOW}\n"
                "compression:\n  protect_first_n: 1\n  protect_last_n: 2\n"
                f"  in_place: {'true' if in_place else 'false'}\n"
                # no background skill review: its requests would take this fake LLM's numbered answers
                "skills:\n  creation_nudge_interval: 0\n", encoding="utf-8")
            # the toolsets `hermes` gives a CLI agent of this config (the default hermes-cli set):
            # their real schemas are in every request, as the replay must send them too
            toolsets = host.configured_toolsets(host.load_config(), "cli")
            agent = host.ai_agent_class()(
                base_url=llm.base_url, api_key="sk-fake", provider="custom", model=MODEL, quiet_mode=True,
                skip_context_files=True, skip_memory=True, enabled_toolsets=toolsets["enabled"],
                disabled_toolsets=toolsets["disabled"] or None, max_iterations=4,
                save_trajectories=False, session_db=host.session_db(home / "state.db"))
            tools = len(agent.tools or [])
            observe(agent.context_compressor, settings={"store": {"path": str(base / "live.sqlite")}},
                    registry=registry)
            history = None
            for i in range(TURNS):
                result = agent.run_conversation(f"Question {i + 1}: go on. " + "detail " * 300,
                                                conversation_history=history)
                history = result["messages"]
            live_session = agent.session_id
        registry.flush(15)
    finally:
        registry.shutdown(5)
        host.reset_plugin_discovery()
        mp.undo()
    live = [r for r in _rows(base / "live.sqlite") if r["hook"] == "compress" and r["event"] == "call"]
    assert len(live) >= 3 and all(r["outcome"] == "compressed" for r in live), live
    assert tools >= 10, tools            # the real tool surface, not an empty one
    return {"home": home, "base": base, "live": live, "session": live_session, "tools": tools}


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    return _record(tmp_path_factory.mktemp("compare"))


def _shape(compressions) -> list:
    return [(c["tokens_before"], c["tokens_after"], c["messages_before"], c["messages_after"])
            for c in compressions]


@pytest.fixture(scope="module")
def compared(recording):
    """``observed-engine compare`` over the recording: the built-in, lossless-hermes, the raising
    directory engine (in a stand-in for Hermes' bundled engine directory) and one not installed."""
    pytest.importorskip("lossless_hermes")
    import plugins.context_engine as pce

    mp = pytest.MonkeyPatch()
    d = recording["base"] / "context_engine"
    (d / "raising-engine").mkdir(parents=True)
    (d / "raising-engine" / "__init__.py").write_text(RAISING_ENGINE, encoding="utf-8")
    (d / "raising-engine" / "plugin.yaml").write_text("name: raising-engine\ndescription: raises\n")
    mp.setattr(pce, "_CONTEXT_ENGINE_PLUGINS_DIR", d)
    install_llm(mp)     # as in the live run; the offline summariser stands in during the replay
    before = set(sys.modules)
    out = recording["base"] / "compare-runs" / "run-1"
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(stdout), redirect_stderr(stderr):
            code = main(["compare", "--engines", "compressor,lossless-hermes,raising-engine,not-installed",
                         "--hermes-home", str(recording["home"]), "--usage", "chars", "--out", str(out)])
    finally:
        mp.undo()
        for name in set(sys.modules) - before:
            if name.startswith("plugins.context_engine."):
                sys.modules.pop(name, None)
    return {"code": code, "out": out, "stdout": stdout.getvalue(), "stderr": stderr.getvalue()}


def test_reads_the_original_transcript_back_from_state_db(recording):
    [conv] = read_conversations(recording["home"] / "state.db", summary_body=host.compaction_summary_body)
    assert conv.skip is None
    assert [t["user"].split(":")[0] for t in conv.turns] == [f"Question {i + 1}" for i in range(TURNS)]
    assert all(len(t["replies"]) == 1 and t["replies"][0]["content"].startswith(f"Answer {i + 1}:")
               for i, t in enumerate(conv.turns))
    assert conv.compactions == len(recording["live"]) == len(conv.summaries)


def test_compare_replays_every_engine_and_reproduces_the_builtin(recording, compared):
    out = compared["out"]
    assert compared["code"] == 0, compared["stderr"]
    assert "[" + "#" * 30 + "] 4/4" in compared["stderr"]     # the progress bar, conversations × engines
    report = json.loads((out / "compare.json").read_text())
    assert report["replay"] is True and report["kind"] == "observed-engine-compare"
    [conv] = report["conversations"]
    assert conv["session_id"] == recording["session"]

    builtin = conv["engines"]["compressor"]
    assert builtin["status"] == "ok" and not builtin["divergences"], builtin
    live = _shape(recording["live"])
    assert _shape(builtin["compression_list"]) == live
    assert builtin["compressions"] == len(live) and builtin["summary_failures"] == 0
    assert builtin["tokens_saved"] == sum(b - a for b, a, _, _ in live) > 0
    assert builtin["cache_prefix_lost_tokens"] > 0        # each compaction rewrote the prompt's prefix
    assert builtin["over_window_turns"] == []
    assert builtin["compress_p50_s"] <= builtin["compress_p95_s"]

    lcm = conv["engines"]["lossless-hermes"]
    assert lcm["status"] == "ok" and lcm["engine_class"].startswith("lossless_hermes."), lcm
    assert lcm["compress_calls"] >= 1 and lcm["turns_replayed"] == TURNS

    raising = conv["engines"]["raising-engine"]
    assert raising["compress_calls"] >= 1 and raising["outcomes"].get("error", 0) >= 1, raising

    assert conv["engines"]["not-installed"]["status"] == "skipped"
    assert "could not load engine 'not-installed'" in report["totals"]["not-installed"]["unavailable"]

    md = (out / "compare.md").read_text()
    assert "(replay)" in md and "`lossless-hermes`" in md and "unavailable" in md
    assert "Question 1" not in md and "Question 1" not in json.dumps(report)   # no message text
    assert md == compared["stdout"]


def test_the_dashboard_opens_a_replay_run_apart_from_live_data(recording, compared, monkeypatch):
    from streamlit.testing.v1 import AppTest

    for var in ("OBSERVED_PROMETHEUS_URL", "OBSERVED_SOURCE", "OBSERVED_ALLOW_SOURCE_CHANGE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OBSERVED_STORE", str(recording["base"] / "live.sqlite"))
    monkeypatch.setenv("OBSERVED_COMPARE_DIR", str(compared["out"].parent))
    monkeypatch.setattr(sys, "argv", ["app.py"])
    at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=120)
    at.session_state["view"] = "Compare engines"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not [w for w in at.warning if "Replay" in w.value]          # live data by default
    at.radio(key="compare_data").set_value("Replay run (observed-engine compare)")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Replay: these numbers come from replaying" in w.value for w in at.warning)
    frames = [e.value for e in at.dataframe]
    engines = next(f for f in frames if "tokens saved" in f.columns).set_index("engine")
    assert list(engines.index) == ["compressor", "lossless-hermes", "raising-engine", "not-installed"]
    report = json.loads((compared["out"] / "compare.json").read_text())
    assert engines.loc["compressor", "compressions"] == str(report["totals"]["compressor"]["compressions"])
    assert engines.loc["not-installed", "status"].startswith("unavailable")


def test_bad_input_is_one_clear_line(tmp_path, capsys):
    empty = tmp_path / "empty-home"
    empty.mkdir()
    assert main(["compare", "--engines", "compressor", "--hermes-home", str(empty)]) == 2
    err = capsys.readouterr().err
    assert "no session store at" in err and "Traceback" not in err
    with pytest.raises(CompareError, match="'observed' is this tool's own wrapper"):
        run_compare(hermes_home=str(empty), engines="compressor,observed")
    (empty / "state.db").write_text("not sqlite")
    assert main(["compare", "--engines", "compressor", "--hermes-home", str(empty)]) == 2
    assert "not a readable SQLite file" in capsys.readouterr().err


def test_session_rotation_recording_replays_the_same(tmp_path):
    """compression.in_place: false: each compaction ends the session and continues in a child."""
    rec = _record(tmp_path, in_place=False)
    [conv] = read_conversations(rec["home"] / "state.db", summary_body=host.compaction_summary_body)
    assert len(conv.sessions) == len(rec["live"]) + 1 and conv.sessions[-1] == rec["session"]
    assert [t["user"].split(":")[0] for t in conv.turns] == [f"Question {i + 1}" for i in range(TURNS)]
    assert conv.compactions == len(rec["live"]) == len(conv.summaries)
    mp = pytest.MonkeyPatch()
    install_llm(mp)
    try:
        report = run_compare(hermes_home=str(rec["home"]), engines="compressor", usage="chars", progress=None)
    finally:
        mp.undo()
    builtin = report["conversations"][0]["engines"]["compressor"]
    assert builtin["status"] == "ok" and not builtin["divergences"], builtin
    assert _shape(builtin["compression_list"]) == _shape(rec["live"])


def test_summary_configured_uses_the_auxiliary_model_of_that_home(recording, tmp_path):
    """--summary configured: the summaries come from auxiliary.compression of the Hermes home
    (here a second local fake provider), not from the offline stand-in."""
    import shutil

    home = tmp_path / "home"
    home.mkdir()
    shutil.copy2(recording["home"] / "state.db", home / "state.db")
    with FakeLLMServer(model="aux-model", context_length=WINDOW, reply_chars=200) as aux:
        (home / "config.yaml").write_text(
            f"model:\n  default: {MODEL}\n  context_length: {WINDOW}\n"
            "compression:\n  protect_first_n: 1\n  protect_last_n: 2\n"
            f"auxiliary:\n  compression:\n    provider: custom\n    model: aux-model\n"
            f"    base_url: {aux.base_url}\n    api_key: sk-aux\n", encoding="utf-8")
        report = run_compare(hermes_home=str(home), engines="compressor", summary="configured",
                             usage="chars", progress=None)
        summaries = len(aux.summary_requests)
    builtin = report["conversations"][0]["engines"]["compressor"]
    assert builtin["status"] == "ok", builtin
    assert builtin["summary_calls"] is None and builtin["summary_failures"] == 0
    assert summaries == builtin["compressions"] >= 1


def _tool_call(call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def test_a_conversation_the_replay_cannot_reproduce_is_skipped_with_why(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    db = host.session_db(home / "state.db")
    db.create_session(session_id="inline-tool", source="cli", model=MODEL)
    db.append_message("inline-tool", "user", "plan it")
    db.append_message("inline-tool", "assistant", "", tool_calls=[_tool_call("t1", "todo", {"todos": []})])
    db.append_message("inline-tool", "tool", "{}", tool_call_id="t1", tool_name="todo")
    db.create_session(session_id="no-result", source="cli", model=MODEL)
    db.append_message("no-result", "user", "list the files")
    db.append_message("no-result", "assistant", "", tool_calls=[_tool_call("c9", "terminal", {"command": "ls"})])
    db.create_session(session_id="images", source="cli", model=MODEL)
    db.append_message("images", "user", [{"type": "text", "text": "what is this"},
                                         {"type": "image_url", "image_url": {"url": "data:,"}}])
    db.close()
    report = run_compare(hermes_home=str(home), engines="compressor", out=tmp_path / "out", progress=None)
    skips = {c["session_id"]: c["skip"] for c in report["conversations"]}
    assert "runs that tool inside the agent" in skips["inline-tool"], skips
    assert "has no recorded result" in skips["no-result"], skips
    assert "multimodal" in skips["images"], skips
    assert "Skipped:" in (tmp_path / "out" / "compare.md").read_text()


def test_tool_calls_are_answered_with_the_recorded_results_never_run(tmp_path):
    from observed_engine.compare.replay import replay

    home = tmp_path / "home"
    home.mkdir()
    marker = tmp_path / "the-tool-ran"
    db = host.session_db(home / "state.db")
    db.create_session(session_id="tools", source="cli", model=MODEL)
    db.append_message("tools", "user", "make the marker, then list the files")
    db.append_message("tools", "assistant", "", tool_calls=[
        _tool_call("c1", "terminal", {"command": f"touch {marker}"}),
        _tool_call("c2", "read_file", {"path": str(tmp_path)})])
    db.append_message("tools", "tool", "created", tool_call_id="c1", tool_name="terminal")
    db.append_message("tools", "tool", "the-tool-ran", tool_call_id="c2", tool_name="read_file")
    db.append_message("tools", "assistant", "Done: the marker is there.")
    db.append_message("tools", "user", "thanks")
    db.append_message("tools", "assistant", "You are welcome.")
    db.close()
    [conv] = read_conversations(home / "state.db", summary_body=host.compaction_summary_body,
                                inline_tools=host.AGENT_INLINE_TOOLS)
    assert conv.skip is None and len(conv.turns) == 2
    raw = replay(conv, "compressor", user_config={}, context_length=WINDOW, usage="chars")
    assert raw["error"] is None and raw["divergences"] == [] and raw["turns_done"] == 2, raw
    tools = [(m.get("tool_call_id"), m.get("content")) for m in raw["history"] if m.get("role") == "tool"]
    assert tools == [("c1", "created"), ("c2", "the-tool-ran")]
    assert [m["content"] for m in raw["history"] if m.get("role") == "assistant"][1:] == [
        "Done: the marker is there.", "You are welcome."]
    assert not marker.exists()                       # the recorded result, not the tool
    assert len(raw["requests"]) == 3


def _tool_heavy_conversation(home: Path, *, turns: int, calls: int) -> None:
    """``turns`` turns, each one assistant reply with ``calls`` terminal calls, then an answer."""
    db = host.session_db(home / "state.db")
    db.create_session(session_id="tool-heavy", source="cli", model=MODEL)
    for t in range(turns):
        db.append_message("tool-heavy", "user", f"step {t}: run the checks")
        ids = [f"t{t}c{c}" for c in range(calls)]
        db.append_message("tool-heavy", "assistant", "", tool_calls=[
            _tool_call(i, "terminal", {"command": f"echo {i}"}) for i in ids])
        for i in ids:
            db.append_message("tool-heavy", "tool", f"output of {i}", tool_call_id=i, tool_name="terminal")
        db.append_message("tool-heavy", "assistant", f"Step {t} checked.")
    db.close()


def test_a_replay_does_not_sleep_between_tool_calls_and_changes_nothing_by_it(tmp_path, monkeypatch):
    """Hermes up to 0.19 pauses ``tool_delay`` (1 s by default) between the tool calls of one
    reply; a replay answers with recorded results, so the pause is pure wall time: 3 turns of 4
    calls cost 9 s of sleep before the fix. The replayed history is the recorded one, request
    for request: on 0.22, where the agent titles the session from inside its turn, the title
    request took a recorded reply before ("turn 2: the agent made 3 requests"). Run on every
    Hermes line by scripts/test.sh. The sleeps are counted, not timed: a loaded machine
    changes no figure here."""
    import threading
    import time

    from observed_engine.compare.replay import replay

    real_sleep = time.sleep
    long_sleeps = []
    # threads that run before the replay are not its own: Hermes' terminal tool keeps a cleanup
    # thread from an earlier test in this process alive that sleeps 1 s per round
    replay_thread, earlier = threading.current_thread(), set(threading.enumerate())

    def counted(seconds):
        current = threading.current_thread()
        if seconds >= 0.5 and (current is replay_thread or current not in earlier):
            caller = sys._getframe(1)
            long_sleeps.append((seconds, current.name,
                                f"{caller.f_code.co_filename}:{caller.f_lineno} {caller.f_code.co_name}"))
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", counted)
    home = tmp_path / "home"
    home.mkdir()
    _tool_heavy_conversation(home, turns=3, calls=4)
    [conv] = read_conversations(home / "state.db", summary_body=host.compaction_summary_body,
                                inline_tools=host.AGENT_INLINE_TOOLS)
    raw = replay(conv, "compressor", user_config={}, context_length=WINDOW, usage="chars")
    assert raw["error"] is None and raw["divergences"] == [] and raw["turns_done"] == 3, raw
    assert long_sleeps == [], long_sleeps                   # 9 pauses of 1 s before the fix
    tools = [(m.get("tool_call_id"), m.get("content")) for m in raw["history"] if m.get("role") == "tool"]
    assert tools == [(f"t{t}c{c}", f"output of t{t}c{c}") for t in range(3) for c in range(4)]
    assert [m["content"] for m in raw["history"] if m.get("role") == "assistant" and m.get("content")] == [
        f"Step {t} checked." for t in range(3)]
    assert len(raw["requests"]) == 6
