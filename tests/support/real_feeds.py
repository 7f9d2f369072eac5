"""Real feeds for the dashboard tests: the demo's observed engines, driven for real.

Two feeds, each run in a child process (the demo patches the built-in compressor's
``call_llm`` module-wide and starts pipelines; none of that may leak into the test
process):

* :func:`feed_real_session` -- the store feed. ``observed_engine.demo.build_engines``
  (Hermes' real ``ContextCompressor`` with the offline summariser, and the demo's
  ``topic-router`` engine with ``select_context``) observed into a SQLite store, driven
  by :func:`drive`: a deterministic scripted traffic of :data:`SCRIPT` sessions. Per
  :data:`SUMMARY_PLAN`, one summary is slower than the compress deadline
  (``deadline_exceeded`` + ``late_completion``) and the summary model fails in two sessions
  (``call_llm`` raises a server error, then a 401): the built-in compressor returns anyway,
  with a fallback summary and with an abort (``summary_failure`` rows); the router answers
  garbage now and then (``fail_open``).
  Then ``observed_engine.flush()`` and ``shutdown()``. Returns :class:`StoreFacts`,
  read back from the store with plain ``sqlite3`` (never through the dashboard).
* :class:`EngineExporter` -- the Prometheus feed: the same engines with the engine's
  own ``/metrics`` exporter (``prometheus: {enabled: true}``, no store, no providers
  passed), driven by the same traffic in two passes. The warm-up pass runs before
  Prometheus starts, so every series exists (with its first value) when Prometheus
  first scrapes; the main pass runs on :meth:`EngineExporter.drive` while Prometheus
  scrapes. ``increase()`` over the range then sees exactly the main pass's counts,
  times Prometheus' extrapolation factor: :meth:`EngineExporter.count_range`.

``python tests/support/real_feeds.py store PATH`` / ``exporter PORT`` is the child side.
"""

from __future__ import annotations

import copy
import json
import math
import os
import queue
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[2]
if __name__ == "__main__":   # the child side, run as a script: make tests/support importable as ``support``
    sys.path.insert(0, str(ROOT / "tests"))

from support.llm import ProviderError  # noqa: E402
from support.servers import listener_pids  # noqa: E402

# -- the scripted traffic (shared by both feeds) -------------------------------------------

SCRIPT: Tuple[str, ...] = ("compressor", "topic-router", "compressor", "topic-router", "compressor")
TURNS = 24                  # per session: one compression of each compressor session
SEED = 6
CONTEXT_LENGTH = 64_000
DEADLINE_S = 0.5            # compress_timeout_seconds
SLOW_SECONDS = 1.0          # a slow summary takes twice the deadline
TAG_RATE = 0.75             # untagged turns: the router leaves the request unchanged


# What the summary model does in each session of SCRIPT (by index; others answer at once):
# "slow" answers after SLOW_SECONDS (past the compress deadline); an exception is raised by
# call_llm, and the built-in ContextCompressor does what it does then, without raising:
# a server error -> a deterministic fallback summary (kind fallback_summary, cause other);
# a 401 -> it aborts and keeps the messages (kind aborted, cause auth).
SUMMARY_PLAN: Dict[int, Any] = {
    0: RuntimeError("upstream exploded (500)"),
    2: "slow",
    4: ProviderError("Error code: 401 - invalid api key", status_code=401),
}

TIMEOUT_EVENTS = ("deadline_exceeded", "host_reported", "late_completion")
INCIDENT_EVENTS = TIMEOUT_EVENTS + ("fail_open", "summary_failure")
COMPRESS_OUTCOMES = ("compressed", "noop", "error", "timeout")
SELECTION_RESULTS = ("unchanged", "same_selection", "changed_selection", "fail_open")
SUMMARY_KINDS = ("fallback_summary", "aborted")
SUMMARY_CAUSES = ("auth", "network", "other")
# the dashboard's incident event for a summary_failure row of each kind
SUMMARY_EVENTS = {"fallback_summary": "summary_fallback", "aborted": "summary_aborted"}


def incident_event(row: Dict[str, Any]) -> str:
    """The event name the dashboard shows for an incident row of the store."""
    if row["event"] == "summary_failure":
        return SUMMARY_EVENTS[row["outcome"]]
    return row["event"]


def _vocabulary() -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    from observed_engine import demo

    # The demo's words without the topic names ("cache" is both): an untagged message then
    # names no topic, and the router returns None (the request is left unchanged).
    words = tuple(w for w in demo.WORDS if not any(t in w for t in demo.TOPICS))
    return demo.TOPICS, words


def drive(engines: Dict[str, Any], prefix: str, keep: Optional[list] = None,
          summariser: Any = None) -> List[str]:
    """Run :data:`SCRIPT` through ``engines`` the way the host does; returns the session ids.

    Per session: a copy of the engine (the host deep-copies plugin engines per agent),
    update_model, on_session_start, then per turn select_context (engines that have it),
    update_from_response, should_compress -> compress (and the host's
    ``last_prompt_tokens = -1``), and on_session_end. ``summariser`` gets the session's
    entry of :data:`SUMMARY_PLAN` first."""
    topics, words = _vocabulary()
    ids = []
    for i, name in enumerate(SCRIPT):
        if summariser is not None:
            summariser.plan = SUMMARY_PLAN.get(i)
        rng = random.Random(SEED * 1000 + i)
        engine = copy.deepcopy(engines[name])
        if keep is not None:
            keep.append(engine)          # the exporter's gauges follow live engines
        session_id = f"{prefix}-{i + 1}-{name}"
        ids.append(session_id)
        engine.update_model(model="gpt-4o", context_length=CONTEXT_LENGTH)
        engine.on_session_start(session_id, model="gpt-4o", platform="test")
        messages: List[Dict[str, Any]] = [{"role": "system", "content": "You are a test agent."}]
        for _turn in range(TURNS):
            tag = f"[{rng.choice(topics)}] " if rng.random() < TAG_RATE else ""
            user = {"role": "user", "content": tag + " ".join(rng.choice(words)
                                                              for _ in range(rng.randint(200, 900)))}
            messages.append(user)
            if hasattr(engine, "select_context"):
                engine.select_context(list(messages), conversation_messages=messages, incoming_message=user,
                                      budget_tokens=engine.threshold_tokens)
            reply = {"role": "assistant", "content": " ".join(rng.choice(words)
                                                               for _ in range(rng.randint(400, 1600)))}
            messages.append(reply)
            prompt = sum(len(str(m.get("content") or "")) for m in messages) // 4 + 4 * len(messages)
            completion = len(reply["content"]) // 4
            engine.update_from_response({
                "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                "cache_read_tokens": int(prompt * rng.uniform(0.3, 0.9)),
                "cache_write_tokens": rng.randint(0, 2000), "reasoning_tokens": rng.randint(0, 300),
            })
            if engine.should_compress(prompt):
                messages = engine.compress(messages, current_tokens=prompt)
                engine.last_prompt_tokens = -1
        engine.on_session_end(session_id, messages)
    return ids


def _scripted_summariser():
    # The built-in classifies a summary error with the provider SDK (openai), imported lazily on the
    # first failure (~1.5 s, past the compress deadline); a real host has loaded it long before.
    import openai  # noqa: F401

    from observed_engine import demo

    class _Scripted(demo.OfflineSummariser):
        """The demo's offline summariser, told per session (``plan``) to be slow or to fail."""

        plan: Any = None
        failures = 0

        def __call__(self, *args, **kwargs):
            plan = self.plan
            if isinstance(plan, BaseException):
                with self._lock:
                    self.failures += 1
                raise copy.copy(plan)
            if plan == "slow":
                time.sleep(SLOW_SECONDS)
            return super().__call__(*args, **kwargs)

    return _Scripted(slow_every=0, slow_seconds=0.0)


def _build(settings: Dict[str, Any]):
    from observed_engine import demo

    summariser = _scripted_summariser()
    return demo.build_engines(settings, summariser, context_length=CONTEXT_LENGTH), summariser


# -- the child side -------------------------------------------------------------------------

def _child_store(path: str) -> int:
    import observed_engine

    engines, summariser = _build({"store": {"path": path}, "compress_timeout_seconds": DEADLINE_S})
    ids = drive(engines, "real", summariser=summariser)
    ok = observed_engine.flush(30.0)
    observed_engine.shutdown(10.0)
    print(json.dumps({"sessions": ids, "summaries": summariser.calls, "failed_summaries": summariser.failures,
                      "flushed": ok}), flush=True)
    return 0 if ok else 1


def _child_exporter(port: int) -> int:
    import observed_engine
    from observed_engine.capture import observed_meta

    engines, summariser = _build({
        "prometheus": {"enabled": True, "host": "127.0.0.1", "port": port},
        "store": {"enabled": False}, "compress_timeout_seconds": DEADLINE_S,
    })
    keep: list = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    drive(engines, "warm", keep, summariser)
    observed_engine.flush(30.0)
    # the engine goes on without /metrics when it cannot listen (fail open); this feed must not
    addresses = {observed_meta(e).pipeline.built.prometheus_address for e in engines.values()}
    if addresses != {("127.0.0.1", port)}:
        print(f"/metrics is not served on 127.0.0.1:{port}: {addresses}", file=sys.stderr, flush=True)
        return 1
    print("READY", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "go":
            drive(engines, "main", keep, summariser)
            observed_engine.flush(30.0)
            print("DONE", flush=True)
        elif cmd == "quit":
            break
    observed_engine.shutdown(5.0)
    return 0


def _child_env(home: Path) -> dict:
    env = dict(os.environ, HERMES_HOME=str(home), PYTHONUNBUFFERED="1")
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
        env.pop(var, None)
    return env


# -- the store feed -------------------------------------------------------------------------

def feed_real_session(path: Path, now: Optional[float] = None, timeout: float = 120.0) -> StoreFacts:
    """Fill the store at ``path`` from a real observed session; the facts read back from it.
    (``now`` is ignored: the rows carry the real times of the calls.)"""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="real-feed-home-") as home:
        proc = subprocess.run([sys.executable, str(Path(__file__)), "store", str(path)], cwd=ROOT,
                              env=_child_env(Path(home)), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"real session feed failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}")
    facts = store_facts(path)
    facts.check_real_session()
    return facts


def copy_store(src: Path, dst: Path) -> Path:
    """A consistent copy of a store (SQLite's backup API: WAL content included)."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    source = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    target = sqlite3.connect(str(dst))
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()
    return dst


def percentiles(values: Sequence[float], qs=(50, 95, 99)) -> List[Optional[float]]:
    """Nearest-rank percentiles (what the store source computes below its sampling size)."""
    import numpy as np

    if not values:
        return [None] * len(qs)
    return [float(v) for v in np.percentile(np.asarray(values, dtype=float), list(qs), method="inverted_cdf")]


@dataclass
class StoreFacts:
    """What a store holds, counted with plain sqlite3: what each dashboard view must show."""

    path: Path
    events: int
    engines: List[str]
    sessions: List[str]                                  # most recently active first
    session_engine: Dict[str, str]                       # the engine of each session's last row
    compress: Dict[str, Dict[str, int]]                  # engine -> outcome -> count (timeout: deadline rows)
    compress_durations: Dict[str, List[float]]           # engine -> compress() call durations
    compressed_tokens: Dict[str, List[Tuple[int, int]]]  # engine -> (before, after) of compressed calls
    selections: Dict[str, Dict[str, int]]                # engine -> result -> count
    cache_lost: Dict[str, int]
    incidents: List[Dict[str, Any]]                      # timeout / fail-open / summary-failure rows, newest
    #                                                      first; event as the dashboard names it (incident_event)
    hook_calls: Dict[Tuple[str, str], int]
    hook_errors: Dict[Tuple[str, str], int]
    hook_durations: Dict[Tuple[str, str], List[float]]
    usage: Dict[str, List[Tuple[float, int, int, int]]]  # session -> (ts, prompt, threshold, window), in order
    marks: Dict[str, List[Dict[str, Any]]]               # session -> compress rows as the sawtooth marks them
    compress_errors: List[float] = field(default_factory=list)   # ts of compress() calls that raised
    # engine -> (kind, cause) -> summary_failure rows (compress() returned although its summary model failed)
    summary_failures: Dict[str, Dict[Tuple[str, str], int]] = field(default_factory=dict)
    first_ts: float = 0.0
    last_ts: float = 0.0

    # -- derived ---------------------------------------------------------------

    def count(self, event: str, engine: Optional[str] = None) -> int:
        return sum(1 for r in self.incidents if r["event"] == event and (engine is None or r["engine"] == engine))

    @property
    def timeouts(self) -> int:
        return self.count("deadline_exceeded") + self.count("host_reported")

    @property
    def fail_opens(self) -> int:
        return self.count("fail_open")

    def summary_total(self, kind: Optional[str] = None, cause: Optional[str] = None,
                      engine: Optional[str] = None) -> int:
        return sum(n for e, by in self.summary_failures.items() if engine is None or e == engine
                   for (k, c), n in by.items() if (kind is None or k == kind) and (cause is None or c == cause))

    def compressions(self, engine: Optional[str] = None) -> int:
        return sum(sum(c.values()) for e, c in self.compress.items() if engine is None or e == engine)

    def outcome_total(self, outcome: str) -> int:
        return sum(c.get(outcome, 0) for c in self.compress.values())

    def selection_total(self, result: Optional[str] = None) -> int:
        return sum((sum(s.values()) if result is None else s.get(result, 0)) for s in self.selections.values())

    def engine_sessions(self, engine: str) -> List[str]:
        return [s for s in self.sessions if self.session_engine[s] == engine]

    def latest_usage(self, session: str) -> Optional[Tuple[float, int, int, int]]:
        rows = self.usage.get(session) or []
        return rows[-1] if rows else None

    def highest_usage(self, sessions: Optional[Sequence[str]] = None) -> Tuple[Optional[str], Optional[float]]:
        """(session, prompt / window of its latest response), the highest of ``sessions``."""
        best: Tuple[Optional[str], Optional[float]] = (None, None)
        for s in (self.sessions[:20] if sessions is None else sessions):
            u = self.latest_usage(s)
            if u and u[3]:
                ratio = u[1] / u[3]
                if best[1] is None or ratio > best[1]:
                    best = (s, ratio)
        return best

    def compressed_in(self, session: str) -> int:
        return sum(1 for m in self.marks.get(session, []) if m["outcome"] == "compressed")

    def alerts(self, now: float, window_s: float = 15 * 60, near: float = 0.9,
               summary_window_s: float = 30 * 60) -> set:
        """The alert names the store source derives (deploy/'s rules over the last 15 minutes; summary
        failures over the last 30, as HermesContextSummaryFailing)."""
        lo = now - window_s
        out = set()
        recent = [r for r in self.incidents if r["ts"] >= lo]
        if any(r["event"] in SUMMARY_EVENTS.values() and r["ts"] >= now - summary_window_s for r in self.incidents):
            out.add("HermesContextSummaryFailing")
        if any(r["event"] in ("deadline_exceeded", "host_reported") for r in recent):
            out.add("HermesContextCompressionTimeout")
        if any(r["event"] == "fail_open" for r in recent):
            out.add("HermesContextEngineFailOpen")
        if any(t >= lo for t in self.compress_errors):
            out.add("HermesContextCompressionErrors")
        for _s, rows in self.usage.items():
            rows = [r for r in rows if r[0] >= lo]
            if rows and rows[-1][1] and rows[-1][3] and rows[-1][1] >= near * rows[-1][3]:
                out.add("HermesContextNearWindow")
        return out

    def session_with(self, event: str) -> str:
        return next(r["session"] for r in self.incidents if r["event"] == event)

    # -- what a real session must have produced ---------------------------------

    def check_real_session(self) -> None:
        problems = []
        if self.engines != ["compressor", "topic-router"]:
            problems.append(f"engines {self.engines}")
        if len(self.sessions) < 3:
            problems.append(f"only {len(self.sessions)} sessions")
        if self.compress.get("compressor", {}).get("compressed", 0) < 1:
            problems.append("no compressed outcome from the built-in compressor")
        for event in ("deadline_exceeded", "late_completion", "fail_open"):
            if not self.count(event):
                problems.append(f"no {event} row")
        for plan in SUMMARY_PLAN.values():
            if isinstance(plan, BaseException):
                kind, cause = ("aborted", "auth") if isinstance(plan, ProviderError) else ("fallback_summary", "other")
                if not self.summary_failures.get("compressor", {}).get((kind, cause)):
                    problems.append(f"no summary_failure row {kind}/{cause} of the built-in compressor")
        for result in SELECTION_RESULTS:
            if not self.selections.get("topic-router", {}).get(result):
                problems.append(f"no select_context result {result}")
        if problems:
            raise AssertionError(f"the real session at {self.path} lacks: " + "; ".join(problems))


def store_facts(path: Path) -> StoreFacts:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    try:
        rows = [dict(r) for r in conn.execute("SELECT * FROM events ORDER BY ts, id")]
    finally:
        conn.close()
    engines = sorted({r["engine"] for r in rows if r["engine"] is not None})
    last: Dict[str, dict] = {}
    for r in rows:
        if r["session"] is not None:
            last[r["session"]] = r
    sessions = sorted(last, key=lambda s: last[s]["ts"], reverse=True)
    compress: Dict[str, Dict[str, int]] = {}
    durations: Dict[str, List[float]] = {}
    tokens: Dict[str, List[Tuple[int, int]]] = {}
    selections: Dict[str, Dict[str, int]] = {}
    lost: Dict[str, int] = {}
    calls: Dict[Tuple[str, str], int] = {}
    errors: Dict[Tuple[str, str], int] = {}
    hook_d: Dict[Tuple[str, str], List[float]] = {}
    usage: Dict[str, list] = {}
    marks: Dict[str, list] = {}
    summary: Dict[str, Dict[Tuple[str, str], int]] = {}
    for r in rows:
        e, h, ev, out = r["engine"], r["hook"], r["event"], r["outcome"]
        if ev == "call":
            calls[(e, h)] = calls.get((e, h), 0) + 1
            if out == "error":
                errors[(e, h)] = errors.get((e, h), 0) + 1
            if r["duration_s"] is not None:
                hook_d.setdefault((e, h), []).append(r["duration_s"])
        if h == "compress":
            c = compress.setdefault(e, dict.fromkeys(COMPRESS_OUTCOMES, 0))
            if ev == "call":
                if out in ("compressed", "noop", "error"):
                    c[out] += 1
                if r["duration_s"] is not None:
                    durations.setdefault(e, []).append(r["duration_s"])
                if out == "compressed" and r["tokens_before"] is not None:
                    tokens.setdefault(e, []).append((r["tokens_before"], r["tokens_after"]))
            elif ev == "deadline_exceeded":
                c["timeout"] += 1
            if ev == "summary_failure":
                by = summary.setdefault(e, {})
                by[(out, r["reason"])] = by.get((out, r["reason"]), 0) + 1
            if r["session"] is not None and ev != "compression_blocked":     # a state change, not a mark
                mark = out if ev == "call" else ("timeout" if ev == "deadline_exceeded" else incident_event(r))
                marks.setdefault(r["session"], []).append(
                    {"ts": r["ts"], "outcome": mark, "tokens_before": r["tokens_before"],
                     "tokens_after": r["tokens_after"], "duration_s": r["duration_s"]})
        if h == "select_context" and ev == "call":
            s = selections.setdefault(e, dict.fromkeys(SELECTION_RESULTS, 0))
            s[out] = s.get(out, 0) + 1
            lost[e] = lost.get(e, 0) + int(r["cache_lost_tokens"] or 0)
        if h == "update_from_response" and r["session"] is not None:
            usage.setdefault(r["session"], []).append(
                (r["ts"], r["prompt_tokens"], r["threshold_tokens"], r["window_tokens"]))
    incidents = [
        {**{k: r[k] for k in ("ts", "session", "engine", "hook", "reason", "duration_s", "content")},
         "event": incident_event(r)}
        for r in sorted((r for r in rows if r["event"] in INCIDENT_EVENTS), key=lambda r: (r["ts"], r["id"]),
                        reverse=True)
    ]
    compress_errors = [r["ts"] for r in rows if r["hook"] == "compress" and r["event"] == "call"
                       and r["outcome"] == "error"]
    return StoreFacts(
        path=Path(path), events=len(rows), engines=engines, sessions=sessions,
        session_engine={s: last[s]["engine"] for s in sessions}, compress=compress,
        compress_durations=durations, compressed_tokens=tokens, selections=selections, cache_lost=lost,
        incidents=incidents, hook_calls=calls, hook_errors=errors, hook_durations=hook_d, usage=usage,
        marks=marks, compress_errors=compress_errors, summary_failures=summary, first_ts=rows[0]["ts"] if rows else 0.0,
        last_ts=rows[-1]["ts"] if rows else 0.0,
    )


# -- the Prometheus feed ---------------------------------------------------------------------

Series = Dict[Tuple[str, frozenset], float]


def parse_exposition(text: str) -> Series:
    from prometheus_client.parser import text_string_to_metric_families

    out: Series = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = float(s.value)
    return out


class EngineExporter:
    """The engine's own ``/metrics`` in a child process, driven by :func:`drive` in two passes."""

    def __init__(self, workdir: Path, port: int) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port
        self.target = f"127.0.0.1:{port}"
        self.proc: Optional[subprocess.Popen] = None
        self.pid: Optional[int] = None
        self._lines: queue.Queue[str] = queue.Queue()
        self.baseline: Series = {}
        self.final: Series = {}
        self.baseline_seen: Optional[float] = None    # when Prometheus was seen holding the baseline

    # -- process ---------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> EngineExporter:
        log = open(self.workdir / "exporter.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__)), "exporter", str(self.port)], cwd=ROOT,
            env=_child_env(self.workdir / "home"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
            text=True, bufsize=1)
        log.close()
        self.pid = self.proc.pid
        threading.Thread(target=self._read, daemon=True).start()
        self._expect("READY", timeout)
        holders = listener_pids(self.port)
        if holders != {self.pid}:
            raise AssertionError(f"/metrics on {self.target} is served by {sorted(holders)}, not the engine "
                                 f"exporter (pid {self.pid})")
        self.baseline = self.scrape()
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.strip())

    def _expect(self, word: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if line == word:
                return
        raise AssertionError(f"engine exporter never said {word} (exit {self.proc.poll()}):\n{self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        try:
            return (self.workdir / "exporter.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def drive(self, timeout: float = 120.0) -> None:
        """The main pass: the scripted traffic again (new session ids), while Prometheus scrapes."""
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        self._expect("DONE", timeout)
        self.final = self.scrape()
        fresh = [k for k, v in self.final.items()
                 if k not in self.baseline and v and k[0].endswith("_total")]
        assert not fresh, f"series the warm-up pass did not create (increase() cannot count them): {fresh}"

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait(5)

    # -- the engine's counters ----------------------------------------------------

    def scrape(self) -> Series:
        with urllib.request.urlopen(f"http://{self.target}/metrics", timeout=5) as r:
            return parse_exposition(r.read().decode())

    @staticmethod
    def sum_of(series: Series, name: str, **labels: str) -> float:
        """``series``' samples called ``name`` with ``labels``, summed over the other labels."""
        want = set(labels.items())
        return sum(v for (n, ls), v in series.items() if n == name and want <= ls)

    def delta(self, name: str, **labels: str) -> int:
        """What the main pass added to a counter (summed over the labels not given)."""
        return int(round(self.sum_of(self.final, name, **labels) - self.sum_of(self.baseline, name, **labels)))

    def engines(self) -> List[str]:
        """The engine names on /metrics."""
        return sorted({dict(ls).get("engine") for (n, ls) in (self.final or self.baseline)
                       if n == "hermes_context_engine_hook_calls_total"} - {None})

    def label_values(self, name: str, label: str, **labels: str) -> set:
        want = set(labels.items())
        return {dict(ls).get(label) for (n, ls), v in self.final.items()
                if n == name and want <= ls and v - self.baseline.get((n, ls), 0.0) > 0}

    def quantile_bounds(self, name: str, q: float, spread: float = 1.0, **labels: str) -> Tuple[float, float]:
        """Where ``histogram_quantile(q, increase(name_bucket[...]))`` can fall, from the main
        pass's bucket counts.

        increase() scales each bucket series by its own extrapolation factor, between 1 and
        ``spread`` (a bucket whose warm-up count was 0 is not extrapolated towards the range
        start, the others are), so the quantile's rank, counted in main-pass observations,
        lies between ``q * total / spread`` and ``q * total * spread``: the answer is in one
        of the buckets in between, or at the highest finite bound (Prometheus' answer when
        the rank falls in +Inf)."""
        want = set(labels.items())
        counts: Dict[float, float] = {}
        for (n, ls), v in self.final.items():
            if n == name + "_bucket" and want <= ls:
                le = float(dict(ls)["le"])
                counts[le] = counts.get(le, 0.0) + v - self.baseline.get((n, ls), 0.0)
        les = sorted(counts)
        total = counts[les[-1]]
        assert total > 0, f"no {name} observations in the main pass for {labels}"
        finite = [le for le in les if not math.isinf(le)]

        def bucket(rank: float) -> int:
            return next(i for i, le in enumerate(les) if counts[le] >= rank)

        lo_i, hi_i = bucket(q * total / spread), bucket(min(total, q * total * spread))
        lower = les[lo_i - 1] if lo_i else 0.0
        upper = les[hi_i] if not math.isinf(les[hi_i]) else finite[-1]
        return min(lower, upper), upper

    def factor(self, scrape_interval: float, since: float) -> float:
        """The largest extrapolation factor of increase() for a query made after ``since``.

        Prometheus' first sample of every series is the warm-up's value (taken at or before
        :attr:`baseline_seen`), so ``increase()`` = main-pass delta x ``(S + start + end) / S``:
        S is the sampled interval (first to last sample, at least ``since - baseline_seen``
        minus one scrape); start and end are each at most 1.1 scrape intervals (the first
        sample is far from the range start: half an interval, or less when the counter's
        extrapolation to zero is shorter; the last sample is recent)."""
        slack = 1.25 * scrape_interval       # scrape jitter
        sampled = max(1e-3, since - self.baseline_seen - slack)
        return (sampled + 2.2 * slack) / sampled

    def count_range(self, delta: int, scrape_interval: float, since: float) -> Tuple[int, int]:
        """The values the dashboard (which rounds increase()) can show for a counter that rose
        by ``delta`` in the main pass: ``delta`` up to ``delta`` x :meth:`factor`."""
        return delta, int(math.floor(delta * self.factor(scrape_interval, since) + 0.5))


def prometheus_ready_for(exporter: EngineExporter, query) -> bool:
    """True when Prometheus holds the exporter's final values (``query(promql)`` -> result list)."""
    for name in ("hermes_context_engine_hook_calls_total", "hermes_context_compressions_total",
                 "hermes_context_selections_total", "hermes_context_engine_fail_open_total",
                 "hermes_context_compression_summary_failures_total"):
        got = query(f"sum({name})")
        want = exporter.sum_of(exporter.final or exporter.baseline, name)
        if not got or abs(float(got[0]["value"][1]) - want) > 1e-6:
            return False
    return True


# -- entry point of the children ----------------------------------------------------------------

def _main(argv: Sequence[str]) -> int:
    sys.path.insert(0, str(ROOT))
    if len(argv) == 2 and argv[0] == "store":
        return _child_store(argv[1])
    if len(argv) == 2 and argv[0] == "exporter":
        return _child_exporter(int(argv[1]))
    print(f"usage: {Path(__file__).name} store PATH | exporter PORT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
