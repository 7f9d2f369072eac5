"""Hermes' own file logs during a replay: inside the replay home, gone with it (issue 29).

Hermes up to 0.20 sets its logs up under the home ``run_agent`` fixed when it was imported, so
without ``host.replay_logs`` every replay after the first logged into the first replay's deleted
home ("--- Logging error --- FileNotFoundError" on stderr, its ``logs/`` made again in the scratch
directory and never removed), or into the operator's real home when Hermes was imported before
the replay (as in a process that built an agent already). scripts/test.sh also runs this file
on every other Hermes line (0.16–0.17 attach the handlers to the root logger, 0.18 on put them
behind a log queue, 0.22 reads HERMES_HOME)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from observed_engine import host
from observed_engine.compare import replay as replay_module
from observed_engine.compare.sessions import read_conversations

MODEL = "fake-model"


def _conversation(home: Path) -> None:
    db = host.session_db(home / "state.db")
    db.create_session(session_id="logs", source="cli", model=MODEL)
    for t in range(2):
        db.append_message("logs", "user", f"question {t}")
        db.append_message("logs", "assistant", f"answer {t}")
    db.close()


def _log_files() -> list:
    """Every file a log handler holds open: on the root logger, behind Hermes' log queue, and
    the per-home files of 0.22's routers (a second home in one process is routed, not given
    handlers of its own)."""
    files = [getattr(h, "baseFilename", None) for h in logging.getLogger().handlers]
    try:
        import hermes_logging
    except ImportError:
        return [Path(f) for f in files if f]
    for handler in getattr(hermes_logging, "_queued_file_handlers", []):
        files.append(getattr(handler, "baseFilename", None))
        files += [getattr(h, "baseFilename", None) for h in getattr(handler, "_profile_handlers", {}).values()]
    return [Path(f) for f in files if f]


def _own_handler_files() -> list:
    """The files of handlers of their own (root logger, Hermes' log queue), not 0.22's routed ones."""
    files = [getattr(h, "baseFilename", None) for h in logging.getLogger().handlers]
    try:
        import hermes_logging
    except ImportError:
        return [Path(f) for f in files if f]
    files += [getattr(h, "baseFilename", None) for h in getattr(hermes_logging, "_queued_file_handlers", [])]
    return [Path(f) for f in files if f]


def _flush_hermes_log_queue() -> None:
    """Write out what Hermes' log queue (0.18 on) still holds; nothing to do before 0.18."""
    try:
        import hermes_logging
    except ImportError:
        return
    getattr(hermes_logging, "flush_log_queue", lambda: None)()


def _recorded_conversation(tmp_path: Path, monkeypatch):
    """An empty scratch directory for the replay homes, and a recorded two-turn conversation."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv(replay_module.SCRATCH_ENV, str(scratch))
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    _conversation(recorded)
    [conv] = read_conversations(recorded / "state.db", summary_body=host.compaction_summary_body,
                                inline_tools=host.AGENT_INLINE_TOOLS)
    return scratch, conv


def _watch_replay_logs(monkeypatch, on_exit) -> None:
    """``host.replay_logs`` as the replay uses it, calling ``on_exit(home)`` just before each
    replay home's logs are put back (while Hermes still logs into that home)."""
    real = host.replay_logs

    def watched(home):
        cm = real(home)

        class _Watch:
            def __enter__(self):
                return cm.__enter__()

            def __exit__(self, *exc):
                on_exit(Path(home))
                return cm.__exit__(*exc)
        return _Watch()

    monkeypatch.setattr(host, "replay_logs", watched)


@pytest.fixture(params=["first home", "after another home"])
def process_logs(request, tmp_path):
    """How the process logs before the replays: not at all, or already for another Hermes home
    (an earlier agent in the same process; on 0.22 every later home is then routed through the
    first home's handlers, which hold the replay home's files under their own)."""
    if request.param == "first home":
        yield None
        return
    hermes_logging = pytest.importorskip("hermes_logging")
    other = tmp_path / "earlier-home"
    other.mkdir()
    with host.replay_logs(other):                # its handlers closed again when the test ends
        hermes_logging.setup_logging(hermes_home=other, force=True)
        logging.getLogger("observed.test").warning("a line for the earlier home")
        yield other


# and no deprecated argument passed: 0.20 on ignore ``tool_delay`` and warn when it is given
@pytest.mark.filterwarnings("error:tool_delay:DeprecationWarning")
def test_two_replays_log_inside_their_own_homes_and_leave_nothing(tmp_path, monkeypatch, capfd, process_logs):
    import run_agent

    operator = tmp_path / "operator-home"          # the home Hermes was imported with
    operator.mkdir()
    monkeypatch.setattr(run_agent, "_hermes_home", operator, raising=False)
    scratch, conv = _recorded_conversation(tmp_path, monkeypatch)
    seen = []

    def while_logging(home):
        logging.getLogger("observed.test").warning("a line for the replay's own log")
        seen.append((home, sorted(p.name for p in (home / "logs").glob("*.log")),
                     [f for f in _log_files() if f.is_relative_to(home.resolve())]))

    _watch_replay_logs(monkeypatch, while_logging)
    for _ in range(2):
        raw = replay_module.replay(conv, "compressor", user_config={}, context_length=64_000, usage="chars")
        assert raw["error"] is None and raw["turns_done"] == 2, raw

    assert len(seen) == 2 and seen[0][0] != seen[1][0]
    for home, logs, handlers in seen:                # while it ran: Hermes logged into this home
        assert "agent.log" in logs, (home, logs)
        assert handlers, home
    assert not (operator / "logs").exists()          # nothing written in the operator's home
    assert run_agent._hermes_home == operator        # and Hermes' own value put back
    assert list(scratch.iterdir()) == []             # nothing left, nothing made again
    assert not [f for f in _log_files() if f.is_relative_to(scratch.resolve())]
    logging.getLogger("observed.test").warning("a line after the replays")
    _flush_hermes_log_queue()
    assert "Logging error" not in capfd.readouterr().err


def test_a_replays_own_logs_keep_warnings_only(tmp_path, monkeypatch):
    """Nothing reads a replay's agent.log, and Hermes' INFO lines cost a replay ~8 % of its CPU
    (redacted and formatted on its log thread): the replay home's config asks for WARNING, so its
    agent.log has the warnings and none of the per-request INFO lines."""
    _scratch, conv = _recorded_conversation(tmp_path, monkeypatch)
    texts = []

    def while_logging(home):
        logging.getLogger("observed.test").warning("a warning of the replay")
        _flush_hermes_log_queue()
        own = [f for f in _own_handler_files() if f.is_relative_to(home.resolve())]
        texts.append((bool(own), (home / "logs" / "agent.log").read_text(encoding="utf-8", errors="replace")))

    _watch_replay_logs(monkeypatch, while_logging)
    raw = replay_module.replay(conv, "compressor", user_config={}, context_length=64_000, usage="chars")
    assert raw["error"] is None and raw["turns_done"] == 2, raw
    [(own, text)] = texts
    assert "a warning of the replay" in text
    if not own:
        pytest.skip("this Hermes (0.22) already logs for another home in this process and routes the replay "
                    "home's files through that home's handlers, at that home's level")
    assert " INFO " not in text and "INFO:" not in text, text[:2000]
