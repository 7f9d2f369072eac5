"""One store writer per store file (issue 28 item 4).

In a gateway that keeps older agents alive, every ``observed:`` edit makes a new pipeline while the
old ones live on. Before, each brought a store-writer thread (and a worker thread) of its own for the
same SQLite file: threads 4 -> 6 -> 8 -> 10 over three edits. Pipelines that share a store path now
share one writer, threads stay flat with edits, and each agent's rows still carry its own settings.
"""

from __future__ import annotations

import sqlite3
import textwrap
import threading
from pathlib import Path

from support.engines import transcript

import observed_engine
from observed_engine.pipeline import REGISTRY, stores
from observed_engine.plugin import build_engine

LASTING = ("observed-engine-worker", "observed-engine-store", "observed-engine-watchdog")


def _threads() -> list:
    return sorted(t.name for t in threading.enumerate() if t.name in LASTING and t.is_alive())


def _write_config(home: Path, store: Path, edit: int) -> None:
    (home / "config.yaml").write_text(textwrap.dedent(f"""\
        model: {{default: gpt-4o, context_length: 128000}}
        context: {{engine: observed}}
        observed:
          queue_size: {1000 + edit}
          capture_content: {'true' if edit % 2 else 'false'}
          store: {{path: {store}}}
        """), encoding="utf-8")


def test_edits_with_older_agents_alive_share_one_writer_and_keep_their_settings(hermes_home, tmp_path):
    store = tmp_path / "shared.sqlite"
    engines, counts = [], []
    for edit in range(4):
        _write_config(hermes_home, store, edit)
        engine = build_engine()
        engines.append(engine)                    # every agent stays alive: no pipeline is retired
        engine.on_session_start(f"session-{edit}", platform="cli")
        engine.compress(transcript(8), focus_topic=f"topic-{edit}")
        assert observed_engine.flush(10.0)
        counts.append((_threads().count("observed-engine-store"), _threads().count("observed-engine-worker")))
    assert len({id(p) for p in REGISTRY.pipelines()}) == 4      # four configurations, all alive
    assert counts == [(1, 1)] * 4, counts                        # one writer and one worker for the one file
    assert stores.writers() == 1

    with sqlite3.connect(store) as db:
        rows = dict(db.execute("select session, content from events where hook='compress' and event='call'"))
    # capture_content was on for the odd edits only: each agent's rows carry its own pipeline's setting
    assert {s: (c is not None) for s, c in rows.items()} == {
        "session-0": False, "session-1": True, "session-2": False, "session-3": True}
    assert "topic-1" in rows["session-1"] and "topic-3" in rows["session-3"]


def test_the_writer_stops_with_the_last_pipeline_that_uses_it(tmp_path):
    from support.engines import NarrowEngine

    from observed_engine import Registry, observe

    registry = Registry()
    store = str(tmp_path / "s.sqlite")
    first = observe(NarrowEngine(), settings={"store": {"path": store}, "queue_size": 500}, registry=registry)
    second = observe(NarrowEngine(), settings={"store": {"path": store}, "queue_size": 600}, registry=registry)
    a, b = (observed_engine.api.pipeline_of(e) for e in (first, second))
    assert a is not b and a.store.writer is b.store.writer and a.recorder._thread is b.recorder._thread
    writer = a.store.writer
    first.should_compress(1)
    second.should_compress(2)
    a.shutdown(5.0)
    assert writer._thread.is_alive() and b.recorder._thread.is_alive()   # the other pipeline goes on
    second.should_compress(3)
    assert b.flush(5.0)
    with sqlite3.connect(store) as db:
        assert db.execute("select count(*) from events where hook='should_compress'").fetchone()[0] == 3
    b.shutdown(5.0)
    assert not writer._thread.is_alive() and stores.writers() == 0 and not b.recorder._thread.is_alive()
    registry.shutdown(5.0)
