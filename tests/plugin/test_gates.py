"""Hermes' plugin gates hold for the inner engine too (issue 14 item 4).

A real entry-point engine plugin (a module and a dist-info on ``sys.path``, found by
``importlib.metadata`` as a pip-installed one is) named by ``observed.inner``: where Hermes'
own gates keep it from running (not in ``plugins.enabled``, in ``plugins.disabled``,
``HERMES_SAFE_MODE=1``), bare Hermes falls back to its built-in compressor, and so does the
observed engine: the plugin's module is not run, the built-in is observed, and one log line
says why. Where the gates let it run, it is the inner. Bare Hermes is Hermes' own selection
(``host.simulate_selection``: its directory loader, then its plugin system's engine).
"""

from __future__ import annotations

import logging
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
from support.entry_points import engine_plugin, forget_modules, isolated_plugin_host, on_path
from support.paths import REPO

import observed_engine
from observed_engine import host, is_observed

PLUGIN_SRC = REPO / "plugins" / "context_engine" / "observed"


@pytest.fixture
def hermes_home(tmp_path, monkeypatch):
    yield isolated_plugin_host(tmp_path, monkeypatch)
    observed_engine.shutdown(5)


@pytest.fixture
def engines_dir(tmp_path, monkeypatch):
    """Hermes' plugins/context_engine/ stand-in with our plugin copied in (the bundled route)."""
    import plugins.context_engine as pce

    d = tmp_path / "context_engine"
    d.mkdir()
    shutil.copytree(PLUGIN_SRC, d / "observed")
    monkeypatch.setattr(pce, "_CONTEXT_ENGINE_PLUGINS_DIR", d)
    yield d
    forget_modules(*[n for n in sys.modules if n.startswith("plugins.context_engine.observed")])


@pytest.fixture
def gated_plugin(tmp_path, monkeypatch):
    """A real pip-style context-engine plugin `gatetest` (entry point, register(ctx))."""
    site = tmp_path / "site"
    module = engine_plugin(site, "gatetest")
    on_path(monkeypatch, site)
    yield module
    forget_modules(module)


def write_config(home: Path, text: str) -> None:
    (home / "config.yaml").write_text(textwrap.dedent(text), encoding="utf-8")


def register_calls(module: str) -> list:
    mod = sys.modules.get(module)
    return list(getattr(mod, "REGISTER_CALLS", []))


GATES = {
    "not enabled": ("plugins:\n  enabled: [something_else]\n", {}, "is not in plugins.enabled",
                    "hermes plugins enable gatetest"),
    "no enabled list": ("", {}, "is not in plugins.enabled", "hermes plugins enable gatetest"),
    "disabled": ("plugins:\n  enabled: [gatetest]\n  disabled: [gatetest]\n", {},
                 "is in plugins.disabled", "plugins.disabled"),
    "safe mode": ("plugins:\n  enabled: [gatetest]\n", {"HERMES_SAFE_MODE": "1"},
                  "HERMES_SAFE_MODE=1", "unset HERMES_SAFE_MODE"),
}


@pytest.mark.parametrize("gate", list(GATES))
def test_gated_inner_runs_the_builtin_like_bare_hermes(gate, hermes_home, engines_dir, gated_plugin,
                                                       monkeypatch, caplog):
    from agent.context_compressor import ContextCompressor

    from plugins.context_engine import load_context_engine

    plugins_yaml, env, reason, fix = GATES[gate]
    if env and not host._honours_safe_mode():
        pytest.skip("this Hermes has no safe mode (0.16.0): bare Hermes loads plugins under it; "
                    "test_safe_mode_where_hermes_has_none")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    write_config(hermes_home, "context:\n  engine: observed\nobserved:\n  inner: gatetest\n" + plugins_yaml)

    # bare Hermes with context.engine: gatetest falls back to its built-in
    bare = host.simulate_selection("gatetest")
    assert bare["engine"] is None and bare["route"] == "builtin"
    assert register_calls(gated_plugin) == []

    with caplog.at_level(logging.WARNING, logger="observed_engine"):
        engines = [load_context_engine("observed") for _ in range(2)]   # two agents
    for engine in engines:
        assert engine is not None and engine.name == "observed" and is_observed(engine)
        assert isinstance(engine, ContextCompressor)                 # the built-in, observed
    assert register_calls(gated_plugin) == []                        # the plugin never ran
    notices = [r.getMessage() for r in caplog.records
               if r.name.startswith(("observed_engine.plugin", "observed_engine.hermes_plugin")) and "gatetest" in r.getMessage()]
    assert len(notices) == 1, notices                                # said once
    assert reason in notices[0] and fix in notices[0] and "built-in compressor" in notices[0]

    # and what the host selects for context.engine: observed is that observed built-in
    selected = host.simulate_selection("observed")
    assert selected["route"] == "directory" and is_observed(selected["engine"])
    assert isinstance(selected["engine"], ContextCompressor)


def test_enabled_inner_is_the_plugin_engine(hermes_home, engines_dir, gated_plugin, caplog):
    from plugins.context_engine import load_context_engine

    write_config(hermes_home, """
        context:
          engine: observed
        observed:
          inner: gatetest
        plugins:
          enabled: [gatetest]
        """)
    bare = host.simulate_selection("gatetest")
    assert bare["route"] == "plugin" and type(bare["engine"]).__name__ == "GatetestEngine"
    with caplog.at_level(logging.WARNING, logger="observed_engine"):
        engine = load_context_engine("observed")
    assert engine.name == "observed" and is_observed(engine)
    assert type(engine).__name__ == "GatetestEngine"
    assert not [r for r in caplog.records if r.name.startswith(("observed_engine.plugin", "observed_engine.hermes_plugin"))]


def test_plugin_gates_are_read_as_hermes_reads_them(hermes_home, monkeypatch):
    write_config(hermes_home, "plugins:\n  enabled: [a, b]\n  disabled: [b]\n")
    gates = host.plugin_gates()
    assert gates == {"safe_mode": False, "enabled": {"a", "b"}, "disabled": {"b"}}
    assert host.plugin_gate("a") is None
    assert "plugins.disabled" in host.plugin_gate("b")
    assert "plugins.enabled" in host.plugin_gate("c")
    write_config(hermes_home, "plugins:\n  enabled: not-a-list\n")
    assert host.plugin_gates()["enabled"] is None                    # Hermes: nothing enabled
    monkeypatch.setenv("HERMES_SAFE_MODE", "true")
    if host._honours_safe_mode():
        assert host.plugin_gates()["safe_mode"] is True
        assert host.plugin_gate("a").startswith("HERMES_SAFE_MODE")
    else:                                                            # 0.16.0: no safe mode
        assert host.plugin_gates()["safe_mode"] is False
        assert not host.plugin_gate("a").startswith("HERMES_SAFE_MODE")


def test_safe_mode_is_this_hermes_own(hermes_home, engines_dir, gated_plugin, monkeypatch):
    """The safe-mode gate exists where this Hermes' plugin discovery has it (0.17.0 and later);
    either way the observed engine's inner is what bare Hermes runs."""
    from plugins.context_engine import load_context_engine

    monkeypatch.setenv("HERMES_SAFE_MODE", "1")
    write_config(hermes_home, "context:\n  engine: observed\nobserved:\n  inner: gatetest\n"
                              "plugins:\n  enabled: [gatetest]\n")
    import hermes_cli.plugins as hp
    source = Path(hp.__file__).read_text(encoding="utf-8")
    assert host._honours_safe_mode() == ("HERMES_SAFE_MODE" in source)
    bare = host.simulate_selection("gatetest")
    engine = load_context_engine("observed")
    if bare["engine"] is None:
        assert host._honours_safe_mode() and type(engine).__name__ == "ContextCompressor"
    else:
        assert not host._honours_safe_mode() and type(engine).__name__ == type(bare["engine"]).__name__


def test_doctor_names_the_gate_and_its_fix(hermes_home, engines_dir, gated_plugin, monkeypatch):
    from observed_engine.cli import doctor

    monkeypatch.setattr(host, "bundled_engines_dir", lambda: engines_dir)
    write_config(hermes_home, "context:\n  engine: observed\nobserved:\n  inner: gatetest\n")
    report = doctor.run_doctor(hermes_home)
    inner = next(c for c in report["checks"] if c["check"] == "inner engine")
    assert inner["status"] == "fail"
    assert "not in plugins.enabled" in inner["detail"] and "hermes plugins enable gatetest" in inner["fix"]
    assert register_calls(gated_plugin) == []


@pytest.fixture
def ep_site(tmp_path, monkeypatch):
    from observed_engine.cli import entry_point as cli_entry_point

    site = tmp_path / "site-observed"
    site.mkdir()
    monkeypatch.setattr(cli_entry_point, "site_dir", lambda: site)
    on_path(monkeypatch, site)
    return site


def run_cli(capsys, *argv):
    from observed_engine import cli

    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_install_says_what_the_gates_will_run(hermes_home, engines_dir, gated_plugin, capsys, monkeypatch):
    """context.engine: gatetest without plugins.enabled: bare Hermes ran the built-in; install keeps
    gatetest as observed.inner and says that the built-in is what runs, and how to run gatetest."""
    from plugins.context_engine import load_context_engine

    monkeypatch.setattr(host, "bundled_engines_dir", lambda: engines_dir)
    write_config(hermes_home, "context:\n  engine: gatetest\n")
    code, out = run_cli(capsys, "install", "--hermes-home", str(hermes_home), "--route", "bundled")
    assert code == 0, out
    assert "note: 'gatetest' is not in plugins.enabled, so Hermes does not run the 'gatetest' plugin" in out
    assert "observes the built-in compressor in its place" in out and "hermes plugins enable gatetest" in out
    assert "wrapping 'compressor'" in out                              # install's own selection check
    engine = load_context_engine("observed")
    assert type(engine).__name__ == "ContextCompressor" and register_calls(gated_plugin) == []


def test_entry_point_route_opens_observed_gate(hermes_home, ep_site, tmp_path, capsys, monkeypatch):
    """plugins.disabled: [observed] would keep the entry point off (disabled wins): install takes
    observed out of it (and says so), uninstall puts it back."""
    import yaml

    import plugins.context_engine as pce

    empty = tmp_path / "no-engines"
    empty.mkdir()
    monkeypatch.setattr(pce, "_CONTEXT_ENGINE_PLUGINS_DIR", empty)
    monkeypatch.setattr(host, "bundled_engines_dir", lambda: empty)

    write_config(hermes_home, "plugins:\n  disabled: [observed, other]\n")
    code, out = run_cli(capsys, "install", "--hermes-home", str(hermes_home), "--route", "entrypoint")
    assert code == 0, out
    assert "observed removed from plugins.disabled" in out
    data = yaml.safe_load((hermes_home / "config.yaml").read_text())
    assert data["plugins"]["disabled"] == ["other"] and data["plugins"]["enabled"] == ["observed"]
    assert host.plugin_gate("observed") is None
    assert "selection: Hermes selects observed through its plugin system" in out
    assert run_cli(capsys, "uninstall", "--hermes-home", str(hermes_home))[0] == 0
    data = yaml.safe_load((hermes_home / "config.yaml").read_text())
    assert data["plugins"]["disabled"] == ["other", "observed"]
