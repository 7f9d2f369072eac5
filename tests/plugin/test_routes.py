"""Routes and listings through Hermes 0.19.0's real plugin scan (issue 14 items 5 and 11).

* Installing the package changes nothing Hermes shows: no ``hermes_agent.plugins`` entry
  point until ``install --route entrypoint`` writes one; after install on each route Hermes'
  listings (``hermes plugins list``'s scan, its context-engine list) match what is active, and
  ``uninstall`` takes the entry point away again.
* The entry-point route beside another entry-point engine plugin: Hermes keeps the first
  context engine its scan registers, so ``observed`` registered after ``laya``-style
  ``layatest`` is rejected and Hermes falls back to its built-in. ``doctor`` runs the host's
  selection and fails with a fix that works; ``install --route entrypoint`` refuses; the
  bundled route observes ``layatest`` through a real ``AIAgent``'s own engine selection.

The two plugins are real entry points: dist-infos in directories on ``sys.path``, the
other plugin's directory first, so Hermes' scan registers it first.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from support.entry_points import GROUP, engine_plugin, forget_modules, isolated_plugin_host, on_path
from support.fake_llm_server import FakeLLMServer

import observed_engine
from observed_engine import cli, host, is_observed
from observed_engine import plugin as oplugin
from observed_engine.cli import entry_point as cli_entry_point

MODEL = "fake-model"


@pytest.fixture
def home(tmp_path, monkeypatch):
    yield isolated_plugin_host(tmp_path, monkeypatch)
    observed_engine.shutdown(5)


@pytest.fixture
def engines_dir(tmp_path, monkeypatch):
    """Stand-in for Hermes' bundled plugins/context_engine/ (loader and CLI)."""
    import plugins.context_engine as pce

    d = tmp_path / "context_engine"
    d.mkdir()
    monkeypatch.setattr(pce, "_CONTEXT_ENGINE_PLUGINS_DIR", d)
    monkeypatch.setattr(host, "bundled_engines_dir", lambda: d)
    before = set(sys.modules)
    yield d
    forget_modules(*[n for n in sys.modules if n.startswith("plugins.context_engine.") and n not in before])


@pytest.fixture
def ep_site(tmp_path, monkeypatch):
    """Where install writes the entry point's dist-info (on sys.path, after `other_site`)."""
    site = tmp_path / "site-observed"
    site.mkdir()
    monkeypatch.setattr(cli_entry_point, "site_dir", lambda: site)
    on_path(monkeypatch, site)
    return site


@pytest.fixture
def layatest(tmp_path, monkeypatch, ep_site):
    """Another pip engine plugin, `layatest`, scanned before observed (its directory comes first)."""
    site = tmp_path / "site-other"
    module = engine_plugin(site, "layatest")
    on_path(monkeypatch, site)
    yield module
    forget_modules(module)


def run(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def write_config(home: Path, text: str) -> None:
    (home / "config.yaml").write_text(textwrap.dedent(text), encoding="utf-8")


def lists_entry_points() -> bool:
    """Whether this Hermes' `hermes plugins list` shows pip plugins at all (0.16.0 does not)."""
    from hermes_cli import plugins_cmd

    return hasattr(plugins_cmd, "_discover_entrypoint_plugins")


def listed() -> dict:
    """What `hermes plugins list` shows: {name: (status, source)} from Hermes' own functions."""
    import inspect

    from hermes_cli import plugins_cmd

    enabled, disabled = plugins_cmd._get_enabled_set(), plugins_cmd._get_disabled_set()
    takes_key = "key" in inspect.signature(plugins_cmd._plugin_status).parameters
    out = {}
    for entry in plugins_cmd._discover_all_plugins():
        name, source = entry[0], entry[3]
        key = entry[5] if len(entry) > 5 else name
        status = (plugins_cmd._plugin_status(name, enabled, disabled, key=key) if takes_key
                  else plugins_cmd._plugin_status(name, enabled, disabled))
        out[name] = (status, source)
    return out


def scanned() -> dict:
    """Hermes' plugin manager after a fresh discovery: {key: LoadedPlugin}."""
    import hermes_cli.plugins as hp

    manager = hp.PluginManager()
    manager.discover_and_load()
    return manager._plugins


def context_engines() -> list:
    from hermes_cli import plugins_cmd

    return [name for name, _desc in plugins_cmd._discover_context_engines()]


def agent_engine(llm: FakeLLMServer):
    """The engine a real AIAgent selects (Hermes' agent_init code) for this HERMES_HOME."""
    import hermes_cli.plugins as hp
    from run_agent import AIAgent

    hp._plugin_manager = None
    agent = AIAgent(base_url=llm.base_url, api_key="sk-fake", provider="custom", model=MODEL,
                    quiet_mode=True, skip_context_files=True, skip_memory=True, enabled_toolsets=[],
                    max_iterations=1, save_trajectories=False)
    return agent.context_compressor


# -- item 11: the package alone changes nothing ---------------------------------------------------

def test_installed_package_adds_nothing_to_hermes_listings(home):
    """observed-engine is installed (editable) in this environment, nothing opted in."""
    write_config(home, "plugins:\n  enabled: [observed]\n")       # even enabled: nothing to load
    assert not [ep for ep in md.entry_points(group=GROUP) if ep.name == "observed"]
    assert "observed" not in listed()
    assert "observed" not in scanned()
    assert "observed" not in context_engines()


def test_listings_match_what_is_active_on_each_route(home, engines_dir, ep_site, capsys):
    from agent.context_compressor import ContextCompressor

    # bundled: a context engine Hermes lists as such, no general plugin called observed
    assert run(capsys, "install", "--hermes-home", str(home), "--route", "bundled")[0] == 0
    assert "observed" in context_engines()
    assert "observed" not in listed() and "observed" not in scanned()
    found = host.simulate_selection("observed")
    assert found["route"] == "directory" and is_observed(found["engine"])
    assert run(capsys, "uninstall", "--hermes-home", str(home))[0] == 0
    assert "observed" not in context_engines() and "observed" not in listed()

    # entrypoint: a plugin Hermes lists as enabled, and the one its plugin system holds
    code, out = run(capsys, "install", "--hermes-home", str(home), "--route", "entrypoint")
    assert code == 0, out
    if lists_entry_points():
        assert listed()["observed"] == ("enabled", "entrypoint")
    else:
        assert "observed" not in listed()              # 0.16.0 lists no pip plugin at all
    loaded = scanned()["observed"]
    assert loaded.enabled and loaded.error is None
    found = host.simulate_selection("observed")
    assert found["route"] == "plugin" and is_observed(found["engine"])
    assert isinstance(found["engine"], ContextCompressor)
    [info] = cli_entry_point.written_dirs(ep_site)
    assert "written by `observed-engine install --route entrypoint`" in (info / "METADATA").read_text()
    assert run(capsys, "uninstall", "--hermes-home", str(home))[0] == 0
    assert "observed" not in listed() and "observed" not in scanned()
    assert not info.exists()


def test_entry_point_shared_by_two_homes(tmp_path, home, engines_dir, ep_site, capsys, monkeypatch):
    other = tmp_path / "other-home"
    other.mkdir()
    assert run(capsys, "install", "--hermes-home", str(other), "--route", "entrypoint")[0] == 0
    assert run(capsys, "install", "--hermes-home", str(home), "--route", "entrypoint")[0] == 0
    [info] = cli_entry_point.written_dirs(ep_site)
    assert set(cli_entry_point.homes_of(info)) == {str(home), str(other)}
    code, out = run(capsys, "uninstall", "--hermes-home", str(home))
    assert code == 0 and info.exists() and "still used by" in out
    assert cli_entry_point.homes_of(info) == [str(other)]
    code, out = run(capsys, "uninstall", "--hermes-home", str(home))     # again: not this home's any more
    assert code == 0 and "entry point" not in out and cli_entry_point.homes_of(info) == [str(other)]
    assert run(capsys, "install", "--hermes-home", str(home), "--route", "bundled")[0] == 0
    assert cli_entry_point.homes_of(info) == [str(other)]              # another route leaves it alone
    assert run(capsys, "uninstall", "--hermes-home", str(other))[0] == 0
    assert not info.exists()


def test_old_entry_point_config_without_the_entry_point_fails_in_doctor(home, engines_dir, ep_site, capsys):
    """A config of the old entry-point route (plugins.enabled: [observed], the entry point came
    with the package): doctor says why Hermes falls back and the fix, which then works."""
    write_config(home, """
        context:
          engine: observed
        plugins:
          enabled: [observed]
        """)
    code, out = run(capsys, "doctor", "--hermes-home", str(home))
    assert code == 1
    assert "[FAIL] selection: Hermes would not select observed" in out
    assert "no `observed` entry point is installed" in out
    assert "fix: `observed-engine install --route entrypoint`" in out
    assert run(capsys, "install", "--hermes-home", str(home), "--route", "entrypoint")[0] == 0
    code, out = run(capsys, "doctor", "--hermes-home", str(home))
    assert code == 0, out
    assert "[ OK ] selection: Hermes selects observed through its plugin system, wrapping 'compressor'" in out


# -- item 5: the entry-point route beside another engine plugin ------------------------------

BROKEN_ENTRYPOINT_CONFIG = """
    context:
      engine: observed
    plugins:
      enabled: [layatest, observed]
    observed:
      inner: layatest
    """


def test_entry_point_route_beside_another_engine_plugin(home, engines_dir, layatest, capsys):
    """Each step compared with a real AIAgent's own engine selection (agent_init) on the same home."""
    from agent.context_compressor import ContextCompressor

    llm = FakeLLMServer(model=MODEL, context_length=64_000)
    llm.__enter__()
    model = textwrap.dedent(f"""
        model:
          default: {MODEL}
          provider: custom
          base_url: {llm.base_url}
          context_length: 64000
        """)
    try:
        # bare: Hermes runs layatest from its plugin system
        write_config(home, "context:\n  engine: layatest\nplugins:\n  enabled: [layatest]\n" + model)
        bare = host.simulate_selection("layatest")
        assert bare["route"] == "plugin" and type(bare["engine"]).__name__ == "LayatestEngine"
        assert type(agent_engine(llm)).__name__ == "LayatestEngine"

        # what the old `install --route entrypoint` wrote: Hermes' real loader falls back
        cli_entry_point.write(home)
        write_config(home, textwrap.dedent(BROKEN_ENTRYPOINT_CONFIG) + model)
        with oplugin.dry_run():
            found = host.simulate_selection("observed")
        assert found["engine"] is None and found["plugin_engine"] == "layatest"
        assert [(r["plugin"], r["accepted"]) for r in found["registrations"]] == [
            ("layatest", True), ("observed", False)]
        engine = agent_engine(llm)                                  # the user loses layatest and the observation
        assert type(engine) is ContextCompressor and not is_observed(engine)
        code, out = run(capsys, "doctor", "--hermes-home", str(home))
        assert code == 1, out
        assert "[FAIL] selection: Hermes would not select observed and falls back to its built-in compressor" in out
        assert "registered first by plugin 'layatest'" in out and "observed's registration was rejected" in out
        assert "neither 'layatest' nor the observation runs" in out
        assert "fix: `observed-engine install --route bundled`" in out
        report = json.loads(run(capsys, "doctor", "--hermes-home", str(home), "--json")[1])
        assert report["selection"]["observed"] is False and report["selection"]["plugin_engine"] == "layatest"

        # the fix doctor gives works: the directory loader comes first and wraps layatest
        code, out = run(capsys, "install", "--hermes-home", str(home), "--route", "bundled")
        assert code == 0, out
        assert "selection: Hermes selects observed through its directory loader, wrapping 'layatest'" in out
        code, out = run(capsys, "doctor", "--hermes-home", str(home))
        assert code == 0, out
        engine = agent_engine(llm)
        assert engine.name == "observed" and is_observed(engine)
        assert type(engine).__name__ == "LayatestEngine" and not isinstance(engine, ContextCompressor)
    finally:
        llm.__exit__(None, None, None)


def test_install_refuses_the_entry_point_route_beside_another_engine_plugin(home, engines_dir, layatest,
                                                                            ep_site, capsys):
    original = "context:\n  engine: layatest   # mine\nplugins:\n  enabled: [layatest]\n"
    (home / "config.yaml").write_text(original, encoding="utf-8")
    code, out = run(capsys, "install", "--hermes-home", str(home), "--route", "entrypoint")
    assert code == 2, out
    assert "the entry-point route cannot work here" in out and "'layatest'" in out
    assert "losing the observation and 'layatest' with it" in out
    assert "fix: `observed-engine install --route bundled`" in out
    assert (home / "config.yaml").read_text() == original           # nothing written
    assert not cli_entry_point.written_dirs(ep_site)

    # auto picks the route that works (the directory loader, before the plugin system)
    code, out = run(capsys, "install", "--hermes-home", str(home))
    assert code == 0, out
    assert "route: bundled" in out and "wrapping 'layatest'" in out
    data = yaml.safe_load((home / "config.yaml").read_text())
    assert data["plugins"]["enabled"] == ["layatest"] and data["observed"]["inner"] == "layatest"


def test_install_refuses_when_no_directory_route_and_another_engine_plugin(home, layatest, ep_site,
                                                                          capsys, monkeypatch):
    monkeypatch.setattr(host, "bundled_engines_dir", lambda: Path("/nonexistent/plugins/context_engine"))
    (home / "config.yaml").write_text("context:\n  engine: layatest\nplugins:\n  enabled: [layatest]\n")
    code, out = run(capsys, "install", "--hermes-home", str(home))         # auto: only entrypoint left
    assert code == 2 and "cannot work here" in out
    assert "make /nonexistent/plugins/context_engine writable" in out


def test_doctor_warns_when_the_entry_point_route_works_by_scan_order(tmp_path, home, engines_dir, capsys,
                                                                     monkeypatch):
    """observed's entry point scanned before layatest's: Hermes selects observed (wrapping
    layatest, whose own registration it rejects), but only by scan order: a warning with the fix."""
    other = tmp_path / "site-other"
    module = engine_plugin(other, "layatest")
    on_path(monkeypatch, other)
    ours = tmp_path / "site-observed-first"
    ours.mkdir()
    monkeypatch.setattr(cli_entry_point, "site_dir", lambda: ours)
    on_path(monkeypatch, ours)                     # now before layatest's directory
    try:
        cli_entry_point.write(home)
        write_config(home, BROKEN_ENTRYPOINT_CONFIG)
        with oplugin.dry_run():
            found = host.simulate_selection("observed")
        assert [(r["plugin"], r["accepted"]) for r in found["registrations"]] == [
            ("observed", True), ("layatest", False)]
        assert found["route"] == "plugin" and type(found["engine"]).__name__ == "LayatestEngine"
        code, out = run(capsys, "doctor", "--hermes-home", str(home))
        assert code == 0, out
        assert "[WARN] selection: Hermes selects observed through its plugin system, wrapping 'layatest', " \
               "only because its plugin scan registered observed before 'layatest'" in out
        assert "fix: `observed-engine install --route bundled`" in out
    finally:
        forget_modules(module)


def _hermes_plugins_list(home: Path, *extra_path: Path) -> list:
    """`hermes plugins list --plain` of the venv's Hermes, as the operator runs it."""
    import os
    import subprocess

    hermes = Path(sys.executable).with_name("hermes")
    if not hermes.exists():
        pytest.skip("no hermes command next to this Python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "HERMES_"))}
    env.update(HERMES_HOME=str(home), PYTHONPATH=os.pathsep.join(str(p) for p in extra_path))
    proc = subprocess.run([str(hermes), "plugins", "list", "--plain"], capture_output=True, text=True,
                          timeout=120, env=env, cwd=str(home))
    assert proc.returncode == 0, proc.stderr
    return [line.split() for line in proc.stdout.splitlines() if line.split()[-1:] == ["observed"]]


def test_hermes_plugins_list_tells_the_truth(tmp_path, home, engines_dir, ep_site, capsys):
    """The `hermes plugins list` command itself: nothing before opting in, `enabled` on the
    entry-point route, `not enabled` in another Hermes home of the same Python, nothing after
    uninstall."""
    if not lists_entry_points():
        pytest.skip("this Hermes' `plugins list` shows no pip plugins (0.16.0)")
    assert _hermes_plugins_list(home, ep_site) == []
    assert run(capsys, "install", "--hermes-home", str(home), "--route", "entrypoint")[0] == 0
    [line] = _hermes_plugins_list(home, ep_site)
    assert line[:2] == ["enabled", "entrypoint"]
    other = tmp_path / "other-home"
    other.mkdir()
    [line] = _hermes_plugins_list(other, ep_site)
    assert line[:2] == ["not", "enabled"]                   # true there: installed, not enabled
    assert run(capsys, "uninstall", "--hermes-home", str(home))[0] == 0
    assert _hermes_plugins_list(home, ep_site) == [] and _hermes_plugins_list(other, ep_site) == []
