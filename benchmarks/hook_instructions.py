"""Hook-path cost in machine instructions (valgrind/callgrind): deterministic where wall time is not.

On a shared 2-core VM the wall-clock figures of ``hook_overhead.py`` move by ±50 % from run to
run; instruction counts do not. This script runs one child process per mode under callgrind,
each building the same four engines as ``hook_overhead.py`` (bare, disabled, metrics, full: spans,
metrics and the SQLite store), so the heaps are alike, and counting only what the *host's thread*
executes while it calls the hook of that one mode: the calls go through ``itertools.filterfalse``,
whose C function is callgrind's ``--toggle-collect`` target (and a run without the calls is
subtracted, for the library code that uses it elsewhere), and each thread is counted on its own
(``--separate-threads``), so the worker, the store writer and the span processor's thread are not
in the figure, but the garbage collections the hook's allocations trigger on the host's thread are.
Batches of ``--batch`` calls, the worker drained between them (outside the counted region), as
``hook_overhead.py`` times them.

Printed per hook: instructions per call bare, and added per call by each mode; then, for the full
mode, where the added instructions go (callgrind's inclusive cost of the C functions the hook path
calls, per call; what is left is the interpreter running the hook's own bytecode).

    python benchmarks/hook_instructions.py [--batch 200] [--batches 40] [--hooks should_compress,...]
    python benchmarks/hook_instructions.py --child MODE HOOK OUT   (one counted run; used by the above)
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import deque
from itertools import filterfalse, repeat
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODES = ("bare", "disabled", "metrics", "full")
DEFAULT_HOOKS = ("should_compress", "update_from_response")

# The C functions the hook path reaches, grouped into the steps of the hook (name: symbols).
STEPS = (
    ("timestamps (2 x perf_counter_ns)", ("time_perf_counter_ns",)),
    ("parent context (ContextVar.get)", ("_contextvars_ContextVar_get", "PyContextVar_Get")),
    ("queue hand-off (deque.append)", ("deque_append",)),
    ("queue bound (len)", ("builtin_len",)),
    ("state read (itemgetter)", ("itemgetter_call",)),
    ("event tuples (allocation, free)", ("_PyTuple_FromArraySteal", "PyTuple_New", "tupledealloc",
                                         "_PyObject_GC_NewVar", "tuple_alloc")),
    ("garbage collector", ("gc_collect_main",)),
)


def child(mode: str, hook: str, out: str, batch: int, batches: int) -> int:
    import hook_overhead as ho

    store_dir = tempfile.mkdtemp(prefix="observed-bench-store-")
    engines = {m: ho.build(m, store_dir) for m in MODES}
    call = ho.HOOKS[hook]
    engine = engines[mode][0]
    for _ in range(2000):                       # warm: caches, specialised bytecode, the worker's first batches
        for m in MODES:
            call(engines[m][0])
    ho.drain(engines)
    for _ in range(batches):
        ho.drain(engines)
        for _ in range(20):
            call(engine)
        deque(filterfalse(call, repeat(engine, batch)), 0)     # the counted region: filterfalse_next
    ho.drain(engines)
    Path(out).write_text(f"{batch * batches}\n")
    print(f"{mode} {hook}: {len(telemetry_queue(engines))} queued at the end", file=sys.stderr)
    for _, telemetry in engines.values():
        if telemetry is not None:
            telemetry.shutdown(5.0)
    return 0


def telemetry_queue(engines):
    return [e for _, t in engines.values() if t is not None for e in t.recorder.queue]


def _main_thread_file(prefix: str) -> Path:
    files = sorted(Path(prefix).parent.glob(Path(prefix).name + "*-01"))
    if not files:
        raise SystemExit(f"callgrind wrote no thread file for {prefix}")
    return files[0]


def _annotate(path: Path) -> tuple:
    """(total instructions, {function: inclusive instructions}) of one callgrind thread file."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(path)],
                          capture_output=True, text=True, check=True).stdout
    total = 0
    inclusive = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \(.*?\)\s+PROGRAM TOTALS", line) or re.match(r"\s*([\d,]+)\s+PROGRAM TOTALS", line)
        if m:
            total = int(m.group(1).replace(",", ""))
            continue
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+\S*:(\S+)", line) or re.match(r"\s*([\d,]+)\s+\S*:(\S+)", line)
        if m:
            name = m.group(2)
            if "'" in name:        # a recursion level: already inside the outer level's inclusive cost
                continue
            inclusive[name] = inclusive.get(name, 0) + int(m.group(1).replace(",", ""))
    return total, inclusive


def run_mode(mode: str, hook: str, batch: int, batches: int, workdir: Path) -> tuple:
    workdir.mkdir(exist_ok=True)
    prefix = workdir / f"cg.{hook}.{mode}"
    marker = workdir / f"n.{hook}.{mode}"
    cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", "--collect-atstart=no",
           "--toggle-collect=filterfalse_next", f"--callgrind-out-file={prefix}.%p",
           sys.executable, __file__, "--child", mode, hook, str(marker),
           "--batch", str(batch), "--batches", str(batches)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    calls = int(marker.read_text())
    total, inclusive = _annotate(_main_thread_file(f"{prefix}."))
    if batches:
        _, base_total, base_inclusive = run_mode(mode, hook, batch, 0, workdir / "empty")
        total -= base_total
        inclusive = {k: v - base_inclusive.get(k, 0) for k, v in inclusive.items()}
    return calls, total, inclusive


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--hooks", default=",".join(DEFAULT_HOOKS))
    parser.add_argument("--modes", default="bare,full")
    parser.add_argument("--child", nargs=3, metavar=("MODE", "HOOK", "OUT"))
    args = parser.parse_args(argv)
    if args.child:
        return child(*args.child, batch=args.batch, batches=args.batches)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    modes = [m for m in args.modes.split(",") if m]
    if "bare" not in modes:
        modes.insert(0, "bare")
    workdir = Path(tempfile.mkdtemp(prefix="observed-hook-instructions-"))
    for hook in args.hooks.split(","):
        results = {mode: run_mode(mode, hook, args.batch, args.batches, workdir) for mode in modes}
        calls, bare_total, bare_incl = results["bare"]
        print(f"{hook}: instructions per call on the host's thread ({calls} calls, batches of {args.batch})")
        print(f"  bare {bare_total / calls:8.0f}")
        for mode in modes:
            if mode == "bare":
                continue
            n, total, incl = results[mode]
            print(f"  {mode:8s} {total / n:8.0f}   added {(total - bare_total * n / calls) / n:+8.0f}")
            if mode == "full":
                accounted = 0.0
                for label, symbols in STEPS:
                    added = sum(incl.get(s, 0) for s in symbols) / n - sum(bare_incl.get(s, 0) for s in symbols) / calls
                    accounted += added
                    print(f"      {label:40s} {added:+8.0f}")
                rest = (total - bare_total * n / calls) / n - accounted
                print(f"      {'the hook bytecode (interpreter), rest':40s} {rest:+8.0f}")
        print()
    print(f"callgrind files: {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
