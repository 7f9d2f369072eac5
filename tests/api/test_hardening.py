"""Faults real deployments hit (issue 13): each test failed before its fix.

* identifiers that cannot be encoded (a lone surrogate from a header) or printed
  (``__str__`` raises) break neither /metrics, nor OTLP, nor the store, nor the hook;
* non-finite and out-of-range numbers in the config are rejected like any bad value;
* the usage gauges run no engine code on the scrape thread;
* a thread that cannot be started never raises into the host, and is started later.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.engines import KwargsEngine, NarrowEngine
from support.engines import agent_transcript as transcript
from support.otlp_receiver import OtlpReceiver
from support.paths import TESTS
from support.servers import free_port

import observed_engine
from observed_engine import observe
from observed_engine.api import pipeline_of
from observed_engine.settings import Settings, SettingsError

SURROGATE = "\udcff"          # what aiohttp's surrogateescape makes of a 0xff header byte


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        return response.read().decode()


class OddNames(KwargsEngine):
    @property
    def name(self) -> str:
        return f"eng{SURROGATE}"


def test_lone_surrogates_break_neither_metrics_nor_otlp_nor_the_store(store_path, caplog):
    port = free_port()
    with OtlpReceiver(grpc_enabled=False) as receiver, caplog.at_level(logging.WARNING):
        engine = observe(OddNames(), settings={
            "prometheus": {"enabled": True, "port": port}, "store": {"path": str(store_path)},
            "otlp": {"enabled": True, "protocol": "http/protobuf", "endpoint": receiver.http_endpoint,
                     "export_interval_seconds": 0.2}})
        engine.on_session_start(f"session{SURROGATE}", platform="api")
        engine.handle_tool_call(f"tool{SURROGATE}", {"query": "q"})
        engine.compress(transcript(10))
        assert observed_engine.flush(10.0)
        text = _scrape(port)
        families = {f.name for f in text_string_to_metric_families(text)}
        assert "hermes_context_engine_hook_calls" in families
        assert 'engine="eng\ufffd"' in text
        deadline = time.monotonic() + 10
        while "context_engine.compress" not in receiver.span_names() and time.monotonic() < deadline:
            time.sleep(0.05)
        compress = receiver.spans_named("context_engine.compress")
        assert compress and compress[0].attributes["gen_ai.conversation.id"] == "session\ufffd"
        assert receiver.spans_named("execute_tool tool\ufffd")
    rows = sqlite3.connect(str(store_path)).execute("SELECT session, engine, hook, reason FROM events").fetchall()
    assert ("session\ufffd", "eng\ufffd", "handle_tool_call", "tool\ufffd") in rows
    assert not [r for r in caplog.records if r.exc_info]          # not one traceback


class Unprintable:
    def __str__(self):
        raise ValueError("no text for you")

    __repr__ = __str__


def test_a_tool_name_whose_str_raises_reaches_the_engine_as_it_does_bare(observe_engine, finished_spans):
    bare, observed = KwargsEngine(), observe_engine(KwargsEngine())
    name = Unprintable()
    outcomes = []
    for engine in (bare, observed):
        try:
            outcomes.append(("ok", engine.handle_tool_call(name, {"query": "x"})))
        except Exception as exc:   # noqa: BLE001 - compared below
            outcomes.append(("raised", type(exc)))
    assert outcomes[0] == outcomes[1]
    names = [s.name for s in finished_spans()]
    assert names == ["execute_tool <unprintable Unprintable>"]


@pytest.mark.parametrize("key, value", [
    ("compress_timeout_seconds", float("nan")), ("compress_timeout_seconds", float("inf")),
    ("compress_timeout_seconds", 1e308), ("compress_timeout_seconds", "nan"),
    ("queue_size", 10 ** 12), ("max_label_values", 10 ** 9),
])
def test_non_finite_or_huge_numbers_are_rejected(key, value):
    with pytest.raises(SettingsError, match=key):
        Settings.from_mapping({key: value})


@pytest.mark.parametrize("section, key", [("otlp", "export_interval_seconds"), ("otlp", "timeout_seconds"),
                                          ("store", "retention_days")])
def test_non_finite_numbers_in_sections_are_rejected(section, key):
    for value in (float("nan"), float("inf"), "-inf"):
        with pytest.raises(SettingsError, match=f"{section}.{key}"):
            Settings.from_mapping({section: {key: value}})


def test_a_nan_timeout_in_config_yaml_falls_back_to_the_default(hermes_home, caplog):
    """Through the plugin: one error naming the key, the default deadline, no timeout reported."""
    from observed_engine import hermes_plugin

    config = {"observed": {"compress_timeout_seconds": float("nan"), "store": False},
              "compression": {"context_timeout_seconds": float("inf")}}
    with caplog.at_level(logging.ERROR, logger="observed_engine.plugin"):
        section = hermes_plugin.observed_section(config)
    assert [r for r in caplog.records if "compress_timeout_seconds" in r.getMessage()]
    engine = observe(NarrowEngine(), settings=section)
    assert pipeline_of(engine).compress_timeout == 120.0
    engine.compress(transcript(10))
    assert observed_engine.flush(5.0)
    assert pipeline_of(engine).watchdog.threads_started == 1


class LockedState(NarrowEngine):
    """``last_prompt_tokens`` is a property guarded by the lock its compress() holds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    @property
    def last_prompt_tokens(self):
        with self._lock:
            return self.__dict__.get("_prompt", 0)

    @last_prompt_tokens.setter
    def last_prompt_tokens(self, value):
        self.__dict__["_prompt"] = value

    def compress(self, messages, current_tokens=None, focus_topic=None):
        with self._lock:
            self.entered.set()
            self.release.wait(10)
            return super().compress(messages, current_tokens, focus_topic)


def test_a_scrape_during_compress_runs_no_engine_code(store_path):
    port = free_port()
    engine = observe(LockedState(), settings={"prometheus": {"enabled": True, "port": port},
                                              "store": {"path": str(store_path)}})
    worker = threading.Thread(target=engine.compress, args=(transcript(10),))
    worker.start()
    try:
        assert engine.entered.wait(5)
        t0 = time.monotonic()
        text = _scrape(port)                       # blocked for the whole compress before the fix
        assert time.monotonic() - t0 < 2.0
        assert 'hermes_context_compression_in_flight{engine="narrow"' in text
        in_flight = [line for line in text.splitlines()
                     if line.startswith("hermes_context_compression_in_flight{")]
        assert in_flight and in_flight[0].rstrip().endswith(" 1.0")
    finally:
        engine.release.set()
        worker.join(10)


def test_a_watchdog_thread_that_cannot_start_is_started_by_a_later_call(observe_engine, monkeypatch, caplog):
    bare, engine = NarrowEngine(), observe_engine(NarrowEngine())
    real_start = threading.Thread.start

    def refuse_watchdog(self):
        if self.name == "observed-engine-watchdog":
            raise RuntimeError("can't start new thread")
        return real_start(self)

    monkeypatch.setattr(threading.Thread, "start", refuse_watchdog)
    messages = transcript(10)
    with caplog.at_level(logging.WARNING, logger="observed_engine"):
        assert engine.compress(list(messages)) == bare.compress(list(messages))      # raised before the fix
    assert [r for r in caplog.records if "watchdog thread" in r.getMessage()]
    watchdog = pipeline_of(engine).watchdog
    assert watchdog.threads_started == 0
    monkeypatch.setattr(threading.Thread, "start", real_start)
    engine.compress(list(messages))
    assert watchdog.threads_started == 1
    assert observed_engine.flush(5.0)


def test_flush_with_an_unbounded_timeout_does_not_overflow(observe_engine):
    engine = observe_engine(NarrowEngine())
    engine.should_compress(1)
    assert observed_engine.flush(float("inf"))


ONE_SHOT = r'''
import os, sys
sys.path.insert(0, {tests!r})
from observed_engine import observe
from support.engines import NarrowEngine, agent_transcript as transcript
engine = observe(NarrowEngine(), settings={{
    "store": {{"path": {store!r}}},
    "otlp": {{"enabled": True, "protocol": "http/protobuf", "endpoint": {endpoint!r}}}}})
engine.on_session_start("one-shot", platform="cli")
engine.update_from_response({{"prompt_tokens": 1234, "completion_tokens": 5}})
engine.compress(transcript(10))
engine.on_session_end("one-shot", [])
os._exit(0)          # what `hermes -z` does: no atexit handler runs
'''


def test_one_shot_exit_after_on_session_end_loses_nothing(tmp_path):
    """``hermes -z`` ends with os._exit() after on_session_end: the end of the telemetry was lost."""
    import subprocess
    import sys

    store = tmp_path / "one-shot.sqlite"
    with OtlpReceiver(grpc_enabled=False) as receiver:
        code = ONE_SHOT.format(tests=str(TESTS), store=str(store), endpoint=receiver.http_endpoint)
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
        took = time.monotonic() - t0
        spans = receiver.span_names()
    hooks = [h for (h,) in sqlite3.connect(str(store)).execute("SELECT hook FROM events ORDER BY id")]
    assert hooks == ["on_session_start", "update_from_response", "compress", "on_session_end"]
    assert {"context_engine.update_from_response", "context_engine.compress",
            "context_engine.on_session_end"} <= spans
    assert took < 30


STARVED_ONE_SHOT = r'''
import os, signal, sys, time
sys.path.insert(0, {tests!r})
from observed_engine import observe
from observed_engine.tokens import counter_for, helper
from support.engines import NarrowEngine, agent_transcript as transcript
engine = observe(NarrowEngine(), settings={{
    "store": {{"path": {store!r}}},
    "otlp": {{"enabled": True, "protocol": "http/protobuf", "endpoint": {endpoint!r}}}}})
counter_for("auto", None)                     # the worker's counter: its helper process is started
(pid,) = [h.pid for h in helper._HELPERS.values()]
print(pid, flush=True)
os.kill(pid, signal.SIGSTOP)                  # what a busy machine does to an idle-class process
engine.on_session_start("one-shot", platform="cli")
engine.update_from_response({{"prompt_tokens": 1234, "completion_tokens": 5}})
engine.compress(transcript(10))
t0 = time.monotonic()
engine.on_session_end("one-shot", [])
print(time.monotonic() - t0, flush=True)
os._exit(0)
'''


def test_a_one_shot_loses_nothing_while_the_token_helper_gets_no_cpu(tmp_path):
    """Under load the token-counting helper (idle scheduling class) got no CPU: the worker waited for
    its counts through the whole delivery budget of on_session_end, and a one-shot's os._exit() lost
    the compress and on_session_end rows and spans. The helper is stopped here (SIGSTOP), which is
    starvation made certain; the counts of that call are then the labelled estimate."""
    import signal
    import subprocess
    import sys

    store = tmp_path / "starved.sqlite"
    with OtlpReceiver(grpc_enabled=False) as receiver:
        code = STARVED_ONE_SHOT.format(tests=str(TESTS), store=str(store),
                                       endpoint=receiver.http_endpoint)
        proc = subprocess.run([sys.executable, "-c", code], check=True, timeout=60, stdout=subprocess.PIPE,
                              text=True)
        helper_pid, took = proc.stdout.split()
        try:
            os.kill(int(helper_pid), signal.SIGKILL)       # stopped, it would never read its end-of-file
        except ProcessLookupError:
            pass
        spans = receiver.span_names()
        estimates = receiver.metrics_named("hermes.context_engine.token_estimates")
    rows = sqlite3.connect(str(store)).execute("SELECT hook, tokenizer, tokens_before FROM events ORDER BY id")
    rows = list(rows)
    assert [r[0] for r in rows] == ["on_session_start", "update_from_response", "compress", "on_session_end"]
    assert rows[2][1] == "estimate" and rows[2][2] > 0       # said, and counted the estimate's way
    assert {"context_engine.update_from_response", "context_engine.compress",
            "context_engine.on_session_end"} <= spans
    assert float(took) < 1.5            # the delivery budget (1 s), not the helper's 60 s timeout
    points = [p for m in estimates for p in m.points]
    assert points and points[-1].attributes == {"engine": "narrow", "reason": "helper_busy"}
    assert points[-1].value == 1        # counted apart: nothing of ours failed


def test_what_an_exit_cannot_deliver_is_said(store_path, caplog):
    engine = observe(NarrowEngine(), settings={"store": {"path": str(store_path)}})
    engine.should_compress(1)
    assert observed_engine.flush(5.0)
    blocker = sqlite3.connect(str(store_path), timeout=0.1, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")              # another writer holds the file
    try:
        for i in range(50):
            engine.should_compress(i)
        pipeline = pipeline_of(engine)
        pipeline.recorder.flush(5.0)                    # the rows reach the store writer, which cannot write
        with caplog.at_level(logging.WARNING, logger="observed_engine"):
            pipeline.shutdown(0.5)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    said = [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()]
    assert len(said) == 1 and "50 store rows" in said[0], said


def _child_calls(engine, conn) -> None:
    for i in range(1000):
        engine.should_compress(i)
    engine.on_session_end("child", [])
    conn.send((os.getpid(), observed_engine.flush(10.0)))
    conn.close()


def test_a_forked_child_delivers_its_own_telemetry(store_path):
    """After fork() the child's telemetry was silently lost: 0 of 1,002 rows, flush() False."""
    import multiprocessing

    engine = observe(NarrowEngine(), settings={"store": {"path": str(store_path)}})
    engine.should_compress(1)
    engine.should_compress(2)                       # queued in the parent when it forks: the parent's
    context = multiprocessing.get_context("fork")
    parent_end, child_end = context.Pipe()
    child = context.Process(target=_child_calls, args=(engine, child_end))
    child.start()
    child_pid, flushed = parent_end.recv()
    child.join(30)
    assert child.exitcode == 0 and flushed is True
    assert observed_engine.flush(5.0)
    rows = dict(sqlite3.connect(str(store_path)).execute("SELECT pid, COUNT(*) FROM events GROUP BY pid"))
    assert rows[child_pid] == 1001                  # its 1,000 should_compress and its on_session_end
    assert rows[os.getpid()] == 2


class Recursing(NarrowEngine):
    def should_compress(self, prompt_tokens=0):
        self.depth = prompt_tokens
        return self.should_compress(prompt_tokens + 1)


def test_the_one_inherent_difference_is_documented_recursion_depth():
    """Each traced hook adds one frame: recursion through its own hook stops at half the depth
    (README, 'The Python API'). Pinned so a second frame per hook would be noticed."""
    depths = []
    # (no spans: 500 exception events with 500-frame tracebacks are slow to format, off the hook path)
    for engine in (Recursing(), observe(Recursing(), settings={"traces": False, "store": False})):
        with pytest.raises(RecursionError):
            engine.should_compress(0)
        depths.append(engine.depth)
    bare, observed = depths
    assert observed >= bare // 2 - 5


def test_a_compress_call_the_signature_rejects_is_not_a_compress(observe_engine, finished_spans, metric_points):
    """Hermes <= 0.18.2 calls compress(..., force=True) and retries without force on TypeError: for an
    engine without ``force`` every compaction recorded an ERROR span and an error count (issue 14.3)."""
    bare, engine = NarrowEngine(), observe_engine(NarrowEngine())
    messages = transcript(12)
    for twin in (bare, engine):
        with pytest.raises(TypeError) as raised:
            twin.compress(list(messages), current_tokens=5, force=True)
        assert "force" in str(raised.value)
    assert engine.compress(list(messages), current_tokens=5) == bare.compress(list(messages), current_tokens=5)
    spans = [s for s in finished_spans() if s.name == "context_engine.compress"]
    assert len(spans) == 1 and spans[0].status.is_ok
    calls = metric_points("hermes.context_engine.hook.calls")
    assert {dict(k)["outcome"]: v for k, v in calls.items() if dict(k)["hook"] == "compress"} == {"ok": 1}


class StatusEngine(NarrowEngine):
    """Reads its own name in get_status() and a tool result, as agentic-memory, LCM and context-tuner do."""

    name = "status-engine"

    def get_status(self):
        return {"engine": self.name}

    def handle_tool_call(self, name, args, **kwargs):
        return json.dumps({"engine": self.name, "tool": name})


def test_the_engine_reads_its_own_name_while_the_host_reads_observed():
    """The generated class replaced ``name``, so the engine's own self.name read "observed" (issue 14.7)."""
    engine = observe(StatusEngine(), settings={"name": "observed", "store": False})
    assert engine.name == "observed"                               # what the host selects by
    assert engine.get_status() == {"engine": "status-engine"}
    assert json.loads(engine.handle_tool_call("t", {})) == {"engine": "status-engine", "tool": "t"}


def _session_ends(engine, n: int) -> float:
    t0 = time.monotonic()
    for i in range(n):
        engine.on_session_start(f"s{i}", platform="cli")
        engine.on_session_end(f"s{i}", [])
    return time.monotonic() - t0


def test_session_ends_do_not_each_wait_their_budget_while_the_store_is_locked(store_path):
    """Each on_session_end waited its whole delivery budget (1 s) while another writer held the
    store: a gateway ending 20 sessions paid 20 s. Once the writer's batch has failed, the rows are
    held for its retry and nobody waits for them; they all arrive when the lock goes."""
    engine = observe(NarrowEngine(), settings={"store": {"path": str(store_path)}})
    engine.should_compress(1)
    assert observed_engine.flush(5.0)
    writer = pipeline_of(engine).store
    blocker = sqlite3.connect(str(store_path), timeout=0.1, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")              # another writer holds the file
    try:
        engine.should_compress(2)
        assert observed_engine.flush(0.2) is False
        deadline = time.monotonic() + 30
        while not writer._pending and time.monotonic() < deadline:   # the busy timeout runs out:
            time.sleep(0.05)                                         # the batch failed, held for a retry
        assert writer._pending
        took = _session_ends(engine, 20)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert took < 2.0, f"20 session ends took {took:.1f} s with the store locked"
    assert observed_engine.flush(30.0)
    assert not writer.failing
    rows = sqlite3.connect(str(store_path)).execute("SELECT COUNT(*) FROM events").fetchone()[0]
    assert rows == 1 + 1 + 40                        # nothing was lost while nobody waited


def test_session_ends_do_not_each_wait_their_budget_for_a_black_holed_collector(store_path):
    """An OTLP endpoint that accepts connections and never answers: the first session end waits
    its budget for the span flush, the later ones do not wait for that same flush again."""
    import socket

    hole = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)                                   # accepted by the kernel, never read
    try:
        engine = observe(NarrowEngine(), settings={
            "store": {"path": str(store_path)},
            "otlp": {"enabled": True, "protocol": "http/protobuf", "timeout_seconds": 20,
                     "endpoint": f"http://127.0.0.1:{hole.getsockname()[1]}"}})
        took = _session_ends(engine, 10)
        assert took < 4.0, f"10 session ends took {took:.1f} s with a black-holed collector"
        # the store is healthy: its rows were delivered all the same
        rows = sqlite3.connect(str(store_path)).execute("SELECT COUNT(*) FROM events").fetchone()[0]
        assert rows == 20
    finally:
        pipeline_of(engine).shutdown(1.0)
        hole.close()
