"""Store rows for tests and benchmarks (never used by the running dashboard).

Two producers, both returning row tuples in ``observed_engine.contract.store_schema.COLUMNS``
order: ``scenario_rows(now)``, a small hand-checkable scenario, and
``synthetic_rows(n, end_ts, span_s)``, realistic rows, fast enough for a million.

The full account: docs/design/internals.md, *dashboard/sample_data.py*.
"""

from __future__ import annotations

import math
import random
import re
from typing import List, Sequence

from observed_engine.contract import vocabulary as v
from observed_engine.contract.store_schema import COLUMNS, INSERT_SQL, SCHEMA_SQL, make_row
from observed_engine.store import connect

HOST = "test-host"


def _row(**fields) -> tuple:
    fields.setdefault("host", HOST)
    fields.setdefault("pid", 4242)
    fields.setdefault("event", v.EVENT_CALL)
    return make_row(**fields)


# --- the hand-checkable scenario ---------------------------------------------

def scenario_rows(now: float) -> List[tuple]:
    """Rows of the scenario, all within the last 20 minutes before ``now``; the deadline and
    the fail-open fall in the last 15 minutes (so the store-derived alerts fire)."""
    rows: List[tuple] = []
    t0 = now - 1200.0

    # sess-alpha on "compressor": the sawtooth. Prompt rises, compress drops it, rises again.
    window, threshold = 128_000, 85_000
    prompts = [20_000, 40_000, 60_000, 75_000, 90_000]       # then compress 90k -> 18k
    t = t0
    for p in prompts:
        t += 60
        rows.append(_row(ts=t, session="sess-alpha", engine="compressor", hook="should_compress",
                         outcome=v.CALL_OK, duration_s=0.00002))
        rows.append(_row(ts=t + 1, session="sess-alpha", engine="compressor", hook="update_from_response",
                         outcome=v.CALL_OK, duration_s=0.00005, prompt_tokens=p, threshold_tokens=threshold,
                         window_tokens=window, input_tokens=p, output_tokens=800, cache_read_tokens=p // 2,
                         cache_write_tokens=1000, reasoning_tokens=0))
    t += 30
    rows.append(_row(ts=t, session="sess-alpha", engine="compressor", hook="compress", outcome=v.COMPRESSED,
                     duration_s=12.0, tokens_before=90_000, tokens_after=18_000, messages_before=120,
                     messages_after=14, prompt_tokens=0, threshold_tokens=threshold, window_tokens=window))
    for p in (30_000, 55_000, 88_000):
        t += 60
        rows.append(_row(ts=t, session="sess-alpha", engine="compressor", hook="update_from_response",
                         outcome=v.CALL_OK, duration_s=0.00006, prompt_tokens=p, threshold_tokens=threshold,
                         window_tokens=window, input_tokens=p, output_tokens=600))
    t += 30
    # the summary model failed (a 5xx): the compressor dropped the middle turns with a fallback summary
    rows.append(_row(ts=t, session="sess-alpha", engine="compressor", hook="compress", event=v.EVENT_SUMMARY_FAILURE,
                     outcome=v.FALLBACK_SUMMARY, reason=v.CAUSE_OTHER, duration_s=20.0))
    rows.append(_row(ts=t, session="sess-alpha", engine="compressor", hook="compress", outcome=v.COMPRESSED,
                     duration_s=20.0, tokens_before=88_000, tokens_after=22_000, messages_before=90,
                     messages_after=12, prompt_tokens=0, threshold_tokens=threshold, window_tokens=window))
    t += 60
    # a compression that stalls past its deadline, then a no-op one: the summary model was unreachable,
    # the compressor aborted and kept the messages
    rows.append(_row(ts=t, session="sess-alpha", engine="compressor", hook="compress", event=v.DEADLINE_EXCEEDED,
                     reason="stalled", duration_s=120.0))
    t += 10
    rows.append(_row(ts=t, session="sess-alpha", engine="compressor", hook="compress", event=v.EVENT_SUMMARY_FAILURE,
                     outcome=v.ABORTED, reason=v.CAUSE_NETWORK, duration_s=0.5))
    rows.append(_row(ts=t, session="sess-alpha", engine="compressor", hook="compress", outcome=v.NOOP,
                     duration_s=0.5, tokens_before=30_000, tokens_after=30_000, messages_before=20,
                     messages_after=20))

    # sess-beta on "compressor": select_context with every result, and a fail-open.
    t = t0 + 100
    results = [v.UNCHANGED, v.UNCHANGED, v.UNCHANGED, v.SAME_SELECTION, v.SAME_SELECTION,
               v.CHANGED_SELECTION, v.CHANGED_SELECTION, v.FAIL_OPEN]
    lost = {5: 3_000, 6: 4_000}
    for i, res in enumerate(results):
        t += 45
        rows.append(_row(ts=t, session="sess-beta", engine="compressor", hook="select_context", outcome=res,
                         duration_s=0.002 + 0.001 * i, tokens_before=50_000, tokens_after=42_000 if res ==
                         v.CHANGED_SELECTION else 50_000, messages_before=40, messages_after=40,
                         cache_lost_tokens=lost.get(i, 0)))
        if res == v.FAIL_OPEN:
            rows.append(_row(ts=t + 0.001, session="sess-beta", engine="compressor", hook="select_context",
                             event=v.FAIL_OPEN, reason=v.REASON_INVALID_RETURN))
        rows.append(_row(ts=t + 2, session="sess-beta", engine="compressor", hook="update_from_response",
                         outcome=v.CALL_OK, duration_s=0.00004, prompt_tokens=30_000 + 2_000 * i,
                         threshold_tokens=threshold, window_tokens=window, input_tokens=30_000 + 2_000 * i,
                         output_tokens=500))

    # sess-gamma on "lcm": a second engine for the comparison view.
    t = t0 + 200
    for _i, p in enumerate((10_000, 25_000, 40_000)):
        t += 90
        rows.append(_row(ts=t, session="sess-gamma", engine="lcm", hook="update_from_response", outcome=v.CALL_OK,
                         duration_s=0.0001, prompt_tokens=p, threshold_tokens=150_000, window_tokens=200_000,
                         input_tokens=p, output_tokens=700))
    for res, lost_tokens in ((v.UNCHANGED, 0), (v.CHANGED_SELECTION, 1_500)):
        t += 30
        rows.append(_row(ts=t, session="sess-gamma", engine="lcm", hook="select_context", outcome=res,
                         duration_s=0.004, cache_lost_tokens=lost_tokens, tokens_before=40_000,
                         tokens_after=40_000))
    rows.sort(key=lambda r: r[0])
    return rows


# --- a million realistic rows ------------------------------------------------

_IDX = {c: i for i, c in enumerate(COLUMNS)}


def synthetic_rows(n: int, *, end_ts: float, span_s: float = 86_400.0, seed: int = 7,
                   engines: Sequence[str] = ("compressor", "lcm", "summarizer"),
                   events_per_session: int = 600) -> List[tuple]:
    """About ``n`` rows (exactly ``n`` after truncation), sorted by ts."""
    rnd = random.Random(seed)
    width = len(COLUMNS)
    out: List[tuple] = []
    turns = max(1, events_per_session // 4)
    # ~4.05 rows per turn; overshoot a little, the oldest rows are cut below
    sessions = max(1, math.ceil(n * 1.08 / (turns * 4.05)))
    start = end_ts - span_s
    I = _IDX  # noqa: E741  (a column index read on every generated row: kept one letter)
    lognorm = rnd.lognormvariate
    random_ = rnd.random

    def base(ts, session, engine, hook, event=v.EVENT_CALL, outcome=v.CALL_OK, reason=None, duration=None):
        r = [None] * width
        r[I["ts"]] = ts
        r[I["host"]] = HOST
        r[I["pid"]] = 1000
        r[I["session"]] = session
        r[I["engine"]] = engine
        r[I["hook"]] = hook
        r[I["event"]] = event
        r[I["outcome"]] = outcome
        r[I["reason"]] = reason
        r[I["duration_s"]] = duration
        return r

    for s in range(sessions):
        engine = engines[s % len(engines)]
        session = f"sess-{s:06d}"
        window = (128_000, 200_000, 1_000_000)[s % 3]
        threshold = int(window * 0.5)
        # sessions overlap: each lives for a slice of the span
        life = span_s * min(1.0, 20.0 / sessions + 0.02)
        s_start = start + (span_s - life) * (s / max(1, sessions - 1))
        step = life / turns
        prompt = 5_000
        t = s_start
        for _ in range(turns):
            t += step * (0.5 + random_())
            if t >= end_ts:
                break
            out.append(tuple(base(t, session, engine, "should_compress", duration=lognorm(-10.5, 0.5))))
            res_draw = random_()
            if res_draw < 0.60:
                res = v.UNCHANGED
            elif res_draw < 0.85:
                res = v.SAME_SELECTION
            elif res_draw < 0.985:
                res = v.CHANGED_SELECTION
            else:
                res = v.FAIL_OPEN
            r = base(t + 0.01, session, engine, "select_context", outcome=res, duration=lognorm(-6.0, 0.7))
            r[I["tokens_before"]] = prompt
            r[I["tokens_after"]] = prompt if res != v.CHANGED_SELECTION else int(prompt * 0.9)
            r[I["cache_lost_tokens"]] = int(prompt * 0.3) if res == v.CHANGED_SELECTION else 0
            out.append(tuple(r))
            if res == v.FAIL_OPEN:
                out.append(tuple(base(t + 0.011, session, engine, "select_context", event=v.FAIL_OPEN,
                                      outcome=None, reason=v.REASON_EXCEPTION if random_() < 0.5 else v.REASON_INVALID_RETURN)))
            prompt += int(1_000 + 3_000 * random_())
            r = base(t + 2.0, session, engine, "update_from_response", duration=lognorm(-9.5, 0.4))
            r[I["prompt_tokens"]] = prompt
            r[I["threshold_tokens"]] = threshold
            r[I["window_tokens"]] = window
            r[I["input_tokens"]] = prompt
            r[I["output_tokens"]] = int(300 + 700 * random_())
            r[I["cache_read_tokens"]] = int(prompt * 0.7)
            r[I["cache_write_tokens"]] = 1_000
            out.append(tuple(r))
            out.append(tuple(base(t + 2.1, session, engine, "on_turn_complete", duration=lognorm(-8.0, 0.5))))
            if prompt > threshold:
                draw = random_()
                ct = t + 2.2
                if draw < 0.02:        # stalled past the deadline
                    out.append(tuple(base(ct + 120, session, engine, "compress", event=v.DEADLINE_EXCEEDED,
                                          outcome=None, reason="stalled", duration=120.0)))
                    continue
                outcome = v.COMPRESSED if draw < 0.92 else (v.NOOP if draw < 0.97 else v.CALL_ERROR)
                dur = lognorm(math.log(8.0), 0.6)
                # the summary model failed although compress() returned (drawn from the same number):
                # ~2 % of compressions with a fallback summary, ~1.5 % aborted (messages kept)
                if 0.90 <= draw < 0.935:
                    # (the built-in aborts on auth and network failures, falls back on the others)
                    kind = v.FALLBACK_SUMMARY if draw < 0.92 else v.ABORTED
                    cause = v.CAUSE_OTHER if draw < 0.92 else (v.CAUSE_NETWORK if draw < 0.93 else v.CAUSE_AUTH)
                    out.append(tuple(base(ct + dur, session, engine, "compress", event=v.EVENT_SUMMARY_FAILURE,
                                          outcome=kind, reason=cause, duration=dur)))
                r = base(ct + dur, session, engine, "compress", outcome=outcome, duration=dur,
                         reason="RuntimeError" if outcome == v.CALL_ERROR else None)
                r[I["tokens_before"]] = prompt
                after = int(prompt * (0.15 + 0.15 * random_())) if outcome == v.COMPRESSED else prompt
                r[I["tokens_after"]] = after
                r[I["messages_before"]] = 100
                r[I["messages_after"]] = 12 if outcome == v.COMPRESSED else 100
                out.append(tuple(r))
                if outcome == v.COMPRESSED:
                    prompt = after
    out.sort(key=lambda r: r[0])
    if len(out) > n:
        out = out[len(out) - n:]
    return out


def fill_store(path, rows: Sequence[tuple], batch: int = 250_000) -> None:
    """Write rows straight into the store (benchmarks): big executemany transactions.

    The store's indexes are dropped while loading and rebuilt from
    ``store.SCHEMA_SQL`` afterwards (a sorted build is much faster than
    maintaining four indexes row by row).
    """
    conn = connect(path)
    try:
        names = [m.group(1) for stmt in SCHEMA_SQL
                 for m in [re.search(r"CREATE INDEX IF NOT EXISTS (\w+)", stmt)] if m]
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-200000")
        for name in names:
            conn.execute(f"DROP INDEX IF EXISTS {name}")
        for i in range(0, len(rows), batch):
            conn.execute("BEGIN")
            conn.executemany(INSERT_SQL, rows[i:i + batch])
            conn.execute("COMMIT")
        for stmt in SCHEMA_SQL:
            conn.execute(stmt)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
