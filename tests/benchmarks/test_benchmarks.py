"""The benchmark scripts measure what they say (issue 16): not timed tests, checks of their method.

* ``agent_process.py`` must run its observed modes with the observed engine, loaded by Hermes'
  own plugin loader through the entry point, and charge the observer's import and build to it.
  (Hermes 0.19.0 scans the plugins' entry points while ``run_agent`` is imported; an entry
  point declared after that import was never seen and the observed modes ran bare.)
* ``hook_overhead.py``'s worker CPU per event must not charge its events with rows an earlier
  phase left to the store writer.
* A benchmark leaves nothing in $TMPDIR (its Hermes homes and stores used to pile up: 1.5 GB).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.paths import REPO

BENCHMARKS = REPO / "benchmarks"


@pytest.mark.parametrize("declared", [False, True], ids=["simulated", "declared-by-install"])
def test_agent_process_one_shot_runs_observed_through_the_entry_point(tmp_path, declared):
    """``declared``: the environment has the entry point ``install --route entrypoint`` writes (a
    dist-info on the child's path): the benchmark's timed entry point answers in its place (it used
    to stop there: nothing would have been timed)."""
    import os

    from support.entry_points import write_dist

    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    if declared:
        site = tmp_path / "site"
        write_dist(site, "observed-engine-entry-point", {"observed": "observed_engine.hermes_plugin"})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    out = tmp_path / "runs.json"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "agent_process.py"), "--rounds", "0", "--oneshot-rounds", "1",
         "--modes", "bare,observed", "--json", str(out)],
        capture_output=True, text=True, timeout=240, cwd=str(tmp_path), env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = json.loads(out.read_text(encoding="utf-8"))["oneshot"]
    bare, observed = runs["bare"][0], runs["observed"][0]
    assert bare["setup"]["observed"] is False
    assert observed["setup"]["observed"] is True, observed["setup"]
    # charged to the observer: the modules it adds and its register() (pipeline, store, class)
    assert observed["observer"]["import_cpu_s"] > 0 and observed["observer"]["build_cpu_s"] > 0, observed["observer"]
    assert bare["observer"] == {"import_cpu_s": 0.0, "build_cpu_s": 0.0}
    assert "observation CPU, attributed s" in proc.stdout
    assert list((tmp_path / "tmp").iterdir()) == []     # the homes and the bytecode cache removed


def test_hook_overhead_leaves_nothing_in_tmpdir(tmp_path):
    import os

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "HERMES_HOME"}
    env["TMPDIR"] = str(scratch)
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "hook_overhead.py"), "--rounds", "2", "--batch", "5",
                           "--warmup", "1"], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "should_compress" in proc.stdout
    assert list(scratch.iterdir()) == []


@pytest.fixture
def hook_overhead(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import hook_overhead as module

    return module


def test_worker_cpu_per_event_starts_with_the_store_writer_idle(hook_overhead, tmp_path):
    engines = {"full": hook_overhead.build("full", str(tmp_path))}
    engine, telemetry = engines["full"]
    try:
        store = telemetry.store
        pending_at_start = []
        real_should_compress = engine.should_compress
        state = {"first": True}

        class Probe:
            """The engine as the benchmark sees it: notes, at each repeat's first queued call, the
            rows the store writer still had to write."""

            def should_compress(self, prompt_tokens=None):
                if state["first"]:
                    state["first"] = False
                    pending_at_start.append(len(store._queue) + len(store._pending) + store._busy)
                return real_should_compress(prompt_tokens)

        # rows of an "earlier phase" left to the writer, as the busy test leaves its 40,000
        for _ in range(3000):
            engine.should_compress(1000)
        telemetry.recorder.flush(60)

        probe = Probe()
        real_flush = telemetry.recorder.flush

        def flush_and_rearm(timeout):
            state["first"] = True
            return real_flush(timeout)

        telemetry.recorder.flush = flush_and_rearm
        try:
            median, each = hook_overhead.worker_cpu_per_event({"full": (probe, telemetry)}, 200, repeats=3)
        finally:
            telemetry.recorder.flush = real_flush
        assert len(each) == 3 and median in each
        assert pending_at_start and all(n == 0 for n in pending_at_start), pending_at_start
    finally:
        telemetry.shutdown()


def test_worker_thread_benchmark_times_the_processor_in_this_thread(monkeypatch):
    """benchmarks/worker_thread.py stops the worker thread and runs the captured batches here: every
    event is processed (its rows reach the store), and the figure is this thread's CPU."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import worker_thread

    figures = worker_thread.measure("should_compress", 2, True)
    assert len(figures) == 2 and all(0 < f < 10_000 for f in figures), figures


def test_agent_process_counts_a_threads_cpu_below_a_clock_tick(monkeypatch):
    """The observer's threads spend a few ms each in a one-shot; /proc's tick counts (10 ms) read
    that as 0 or 10 ms. The benchmark reads each thread's CPU-time clock instead."""
    import threading
    import time

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import agent_process

    burnt, release = threading.Event(), threading.Event()

    def burn():
        start = time.thread_time()
        while time.thread_time() - start < 0.004:
            pass
        burnt.set()
        release.wait(30)

    t = threading.Thread(target=burn, name="observed-engine-burner")
    t.start()
    try:
        assert burnt.wait(30)
        cpu = agent_process._thread_cpu_s(t)
        assert 0.004 <= cpu < 0.009, cpu
    finally:
        release.set()
        t.join(30)


def test_memory_benchmark_measures_an_observed_session_and_the_helper(tmp_path):
    """``memory.py``'s observed runs get the observed engine (it stops otherwise), the session
    compresses (so the token helper ran and its own RSS is read), and the gateway run samples the
    process's RSS as it goes."""
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "memory.py"), "--rounds", "1", "--turns", "6",
         "--sessions", "2", "--sample-every", "1"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    observed = next(line for line in lines if line.strip().startswith("observed  RSS"))
    helper_rss = float(observed.split("token helper RSS")[1].split()[0])
    assert helper_rss > 10, observed              # the helper process was found and measured
    assert "compressions 0" not in observed
    assert any(line.strip().startswith("observed  RSS after 1:") for line in lines), proc.stdout
