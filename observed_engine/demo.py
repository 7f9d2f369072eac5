"""``observed-engine demo``: realistic traffic through real engines, and the live dashboard.

Runs several concurrent sessions, the way a Hermes gateway would, through two
observed engines:

* ``compressor`` -- Hermes' own built-in ``ContextCompressor`` (its summariser's
  LLM call is answered offline; everything else is the real engine), driven like
  the host drives it: update_from_response → should_compress → compress, with the
  host's ``last_prompt_tokens = -1`` write after each compaction;
* ``topic-router`` -- a small demo engine with ``select_context`` (per-request
  retrieval by topic) and its own trimming ``compress``.

Now and then a summary is slow enough to pass the compression deadline, or the
summary model fails (a 503 makes the compressor insert its fallback summary, a
dropped connection makes it abort; either way its cooldown keeps that session
without real summaries for a while, as in production), and the router returns
garbage from ``select_context`` (the host falls open). All of it
lands in the embedded SQLite store that the dashboard reads; the dashboard is
served on 127.0.0.1 while the traffic runs.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

from . import host
from .host import default_store_path


TOPICS = ("billing", "deploy", "search", "auth", "cache")
WORDS = ("context", "token", "engine", "summary", "request", "provider", "window", "cache",
         "session", "prompt", "latency", "retry", "budget", "message", "compress", "select")


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def _rough_tokens(messages: List[Dict[str, Any]]) -> int:
    return sum(len(str(m.get("content") or "")) for m in messages) // 4 + 4 * len(messages)


# -- the second engine ------------------------------------------------------------------

def make_topic_router(context_length: int = 128_000):
    ContextEngine = host.context_engine_abc()

    class TopicRouterEngine(ContextEngine):
        """Demo engine: routes each request to the messages of its topic; trims on compress."""

        name = "topic-router"

        def __init__(self, garbage_rate: float = 0.05) -> None:
            self.context_length = context_length
            self.threshold_percent = 0.6
            self.threshold_tokens = int(context_length * self.threshold_percent)
            self.garbage_rate = garbage_rate
            self._selection: Optional[list] = None
            self._topic: Optional[str] = None
            self._rng = random.Random(7)

        def update_from_response(self, usage):
            self.last_prompt_tokens = usage.get("prompt_tokens", 0)
            self.last_completion_tokens = usage.get("completion_tokens", 0)
            self.last_total_tokens = usage.get("total_tokens", 0)

        def should_compress(self, prompt_tokens=None):
            tokens = prompt_tokens if prompt_tokens is not None else self.last_prompt_tokens
            return tokens >= self.threshold_tokens

        def compress(self, messages, current_tokens=None, focus_topic=None):  # noqa: ARG002 (the host filters kwargs by this signature)
            self.compression_count += 1
            keep = max(6, len(messages) // 3)
            return messages[:2] + messages[-keep:]

        def select_context(self, request_messages, *, conversation_messages=None,  # noqa: ARG002
                           incoming_message=None, budget_tokens=0):  # noqa: ARG002 (head's call)
            roll = self._rng.random()
            if roll < self.garbage_rate:
                return {"oops": "not a list"}          # the host falls open
            text = str((incoming_message or {}).get("content", "")) if isinstance(incoming_message, dict) else ""
            topic = next((t for t in TOPICS if text.startswith(f"[{t}]")), None)   # the tag only
            if topic is None:
                return None                             # leave the request unchanged
            if topic == self._topic and self._selection is not None:
                return self._selection                  # same selection: cache-friendly
            self._topic = topic
            picked = [m for m in request_messages if topic in str(m.get("content", ""))][-12:]
            self._selection = request_messages[:1] + picked + request_messages[-1:]
            return self._selection

    return TopicRouterEngine


# -- the offline summariser ---------------------------------------------------------------

class OfflineSummariser:
    """Stands in for the LLM behind ``call_llm(task="compression")``; sometimes slow, sometimes failing."""

    def __init__(self, slow_every: int, slow_seconds: float, fail_every: int = 0) -> None:
        self.calls = 0
        self.failures = 0
        self.slow_every = slow_every
        self.slow_seconds = slow_seconds
        self.fail_every = fail_every
        self._lock = threading.Lock()

    def __call__(self, *args, **kwargs):  # noqa: ARG002 (call_llm's signature; the demo answers any call)
        with self._lock:
            self.calls += 1
            n = self.calls
            failing = bool(self.fail_every) and n % self.fail_every == 0
            if failing:
                self.failures += 1
                nth_failure = self.failures
        if failing:
            time.sleep(0.05)
            if nth_failure % 2:
                raise RuntimeError("offline summariser: simulated 503 Service Unavailable")
            raise ConnectionError("offline summariser: simulated connection reset")
        if self.slow_every and n % self.slow_every == 0:
            time.sleep(self.slow_seconds)
        else:
            time.sleep(0.05)
        summary = ("## Goal\nKeep the demo conversation going.\n## Progress\n"
                   f"Summarised turns (summary #{n}).\n## Next steps\nContinue.")
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=summary))],
                               usage=None, model="offline-summariser")


# -- traffic ----------------------------------------------------------------------------------

class Traffic:
    def __init__(self, engines: Dict[str, Any], sessions: int, turn_delay: float, seed: int = 1) -> None:
        self.engines = engines
        self.sessions = sessions
        self.turn_delay = turn_delay
        self.seed = seed
        self.turns = 0
        self.compressions = 0
        self.errors = 0
        self.stop = threading.Event()
        self._lock = threading.Lock()

    def run_session(self, worker: int) -> None:
        rng = random.Random(self.seed * 1000 + worker)
        while not self.stop.is_set():
            name = rng.choice(list(self.engines))
            engine = copy.deepcopy(self.engines[name])   # the host copies plugin engines per agent
            self._one_session(engine, rng, f"demo-{worker}-{int(time.time() * 1000) % 10**9}")

    def _one_session(self, engine, rng: random.Random, session_id: str) -> None:
        engine.update_model(model="gpt-4o", context_length=engine.context_length or 128_000)
        engine.on_session_start(session_id, model="gpt-4o", platform="demo")
        messages: List[Dict[str, Any]] = [{"role": "system", "content": "You are a demo agent."}]
        n_turns = rng.randint(25, 60)
        for turn in range(n_turns):
            if self.stop.is_set():
                break
            topic = rng.choice(TOPICS)
            tag = f"[{topic}] " if rng.random() < 0.8 else ""    # untagged turns: select_context returns None
            user = {"role": "user", "content": tag + _text(rng, rng.randint(200, 900))}
            messages.append(user)
            if hasattr(engine, "select_context"):
                try:
                    engine.select_context(list(messages), conversation_messages=messages,
                                          incoming_message=user, budget_tokens=engine.threshold_tokens)
                except Exception:
                    pass
            reply = {"role": "assistant", "content": _text(rng, rng.randint(400, 1600))}
            messages.append(reply)
            prompt = _rough_tokens(messages)
            completion = len(reply["content"]) // 4
            engine.update_from_response({
                "prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "cache_read_tokens": int(prompt * rng.uniform(0.3, 0.9)),
                "cache_write_tokens": rng.randint(0, 2000), "reasoning_tokens": rng.randint(0, 300),
            })
            if engine.should_compress(prompt):
                try:
                    messages = engine.compress(messages, current_tokens=prompt)
                    engine.last_prompt_tokens = -1      # what the host writes: awaiting real usage
                    with self._lock:
                        self.compressions += 1
                except Exception:
                    with self._lock:
                        self.errors += 1
            with self._lock:
                self.turns += 1
            time.sleep(self.turn_delay * rng.uniform(0.5, 1.5))
        try:
            engine.on_session_end(session_id, messages)
        except Exception:
            pass


def build_engines(settings: Dict[str, Any], summariser: OfflineSummariser, context_length: int) -> Dict[str, Any]:
    from .api import observe

    cc = host.compressor_module()

    cc.call_llm = summariser       # the only LLM call of the built-in compressor, answered offline
    compressor = cc.ContextCompressor(
        "gpt-4o", threshold_percent=0.5, protect_first_n=1, protect_last_n=6,
        config_context_length=context_length, quiet_mode=True,
    )
    router = make_topic_router(context_length)()
    return {"compressor": observe(compressor, settings=settings), "topic-router": observe(router, settings=settings)}


# -- the dashboard ------------------------------------------------------------------------
# The one builder of the dashboard's command line, used by ``start_dashboard`` below and by
# ``observed-engine dashboard`` (observed_engine/cli/dashboard.py). It lives here, not in the
# CLI, because the demo sits below the CLI in the import layers (pyproject.toml).

DASHBOARD_EXTRA = "the dashboard needs the extra: pip install 'observed-engine[dashboard]'"


def streamlit_installed() -> bool:
    """Streamlit is importable (found, not imported: the core install has no Streamlit)."""
    try:
        return importlib.util.find_spec("streamlit") is not None
    except (ImportError, ValueError):
        return False


def _dashboard_app() -> Path:
    """The dashboard's Streamlit script inside the installed package (``observed_engine.dashboard``,
    shipped in the wheel; its dependencies come with the ``[dashboard]`` extra). Found, not imported."""
    spec = importlib.util.find_spec("observed_engine.dashboard")
    if spec is not None and spec.origin:
        return Path(spec.origin).parent / "app.py"
    return Path(__file__).resolve().parent / "dashboard" / "app.py"     # is_file() says it is missing


# The installed dashboard's Streamlit script, observed_engine/dashboard/app.py (may be missing:
# check is_file()).
DASHBOARD_APP = _dashboard_app()


def dashboard_command(app: Path, *, store: Optional[os.PathLike | str] = None, prometheus: Optional[str] = None,
                      address: str = "127.0.0.1", port: int = 8501, allow_source_change: bool = False) -> List[str]:
    """``python -m streamlit run <app> ... -- --store PATH | --prometheus URL [--allow-source-change]``:
    served on ``address:port`` only, headless, no usage statistics, the viewer toolbar. Without
    ``store`` or ``prometheus``: the current Hermes home's store."""
    cmd = [sys.executable, "-m", "streamlit", "run", str(app),
           "--server.address", address, "--server.port", str(port),
           "--server.headless", "true", "--browser.gatherUsageStats", "false",
           "--client.toolbarMode", "viewer", "--"]
    if prometheus:
        cmd += ["--prometheus", prometheus]
    else:
        cmd += ["--store", str(store if store is not None else default_store_path())]
    if allow_source_change:
        cmd.append("--allow-source-change")
    return cmd


def start_dashboard(store: Path, address: str, port: int) -> Optional[subprocess.Popen]:
    """The dashboard on *store*, in a process group of its own (the demo stops it with the group);
    None, said on stderr, when Streamlit or the dashboard app is missing."""
    problem = (DASHBOARD_EXTRA if not streamlit_installed()
               else f"dashboard not found at {DASHBOARD_APP}" if not DASHBOARD_APP.is_file() else None)
    if problem:
        print(f"demo: {problem}; showing progress only", file=sys.stderr)
        return None
    env = dict(os.environ, OBSERVED_STORE=str(store), OBSERVED_REFRESH_SECONDS="2")
    cmd = dashboard_command(DASHBOARD_APP, store=store, address=address, port=port)
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="observed-engine demo", description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=default_store_path().parent / "demo.sqlite",
                        help="SQLite store to write (default: %(default)s)")
    parser.add_argument("--sessions", type=int, default=4, help="concurrent sessions (default 4)")
    parser.add_argument("--duration", type=float, default=0, help="seconds to run; 0 = until Ctrl-C")
    parser.add_argument("--turn-delay", type=float, default=0.25, help="mean pause between turns, seconds")
    parser.add_argument("--deadline", type=float, default=3.0, help="compress deadline for the demo, seconds")
    parser.add_argument("--slow-every", type=int, default=7, help="every Nth summary is slow (0: never)")
    parser.add_argument("--fail-every", type=int, default=13,
                        help="every Nth summary call fails, 503 and connection reset in turn (0: never)")
    parser.add_argument("--context-length", type=int, default=64_000)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8501, help="dashboard port")
    parser.add_argument("--prometheus-port", type=int, default=0, help="also serve /metrics on this port")
    parser.add_argument("--no-dashboard", action="store_true")
    args = parser.parse_args(argv)

    try:
        host.compressor_module()
    except ImportError:
        print("demo: Hermes Agent is not installed; run `pip install 'observed-engine[test]'` "
              "(or scripts/setup.sh) first", file=sys.stderr)
        return 2

    args.store.parent.mkdir(parents=True, exist_ok=True)
    settings = {
        "store": {"path": str(args.store)},
        "compress_timeout_seconds": args.deadline,
        "prometheus": {"enabled": bool(args.prometheus_port), "port": args.prometheus_port or 9464},
    }
    summariser = OfflineSummariser(args.slow_every, args.deadline * 1.5, args.fail_every)
    engines = build_engines(settings, summariser, args.context_length)
    traffic = Traffic(engines, args.sessions, args.turn_delay)

    dashboard = None if args.no_dashboard else start_dashboard(args.store, args.host, args.port)
    print(f"demo: writing telemetry to {args.store}")
    if dashboard is not None:
        print(f"demo: dashboard on http://{args.host}:{args.port}  (Ctrl-C to stop)")
    if args.prometheus_port:
        print(f"demo: Prometheus metrics on http://127.0.0.1:{args.prometheus_port}/metrics")

    threads = [threading.Thread(target=traffic.run_session, args=(i,), daemon=True) for i in range(args.sessions)]
    for t in threads:
        t.start()
    stop_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.set())
    started = time.monotonic()
    try:
        while not stop_requested.is_set():
            elapsed = time.monotonic() - started
            if args.duration and elapsed >= args.duration:
                break
            sys.stdout.write(
                f"\rdemo: {elapsed:6.0f}s  turns {traffic.turns:6d}  compressions {traffic.compressions:4d}  "
                f"summaries {summariser.calls:4d} ({summariser.failures} failed)  engine errors {traffic.errors:3d}")
            sys.stdout.flush()
            stop_requested.wait(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        print()
        traffic.stop.set()
        for t in threads:
            t.join(timeout=args.deadline * 2 + 2)
        from .api import flush

        flush(10.0)
        if dashboard is not None:
            try:
                os.killpg(dashboard.pid, signal.SIGTERM)
                dashboard.wait(timeout=10)
            except Exception:
                dashboard.kill()
        print(f"demo: done ({traffic.turns} turns, {traffic.compressions} compressions); store {args.store}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
