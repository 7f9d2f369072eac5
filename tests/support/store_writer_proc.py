"""A Hermes-like process writing the shared store: ``python store_writer_proc.py PATH N NAME START_AT``.

Observes a scripted engine with the store at PATH, waits until the epoch time
START_AT (so two processes write at the same time), makes N hook calls, flushes,
and prints one JSON line: pid, calls, rows_written, seconds.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from support.engines import ScriptedEngine

import observed_engine
from observed_engine import observe
from observed_engine.capture import observed_meta


def main() -> None:
    path, n, name, start_at = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    eng = observe(ScriptedEngine(name), settings={"store": {"path": path}, "traces": False})
    store = observed_meta(eng).pipeline.store
    while time.time() < start_at:
        time.sleep(0.001)
    t0 = time.perf_counter()
    for i in range(n):
        eng.should_compress(i)
    ok = observed_engine.flush(120.0)
    seconds = time.perf_counter() - t0
    print(json.dumps({"pid": os.getpid(), "calls": n, "rows_written": store.rows_written,
                      "rows_dropped": store.rows_dropped, "flushed": ok, "seconds": seconds}))
    sys.stdout.flush()
    observed_engine.shutdown(10.0)


if __name__ == "__main__":
    main()
