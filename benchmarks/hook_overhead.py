"""Hook-path overhead of the observed engine against the bare engine, same process, same run.

For each hook, the median cost per call of the bare built-in ContextCompressor
and of an observed twin in three modes:

  disabled  observe() with ``enabled: false``: hooks pass straight through
  metrics   metrics on (SDK MeterProvider + reader), no spans, no store
  full      spans (SDK TracerProvider, batch processor), metrics and the SQLite store

Method. The four engines are timed in rounds. In each round every engine gets
the same treatment, in an order that rotates from round to round: all workers
are drained (untimed), the engine makes ``--warmup`` untimed calls, then a batch
of ``--batch`` calls is timed. So bare and observed see the same conditions; the
figure is what the host's thread pays per call on the hook path, in steady state.

Also reported, because the steady-state figure does not show them:

* after an idle wait: the same, with no warm-up calls: the first calls after the
  thread slept (waiting for a provider, or here for the drain) run on cold caches,
  for the bare engine as much as the observed one;
* worker busy: per-call latency percentiles while the worker thread is building
  spans for a backlog. Python runs one thread at a time (the GIL), so while the
  worker holds it the host's thread waits, whatever engine it calls;
* the worker's CPU per event, off the hook path.

    python benchmarks/hook_overhead.py [--batch 200] [--rounds 300] [--warmup 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from scratch import scratch_dir

if "HERMES_HOME" not in os.environ:
    os.environ["HERMES_HOME"] = scratch_dir("observed-bench-")

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402

MODES = ("bare", "disabled", "metrics", "full")


class DiscardExporter(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS


def make_compressor():
    from agent.context_compressor import ContextCompressor

    c = ContextCompressor("gpt-4o", config_context_length=200_000, quiet_mode=True)
    c.update_model(model="gpt-4o", context_length=200_000)
    return c


USAGE = {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050,
         "cache_read_tokens": 800, "cache_write_tokens": 0, "reasoning_tokens": 0}

HOOKS = {
    "should_compress": lambda e: e.should_compress(1000),
    "update_from_response": lambda e: e.update_from_response(USAGE),
    "should_defer_preflight_to_real_usage": lambda e: e.should_defer_preflight_to_real_usage(1000),
    "get_status": lambda e: e.get_status(),
}


def build(mode: str, store_dir: str):
    """(engine, telemetry or None) for one mode."""
    import observed_engine
    from observed_engine.api import pipeline_for

    if mode == "bare":
        return make_compressor(), None
    if mode == "disabled":
        settings = {"enabled": False, "store": {"enabled": False}}
        tp = mp = None
    elif mode == "metrics":
        settings = {"traces": False, "store": {"enabled": False}}
        tp, mp = None, MeterProvider(metric_readers=[InMemoryMetricReader()])
    else:
        settings = {"store": {"path": os.path.join(store_dir, "bench.sqlite")}}
        tp = TracerProvider()
        tp.add_span_processor(BatchSpanProcessor(DiscardExporter(), max_queue_size=1_000_000))
        mp = MeterProvider(metric_readers=[InMemoryMetricReader()])
    engine = observed_engine.observe(make_compressor(), tracer_provider=tp, meter_provider=mp, settings=settings)
    telemetry = pipeline_for(tracer_provider=tp, meter_provider=mp, settings=settings)
    return engine, telemetry


def drain(engines) -> None:
    for _, telemetry in engines.values():
        if telemetry is not None:
            telemetry.recorder.flush(60)


def time_rounds(engines, call, batch: int, rounds: int, warmup: int):
    """Median µs per call per mode; every round drains, warms up and times each mode in turn."""
    perf = time.perf_counter_ns
    per_call = {mode: [] for mode in engines}
    modes = list(engines)
    for r in range(rounds):
        order = modes[r % len(modes):] + modes[:r % len(modes)]
        for mode in order:
            engine = engines[mode][0]
            drain(engines)
            for _ in range(warmup):
                call(engine)
            t0 = perf()
            for _ in range(batch):
                call(engine)
            per_call[mode].append((perf() - t0) / batch / 1000.0)
    drain(engines)
    return {mode: statistics.median(v) for mode, v in per_call.items()}


def worker_busy_latency(engines, n_backlog: int, n_calls: int):
    """Per-call µs percentiles of should_compress, bare and observed, while the full-mode worker
    works through a backlog of ``n_backlog`` events (calls alternate between the two engines)."""
    full_engine, telemetry = engines["full"]
    bare = engines["bare"][0]
    drain(engines)
    recorder = telemetry.recorder
    # build the backlog with the worker's wake-ups held back, then let it go
    for _ in range(n_backlog):
        full_engine.should_compress(1000)
    recorder._wake.set()
    perf = time.perf_counter_ns
    samples = {"bare": [], "full": []}
    for i in range(n_calls):
        mode, engine = ("bare", bare) if i % 2 else ("full", full_engine)
        t0 = perf()
        engine.should_compress(1000)
        samples[mode].append((perf() - t0) / 1000.0)
    busy = len(recorder.queue)
    drain(engines)

    def pct(values, q):
        values = sorted(values)
        return values[min(len(values) - 1, int(q * len(values)))]

    return {mode: (pct(v, 0.5), pct(v, 0.99), max(v)) for mode, v in samples.items()}, busy


def worker_cpu_per_event(engines, n: int, repeats: int = 5):
    """Process CPU per event (the worker thread, the store writer and the span processor's export
    thread) for ``n`` queued should_compress events, ``repeats`` times: (median, each figure).
    Every repeat starts with the worker and the store writer idle, so the rows of earlier phases
    (the busy test's 40,000) are not charged to these events."""
    engine, telemetry = engines["full"]
    figures = []
    for _ in range(repeats):
        drain(engines)
        telemetry.store.flush(60)
        for _ in range(n):
            engine.should_compress(1000)
        t0 = time.process_time_ns()
        telemetry.recorder.flush(120)
        telemetry.store.flush(60)
        figures.append((time.process_time_ns() - t0) / n / 1000.0)
    return statistics.median(figures), figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args(argv)
    store_dir = scratch_dir("observed-bench-store-")
    engines = {mode: build(mode, store_dir) for mode in MODES}

    steady, cold = {}, {}
    for hook, call in HOOKS.items():
        steady[hook] = time_rounds(engines, call, args.batch, args.rounds, args.warmup)
    for hook in ("should_compress", "update_from_response"):
        cold[hook] = time_rounds(engines, HOOKS[hook], args.batch, max(args.rounds // 3, 10), 0)
    busy, left = worker_busy_latency(engines, n_backlog=20_000, n_calls=20_000)
    worker_us, worker_each = worker_cpu_per_event(engines, 20_000)

    def table(title, results):
        print(title)
        print(f"{'hook':38s} {'bare':>6s} {'disabled':>9s} {'metrics':>8s} {'full':>6s}   added: disabled / metrics / full")
        for hook, r in results.items():
            b = r["bare"]
            print(f"{hook:38s} {b:6.2f} {r['disabled']:9.2f} {r['metrics']:8.2f} {r['full']:6.2f}   "
                  f"{r['disabled'] - b:+.2f} / {r['metrics'] - b:+.2f} / {r['full'] - b:+.2f} µs")
        print()

    table(f"steady state: median µs per call ({args.rounds} rounds × {args.batch} calls, "
          f"{args.warmup} warm-up calls)", steady)
    table("after an idle wait: median µs per call over the first "
          f"{args.batch} calls after the drain, no warm-up", cold)
    print("worker busy (a 20,000-event backlog with spans), should_compress µs per call: p50 / p99 / max")
    for mode, (p50, p99, mx) in busy.items():
        print(f"  {mode:5s} {p50:8.2f} / {p99:8.2f} / {mx:8.0f}")
    print(f"  (backlog still queued after the timed calls: {left})")
    print(f"\nworker CPU per event (full: span + metrics + store row), off the hook path: {worker_us:.1f} µs "
          f"(median of {len(worker_each)} × 20,000 events: {' '.join(f'{x:.1f}' for x in worker_each)})")

    # The head host skips select_context/on_turn_complete unless the engine overrides the ABC's
    # default; the wrapper defines them only when the inner does, so the built-in costs 0 calls.
    from observed_engine.host import overrides_abc_default

    extra = [h for h in ("select_context", "on_turn_complete") if overrides_abc_default(engines["full"][0], h)]
    print(f"head-host per-request hooks the observed built-in exposes: {extra or 'none'} "
          f"-> {len(extra)} extra calls per provider request")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
