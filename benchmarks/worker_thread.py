"""The worker thread's own CPU per event, without the other threads and without scheduling noise.

``hook_overhead.py``'s "worker CPU per event" is the whole process's CPU while queued events are
turned into spans, metrics and rows: the worker thread, the store writer and the span processor's
export thread together, and it moves with whatever else the machine does. Here the worker thread
is stopped, the full-mode engine's hook events are captured in batches of 4,000, and the
processor's ``process_batch`` runs them in this thread, timed with ``thread_time``: only the
worker's Python code (and the garbage collections it triggers). ``--no-gc`` runs the batches
with the collector off, to show its share.

    python benchmarks/worker_thread.py [--rounds 8] [--no-gc]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

from scratch import scratch_dir

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hook_overhead  # noqa: E402  (the same engines and hook calls)

BATCH = 4000
BATCHES = 5


def measure(hook: str, rounds: int, collect: bool) -> list:
    import run_agent  # noqa: F401  (a Hermes process's heap, as in hook_overhead.py)

    engine, telemetry = hook_overhead.build("full", scratch_dir("observed-bench-store-"))
    call = hook_overhead.HOOKS[hook]
    for _ in range(2000):
        call(engine)
    telemetry.recorder.flush(60)
    telemetry.store.flush(60)
    recorder = telemetry.recorder
    recorder._stopped = True          # the worker thread ends; this thread processes the batches
    recorder._wake.set()
    recorder._thread.join()
    figures = []
    try:
        for _ in range(rounds):
            batches = []
            for _ in range(BATCHES):
                for _ in range(BATCH):
                    call(engine)
                batches.append(list(recorder.queue))
                recorder.queue.clear()
            telemetry.store.flush(60)
            if not collect:
                gc.disable()
            t0 = time.thread_time()
            for batch in batches:
                telemetry.processor.process_batch(batch)
            figures.append((time.thread_time() - t0) / (BATCH * BATCHES) * 1e6)
            gc.enable()
            del batches
    finally:
        gc.enable()
        telemetry.shutdown()
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--no-gc", action="store_true", help="run the batches with the garbage collector off")
    args = parser.parse_args(argv)
    for hook in ("should_compress", "update_from_response"):
        figures = measure(hook, max(args.rounds, 2), not args.no_gc)
        later = figures[1:]                # the first round warms the caches
        print(f"{hook:22s} worker thread µs per event: median {statistics.median(later):5.2f}, "
              f"min {min(later):5.2f} ({len(later)} rounds of {BATCH * BATCHES:,} events"
              f"{', collector off' if args.no_gc else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
