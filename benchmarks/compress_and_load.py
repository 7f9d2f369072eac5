"""compress() overhead on a 200k-token transcript, sustained load, and memory over 1M hook calls.

    python benchmarks/compress_and_load.py [--rate 10000] [--seconds 10] [--calls 1000000]

1. compress(): a trivial inner engine (keeps the last 10 messages) so the wrapper's
   share is visible; bare vs observed (full telemetry) on a ~200k-token transcript,
   cold (first time the transcript is seen) and warm (the same transcript plus one
   new message). Also the worker's token counting, cold and warm (off the hook path).
2. Sustained load: `--rate` hook calls per second for `--seconds` from 2 threads with
   metrics + store on; afterwards the hook_calls counter and the store row count must
   equal the number of calls exactly.
3. Memory: `--calls` hook calls with full telemetry; peak RSS before/after.
"""

from __future__ import annotations

import argparse
import os
import resource
import sqlite3
import statistics
import sys
import threading
import time

from scratch import scratch_dir

if "HERMES_HOME" not in os.environ:
    os.environ["HERMES_HOME"] = scratch_dir("observed-bench-")

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402


class Discard(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS


def trivial_engine_class():
    from agent.context_engine import ContextEngine

    class KeepTail(ContextEngine):
        name = "keep-tail"

        def update_from_response(self, usage):
            self.last_prompt_tokens = usage.get("prompt_tokens", 0)

        def should_compress(self, prompt_tokens=None):
            return False

        def compress(self, messages, current_tokens=None, focus_topic=None, force=False, memory_context=""):
            return messages[:1] + messages[-10:]

    return KeepTail


def transcript(n_messages: int = 400, words: int = 500):
    import random

    rng = random.Random(3)
    vocab = ["context", "engine", "token", "window", "cache", "prompt", "summary", "provider", "retry", "budget",
             "message", "assistant", "compress", "select", "latency", "observe"]
    out = [{"role": "system", "content": "You are a benchmark."}]
    for i in range(n_messages):
        role = "user" if i % 2 == 0 else "assistant"
        out.append({"role": role, "content": " ".join(rng.choice(vocab) for _ in range(words)) + f" #{i}"})
    return out


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def counter_total(reader, name, **match) -> int:
    total = 0
    data = reader.get_metrics_data()
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name != name:
                    continue
                for point in metric.data.data_points:
                    if all(point.attributes.get(k) == v for k, v in match.items()):
                        total += point.value
    return total


def bench_compress(store_dir: str) -> None:
    import observed_engine
    from observed_engine.api import pipeline_for
    from observed_engine.tokens import TokenCounter

    cls = trivial_engine_class()
    msgs = transcript()
    counter = TokenCounter("auto", model="gpt-4o")
    n_tokens = counter.count_messages(msgs)
    bare = cls()
    tp = TracerProvider()
    tp.add_span_processor(BatchSpanProcessor(Discard()))
    mp = MeterProvider(metric_readers=[InMemoryMetricReader()])
    settings = {"store": {"path": os.path.join(store_dir, "compress.sqlite")}}
    obs = observed_engine.observe(cls(), tracer_provider=tp, meter_provider=mp, settings=settings)
    telemetry = pipeline_for(tracer_provider=tp, meter_provider=mp, settings=settings)

    def timed(engine, messages, reps=30):
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter_ns()
            engine.compress(messages, current_tokens=n_tokens)
            samples.append((time.perf_counter_ns() - t0) / 1e6)
            telemetry.recorder.flush(60)
        return statistics.median(samples)

    bare_ms = timed(bare, msgs)
    # count what tiktoken is asked to encode while the observed engine sees the transcript cold
    import tiktoken

    encoded = {"calls": 0, "chars": 0}
    real_encode = tiktoken.Encoding.encode

    def counting_encode(self, text, *args, **kwargs):
        encoded["calls"] += 1
        encoded["chars"] += len(text)
        return real_encode(self, text, *args, **kwargs)

    tiktoken.Encoding.encode = counting_encode
    t0 = time.perf_counter_ns()
    obs.compress(msgs, current_tokens=n_tokens)
    cold_hook_ms = (time.perf_counter_ns() - t0) / 1e6
    t1 = time.perf_counter_ns()
    telemetry.recorder.flush(120)
    cold_worker_ms = (time.perf_counter_ns() - t1) / 1e6
    tiktoken.Encoding.encode = real_encode
    transcript_chars = sum(len(m["content"]) for m in msgs)
    warm = msgs + [{"role": "user", "content": "one more message"}]
    obs_ms = timed(obs, warm)
    t2 = time.perf_counter_ns()
    obs.compress(warm + [{"role": "assistant", "content": "and another"}], current_tokens=n_tokens)
    telemetry.recorder.flush(60)
    warm_total_ms = (time.perf_counter_ns() - t2) / 1e6
    print(f"compress() on {len(msgs)} messages / {n_tokens} tokens ({counter.method}):")
    print(f"  bare {bare_ms:.3f} ms; observed (hook path) {obs_ms:.3f} ms -> added {obs_ms - bare_ms:.3f} ms")
    print(f"  cold: hook path {cold_hook_ms:.3f} ms, worker token counting {cold_worker_ms:.1f} ms; tiktoken encoded "
          f"{encoded['chars']:,} chars in {encoded['calls']} calls for a {transcript_chars:,}-char transcript "
          f"= {encoded['chars'] / transcript_chars:.2f} passes")
    print(f"  warm: hook path + worker for the transcript plus one new message {warm_total_ms:.2f} ms")


def bench_load(rate: int, seconds: float, store_dir: str, spans: bool = False, queue: int = 1_000_000) -> None:
    from agent.context_compressor import ContextCompressor

    import observed_engine
    from observed_engine.api import pipeline_for

    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    path = os.path.join(store_dir, "load.sqlite")
    settings = {"traces": spans, "store": {"path": path}, "queue_size": queue}
    tp = None
    if spans:      # the SDK's batch processor into a discarding exporter, its queue as big as ours
        tp = TracerProvider()
        tp.add_span_processor(BatchSpanProcessor(Discard(), max_queue_size=max(queue, 2048)))
    engine = observed_engine.observe(ContextCompressor("gpt-4o", config_context_length=200_000, quiet_mode=True),
                                     tracer_provider=tp, meter_provider=mp, settings=settings)
    telemetry = pipeline_for(tracer_provider=tp, meter_provider=mp, settings=settings)
    threads = 2
    per_thread = int(rate * seconds / threads)
    usage = {"prompt_tokens": 1000, "completion_tokens": 10, "total_tokens": 1010}
    cpu0 = time.process_time()

    def drive():
        interval = threads / rate
        next_at = time.perf_counter()
        for i in range(per_thread):
            if i % 2:
                engine.should_compress(1000)
            else:
                engine.update_from_response(usage)
            next_at += interval
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)

    workers = [threading.Thread(target=drive) for _ in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t0
    backlog = len(telemetry.recorder.queue)
    observed_engine.flush(120)
    cpu = time.process_time() - cpu0
    calls = per_thread * threads
    total = counter_total(reader, "hermes.context_engine.hook.calls")
    rows = sqlite3.connect(path).execute("select count(*) from events where event='call'").fetchone()[0]
    print(f"sustained load: {calls} hook calls in {elapsed:.1f} s = {calls / elapsed:,.0f}/s from {threads} threads "
          f"({'spans + ' if spans else ''}metrics + store, queue {queue:,}); backlog at end {backlog}; process CPU {cpu / elapsed * 100:.0f}% of one core")
    print(f"  hook_calls counter total {total} (expected {calls}: {'exact' if total == calls else 'MISMATCH'}); "
          f"store rows {rows} ({'exact' if rows == calls else 'MISMATCH'}); dropped {telemetry.recorder.dropped}; store rows dropped {telemetry.store.rows_dropped}, written {telemetry.store.rows_written}")


def bench_memory(calls: int, store_dir: str) -> None:
    from agent.context_compressor import ContextCompressor

    import observed_engine
    from observed_engine.api import pipeline_for

    tp = TracerProvider()
    tp.add_span_processor(BatchSpanProcessor(Discard()))
    mp = MeterProvider(metric_readers=[InMemoryMetricReader()])
    settings = {"store": {"path": os.path.join(store_dir, "memory.sqlite"), "retention_days": 1}}
    engine = observed_engine.observe(ContextCompressor("gpt-4o", config_context_length=200_000, quiet_mode=True),
                                     tracer_provider=tp, meter_provider=mp, settings=settings)
    telemetry = pipeline_for(tracer_provider=tp, meter_provider=mp, settings=settings)
    before = rss_mb()
    marks = []
    t0 = time.perf_counter()
    for i in range(calls):
        engine.should_compress(1000)
        if i % 100_000 == 99_999:
            marks.append(rss_mb())
    telemetry.flush(300)
    elapsed = time.perf_counter() - t0
    print(f"memory over {calls:,} hook calls (full telemetry): peak RSS {before:.0f} MB before, "
          f"{rss_mb():.0f} MB after; per 100k calls: {', '.join(f'{m:.0f}' for m in marks)} MB; "
          f"dropped (queue bound {telemetry.settings.queue_size:,}) {telemetry.recorder.dropped:,}; {elapsed:.0f} s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--skip", default="", help="comma list of compress,load,memory to skip")
    parser.add_argument("--spans", action="store_true", help="load: spans on too")
    parser.add_argument("--queue", type=int, default=1_000_000, help="load: the event queue bound")
    args = parser.parse_args(argv)
    store_dir = scratch_dir("observed-bench-store-")
    skip = set(filter(None, args.skip.split(",")))
    if "compress" not in skip:
        bench_compress(store_dir)
    if "load" not in skip:
        bench_load(args.rate, args.seconds, store_dir, args.spans, args.queue)
    if "memory" not in skip:
        bench_memory(args.calls, store_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
