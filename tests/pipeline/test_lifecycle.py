"""Pipelines over the life of a gateway (issue 13, item 2): Hermes re-reads config.yaml for every
agent, so an edited ``observed:`` section makes a new pipeline. Before: each one was kept for the
life of the process (2 threads and a store connection per edit), the first kept the Prometheus
port (agents built after the edit were missing from /metrics) and exit took ~8 s more per leaked
pipeline with a locked store and a dead collector.

Real plugin path (``plugin.build_engine`` reading config.yaml as Hermes' loader calls it), real
built-in compressor, real Prometheus scrapes, a real subprocess exit.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from support.paths import TESTS
from support.servers import free_port, scrape

import observed_engine
from observed_engine.pipeline import REGISTRY
from observed_engine.plugin import build_engine

HOOK_CALLS = "hermes_context_engine_hook_calls"


def _write_config(home: Path, port: int, queue_size: int, store: Path) -> None:
    (home / "config.yaml").write_text(textwrap.dedent(f"""\
        model: {{default: gpt-4o, context_length: 128000}}
        context: {{engine: observed}}
        observed:
          queue_size: {queue_size}
          store: {{path: {store}}}
          prometheus: {{enabled: true, port: {port}}}
        """), encoding="utf-8")


def _calls(text: str, hook: str = "should_compress") -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == HOOK_CALLS:
            total += sum(s.value for s in family.samples
                         if s.name.endswith("_total") and s.labels.get("hook") == hook)
    return total


def _families_once(text: str) -> None:
    """Prometheus rejects a family given twice and a series given twice in one scrape."""
    seen = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name = line.split()[2]
            assert name not in seen, f"family {name} twice in one scrape"
            seen.add(name)
    series = [line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")]
    assert len(series) == len(set(series)), "a series twice in one scrape"


def test_config_edits_in_a_running_gateway_leak_nothing_and_metrics_follow(hermes_home, tmp_path):
    port = free_port()
    store = tmp_path / "telemetry.sqlite"
    _write_config(hermes_home, port, 1000, store)
    engine = build_engine()
    for t in (1, 2, 3):
        engine.should_compress(t)
    assert observed_engine.flush(10.0)
    assert _calls(scrape(port)) == 3
    threads_one_pipeline = threading.active_count()
    calls = 3
    for edit in range(1, 6):                       # five edits, an agent after each
        _write_config(hermes_home, port, 1000 + edit, store)
        previous, engine = engine, build_engine()
        for t in range(edit + 1):
            engine.should_compress(t)
        calls += edit + 1
        del previous                               # the old agent ends (the worker's queued events
        assert observed_engine.flush(10.0)          # of it still held it until they were processed)
        gc.collect()
        assert REGISTRY.wait_retired(10.0)
        text = scrape(port)                         # the port follows the new pipeline...
        _families_once(text)
        assert _calls(text) == calls                # ...and the retired ones' counters stay (monotonic)
    assert len(REGISTRY.pipelines()) == 1, [(p.engines_seen, len(p.live_engines()), p.settings.queue_size)
                                            for p in REGISTRY.pipelines()]
    assert REGISTRY.retired >= 5
    assert threading.active_count() <= threads_one_pipeline + 1
    assert not [t for t in threading.enumerate() if t.name == "observed-engine-retire" and t.is_alive()]


def test_two_live_configurations_are_served_on_one_port(hermes_home, tmp_path):
    """Two agents with different sections alive at once (an old agent still running after an edit):
    both on /metrics, each family once, counters summed."""
    port = free_port()
    _write_config(hermes_home, port, 1000, tmp_path / "a.sqlite")
    first = build_engine()
    _write_config(hermes_home, port, 2000, tmp_path / "b.sqlite")
    second = build_engine()
    assert first is not second
    first.should_compress(1)
    for t in range(4):
        second.should_compress(t)
    assert len(REGISTRY.pipelines()) == 2          # both alive: neither is retired
    assert observed_engine.flush(10.0)
    text = scrape(port)
    _families_once(text)
    assert _calls(text) == 5
    for family in text_string_to_metric_families(text):   # one prompt-tokens series per engine name
        if family.name == "hermes_context_prompt_tokens":
            assert len(family.samples) == 1


EXIT = r'''
import sqlite3, sys, time, textwrap
sys.path.insert(0, {tests!r})
from pathlib import Path
home = Path({home!r})
store = {store!r}
from observed_engine.plugin import build_engine
engines = []
blocker = None
for edit in range(4):
    (home / "config.yaml").write_text(textwrap.dedent(f"""\
        context: {{{{engine: observed}}}}
        observed:
          queue_size: {{1000 + edit}}
          store: {{{{path: {{store}}}}}}
          otlp: {{{{enabled: true, protocol: http/protobuf, endpoint: "http://127.0.0.1:{hole}", timeout_seconds: 30}}}}
        """))
    engine = build_engine()
    engines.append(engine)                  # all four stay alive: nothing can be retired early
    engine.should_compress(1)
    if blocker is None:
        time.sleep(0.5)
        blocker = sqlite3.connect(store, timeout=0.1, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another writer holds the store from now on
for engine in engines:
    for i in range(200):
        engine.should_compress(i)
print("exiting", flush=True)
'''


def test_exit_with_several_pipelines_a_locked_store_and_a_dead_collector_is_bounded(hermes_home, tmp_path):
    import socket

    hole = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)                                # accepts, never answers
    try:
        code = EXIT.format(tests=str(TESTS), home=str(hermes_home),
                           store=str(tmp_path / "locked.sqlite"), hole=hole.getsockname()[1])
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**__import__("os").environ, "HERMES_HOME": str(hermes_home)})
        line = proc.stdout.readline()
        assert line.strip() == "exiting", proc.stderr.read()
        t0 = time.monotonic()
        _out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        hole.close()
    assert proc.returncode == 0, err
    assert took <= 10.0, f"exit took {took:.1f} s with 4 pipelines"
    assert "not delivered" in err                  # what could not be delivered is said
