"""``observed-engine demo``: real Hermes agents through the observed engine, and the live dashboard.

Runs several concurrent sessions of Hermes' own agent loop (``run_agent.AIAgent.run_conversation``,
the code a gateway runs) against the demo's own fake LLM, an OpenAI-compatible server on
127.0.0.1 (``DemoLLM``): nothing leaves the machine. The agents run in a private Hermes home
next to the store whose config.yaml selects ``context.engine: observed`` through Hermes' plugin
system, so what the store shows is what Hermes does: the host's preflight checks, its
``last_prompt_tokens = -1`` write after a compaction, the real ``compress_context``, and the
built-in compressor's cooldown after its summariser fails. Two engines:

* ``compressor`` -- Hermes' built-in ``ContextCompressor``, wrapped by the plugin;
* ``topic-router`` -- the built-in under another name plus ``select_context`` (per-request
  retrieval by topic), set on every third agent the way the host sets a plugin engine. Hermes
  0.19.0 never calls ``select_context``: the demo calls it from Hermes' ``pre_api_request`` hook,
  before every provider request, as head Hermes does (the result is not applied).

The fake LLM reports prompt-cache reads, and every few summaries one is slow enough to pass the
compression deadline or fails (HTTP 401, then a dropped connection); now and then the router
returns garbage from ``select_context`` (the host falls open). All of it lands in the SQLite
store that the dashboard, served on 127.0.0.1 while the traffic runs, reads; the address is
printed once the dashboard answers there (a taken default port gives way to the next free one).

The demo writes only inside a directory of its own (``--dir``; default ``$OBSERVED_DEMO_DIR``,
else ``~/.local/state/observed-engine/demo``): the store ``demo.sqlite``, the agents' Hermes
home ``demo-hermes-home/`` (set as ``HERMES_HOME`` before Hermes is imported, since Hermes'
modules create their home's files at import), tiktoken's cache, the dashboard's log. Wrong
arguments are one line on stderr and exit 2, before anything is created.
"""

from __future__ import annotations

import argparse
import copy
import errno
import http.client
import importlib.util
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

from . import host
from .contract.store_schema import DEMO_DIR_ENV, DEMO_STORE_FILE, demo_dir
from .host import default_store_path
from .loopback_llm import DROP, LoopbackChatServer, content_text, prose
from .version import __version__


TOPICS = ("billing", "deploy", "search", "auth", "cache")
WORDS = ("context", "token", "engine", "summary", "request", "provider", "window", "cache",
         "session", "prompt", "latency", "retry", "budget", "message", "compress", "select")


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


# -- the second engine ------------------------------------------------------------------

class TopicSelection:
    """``select_context`` of both demo routers: per-request retrieval by the topic tag of the
    incoming message; now and then garbage (the host falls open)."""

    def _init_selection(self, garbage_rate: float) -> None:
        self.garbage_rate = garbage_rate
        self._selection: Optional[list] = None
        self._topic: Optional[str] = None
        self._rng = random.Random(7)

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


def make_topic_router(context_length: int = 128_000):
    """The router: Hermes' built-in compressor (its real summarising ``compress``) under another
    name, plus ``select_context`` (per-request retrieval by topic)."""
    Compressor = host.context_compressor_class()

    class TopicRouterEngine(TopicSelection, Compressor):
        """Demo engine: routes each request to the messages of its topic; the built-in compresses."""

        @property
        def name(self) -> str:
            return "topic-router"

        def __init__(self, garbage_rate: float = 0.05) -> None:
            super().__init__(CHAT_MODEL, threshold_percent=0.6, protect_first_n=1, protect_last_n=2,
                             config_context_length=context_length, quiet_mode=True)
            self._init_selection(garbage_rate)

    return TopicRouterEngine


# -- the demo's own LLM: an OpenAI-compatible server on 127.0.0.1 ------------------------------

SUMMARY_MARKER = "summarization agent"      # in the built-in compressor's summariser prompt
CHAT_MODEL = "demo-model"
SUMMARY_MODEL = "demo-summariser"
SUMMARY_TEXT = ("## Goal\nKeep the demo conversation going.\n## Progress\nThe assistant answered every "
                "question so far.\n## Remaining Work\nAnswer the next question.")


class DemoLLM(LoopbackChatServer):
    """A chat-completions server on 127.0.0.1 that answers the agent and its summariser.

    Chat replies are ``reply_chars`` long, so a conversation crosses the compression threshold
    after a few turns; ``usage.prompt_tokens`` is the request's size (characters / 4) and
    ``prompt_tokens_details.cached_tokens`` what a provider's prefix cache would have kept: the
    previous request of the same conversation, none after the prefix changed (a compaction).
    Summaries (requests with the summariser's preamble): every ``fail_every``-th fails, HTTP 401
    and a dropped connection in turn; every ``slow_every``-th takes ``slow_seconds``."""

    def __init__(self, *, reply_chars: int = 40_000, context_length: int = 64_000, slow_every: int = 0,
                 slow_seconds: float = 0.0, fail_every: int = 0, host_: str = "127.0.0.1", port: int = 0) -> None:
        self.reply_chars = reply_chars
        self.context_length = context_length
        self.slow_every, self.slow_seconds, self.fail_every = slow_every, slow_seconds, fail_every
        self.chats = 0
        self.summaries = 0
        self.failures = 0
        self._prefix: Dict[str, tuple] = {}      # conversation -> (first messages digest, prompt tokens)
        self._lock = threading.Lock()
        super().__init__(host_, port)

    thread_name = "demo-llm"
    owner = "demo"
    default_model = CHAT_MODEL

    def model_cards(self) -> List[Dict[str, Any]]:
        return [{"id": m, "object": "model", "owned_by": "demo", "context_length": self.context_length}
                for m in (CHAT_MODEL, SUMMARY_MODEL)]

    def error_payload(self, status: int) -> Dict[str, Any]:  # noqa: ARG002 (the demo fails with 401 only)
        return {"error": {"message": "invalid api key (demo)", "type": "auth_error", "code": "invalid_api_key"}}

    def respond(self, body: Dict[str, Any]):
        """(message, usage), an HTTP status to fail with, or DROP (close the connection)."""
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        texts = [content_text(m.get("content")) for m in messages]
        prompt = max(1, (sum(len(t) for t in texts) + len(str(body.get("tools") or ""))) // 4)
        if any(SUMMARY_MARKER in t for t in texts):
            with self._lock:
                self.summaries += 1
                n = self.summaries
                failing = bool(self.fail_every) and n % self.fail_every == 0
                if failing:
                    self.failures += 1
                    nth = self.failures
            if failing:
                time.sleep(0.05)
                return 401 if nth % 2 else DROP
            time.sleep(self.slow_seconds if self.slow_every and n % self.slow_every == 0 else 0.05)
            return {"role": "assistant", "content": SUMMARY_TEXT}, {"prompt_tokens": prompt, "completion_tokens": len(SUMMARY_TEXT) // 4,
                                  "total_tokens": prompt + len(SUMMARY_TEXT) // 4}
        # the conversation: its first user message; the cached prefix: what the previous request sent
        first_user = next((t for m, t in zip(messages, texts) if m.get("role") == "user"), "")
        head = "\x00".join(texts[:3])
        with self._lock:
            self.chats += 1
            turn = self.chats
            prev = self._prefix.get(first_user[:200])
            self._prefix[first_user[:200]] = (head, prompt)
            if len(self._prefix) > 10_000:
                self._prefix.clear()
        cached = min(prev[1], prompt) * 9 // 10 if prev and prev[0] == head else 0
        # prose that does not repeat itself: Hermes 0.22 stops a reply of one repeated sentence
        content = (f"Answer {turn}: noted. " + prose(turn, self.reply_chars))[: self.reply_chars]
        completion = len(content) // 4
        return {"role": "assistant", "content": content}, {"prompt_tokens": prompt, "completion_tokens": completion,
                         "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": cached}}



# -- the Hermes home the demo's agents run in ----------------------------------------------------

def write_demo_home(home: Path, llm: DemoLLM, settings: Dict[str, Any], context_length: int) -> Path:
    """A private HERMES_HOME whose config.yaml points the agent at the demo LLM and selects the
    observed engine (Hermes' general plugin route: the plugin directory as a user plugin of that
    home, ``plugins.enabled: [observed]``), wrapping the
    built-in compressor, with the demo's store and deadline in its ``observed:`` section."""
    import json

    home.mkdir(parents=True, exist_ok=True)
    # the plugin as a user plugin of this home (0.19.0's general plugin system scans HERMES_HOME/plugins)
    plugin = home / "plugins" / "observed"
    if plugin.exists():
        shutil.rmtree(plugin)
    shutil.copytree(Path(__file__).resolve().parent / "hermes_plugin_dir", plugin,
                    ignore=shutil.ignore_patterns("__pycache__"))
    q = json.dumps          # a JSON string is a YAML string
    prom = settings.get("prometheus") or {}
    (home / "config.yaml").write_text(
        "# written by `observed-engine demo`: its agents talk to a local fake LLM only\n"
        f"model:\n  default: {CHAT_MODEL}\n  provider: custom\n  base_url: {q(llm.base_url)}\n"
        f"  api_key: sk-demo\n  context_length: {context_length}\n"
        "auxiliary:\n  compression:\n    provider: custom\n"
        f"    model: {SUMMARY_MODEL}\n    base_url: {q(llm.base_url)}\n    api_key: sk-demo\n"
        "context:\n  engine: observed\n"
        "compression:\n  threshold: 0.5\n  protect_first_n: 1\n  protect_last_n: 2\n"
        "plugins:\n  enabled:\n    - observed\n"
        "observed:\n  inner: compressor\n"
        f"  store:\n    path: {q(settings['store']['path'])}\n"
        f"  compress_timeout_seconds: {float(settings['compress_timeout_seconds'])}\n"
        f"  prometheus:\n    enabled: {'true' if prom.get('enabled') else 'false'}\n"
        f"    host: 127.0.0.1\n    port: {int(prom.get('port') or 9464)}\n",
        encoding="utf-8")
    return home


# -- traffic: real agents ----------------------------------------------------------------------

class Traffic:
    """Sessions of the real Hermes ``AIAgent`` loop (``run_conversation``), one thread per
    concurrent session. Most sessions run the host's own choice (the observed engine around the
    built-in compressor, from config.yaml); every ``router_every``-th session gets the topic
    router instead, set the way the host sets a plugin engine (``context_compressor``, then
    ``update_model``). 0.19.0 never calls ``select_context``: the demo calls the router's from
    Hermes' ``pre_api_request`` plugin hook, before every provider request, as head Hermes does
    (the result is not applied to the request)."""

    def __init__(self, llm: DemoLLM, router, sessions: int, turn_delay: float, seed: int = 1,
                 router_every: int = 3, turns=(8, 14)) -> None:
        self.llm = llm
        self.router = router
        self.sessions = sessions
        self.turn_delay = turn_delay
        self.seed = seed
        self.router_every = router_every
        self.turn_range = turns
        self.turns = 0
        self.finished = 0
        self.errors = 0
        self.started = 0
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._routed: Dict[str, Any] = {}        # session id -> the router engine of that agent
        self.agents: List[Any] = []              # the latest agent of each worker (the test reads them)

    @property
    def compressions(self) -> int:
        return sum(int(getattr(getattr(a, "context_compressor", None), "compression_count", 0) or 0)
                   for a in list(self.agents)) + self._done_compressions

    _done_compressions = 0

    def on_request(self, **kw) -> None:
        """Hermes' pre_api_request hook: head's select_context call, for a router session."""
        engine = self._routed.get(kw.get("session_id") or "")
        if engine is None:
            return
        request = list(kw.get("request_messages") or [])
        user = {"role": "user", "content": str(kw.get("user_message") or "")}
        try:
            engine.select_context(request, conversation_messages=list(kw.get("conversation_history") or []),
                                  incoming_message=user, budget_tokens=int(engine.threshold_tokens or 0))
        except Exception:  # the demo's selection is decoration; the turn goes on
            pass

    def run_session(self, worker: int) -> None:
        rng = random.Random(self.seed * 1000 + worker)
        while not self.stop.is_set():
            with self._lock:
                self.started += 1
                n = self.started
            try:
                self._one_session(rng, f"demo-{worker}-{int(time.time() * 1000) % 10**9}",
                                  routed=bool(self.router_every) and n % self.router_every == 0, worker=worker)
            except Exception as exc:         # an agent that cannot start: counted, the next one tries again
                with self._lock:
                    self.errors += 1
                print(f"\ndemo: session failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                self.stop.wait(1.0)

    def _one_session(self, rng: random.Random, session_id: str, *, routed: bool, worker: int) -> None:
        AIAgent = host.ai_agent_class()
        agent = AIAgent(base_url=self.llm.base_url, api_key="sk-demo", provider="custom", model=CHAT_MODEL,
                        quiet_mode=True, skip_context_files=True, skip_memory=True, enabled_toolsets=[],
                        max_iterations=2, save_trajectories=False, session_id=session_id, platform="demo")
        agent.suppress_status_output = True       # the host's status lines would bury the progress line
        if routed:
            engine = copy.deepcopy(self.router)              # the host deep-copies plugin engines per agent
            agent.context_compressor = engine
            engine.update_model(model=agent.model, context_length=self.llm.context_length, base_url=agent.base_url,
                                api_key="sk-demo", provider=agent.provider, api_mode=agent.api_mode)
            bind = getattr(engine, "bind_session_state", None)      # as the host's agent init does
            if callable(bind):
                bind(session_db=getattr(agent, "_session_db", None), session_id=session_id)
            self._routed[session_id] = engine
        while len(self.agents) <= worker:
            self.agents.append(None)
        self.agents[worker] = agent
        history = None
        try:
            for _ in range(rng.randint(*self.turn_range)):
                if self.stop.is_set():
                    break
                topic = rng.choice(TOPICS)
                tag = f"[{topic}] " if rng.random() < 0.8 else ""   # untagged: select_context returns None
                result = agent.run_conversation(tag + _text(rng, rng.randint(150, 400)), conversation_history=history)
                history = result.get("messages") or history
                if sum(len(content_text(m.get("content"))) for m in history if isinstance(m, dict)) > \
                        8 * self.llm.context_length:     # ~2x the window: a session that cannot shrink ends
                    break
                with self._lock:
                    self.turns += 1
                self.stop.wait(self.turn_delay * rng.uniform(0.5, 1.5))
        finally:
            agent.shutdown_memory_provider(history or [])         # the host's session end: on_session_end
            self._routed.pop(session_id, None)
            with self._lock:
                self.finished += 1
                self._done_compressions += int(getattr(agent.context_compressor, "compression_count", 0) or 0)
                self.agents[worker] = None


def router_engine(settings: Dict[str, Any], context_length: int):
    """The topic router, observed with the same settings as the plugin's engine (one pipeline)."""
    from .api import observe

    return observe(make_topic_router(context_length)(), settings={**settings, "name": "observed"})


# -- offline engines (no agent loop): the test feeds drive these hook by hook --------------------

def make_trimming_router(context_length: int = 128_000):
    """The offline router of the test feeds: select_context as the demo's, its own trimming compress."""
    ContextEngine = host.context_engine_abc()

    class TopicRouterEngine(TopicSelection, ContextEngine):
        """Demo engine: routes each request to the messages of its topic; trims on compress."""

        name = "topic-router"

        def __init__(self, garbage_rate: float = 0.05) -> None:
            self.context_length = context_length
            self.threshold_percent = 0.6
            self.threshold_tokens = int(context_length * self.threshold_percent)
            self._init_selection(garbage_rate)

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

    return TopicRouterEngine


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


def build_engines(settings: Dict[str, Any], summariser: OfflineSummariser, context_length: int) -> Dict[str, Any]:
    from .api import observe

    cc = host.compressor_module()

    cc.call_llm = summariser       # the only LLM call of the built-in compressor, answered offline
    compressor = cc.ContextCompressor(
        "gpt-4o", threshold_percent=0.5, protect_first_n=1, protect_last_n=6,
        config_context_length=context_length, quiet_mode=True,
    )
    router = make_trimming_router(context_length)()
    return {"compressor": observe(compressor, settings=settings), "topic-router": observe(router, settings=settings)}


# -- the dashboard ------------------------------------------------------------------------
# The one builder of the dashboard's command line, used by ``start_dashboard`` below and by
# ``observed-engine dashboard`` (observed_engine/cli/dashboard.py). It lives here, not in the
# CLI, because the demo sits below the CLI in the import layers (pyproject.toml).

# Not on the package index yet: the extra comes from a checkout or a built wheel (README, Install).
DASHBOARD_EXTRA = ("the dashboard needs the [dashboard] extra: pip install '/path/to/observed-engine[dashboard]' "
                   f"(a checkout) or 'observed_engine-{__version__}-py3-none-any.whl[dashboard]' (a built wheel)")


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


def start_dashboard(store: Path, address: str, port: int,
                    log: Optional[Path] = None) -> Optional[subprocess.Popen]:
    """The dashboard on *store*, in a process group of its own (the demo stops it with the group),
    its output in *log* (so that the demo can say why it stopped); None, said on stderr, when
    Streamlit or the dashboard app is missing."""
    problem = (DASHBOARD_EXTRA if not streamlit_installed()
               else f"dashboard not found at {DASHBOARD_APP}" if not DASHBOARD_APP.is_file() else None)
    if problem:
        print(f"demo: {problem}; showing progress only", file=sys.stderr)
        return None
    env = dict(os.environ, OBSERVED_STORE=str(store), OBSERVED_REFRESH_SECONDS="2")
    cmd = dashboard_command(DASHBOARD_APP, store=store, address=address, port=port)
    out = open(log, "wb") if log is not None else subprocess.DEVNULL
    try:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT if log is not None else out,
                                start_new_session=True)
    finally:
        if log is not None:
            out.close()


# -- which port the dashboard gets, and whether it answers there -----------------------------
# Streamlit told to use a port that is taken exits at once (``Port 8501 is not available``);
# the demo used to print the address anyway, and whatever else answered there (another
# dashboard, empty) was what the user saw. So the port is checked first, and the address is
# printed only once the demo's own child answers on it.

DEFAULT_DASHBOARD_PORT = 8501
NEARBY_PORTS = 20               # tried after a taken default port, before any free port


def port_in_use(host: str, port: int) -> bool:
    """Something holds ``host:port``: a bind as Streamlit's (tornado's ``bind_sockets``: every
    address the host resolves to, SO_REUSEADDR, IPv6 sockets v6-only) fails with EADDRINUSE.
    Other failures (an address of no interface here, a name that does not resolve) raise OSError."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return True
                raise
    return False


def _any_free_port(host: str) -> int:
    infos = socket.getaddrinfo(host or None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.bind(address)
        return probe.getsockname()[1]


def choose_dashboard_port(host: str, requested: Optional[int], start: int = DEFAULT_DASHBOARD_PORT) -> tuple:
    """``(port, note)``: the port the dashboard will listen on. An explicit ``--port`` that is
    taken is a wrong argument (DemoArgumentError); the default one (*start*), when taken, gives
    way to the next free port (``note`` says so)."""
    port = start if requested is None else requested
    try:
        if not port_in_use(host, port):
            return port, None
        if requested is not None:
            raise DemoArgumentError(f"--port {port}: {_netloc(host, port)} is in use by another program; "
                                    "fix: --port with a free port, or no --port (the demo then takes the next free one)")
        for candidate in range(port + 1, min(port + 1 + NEARBY_PORTS, 65536)):
            if not port_in_use(host, candidate):
                break
        else:
            candidate = _any_free_port(host)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise DemoArgumentError(f"--port {port}: this user may not listen on {_netloc(host, port)} ({why}); "
                                    "fix: --port 1024 or above") from None
        raise DemoArgumentError(f"--host {host!r}: not an address of this machine ({why}); "
                                "fix: --host 127.0.0.1") from None
    return candidate, f"{_netloc(host, port)} is in use by another program; the dashboard takes port {candidate}"


RACE_RETRIES = 3


def _in_use(host: str, port: int) -> bool:
    try:
        return port_in_use(host, port)
    except OSError:
        return False


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _probe_host(host: str) -> str:
    """Where to ask a server listening on *host* (a wildcard address: its loopback)."""
    return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


def health(host: str, port: int, timeout: float = 2.0) -> Optional[str]:
    """The body of Streamlit's ``/_stcore/health`` on host:port (``ok`` once it serves), else None.
    A direct connection: no proxy from the environment comes between."""
    conn = http.client.HTTPConnection(_probe_host(host), port, timeout=timeout)
    try:
        conn.request("GET", "/_stcore/health")
        response = conn.getresponse()
        return response.read(64).decode("utf-8", "replace").strip() if response.status == 200 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def last_line(log: Optional[Path]) -> str:
    """The last non-blank line of the dashboard's log (Streamlit's reason for exiting), or ''."""
    try:
        lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines()]
    except (OSError, AttributeError):
        return ""
    return next((ln for ln in reversed(lines) if ln), "")[:300]


def listens(pid: int, port: int) -> Optional[bool]:
    """Process *pid* holds a socket listening on TCP *port*: its listening sockets of that port in
    ``/proc/PID/net/tcp{,6}`` against the socket inodes of its ``/proc/PID/fd``. None where /proc
    cannot say (not Linux)."""
    inodes = set()
    try:
        for table in ("tcp", "tcp6"):
            try:
                rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
            except FileNotFoundError:
                continue
            for row in rows:
                fields = row.split()
                if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
        fds = os.listdir(f"/proc/{pid}/fd")
    except (OSError, ValueError):
        return None
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
        except OSError:
            continue
    return False


def _log_says_it_serves(log: Optional[Path], port: int) -> bool:
    """Streamlit's own line once it listens: ``URL: http://127.0.0.1:8501``."""
    try:
        return re.search(rf"URL: https?://\S+:{port}\b", log.read_text(encoding="utf-8", errors="replace")) is not None
    except (OSError, AttributeError):
        return False


def wait_until_serving(proc: subprocess.Popen, host: str, port: int, *, log: Optional[Path] = None,
                       timeout: float = 90.0, stop: Optional[threading.Event] = None) -> Optional[str]:
    """Wait until the dashboard child answers ``/_stcore/health`` on host:port, and the server that
    answers is the child's own (it listens there: /proc, or else its log says so; another program
    may have taken the port between the check and the child's bind, and the child is still starting
    when that one answers): None then; else why not, in a few words (its exit code and the last
    line of its log)."""
    deadline = time.monotonic() + timeout
    while True:
        code = proc.poll()
        if code is None and health(host, port) == "ok":
            mine = listens(proc.pid, port)
            if (mine or (mine is None and _log_says_it_serves(log, port))) and proc.poll() is None:
                return None
            code = proc.poll()
        if code is not None:
            why = last_line(log)
            return f"Streamlit exited with code {code}" + (f" ({why})" if why else "")
        if stop is not None and stop.is_set():
            return "stopped before it answered"
        if time.monotonic() >= deadline:
            return f"it did not answer http://{_netloc(_probe_host(host), port)}/_stcore/health within {timeout:g} s"
        time.sleep(0.25)


# -- arguments: checked before anything is created -------------------------------------------

class DemoArgumentError(Exception):
    """A wrong argument: said in one line on stderr (what is wrong and the fix), exit 2, nothing
    created or changed."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):       # argparse's usage errors: one line, like every other
        raise DemoArgumentError(f"{message}; fix: see `observed-engine demo --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="observed-engine demo", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None,
                        help="the demo's own directory, the only place it writes: its store, the private Hermes "
                             f"home its agents run in, its token cache, the dashboard's log (default: ${DEMO_DIR_ENV}, "
                             "else $XDG_STATE_HOME/observed-engine/demo, ~/.local/state/observed-engine/demo; "
                             "with --store alone: the store's folder)")
    parser.add_argument("--store", type=Path, default=None, help="SQLite store to write (default: DIR/demo.sqlite)")
    parser.add_argument("--sessions", type=int, default=3, help="concurrent sessions (default 3)")
    parser.add_argument("--duration", type=float, default=0, help="seconds to run; 0 = until Ctrl-C")
    parser.add_argument("--turn-delay", type=float, default=0.25, help="mean pause between turns, seconds")
    parser.add_argument("--deadline", type=float, default=3.0, help="compress deadline for the demo, seconds")
    parser.add_argument("--slow-every", type=int, default=5, help="every Nth summary is slow (0: never)")
    parser.add_argument("--fail-every", type=int, default=4,
                        help="every Nth summary call fails, HTTP 401 and a dropped connection in turn (0: never)")
    parser.add_argument("--router-every", type=int, default=3,
                        help="every Nth session runs the topic router instead of the built-in (0: never)")
    parser.add_argument("--context-length", type=int, default=64_000, help="the model's window (Hermes: >= 64000)")
    parser.add_argument("--reply-chars", type=int, default=40_000, help="length of each fake reply")
    parser.add_argument("--host", default="127.0.0.1", help="address the dashboard listens on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None,
                        help=f"dashboard port (default {DEFAULT_DASHBOARD_PORT}, or the next free one when it is "
                             "taken; a port given here that is taken is an error)")
    parser.add_argument("--prometheus-port", type=int, default=0, help="also serve /metrics on this port")
    parser.add_argument("--no-dashboard", action="store_true")
    return parser


# (flag, smallest value, what the value is, an example fix)
_NUMBERS = (
    ("--sessions", 1, "the number of concurrent sessions", "--sessions 3"),
    ("--duration", 0, "the seconds to run", "--duration 60, or 0 to run until Ctrl-C"),
    ("--turn-delay", 0, "the pause between turns (seconds)", "--turn-delay 0.25"),
    ("--deadline", 0.001, "the compress deadline (seconds)", "--deadline 3"),
    ("--slow-every", 0, "a summary count", "--slow-every 5, or 0 for never"),
    ("--fail-every", 0, "a summary count", "--fail-every 4, or 0 for never"),
    ("--router-every", 0, "a session count", "--router-every 3, or 0 for never"),
    ("--reply-chars", 1, "the reply length", "--reply-chars 40000"),
    ("--prometheus-port", 0, "a TCP port", "--prometheus-port 9464, or leave it out"),
)


def check_arguments(args: argparse.Namespace) -> None:
    """Raise DemoArgumentError for the first wrong argument. Creates nothing."""
    for flag, least, what, fix in _NUMBERS:
        value = getattr(args, flag[2:].replace("-", "_"))
        if not math.isfinite(value) or value < least:
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            problem = f"{what} must be at least {least:g}" if math.isfinite(value) else "not a finite number"
            raise DemoArgumentError(f"{flag} {shown}: {problem}; fix: {fix}")
    for flag, value, least in (("--port", args.port, 1), ("--prometheus-port", args.prometheus_port, 0)):
        if value is not None and not least <= value <= 65535:
            raise DemoArgumentError(f"{flag} {value}: not a TCP port; fix: a port from 1 to 65535"
                                    + (", e.g. --port 8501" if flag == "--port" else ", e.g. --prometheus-port 9464"))
    if not args.no_dashboard and not args.host.strip():
        raise DemoArgumentError("--host is empty (Streamlit would listen on every interface); "
                                "fix: an address to listen on, such as 127.0.0.1")
    minimum = host.minimum_context_length() or 64_000
    if args.context_length < minimum:
        raise DemoArgumentError(f"--context-length {args.context_length}: below Hermes' smallest model window "
                                f"({minimum:,} tokens; its agent refuses smaller ones); fix: --context-length {minimum}")
    if args.store is not None:
        store = args.store.expanduser()
        if store.is_dir():
            raise DemoArgumentError(f"--store {args.store}: is a directory; fix: a file in it, "
                                    f"e.g. --store {store / DEMO_STORE_FILE}")
        parent = _existing_ancestor(store.parent)
        if not parent.is_dir():
            raise DemoArgumentError(f"--store {args.store}: {parent} is a file, not a directory; "
                                    "fix: a store path in a directory")
    if args.dir is not None and _existing_ancestor(args.dir.expanduser()).is_file():
        raise DemoArgumentError(f"--dir {args.dir}: {_existing_ancestor(args.dir.expanduser())} is a file; "
                                "fix: a directory of its own for the demo (created if missing)")
    if args.prometheus_port and not args.no_dashboard and args.prometheus_port == (args.port or DEFAULT_DASHBOARD_PORT):
        raise DemoArgumentError(f"--prometheus-port {args.prometheus_port}: the dashboard's port too; "
                                "fix: another --prometheus-port")
    if args.prometheus_port:
        try:
            taken = port_in_use("127.0.0.1", args.prometheus_port)
        except OSError:
            taken = True
        if taken:
            raise DemoArgumentError(f"--prometheus-port {args.prometheus_port}: 127.0.0.1:{args.prometheus_port} "
                                    "is in use by another program; fix: another --prometheus-port, or leave it out")


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def demo_paths(args: argparse.Namespace) -> tuple:
    """``(directory, store, hermes_home)``: the demo's own directory (``--dir``, else
    ``$OBSERVED_DEMO_DIR`` or the state directory, else, with ``--store`` alone, the store's
    folder), the store in it, the private Hermes home in it. Nothing is created."""
    store = args.store.expanduser().resolve() if args.store is not None else None
    if args.dir is not None:
        directory = args.dir.expanduser().resolve()
    elif store is not None and not os.environ.get(DEMO_DIR_ENV):
        directory = store.parent
    else:
        directory = demo_dir().resolve()
    store = store or directory / DEMO_STORE_FILE
    return directory, store, directory / (store.stem + "-hermes-home")


class private_environment:
    """The demo's process environment while it runs: ``HERMES_HOME`` is its private home (set
    before Hermes is first imported: Hermes' modules create their home's files at import time,
    SOUL.md, state.db, logs/, ...), and tiktoken's cache is in the demo's directory unless the
    operator chose one. Restored on exit (``main()`` may run inside another program: the tests)."""

    def __init__(self, home: Path, token_cache: Path) -> None:
        self.values = {"HERMES_HOME": str(home)}
        if not (os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")):
            self.values["TIKTOKEN_CACHE_DIR"] = str(token_cache)
        self.saved: Dict[str, Optional[str]] = {}

    def __enter__(self):
        for name, value in self.values.items():
            self.saved[name] = os.environ.get(name)
            os.environ[name] = value
        return self

    def __exit__(self, *exc) -> None:
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# -- main ---------------------------------------------------------------------------------------

def main(argv: Optional[List[str]] = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        directory, store, home = demo_paths(args)
    except DemoArgumentError as exc:
        print(f"observed-engine demo: {exc}", file=sys.stderr)
        return 2
    if host.hermes_version() is None:        # looked up without importing it (an import writes files)
        print("observed-engine demo: Hermes Agent is not installed here; fix: bash scripts/demo.sh "
              "(or pip install '/path/to/observed-engine[demo]' from a checkout)", file=sys.stderr)
        return 2
    with private_environment(home, directory / "tiktoken"):
        try:
            check_arguments(args)
            port, note = (None, None) if args.no_dashboard else choose_dashboard_port(args.host, args.port)
        except DemoArgumentError as exc:
            print(f"observed-engine demo: {exc}", file=sys.stderr)
            return 2
        return _run(args, directory, store, home, port, note)


def _run(args: argparse.Namespace, directory: Path, store: Path, home: Path,
         port: Optional[int], port_note: Optional[str]) -> int:
    try:
        host.ai_agent_class()
    except ImportError as exc:
        print(f"observed-engine demo: Hermes Agent cannot be imported ({exc}); fix: bash scripts/demo.sh "
              "(or pip install '/path/to/observed-engine[demo]' from a checkout)", file=sys.stderr)
        return 2
    store.parent.mkdir(parents=True, exist_ok=True)
    directory.mkdir(parents=True, exist_ok=True)
    inside = store.parent == directory
    print(f"demo: its own directory {directory} ({'the store, ' if inside else ''}the agents' Hermes home, the "
          f"token cache, the dashboard's log): it writes nothing elsewhere{'' if inside else ' but the store'}; "
          "delete it to start afresh")
    settings = {
        "store": {"path": str(store)},
        "compress_timeout_seconds": args.deadline,
        "prometheus": {"enabled": bool(args.prometheus_port), "port": args.prometheus_port or 9464},
    }
    llm = DemoLLM(reply_chars=args.reply_chars, context_length=args.context_length, slow_every=args.slow_every,
                  slow_seconds=args.deadline * 1.5, fail_every=args.fail_every).start()
    write_demo_home(home, llm, settings, args.context_length)
    host.reset_plugin_discovery()
    traffic = Traffic(llm, router_engine(settings, args.context_length), args.sessions, args.turn_delay,
                      router_every=args.router_every)
    host.add_request_observer(traffic.on_request)

    log = directory / "dashboard.log"
    dashboard = None if args.no_dashboard else start_dashboard(store, args.host, port, log=log)
    print(f"demo: writing telemetry to {store}")
    if port_note and dashboard is not None:
        print(f"demo: {port_note}")
    if args.prometheus_port:
        print(f"demo: Prometheus metrics on http://127.0.0.1:{args.prometheus_port}/metrics")
    sys.stdout.flush()

    threads = [threading.Thread(target=traffic.run_session, args=(i,), daemon=True) for i in range(args.sessions)]
    for t in threads:
        t.start()
    stop_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.set())
    started = time.monotonic()
    code = 0
    try:
        if dashboard is not None:
            why = wait_until_serving(dashboard, args.host, port, log=log, stop=stop_requested)
            for _ in range(RACE_RETRIES):
                # another program took the port between the check and Streamlit's bind (two demos
                # started at once): the default port moves on, as it does for a port taken before
                if why is None or args.port is not None or dashboard.poll() is None or not _in_use(args.host, port):
                    break
                try:
                    port, note = choose_dashboard_port(args.host, None, start=port + 1)
                except DemoArgumentError:
                    break
                print(f"demo: {note}")
                dashboard = start_dashboard(store, args.host, port, log=log) or dashboard
                why = wait_until_serving(dashboard, args.host, port, log=log, stop=stop_requested)
            if why is None:
                print(f"demo: dashboard on http://{_netloc(args.host, port)}  (Ctrl-C to stop)")
            elif not stop_requested.is_set():
                print(f"observed-engine demo: the dashboard did not start on {_netloc(args.host, port)}: {why}; "
                      f"its log: {log}", file=sys.stderr)
                stop_requested.set()
                code = 1
        said_gone = False
        while not stop_requested.is_set():
            elapsed = time.monotonic() - started
            if args.duration and elapsed >= args.duration:
                break
            if dashboard is not None and not said_gone and dashboard.poll() is not None:
                said_gone = True
                why = last_line(log)
                print(f"\nobserved-engine demo: the dashboard stopped (Streamlit exited with code "
                      f"{dashboard.returncode}{': ' + why if why else ''}); the traffic goes on; its log: {log}",
                      file=sys.stderr)
            sys.stdout.write(
                f"\rdemo: {elapsed:6.0f}s  turns {traffic.turns:6d}  compressions {traffic.compressions:4d}  "
                f"summaries {llm.summaries:4d} ({llm.failures} failed)  sessions {traffic.finished:3d} ended")
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
        llm.stop()
        host.reset_plugin_discovery()
        if dashboard is not None:
            try:
                os.killpg(dashboard.pid, signal.SIGTERM)
                dashboard.wait(timeout=10)
            except Exception:
                dashboard.kill()
        print(f"demo: done ({traffic.turns} turns, {traffic.compressions} compressions); store {store}")
    return code


if __name__ == "__main__":
    sys.exit(main())
