"""Many replays: a grid of variants, a pool of replay workers, and the results kept for resuming.

One job is one (conversation, variant) replay, keyed by a hash of everything its result depends
on; a finished job is written to ``DIR/jobs/<key>.json`` at once, so an interrupted sweep resumes
and a later one replays only new conversations. Variants that write the same settings (a grid
value equal to the current one, say) are one replay: its result answers each of their labels.
``jobs > 1``: long-lived ``spawn`` workers, each
with its own HERMES_HOME, replay LLM and in-process tiktoken; every replay keeps its own home and
stores. When editing: a job key must change with anything that changes its result.

The full account: docs/design/internals.md, *observed_engine/compare/sweep.py*.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import os
import signal
import sys
import tempfile
import time
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, TextIO, Tuple

from .. import host
from ..version import __version__
from . import config_copy, request_memo
from . import report as report_mod
from .sessions import Conversation
from .variants import BUILTIN, Variant, VariantError, make

JOBS_DIR = "jobs"
JOB_FORMAT = 1
MAX_VARIANTS = 1000


# -- the grid ---------------------------------------------------------------------------------

def _grid_values(key: str, spec: str) -> List[str]:
    spec = spec.strip()
    if not spec:
        raise VariantError(f"--grid {key}=: no values; fix: key=start:stop:step or key=v1,v2,...")
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) != 3:
            raise VariantError(f"--grid {key}={spec}: a range is start:stop:step; fix: key=start:stop:step or key=v1,v2,...")
        try:
            start, stop, step = (Decimal(p.strip()) for p in parts)
        except InvalidOperation:
            raise VariantError(f"--grid {key}={spec}: start, stop and step must be numbers; fix: key=start:stop:step or key=v1,v2,...") from None
        if step <= 0 or stop < start or not start.is_finite() or not stop.is_finite():
            raise VariantError(f"--grid {key}={spec}: needs start <= stop and a step > 0; fix: key=start:stop:step or key=v1,v2,...")
        if (stop - start) / step > MAX_VARIANTS:
            raise VariantError(f"--grid {key}={spec}: more than {MAX_VARIANTS} values; fix: key=start:stop:step or key=v1,v2,...")
        values, v = [], start
        while v <= stop:
            values.append(str(v.normalize()) if v != 0 else "0")
            v += step
        return values
    values = [v.strip() for v in spec.split(",") if v.strip()]
    if not values:
        raise VariantError(f"--grid {key}={spec}: no values; fix: key=start:stop:step or key=v1,v2,...")
    return values


def parse_grid(engine: str, grids: Sequence[str], user_config: Optional[Mapping[str, Any]] = None) -> List[Variant]:
    """The variants of ``engine`` a list of ``key=values`` grids spans (each validated)."""
    axes: List[Tuple[str, List[str]]] = []
    for g in grids:
        key, eq, spec = str(g).partition("=")
        if not eq or not key.strip():
            raise VariantError(f"--grid {g}: write key=start:stop:step or key=v1,v2,...; fix: key=start:stop:step or key=v1,v2,...")
        if any(k == key.strip() for k, _ in axes):
            raise VariantError(f"--grid {key.strip()} given twice; fix: give it once")
        axes.append((key.strip(), _grid_values(key.strip(), spec)))
    total = 1
    for _, values in axes:
        total *= len(values)
    if total > MAX_VARIANTS:
        raise VariantError(f"the grid spans {total} variants (at most {MAX_VARIANTS}); fix: fewer values")
    out = []
    for combo in itertools.product(*[[(k, v) for v in values] for k, values in axes]):
        out.append(make(engine, list(combo), user_config))
    return out


def default_grid(context_length: int) -> List[str]:
    """The built-in's default grid: the threshold where it can act (under a 512K window the
    built-in floors it at 0.75) and the tail it keeps (target_ratio)."""
    thresholds = "0.75,0.8,0.85,0.9" if context_length < 512_000 else "0.5,0.6,0.7,0.8,0.9"
    return [f"threshold={thresholds}", "target_ratio=0.1,0.2,0.3"]


# -- the jobs ---------------------------------------------------------------------------------

def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode("utf-8", "surrogatepass")).hexdigest()


def conversation_fingerprint(conv: Conversation) -> str:
    return _digest([conv.session_id, conv.model, conv.system_prompt, conv.messages, conv.summaries])


def options_fingerprint(user_config: Mapping[str, Any], engine: str, *, context_length: int, summary: str,
                        usage: str) -> str:
    sections = {k: user_config.get(k) for k in ("compression", "auxiliary", "plugins", engine)}
    return _digest([JOB_FORMAT, __version__, host.hermes_version(), sections, context_length, summary, usage])


def replay_identity(variant: Variant, user_config: Mapping[str, Any]) -> str:
    """What a replay of ``variant`` reads that the variant can change: the config sections it
    writes into and the environment it sets. Two variants with equal identities replay the same
    conversation identically (only a literal equality counts: a value the engine would floor or
    default to the same is still a replay of its own)."""
    sections = {k: copy.deepcopy(user_config.get(k)) for k in ("compression", "auxiliary", variant.engine)}
    cfg = {k: v for k, v in sections.items() if v is not None}
    env = variant.apply(cfg)
    return _digest([variant.engine, variant.route, cfg, env])


def job_key(conv_print: str, variant: Variant, options_print: str, toolsets: Mapping[str, Any]) -> str:
    return _digest([conv_print, variant.engine, [list(kv) for kv in variant.settings], options_print,
                    toolsets])[:32]


class Progress:
    """``[#####.....] 3/6  1.2/min  ETA 2m05s  label`` on one stderr line (the ETA from the
    replays done in this run)."""

    def __init__(self, total: int, stream: Optional[TextIO], done: int = 0) -> None:
        self.total, self.done, self.stream = total, done, stream
        self._start, self._start_done = time.monotonic(), done

    def show(self, label: str) -> None:
        if self.stream is None or self.total <= 0:
            return
        width = 30
        filled = int(width * self.done / self.total)
        ran = self.done - self._start_done
        elapsed = time.monotonic() - self._start
        rate = f"  {ran / elapsed * 60:,.1f}/min" if ran and elapsed > 0 else ""
        eta = ""
        if ran and elapsed > 0 and self.done < self.total:
            left = (self.total - self.done) * elapsed / ran
            eta = f"  ETA {int(left // 60)}m{int(left % 60):02d}s"
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}{rate}{eta}  "
                          f"{label[:50]:<50}")
        self.stream.flush()

    def step(self, label: str) -> None:
        self.done += 1
        self.show(label)

    def close(self) -> None:
        if self.stream is not None and self.total > 0:
            self.stream.write("\n")
            self.stream.flush()


# -- one replay, in whichever process runs it ---------------------------------------------------

_SCRATCH_HOME: Optional[str] = None


def import_hermes_privately() -> None:
    """Import Hermes' agent loop with HERMES_HOME at a scratch directory of this process's own,
    unless it is imported already. Hermes binds its log files to the home it was imported under
    (``run_agent._hermes_home``): imported inside a replay, they would point into a replay home
    that is deleted afterwards (and every later log line would print an error); imported in the
    operator's home, the replays' log lines would land in it."""
    global _SCRATCH_HOME
    if "run_agent" in sys.modules:
        return
    _SCRATCH_HOME = _SCRATCH_HOME or tempfile.mkdtemp(prefix="observed-replay-process-")
    before = os.environ.get("HERMES_HOME")
    os.environ["HERMES_HOME"] = _SCRATCH_HOME
    try:
        host.ai_agent_class()
    finally:
        if before is None:
            os.environ.pop("HERMES_HOME", None)
        else:
            os.environ["HERMES_HOME"] = before


SCRATCH_PREFIX = "observed-replays-"


def _process_scratch() -> str:
    """This process's directory for replay homes (``observed-replays-<pid>-*`` in the replay's
    scratch place, /dev/shm where there is one), named after the process so that the next sweep
    removes what a killed one left (a worker stopped mid-replay cannot clean up after itself)."""
    from .replay import scratch_dir

    base = Path(scratch_dir() or tempfile.gettempdir())
    for stale in base.glob(SCRATCH_PREFIX + "*"):
        try:
            pid = int(stale.name[len(SCRATCH_PREFIX):].split("-")[0])
            os.kill(pid, 0)
        except ProcessLookupError:
            import shutil

            shutil.rmtree(stale, ignore_errors=True)
        except (ValueError, OSError):
            continue
    return tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=str(base))


TOKENIZER_PROCESS_ENV = "OBSERVED_TOKENIZER_PROCESS"


class Replayer:
    """Replays jobs one after another in this process, with one replay LLM for all of them."""

    def __init__(self, scratch: Optional[str] = None) -> None:
        from .replay import SCRATCH_ENV
        from .replay_server import ReplayServer

        import_hermes_privately()
        self._scratch = scratch or _process_scratch()      # this process's replay homes go here
        os.environ[SCRATCH_ENV] = self._scratch
        # tiktoken in this process, as in a worker: the replay LLM counts every request, and the
        # helper process would be one more process per sweep to feed and to schedule (same counts)
        self._tokenizer_env_set = TOKENIZER_PROCESS_ENV not in os.environ     # undone by close()
        os.environ.setdefault(TOKENIZER_PROCESS_ENV, "0")
        self.server = ReplayServer([], model="replay-model", context_length=128_000).start()
        self._servers: Dict[str, Any] = {}
        self.request_memo = request_memo.install()      # the SDK's per-request walk, once per message
        self.config_copy = config_copy.install()        # Hermes' load_config() copies, for plain data

    def server_for(self, usage: str):
        from .replay_server import ReplayServer

        if usage == self.server.usage:
            return self.server
        if usage not in self._servers:
            self._servers[usage] = ReplayServer([], model="replay-model", context_length=128_000,
                                                usage=usage).start()
        return self._servers[usage]

    def run(self, task: Mapping[str, Any]) -> Dict[str, Any]:
        from .replay import EngineUnavailable, replay

        conv, variant = task["conversation"], task["variant"]
        started = time.monotonic()
        try:
            raw = replay(conv, variant, user_config=task["user_config"], context_length=task["context_length"],
                         summary=task["summary"], usage=task["usage"], toolsets=task["toolsets"],
                         server=self.server_for(task["usage"]))
            result = report_mod.summarise_replay(raw, task["context_length"])
        except EngineUnavailable as exc:
            result = {"status": "skipped", "reason": str(exc), "unavailable": True}
        except Exception as exc:   # the replay itself broke: this job only
            result = {"status": "skipped", "reason": f"the replay failed: {type(exc).__name__}: {exc}"}
        result["replay_wall_s"] = time.monotonic() - started
        result["pid"] = os.getpid()
        return {"key": task["key"], "session_id": conv.session_id, "variant": variant.label, "result": result}

    def close(self) -> None:
        for s in [self.server, *self._servers.values()]:
            try:
                s.stop()
            except Exception:  # teardown: the next server is stopped anyway
                pass
        from .replay import SCRATCH_ENV

        if os.environ.get(SCRATCH_ENV) == self._scratch:
            os.environ.pop(SCRATCH_ENV, None)
        if self._tokenizer_env_set:     # a serial sweep inside another program leaves its env as it was
            os.environ.pop(TOKENIZER_PROCESS_ENV, None)
        if self.request_memo is not None:
            request_memo.uninstall()
            self.request_memo = None
        if self.config_copy is not None:
            config_copy.uninstall()
            self.config_copy = None
        import shutil

        shutil.rmtree(self._scratch, ignore_errors=True)


_WORKER: Optional[Replayer] = None


def _worker_init(private_home: str, replays: str) -> None:
    """A pool worker: its own HERMES_HOME, tiktoken in this process, Hermes imported once."""
    global _WORKER, _WORKER_FAILED
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ["HERMES_HOME"] = tempfile.mkdtemp(prefix="worker-", dir=private_home)
    os.environ["OBSERVED_TOKENIZER_PROCESS"] = "0"
    try:       # a failing initializer would make the pool start workers forever: report it per job
        host.ai_agent_class()
        _WORKER = Replayer(tempfile.mkdtemp(prefix="worker-", dir=replays))
    except Exception as exc:
        _WORKER_FAILED = f"the replay worker could not start: {type(exc).__name__}: {exc}"


_WORKER_FAILED: Optional[str] = None


def _worker_run(task: Mapping[str, Any]) -> Dict[str, Any]:
    if _WORKER is None:
        return {"key": task["key"], "session_id": task["conversation"].session_id, "variant": task["variant"].label,
                "result": {"status": "skipped", "reason": _WORKER_FAILED or "the replay worker did not start"}}
    return _WORKER.run(task)


# -- the runner --------------------------------------------------------------------------------

def _write_atomic(path: Path, data: Dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, default=str), encoding="utf-8")
    os.replace(tmp, path)


def _load_done(path: Path) -> Optional[Dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == JOB_FORMAT and "result" in data else None


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class SweepInterrupted(Exception):
    """Ctrl-C during a sweep: what was done is kept; ``done`` of ``total`` jobs."""

    def __init__(self, done: int, total: int, out: Optional[Path]) -> None:
        super().__init__(f"interrupted: {done} of {total} replays done"
                         + (f" and kept in {out}; run the same command again to resume" if out else ""))
        self.done, self.total, self.out = done, total, out


def run_jobs(conversations: Sequence[Conversation], variants: Sequence[Variant], *,
             user_config: Mapping[str, Any], context_length: int, summary: str, usage: str,
             toolsets_for: Callable[[Conversation], Mapping[str, Any]], jobs: int = 1,
             out: Optional[Path] = None, progress: Optional[TextIO] = sys.stderr,
             on_result: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]:
    """Every (conversation, variant) replay, from ``out``'s kept results where they are there.

    Returns ``{"results": {(session_id, label): summary}, "replayed": n, "reused": n (kept in
    ``out``), "shared": n (labels answered by the replay of a variant with the same settings),
    "seconds": wall, "jobs": jobs}``. Raises :class:`SweepInterrupted` on Ctrl-C."""
    jobs_dir = Path(out) / JOBS_DIR if out is not None else None
    if jobs_dir is not None:
        jobs_dir.mkdir(parents=True, exist_ok=True)
    engines = sorted({v.engine for v in variants})
    opts = {e: options_fingerprint(user_config, e, context_length=context_length, summary=summary, usage=usage)
            for e in engines}
    identity = {v.label: replay_identity(v, user_config) for v in variants}
    results: Dict[Tuple[str, str], Dict[str, Any]] = {}
    pending: List[Dict[str, Any]] = []
    # the labels a replay also answers (same identity): {key of the replay: [(key, label), ...]}
    also: Dict[str, List[Tuple[str, str]]] = {}
    shared = shared_kept = 0
    for conv in sorted(conversations, key=lambda c: -len(c.messages)):
        cprint = conversation_fingerprint(conv)
        toolsets = dict(toolsets_for(conv))
        keys = {v.label: job_key(cprint, v, opts[v.engine], toolsets) for v in variants}
        found: Dict[str, Dict[str, Any]] = {}          # identity -> a kept result
        for variant in variants:
            done = _load_done(jobs_dir / f"{keys[variant.label]}.json") if jobs_dir is not None else None
            if done is not None:
                results[(conv.session_id, variant.label)] = done["result"]
                found.setdefault(identity[variant.label], done["result"])
        first: Dict[str, str] = {}                     # identity -> key of this conversation's replay
        for variant in variants:
            label, key, ident = variant.label, keys[variant.label], identity[variant.label]
            if (conv.session_id, label) in results:
                continue
            if ident in found:                         # kept under another label with the same settings
                results[(conv.session_id, label)] = found[ident]
                shared += 1
                shared_kept += 1
                if jobs_dir is not None:
                    _write_atomic(jobs_dir / f"{key}.json", {"format": JOB_FORMAT, "session_id": conv.session_id,
                                                             "variant": label, "result": found[ident]})
                continue
            if ident in first:
                also[first[ident]].append((key, label))
                shared += 1
                continue
            first[ident] = key
            also[key] = []
            pending.append({"key": key, "conversation": conv, "variant": variant, "user_config": dict(user_config),
                            "context_length": context_length, "summary": summary, "usage": usage,
                            "toolsets": toolsets})
    reused = len(results) - shared_kept
    total = reused + len(pending)
    bar = Progress(total, progress, done=reused)
    unavailable: Dict[str, str] = {}
    started = time.monotonic()

    def accept(item: Dict[str, Any]) -> None:
        result = item["result"]
        for key, label in [(item["key"], item["variant"]), *also.get(item["key"], ())]:
            results[(item["session_id"], label)] = result
            if result.get("unavailable"):
                unavailable.setdefault(label.partition("@")[0], result["reason"])
            elif jobs_dir is not None:
                _write_atomic(jobs_dir / f"{key}.json", {"format": JOB_FORMAT, "session_id": item["session_id"],
                                                         "variant": label, "result": result})
        if on_result is not None:
            on_result(item)
        bar.step(f"{item['session_id']} × {item['variant']}")

    bar.show("")
    try:
        if pending and jobs <= 1:
            worker = Replayer()
            try:
                for task in pending:
                    engine = task["variant"].engine
                    if engine in unavailable:
                        accept({"key": task["key"], "session_id": task["conversation"].session_id,
                                "variant": task["variant"].label,
                                "result": {"status": "skipped", "reason": unavailable[engine],
                                           "unavailable": True}})
                        continue
                    accept(worker.run(task))
            finally:
                worker.close()
        elif pending:
            _run_pool(pending, jobs, accept)
    except KeyboardInterrupt:
        bar.close()
        raise SweepInterrupted(bar.done, total, out) from None
    bar.close()
    return {"results": results, "replayed": len(pending), "reused": reused, "shared": shared,
            "seconds": time.monotonic() - started, "jobs": jobs, "unavailable": unavailable}


def _run_pool(pending: List[Dict[str, Any]], jobs: int, accept: Callable[[Dict[str, Any]], None]) -> None:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    private = tempfile.mkdtemp(prefix="observed-tune-workers-")
    replays = _process_scratch()      # the workers' replay homes: removed below, or by the next sweep
    pool = ctx.Pool(processes=min(jobs, len(pending)), initializer=_worker_init, initargs=(private, replays))
    try:
        for item in pool.imap_unordered(_worker_run, pending, chunksize=1):
            accept(item)
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()
        import shutil

        shutil.rmtree(private, ignore_errors=True)
        shutil.rmtree(replays, ignore_errors=True)


def conversations_with_variants(results: Mapping[Tuple[str, str], Dict[str, Any]],
                                conversations: Iterable[Conversation], variants: Sequence[Variant]
                                ) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """``{session_id: {label: summary}}`` in the variants' order."""
    return {c.session_id: {v.label: results[(c.session_id, v.label)] for v in variants
                           if (c.session_id, v.label) in results} for c in conversations}


__all__ = ["BUILTIN", "Progress", "Replayer", "SweepInterrupted", "default_grid", "default_jobs", "parse_grid",
           "run_jobs"]
