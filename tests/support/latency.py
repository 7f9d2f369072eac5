"""Hook latency measurement and dead OTLP endpoints, shared by tests and benchmarks/dead_endpoint.py."""

from __future__ import annotations

import gc
import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path
from time import perf_counter_ns
from typing import Dict, List

RECEIVER = Path(__file__).resolve().parent / "otlp_receiver.py"


def hook_latencies(eng, n: int = 20_000, warmup: int = 2_000) -> List[int]:
    """Per-call wall time (ns) of ``eng.should_compress`` as the host sees it."""
    call = eng.should_compress
    for i in range(warmup):
        call(i)
    out = [0] * n
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for i in range(n):
            t0 = perf_counter_ns()
            call(i)
            out[i] = perf_counter_ns() - t0
    finally:
        if gc_was:
            gc.enable()
    return out


def summary(samples: List[int]) -> Dict[str, float]:
    s = sorted(samples)
    return {"median_us": statistics.median(s) / 1000, "p90_us": s[int(len(s) * 0.9)] / 1000,
            "p99_us": s[int(len(s) * 0.99)] / 1000, "mean_us": sum(s) / len(s) / 1000}


class ReceiverProcess:
    """tests/support/otlp_receiver.py in its own process; stopped by its PID."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(RECEIVER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("OTLP receiver process did not start")
        info = json.loads(line)
        self.pid = self.proc.pid
        self.grpc_port, self.http_port = info["grpc_port"], info["http_port"]

    def endpoint(self, protocol: str) -> str:
        port = self.grpc_port if protocol == "grpc" else self.http_port
        return f"http://127.0.0.1:{port}"

    def stop(self) -> Dict:
        if self.proc.poll() is not None:
            return {}
        try:
            self.proc.stdin.close()
            out = self.proc.stdout.readline()
            self.proc.wait(5)
            return json.loads(out) if out else {}
        except Exception:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return {}


def interleaved(engines: Dict[str, object], rounds: int = 5, n: int = 20_000) -> Dict[str, List[int]]:
    """Rounds of ``n`` calls on each engine in turn (order rotated each round), in one process.

    Comparing engines measured side by side in the same process removes the process-to-process
    noise (layout, CPU frequency) that is larger than the effect being measured. After each round
    the engine's own worker drains its queue, so the next round does not pay for it.
    """
    from observed_engine.capture import observed_meta

    names = list(engines)
    out: Dict[str, List[int]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            eng = engines[name]
            out[name].extend(hook_latencies(eng, n=n, warmup=500))
            meta = observed_meta(eng)
            if meta is not None:
                meta.pipeline.recorder.flush(30)
    return out
