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
calls, per call; what is left is the interpreter running the hook's own bytecode). First, and alone
with ``--steps``: what each step of the exact leaf hook costs, each taken out of its generated source
in a small process (no Hermes).

    python benchmarks/hook_instructions.py [--batch 200] [--batches 40] [--hooks should_compress,...] [--steps]
    python benchmarks/hook_instructions.py --child MODE HOOK OUT   (one counted run; used by the above)
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections import deque
from itertools import filterfalse, repeat
from pathlib import Path

from scratch import kept, scratch_dir

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODES = ("bare", "disabled", "metrics", "full")
DEFAULT_HOOKS = ("should_compress", "update_from_response")

# The C functions the hook path reaches, by what they do for it (name: symbols; inclusive cost).
# What is left is the interpreter running the hook's own bytecode and frame. The per-step costs
# of the hook's source lines (an ablation) are in docs/performance.md.
STEPS = (
    ("clock, C side (2 x perf_counter_ns)", ("time_perf_counter_ns",)),
    ("span parent, C side (ContextVar.get)", ("_contextvars_ContextVar_get",)),
    ("class-patch check, C side (class attribute read)", ("type_getattro",)),
    ("queue bound, C side (len)", ("deque_len",)),
    ("queue hand-off, C side (deque.append)", ("deque_append",)),
    ("tuples, C side (allocation)", ("PyTuple_New", "tuple_alloc")),
    ("garbage collections on the host's thread", ("gc_collect_main",)),
)


def child(mode: str, hook: str, out: str, batch: int, batches: int) -> int:
    import hook_overhead as ho

    store_dir = scratch_dir("observed-bench-store-")
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


# -- --steps: what each step of the exact leaf hook costs, by taking it out ---------------------
#
# The generated source of a should_compress-shaped exact leaf hook (capture/exact_leaf.py's
# template, as generated for the built-in; update_from_response's state read as generated there:
# three attribute reads into the event's tuple), each step taken out alone, in a small process (no
# Hermes) under callgrind: the difference to the whole hook is that step's cost.

_STEP_HOOK = """
def hook(self, prompt_tokens=None):
    if _oe_inner.should_compress is not _oe_original:
        return _oe_changed(self, (prompt_tokens, ), _oe_no_keywords)
    if _oe_running and _oe_inside.engine is self:
        return _oe_original(self, prompt_tokens)
    if _oe_len(_oe_queue) >= 100000:
        _oe_dropped()
        return _oe_original(self, prompt_tokens)
    _oe_ctx = _oe_get_context()
    _oe_t0 = _oe_clock()
    try:
        _oe_result = _oe_original(self, prompt_tokens)
    except BaseException:
        raise
    _oe_append((5, self, _oe_t0, _oe_clock(), None, (prompt_tokens, ), _oe_no_keywords, _oe_result, _oe_ctx, None))
    return _oe_result
"""
_EVENT = "(5, self, _oe_t0, _oe_clock(), None, (prompt_tokens, ), _oe_no_keywords, _oe_result, _oe_ctx, None)"
_APPEND = f"    _oe_append({_EVENT})\n"
_WITH_STATE = ("    try:\n        _oe_append(" + _EVENT[:-1]
               + ", self.last_prompt_tokens, self.threshold_tokens, self.context_length))\n"
               "    except Exception:\n        _oe_append(" + _EVENT[:-1] + ", None, None, None))\n")
STEP_VARIANTS = {
    "nothing": ("hook = _oe_original", None),
    "frame": ("def hook(self, prompt_tokens=None):\n    return _oe_original(self, prompt_tokens)\n", None),
    "whole": (_STEP_HOOK, None),
    "class-patch check": (_STEP_HOOK.replace(
        "    if _oe_inner.should_compress is not _oe_original:\n"
        "        return _oe_changed(self, (prompt_tokens, ), _oe_no_keywords)\n", ""), "whole"),
    "self-call guard": (_STEP_HOOK.replace(
        "    if _oe_running and _oe_inside.engine is self:\n        return _oe_original(self, prompt_tokens)\n", ""),
        "whole"),
    "timestamps (2 clock reads)": (_STEP_HOOK.replace("_oe_clock()", "0"), "whole"),
    "span parent (ContextVar.get)": (_STEP_HOOK.replace("_oe_ctx = _oe_get_context()", "_oe_ctx = None"), "whole"),
    "queue bound (len check)": (_STEP_HOOK.replace(
        "    if _oe_len(_oe_queue) >= 100000:\n        _oe_dropped()\n        return _oe_original(self, prompt_tokens)\n",
        ""), "whole"),
    "event tuple + deque.append": (_STEP_HOOK.replace(_APPEND, "    _oe_t1 = _oe_clock()\n"), "whole"),   # t1 still read
    "state read, 3 attributes (update_from_response)": (_STEP_HOOK.replace(_APPEND, _WITH_STATE), "whole"),
}


def step_child(variant: str) -> int:
    import threading
    import types
    from contextvars import ContextVar
    from time import perf_counter_ns

    class Inside(threading.local):
        engine = None

    class Engine:
        def __init__(self):
            self.last_prompt_tokens, self.threshold_tokens, self.context_length = 5, 100, 1000

        def should_compress(self, prompt_tokens=None):
            return False

    queue: deque = deque()
    namespace = dict(_oe_inner=Engine, _oe_original=Engine.should_compress, _oe_running=[], _oe_inside=Inside(),
                     _oe_get_context=ContextVar("ctx", default={}).get, _oe_clock=perf_counter_ns, _oe_queue=queue,
                     _oe_append=queue.append, _oe_cap=100_000, _oe_dropped=lambda: None,
                     _oe_no_keywords=types.MappingProxyType({}), _oe_len=len, _oe_changed=None)
    exec(STEP_VARIANTS[variant][0], namespace)
    bound = types.MethodType(namespace["hook"], Engine())

    def call(_):
        return bound(1000)

    for _ in range(100):
        call(0)
    for _ in range(20):
        deque(filterfalse(call, repeat(0, 200)), 0)     # the counted region
        queue.clear()
    return 0


def run_steps(workdir: Path) -> None:
    counts = {}
    for variant in STEP_VARIANTS:
        out = workdir / f"steps.{variant.split()[0]}.%p"
        proc = subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no",
                               "--toggle-collect=filterfalse_next", f"--callgrind-out-file={out}",
                               sys.executable, __file__, "--step-child", variant],
                              capture_output=True, text=True, check=True)
        m = re.search(r"Collected : (\d+)", proc.stderr)
        counts[variant] = int(m.group(1)) / 4000
    whole, frame, nothing = counts["whole"], counts["frame"], counts["nothing"]
    print("exact leaf hook, instructions per call by step (each taken out alone; a should_compress-shaped hook):")
    print(f"  the whole hook adds {whole - nothing:6.0f} over calling the inner directly")
    print(f"  {'its own Python frame (a pass-through function)':52s} {frame - nothing:6.0f}")
    accounted = frame - nothing
    for variant, (_, against) in STEP_VARIANTS.items():
        if against is None:
            continue
        cost = counts[variant] - counts[against]
        if variant.startswith("state read"):
            print(f"  {variant:52s} {cost:+6.0f} (added to the hook)")
            continue
        cost = -cost
        accounted += cost
        print(f"  {variant:52s} {cost:6.0f}")
    print(f"  {'the rest (try, locals, return)':52s} {whole - nothing - accounted:6.0f}")


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
    parser.add_argument("--steps", action="store_true", help="only the per-step costs of the exact leaf hook")
    parser.add_argument("--step-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(*args.child, batch=args.batch, batches=args.batches)
    if args.step_child:
        return step_child(args.step_child)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    modes = [m for m in args.modes.split(",") if m]
    if "bare" not in modes:
        modes.insert(0, "bare")
    workdir = Path(scratch_dir("observed-hook-instructions-"))
    run_steps(workdir)
    print()
    if args.steps:
        return 0
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
                    print(f"      {label:48s} {added:+8.0f}")
                rest = (total - bare_total * n / calls) / n - accounted
                print(f"      {'the interpreter (bytecodes, frame), rest':48s} {rest:+8.0f}")
        print()
    if kept():
        print(f"callgrind files: {workdir}")
    else:
        print("callgrind files: removed at exit (OBSERVED_BENCH_KEEP=1 keeps them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
