"""The observed plugin through Hermes 0.19.0's own loaders.

* bundled-directory route: ``plugins.context_engine.load_context_engine("observed")``
  with our ``plugins/context_engine/observed/`` in (a temporary stand-in for)
  Hermes' ``plugins/context_engine/`` directory;
* entry-point route: ``hermes_cli.plugins`` discovery with ``plugins.enabled:
  [observed]`` and the ``hermes_agent.plugins`` entry point (the one
  ``install --route entrypoint`` writes when present, else simulated through importlib.metadata).

Each yields an engine named "observed" around the configured inner engine
(inner class preserved, ``isinstance(engine, ContextEngine)``) that survives
``copy.deepcopy``; broken config and broken inner engines still yield an engine.
"""

from __future__ import annotations

import copy
import importlib.metadata as md
import logging
import shutil
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from support.entry_points import simulate_observed_entry_point
from support.paths import REPO

import observed_engine
from observed_engine import hermes_plugin, is_observed

PLUGIN_SRC = REPO / "plugins" / "context_engine" / "observed"
GROUP = "hermes_agent.plugins"

TEST_ENGINE = '''
import json
from agent.context_engine import ContextEngine


class LcmTestEngine(ContextEngine):
    """A third-party style engine: tools and a head-only select_context hook."""

    def __init__(self):
        self.context_length = 200000
        self.threshold_tokens = 150000
        self.ingested = []

    @property
    def name(self):
        return "lcmtest"

    def update_from_response(self, usage):
        self.last_prompt_tokens = usage.get("prompt_tokens", 0)

    def should_compress(self, prompt_tokens=None):
        return (prompt_tokens or 0) >= self.threshold_tokens

    def compress(self, messages, current_tokens=None, focus_topic=None):
        self.compression_count += 1
        return messages[-2:]

    def get_tool_schemas(self):
        return [{"name": "lcm_grep", "description": "search", "parameters": {"type": "object", "properties": {}}}]

    def handle_tool_call(self, name, args, **kwargs):
        return json.dumps({"results": []})

    def select_context(self, request_messages, *, conversation_messages=None,
                       incoming_message=None, budget_tokens=0):
        return None
'''

BROKEN_ENGINE = '''
def register(ctx):
    raise RuntimeError("boom: this engine cannot start")
'''


# -- fixtures -------------------------------------------------------------------------

@pytest.fixture
def hermes_home(tmp_path, monkeypatch):
    home = tmp_path / "hermes-home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    yield home
    # pipelines are per settings; drop them so the next test's store is its own
    observed_engine.shutdown(5)


def write_config(home: Path, text: str) -> None:
    (home / "config.yaml").write_text(textwrap.dedent(text), encoding="utf-8")


@pytest.fixture
def engines_dir(tmp_path, monkeypatch):
    """A temporary ``plugins/context_engine/`` for Hermes' directory loader holding
    our plugin directory (as `observed-engine install` copies it) and test engines.
    The venv's Hermes installation is not touched."""
    import plugins.context_engine as pce

    d = tmp_path / "context_engine"
    d.mkdir()
    shutil.copytree(PLUGIN_SRC, d / "observed")
    (d / "lcmtest").mkdir()
    (d / "lcmtest" / "__init__.py").write_text(TEST_ENGINE, encoding="utf-8")
    (d / "brokenengine").mkdir()
    (d / "brokenengine" / "__init__.py").write_text(BROKEN_ENGINE, encoding="utf-8")
    monkeypatch.setattr(pce, "_CONTEXT_ENGINE_PLUGINS_DIR", d)
    before = {n for n in sys.modules if n.startswith("plugins.context_engine.")}
    yield d
    for name in [n for n in sys.modules if n.startswith("plugins.context_engine.")]:
        if name not in before:
            sys.modules.pop(name, None)


@pytest.fixture
def fresh_plugin_manager(monkeypatch):
    import hermes_cli.plugins as hp

    monkeypatch.setattr(hp, "_plugin_manager", None)
    return hp


@pytest.fixture
def observed_entry_point(monkeypatch):
    """The entry point `install --route entrypoint` wrote if present, else a simulated one."""
    return "simulated" if simulate_observed_entry_point(monkeypatch.setattr) else "installed"


def assert_observed(engine, inner_cls_name: str):
    from agent.context_engine import ContextEngine

    assert engine is not None
    assert engine.name == "observed"
    assert isinstance(engine, ContextEngine)
    assert is_observed(engine)
    assert inner_cls_name in [c.__name__ for c in type(engine).__mro__]
    clone = copy.deepcopy(engine)
    assert clone is not engine
    assert clone.name == "observed"
    assert is_observed(clone)
    assert isinstance(clone, ContextEngine)
    assert type(clone) is type(engine)
    return clone


# -- bundled-directory route --------------------------------------------------------

def test_bundled_directory_route_wraps_the_compressor(hermes_home, engines_dir):
    from agent.context_compressor import ContextCompressor

    from plugins.context_engine import discover_context_engines, load_context_engine

    write_config(hermes_home, """
        context:
          engine: observed
        model:
          default: some-model
          context_length: 200000
        compression:
          threshold: 0.6
          protect_last_n: 7
        """)
    names = {name: (desc, ok) for name, desc, ok in discover_context_engines()}
    assert "observed" in names and names["observed"][1] is True
    assert "Observability" in names["observed"][0]

    engine = load_context_engine("observed")
    assert_observed(engine, "ContextCompressor")
    assert isinstance(engine, ContextCompressor)
    # built from compression.* / model.* as the host would, no network lookup
    assert engine.context_length == 200000
    assert engine.protect_last_n == 7
    assert engine.model == "some-model"
    # a fresh engine per agent (the directory loader calls register() each time)
    assert load_context_engine("observed") is not engine


def test_bundled_directory_route_wraps_a_directory_engine(hermes_home, engines_dir):
    from plugins.context_engine import load_context_engine

    write_config(hermes_home, """
        context:
          engine: observed
        observed:
          inner: lcmtest
        """)
    engine = load_context_engine("observed")
    clone = assert_observed(engine, "LcmTestEngine")
    assert engine.get_tool_schemas()[0]["name"] == "lcm_grep"
    assert engine.compress([{"role": "user", "content": str(i)} for i in range(5)]) == [
        {"role": "user", "content": "3"}, {"role": "user", "content": "4"}]
    assert engine.compression_count == 1
    assert clone.compression_count == 0


# -- entry-point route -----------------------------------------------------------------

def test_the_package_declares_no_hermes_entry_point():
    """Installing the package changes nothing in Hermes (issue 14 item 11): no
    hermes_agent.plugins entry point in pyproject or in the installed metadata (Hermes' plugin
    scan lists every one); `install --route entrypoint` writes one (cli/entry_point.py)."""
    import tomllib

    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert GROUP not in data["project"].get("entry-points", {})
    # Hermes' loader does ep.load() and then getattr(module, "register") on the one install writes
    assert callable(hermes_plugin.register)
    try:
        dist = md.distribution("observed-engine")
    except md.PackageNotFoundError:
        pytest.skip("observed-engine is not pip-installed in this environment")
    assert not [ep for ep in dist.entry_points if ep.group == GROUP]


def test_entry_point_route_registers_observed(hermes_home, fresh_plugin_manager, observed_entry_point):
    write_config(hermes_home, """
        context:
          engine: observed
        plugins:
          enabled:
            - observed
        model:
          default: ep-model
          context_length: 100000
        """)
    candidate = fresh_plugin_manager.get_plugin_context_engine()
    assert candidate is not None, f"entry point ({observed_entry_point}) did not register an engine"
    assert candidate.name == "observed"
    loaded = fresh_plugin_manager.get_plugin_manager()._plugins["observed"]
    assert loaded.enabled and loaded.error is None and loaded.manifest.source == "entrypoint"
    # the host deep-copies the plugin singleton for every agent
    engine = copy.deepcopy(candidate)
    assert_observed(engine, "ContextCompressor")
    assert engine.context_length == 100000


def test_entry_point_route_not_enabled_registers_nothing(hermes_home, fresh_plugin_manager,
                                                          observed_entry_point):
    write_config(hermes_home, """
        context:
          engine: observed
        """)
    assert fresh_plugin_manager.get_plugin_context_engine() is None


# -- inner engines ---------------------------------------------------------------------

class PlugEngine:
    """Stands in for an engine another pip plugin registered."""

    lock = None

    def __new__(cls, *a, **k):
        from agent.context_engine import ContextEngine

        class _PlugEngine(ContextEngine):
            name = "plugengine"
            uncopyable = None

            def update_from_response(self, usage):
                pass

            def should_compress(self, prompt_tokens=None):
                return False

            def compress(self, messages, current_tokens=None, focus_topic=None):
                return messages

        return _PlugEngine()


def test_inner_from_the_general_plugin_system_is_copied(hermes_home, engines_dir, monkeypatch):
    import hermes_cli.plugins as hp

    from plugins.context_engine import load_context_engine

    singleton = PlugEngine()
    singleton_cls = type(singleton)
    monkeypatch.setattr(hp, "get_plugin_context_engine", lambda: singleton)
    write_config(hermes_home, """
        context:
          engine: observed
        observed:
          inner: plugengine
        """)
    engine = load_context_engine("observed")
    assert_observed(engine, "_PlugEngine")
    assert engine is not singleton
    assert type(singleton) is singleton_cls and not is_observed(singleton)


def test_uncopyable_plugin_inner_falls_back_to_compressor(hermes_home, engines_dir, monkeypatch, caplog):
    import hermes_cli.plugins as hp

    from plugins.context_engine import load_context_engine

    singleton = PlugEngine()
    singleton.uncopyable = threading.Lock()
    monkeypatch.setattr(hp, "get_plugin_context_engine", lambda: singleton)
    write_config(hermes_home, """
        context:
          engine: observed
        observed:
          inner: plugengine
        """)
    with caplog.at_level(logging.WARNING, logger="observed_engine"):
        engine = load_context_engine("observed")
    assert_observed(engine, "ContextCompressor")
    assert "plugengine" in caplog.text and "cannot be copied" in caplog.text


@pytest.mark.parametrize("inner, expected", [
    ("brokenengine", "brokenengine"),   # register() raises
    ("nosuchengine", "nosuchengine"),   # not installed anywhere
])
def test_inner_that_cannot_be_built_falls_back_to_compressor(hermes_home, engines_dir, caplog,
                                                             inner, expected):
    from plugins.context_engine import load_context_engine

    write_config(hermes_home, f"""
        context:
          engine: observed
        observed:
          inner: {inner}
        """)
    with caplog.at_level(logging.WARNING, logger="observed_engine"):
        engine = load_context_engine("observed")
    assert_observed(engine, "ContextCompressor")
    warnings = [r for r in caplog.records if r.name.startswith(("observed_engine.plugin", "observed_engine.hermes_plugin"))
                and r.levelno == logging.WARNING]
    assert warnings, caplog.text
    message = warnings[0].getMessage()
    assert repr(expected) in message and "built-in compressor" in message


def test_inner_observed_is_refused(hermes_home, engines_dir, caplog):
    from plugins.context_engine import load_context_engine

    write_config(hermes_home, """
        context:
          engine: observed
        observed:
          inner: observed
        """)
    with caplog.at_level(logging.WARNING, logger="observed_engine"):
        engine = load_context_engine("observed")
    assert_observed(engine, "ContextCompressor")
    assert "observed.inner" in caplog.text


# -- broken observed: section ---------------------------------------------------------

@pytest.mark.parametrize("section, key", [
    ("  prometheus:\n    port: not-a-port\n", "observed.prometheus.port"),
    ("  store:\n    retention_days: -3\n", "observed.store.retention_days"),
    ("  no_such_key: 1\n", "observed.no_such_key"),
    ("  capture_content: maybe\n", "observed.capture_content"),
])
def test_bad_observed_section_logs_the_key_and_still_yields_an_engine(
        hermes_home, engines_dir, caplog, section, key):
    from plugins.context_engine import load_context_engine

    write_config(hermes_home, "context:\n  engine: observed\nobserved:\n  inner: lcmtest\n" + section)
    with caplog.at_level(logging.WARNING, logger="observed_engine"):
        engine = load_context_engine("observed")
    # the valid inner survives the fallback to default settings
    assert_observed(engine, "LcmTestEngine")
    errors = [r for r in caplog.records if r.name.startswith(("observed_engine.plugin", "observed_engine.hermes_plugin"))
              and r.levelno == logging.ERROR]
    assert errors, caplog.text
    assert key in errors[0].getMessage()


def test_observed_section_not_a_mapping(hermes_home, engines_dir, caplog):
    from plugins.context_engine import load_context_engine

    write_config(hermes_home, "context:\n  engine: observed\nobserved: 5\n")
    with caplog.at_level(logging.ERROR, logger="observed_engine"):
        engine = load_context_engine("observed")
    assert_observed(engine, "ContextCompressor")
    assert "observed" in caplog.text and "mapping" in caplog.text


def test_register_is_reentrancy_safe(hermes_home):
    """A register() re-entered while building (our own entry point loaded by the
    plugin discovery that building a plugin inner triggers) registers nothing."""
    calls = []

    class Ctx:
        def register_context_engine(self, engine):
            calls.append(engine)

    with hermes_plugin._building():
        hermes_plugin.register(Ctx())
    assert calls == []
    hermes_plugin.register(Ctx())
    assert len(calls) == 1 and calls[0].name == "observed"
