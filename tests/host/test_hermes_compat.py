"""The built-in compressor built for the Hermes that is installed (issue 14, items 1 and 10).

* Older constructors: 0.16.0/0.17.0's ``ContextCompressor`` takes no ``max_tokens`` (0.18.0
  added it), 0.13/0.14's no ``abort_on_summary_failure`` (0.15.0). The plugin passes only what
  the installed constructor takes; given a keyword it does not know, the constructor raised
  TypeError and Hermes ran its un-observed built-in. (The real 0.16.0, 0.17.0 and 0.18.2 run
  in tests/hermes_versions/.)
* Quiet mode: the host builds its own compressor with ``quiet_mode=agent.quiet_mode``; the
  plugin's built-in follows the agent being built, so agent.log gets the lines bare Hermes
  writes and no others (a real bare and observed ``AIAgent`` run, their log records compared).
* The tested range: pyproject, observed_engine.version, the CI matrix script and the README
  say the same, and ``doctor`` warns outside it.
"""

from __future__ import annotations

import logging
import re
import shutil
import sys
import threading
import tomllib
from pathlib import Path

import pytest
from agent.context_compressor import ContextCompressor
from support import agent_run
from support.agent_run import CONTEXT_LENGTH, MODEL
from support.fake_llm_server import FakeLLMServer
from support.paths import REPO

import observed_engine
from observed_engine import host, is_observed, version
from observed_engine import plugin as hp
from observed_engine.cli import doctor

CONFIG = {
    "model": {"default": "gpt-4o", "provider": "openrouter", "context_length": 128_000, "max_tokens": 4096},
    "compression": {"abort_on_summary_failure": True, "protect_last_n": 7},
}


class Compressor017(ContextCompressor):
    """The built-in with 0.16.0/0.17.0's constructor: every keyword of 0.19.0's but max_tokens."""

    def __init__(self, model, threshold_percent=0.5, protect_first_n=3, protect_last_n=20,
                 summary_target_ratio=0.2, quiet_mode=False, summary_model_override=None, base_url="",
                 api_key="", config_context_length=None, provider="", api_mode="",
                 abort_on_summary_failure=False):
        super().__init__(model, threshold_percent, protect_first_n, protect_last_n, summary_target_ratio,
                         quiet_mode, summary_model_override, base_url, api_key, config_context_length,
                         provider, api_mode, abort_on_summary_failure=abort_on_summary_failure)


class Compressor014(ContextCompressor):
    """0.13/0.14's constructor: no abort_on_summary_failure either."""

    def __init__(self, model, threshold_percent=0.5, protect_first_n=3, protect_last_n=20,
                 summary_target_ratio=0.2, quiet_mode=False, summary_model_override=None, base_url="",
                 api_key="", config_context_length=None, provider="", api_mode=""):
        super().__init__(model, threshold_percent, protect_first_n, protect_last_n, summary_target_ratio,
                         quiet_mode, summary_model_override, base_url, api_key, config_context_length,
                         provider, api_mode)


# ------------------------------------------------------------------ older constructors (item 1)

@pytest.mark.parametrize("cls", [Compressor017, Compressor014])
def test_the_builtin_is_built_with_what_the_installed_constructor_takes(cls, monkeypatch):
    monkeypatch.setattr(host, "context_compressor_class", lambda: cls)
    inner = hp.build_compressor(CONFIG)
    assert type(inner) is cls
    assert inner.context_length == 128_000 and inner.protect_last_n == 7 and inner.model == "gpt-4o"
    if cls is Compressor017:
        assert inner.abort_on_summary_failure is True

    engine = hp.build_engine(CONFIG)            # what register() hands Hermes
    assert is_observed(engine) and engine.name == "observed"
    assert isinstance(engine, cls)


def test_keywords_of_the_current_constructor_all_reach_it():
    inner = hp.build_compressor(CONFIG)
    assert type(inner) is ContextCompressor
    assert inner.abort_on_summary_failure is True
    assert getattr(inner, "max_tokens", 4096) == 4096


def test_compressor_arguments_keeps_everything_for_a_var_keyword_constructor():
    class Open:
        def __init__(self, model, **kwargs):
            pass

    assert host.compressor_arguments(Open, {"model": "m", "max_tokens": 1}) == {"model": "m", "max_tokens": 1}
    assert host.compressor_arguments(Compressor014, {"model": "m", "max_tokens": 1, "provider": "p"}) == \
        {"model": "m", "provider": "p"}


# ------------------------------------------------------------------ quiet mode (item 10)

def test_without_an_agent_being_built_the_builtin_is_quiet():
    assert host.building_agent_quiet_mode() is None
    assert hp.build_compressor(CONFIG).quiet_mode is True
    assert hp.build_compressor(CONFIG, quiet_mode=False).quiet_mode is False


TURNS = 7
llm = agent_run.llm          # a fixture: the fake LLM server (fake-model, a 64,000-token window)


@pytest.fixture
def hermes_dirs(tmp_path, monkeypatch):
    for var in [v for v in __import__("os").environ if v.startswith("OTEL_") or v.endswith("_API_KEY")]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("HERMES_SAFE_MODE", raising=False)
    import hermes_cli.plugins as hplugins

    import plugins.context_engine as pce

    monkeypatch.setattr(hplugins, "_plugin_manager", None)
    engines = tmp_path / "context_engine"      # stand-in for Hermes' bundled dir
    engines.mkdir()
    shutil.copytree(REPO / "plugins" / "context_engine" / "observed", engines / "observed")
    monkeypatch.setattr(pce, "_CONTEXT_ENGINE_PLUGINS_DIR", engines)
    before = {n for n in sys.modules if n.startswith("plugins.context_engine.")}
    observed_engine.shutdown(5)
    yield tmp_path
    observed_engine.shutdown(5)
    for name in [n for n in sys.modules if n.startswith("plugins.context_engine.")]:
        if name not in before:
            sys.modules.pop(name, None)


def _home(root: Path, llm: FakeLLMServer, engine: str, monkeypatch) -> Path:
    # the same length for both (the system prompt shows the home's path, the log its size in tokens)
    home = root / ("home-bare" if engine == "compressor" else "home-obsd")
    home.mkdir()
    (home / "config.yaml").write_text(
        "model:\n"
        f"  default: {MODEL}\n  provider: custom\n  base_url: {llm.base_url}\n  context_length: {CONTEXT_LENGTH}\n"
        f"context:\n  engine: {engine}\n"
        "compression:\n  protect_first_n: 1\n  protect_last_n: 2\n"
        "observed:\n  inner: compressor\n  prometheus:\n    enabled: false\n",
        encoding="utf-8")
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


class _Records(logging.Handler):
    """Every record at INFO or above, as agent.log's handler (INFO+, root logger) sees it; but not
    our own lines from threads that were running before the run began (an earlier test's exporter
    thread, still finishing under load after its pipeline was shut down): they are not this run's."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []
        self.earlier_threads = {t.ident for t in threading.enumerate()} - {threading.main_thread().ident}

    def emit(self, record):
        if record.name.startswith("observed_engine") and record.thread in self.earlier_threads:
            return
        self.lines.append((record.name, record.levelname, record.getMessage()))


def _normalised(lines, llm_port):
    out = []
    for name, level, text in lines:
        if name.startswith("observed_engine"):
            continue   # our own lines are counted separately
        text = text.replace(str(llm_port), "PORT")
        text = re.sub(r"\b\d+(\.\d+)?(ms|s)\b", "T", text)               # durations
        text = re.sub(r"Thread-\d+", "Thread-N", text)
        text = re.sub(r"\b[0-9a-f]{8,}\b|\b\d{8}_\d{6}_[0-9a-f]+\b", "ID", text)  # session ids
        out.append((name, level, text))
    return out


def _run(llm, quiet: bool):
    import hermes_cli.plugins as hplugins
    from run_agent import AIAgent

    hplugins._plugin_manager = None          # each agent's plugin discovery logs its lines
    from agent.auxiliary_client import shutdown_cached_clients

    shutdown_cached_clients()                # and each resolves the summariser's client afresh

    with llm._lock:
        llm._turn = 0            # the answers are numbered: each run from 1
    root = logging.getLogger()
    handler = _Records()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        agent = AIAgent(base_url=llm.base_url, api_key="sk-fake", provider="custom", model=MODEL,
                        quiet_mode=quiet, skip_context_files=True, skip_memory=True, enabled_toolsets=[],
                        max_iterations=4, save_trajectories=False)
        history, turns = None, []
        for i in range(TURNS):
            result = agent.run_conversation(f"Question {i + 1}: go on. " + "detail " * 300,
                                            conversation_history=history)
            history = result.get("messages")
            turns.append((result.get("final_response"), len(history or []),
                          agent.context_compressor.compression_count))
        observed_engine.flush(10)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    return agent, turns, handler.lines


@pytest.mark.parametrize("quiet", [True, False], ids=["quiet", "verbose"])
def test_agent_log_has_the_lines_of_bare_hermes(quiet, hermes_dirs, llm, monkeypatch):
    _home(hermes_dirs, llm, "compressor", monkeypatch)
    bare, bare_turns, bare_lines = _run(llm, quiet)
    _home(hermes_dirs, llm, "observed", monkeypatch)
    observed, obs_turns, obs_lines = _run(llm, quiet)

    assert not is_observed(bare.context_compressor) and is_observed(observed.context_compressor)
    assert observed.context_compressor.quiet_mode is bare.context_compressor.quiet_mode is quiet
    assert obs_turns == bare_turns and bare_turns[-1][2] >= 1, bare_turns   # it compressed
    bare_norm = _normalised(bare_lines, llm.port)
    obs_norm = _normalised(obs_lines, llm.port)
    if not quiet:
        # the host's own line for any selected plugin engine, written by bare Hermes too with that engine
        host_line = ("run_agent", "INFO", "Using context engine: observed")
        assert host_line in obs_norm
        obs_norm.remove(host_line)
    compressor_lines = [line for line in bare_norm if line[0] == "agent.context_compressor"]
    assert bool(compressor_lines) is not quiet, bare_norm
    import difflib
    assert obs_norm == bare_norm, "\n".join(difflib.unified_diff(
        [" | ".join(x) for x in bare_norm], [" | ".join(x) for x in obs_norm], "bare", "observed", lineterm=""))
    assert not [line for line in obs_lines if line[0].startswith("observed_engine")]


# ------------------------------------------------------------------ the tested range (item 1)

def _matrix_lines() -> dict:
    """tests/hermes_versions' LINES (read from its source: the module skips itself here)."""
    import ast

    tree = ast.parse((REPO / "tests" / "hermes_versions" / "test_hermes_version.py").read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "LINES")
    return ast.literal_eval(node.value)


def test_the_tested_range_is_stated_once_everywhere():
    """version.py's verified set is what pyproject, both scripts, the matrix test and the docs say:
    a line dropped from any of them, or mapped to another distribution, fails here."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["optional-dependencies"]["hermes"] == [
        f"{version.HERMES_DISTRIBUTION}{version.HERMES_TESTED_RANGE}"]
    assert f"hermes-agent=={version.HERMES_SUITE}" in pyproject["project"]["optional-dependencies"]["test"]
    others = [v for v in version.HERMES_TESTED if v != version.HERMES_SUITE]
    script = (REPO / "scripts" / "setup_hermes_versions.sh").read_text(encoding="utf-8")
    assert re.search(r'OBSERVED_HERMES_VERSIONS:-([0-9a-z. ]+)\}', script).group(1).split() == others
    test_sh = (REPO / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert re.search(r'OBSERVED_HERMES_VERSIONS-([0-9a-z. ]+)\}', test_sh).group(1).split() == others
    assert version.HERMES_SUITE in version.HERMES_TESTED_BY_DISTRIBUTION[version.HERMES_DISTRIBUTION]
    assert all(version.release(v) is not None for v in version.HERMES_TESTED)
    lines = _matrix_lines()
    assert lines == {v: d for d, versions in version.HERMES_TESTED_BY_DISTRIBUTION.items() for v in versions}
    # the setup script installs each version under its distribution's name
    import subprocess

    requirement = re.search(r"^requirement\(\) \{.*?^\}", script, re.S | re.M).group(0)
    for v in others:
        out = subprocess.run(["bash", "-c", f"{requirement}\nrequirement {v}"], capture_output=True, text=True,
                             check=True, timeout=30).stdout.strip()
        assert out == f"{lines[v]}=={v}"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    use = (REPO / "docs" / "use-with-hermes.md").read_text(encoding="utf-8")
    assert f"hermes-agent {version.HERMES_TESTED_RANGE}" in readme
    assert "CI runs " + ", ".join(version.HERMES_TESTED) in readme
    assert ", ".join(version.HERMES_TESTED[:-1]) + " and " + version.HERMES_TESTED[-1] in use
    for name, versions in version.HERMES_TESTED_BY_DISTRIBUTION.items():
        row = f"| {', '.join(versions)} | `{name}`"
        assert row in readme and row in use, row


@pytest.mark.parametrize("installed, status", [
    ("0.19.0", "ok"), ("0.16.0", "ok"), ("0.18.1", "ok"), ("0.19.7", "ok"),
    ("0.15.2", "warn"), ("0.13.0", "warn"), ("0.20.0", "warn"), ("1.0.0", "warn"), ("0.19.0.dev3", "ok"),
    ("nightly", "warn"),
])
def test_doctor_warns_outside_the_tested_range(installed, status, tmp_path):
    ctx = doctor.Context(home=tmp_path, report={}, version=installed)
    results = doctor.check_hermes_range(ctx)
    assert [r["status"] for r in results] == [status]
    if status == "warn":
        assert results[0]["fix"] and version.HERMES_TESTED_RANGE in results[0]["fix"]
    assert ctx.report["hermes_tested_range"] == version.HERMES_TESTED_RANGE


def test_doctor_runs_the_range_check_after_the_hermes_check():
    assert doctor.CHECKS.index(doctor.check_hermes_range) == doctor.CHECKS.index(doctor.check_hermes) + 1


# ------------------------------------------------------------------ pipx users (item 12)

def test_readme_tells_pipx_users_the_lines_that_work():
    import subprocess

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    use = readme.split("## Use it with Hermes", 1)[1].split("\n## ", 1)[0]
    assert "pipx inject --include-apps hermes-agent /path/to/observed-engine" in use   # not on PyPI yet
    assert "pipx uninject hermes-agent observed-engine" in use
    assert '"$HERMES_PY" -m pip uninstall observed-engine' in use
    assert use.index("uninstall first") < use.index("pipx uninject")
    help_text = subprocess.run([sys.executable, "-m", "observed_engine", "--help"], capture_output=True,
                               text=True, timeout=60, check=True).stdout
    commands = set(re.findall(r"^    ([a-z-]+) ", help_text, re.M))
    named = re.findall(r'"\$HERMES_PY" -m observed_engine ([a-z-]+)', use)
    assert named and set(named) <= commands, (named, commands)
