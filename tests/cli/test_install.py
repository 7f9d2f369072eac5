"""``observed-engine install / doctor / uninstall`` on temporary Hermes homes.

Each command runs twice (idempotent) against a config.yaml with comments and
other keys: comments and keys survive, a backup is written, ``context.engine``
toggles to ``observed`` and back to the operator's engine. Hermes' bundled
``plugins/context_engine/`` is replaced by a temporary directory, except in the
one test that installs into the real installation and removes it again.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import textwrap
import types
from pathlib import Path

import pytest
import yaml
from support.entry_points import on_path
from support.paths import REPO

import observed_engine
from observed_engine import cli, host
from observed_engine.cli import entry_point as cli_entry_point
from observed_engine.cli import install as cli_install
from observed_engine.cli import paths as cli_paths

PLUGIN_SRC = REPO / "plugins" / "context_engine" / "observed"
PACKAGED_PLUGIN = REPO / "observed_engine" / "hermes_plugin_dir"

ORIGINAL = textwrap.dedent("""\
    # Operator's Hermes config -- keep this comment
    model:
      default: gpt-4o   # main model
      provider: openrouter
    toolsets:
      - hermes-cli
      - web
    context:
      engine: lcmtest   # the engine I use
    compression:
      threshold: 0.6    # compress later
      protect_last_n: 12
    display:
      skin: mono
    """)

TEST_ENGINE = '''
import json
from agent.context_engine import ContextEngine


class LcmTestEngine(ContextEngine):
    name = "lcmtest"

    def update_from_response(self, usage):
        pass

    def should_compress(self, prompt_tokens=None):
        return False

    def compress(self, messages, current_tokens=None, focus_topic=None):
        return messages

    def get_tool_schemas(self):
        return [{"name": "lcm_grep", "description": "search", "parameters": {"type": "object"}}]

    def handle_tool_call(self, name, args, **kwargs):
        return json.dumps({})

    def select_context(self, request_messages, *, conversation_messages=None,
                       incoming_message=None, budget_tokens=0):
        return None
'''


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "hermes-home"
    h.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(h))      # restored after the test (cli sets it too)
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    import hermes_cli.plugins as hp
    monkeypatch.setattr(hp, "_plugin_manager", None)
    yield h
    observed_engine.shutdown(5)


@pytest.fixture
def engines_dir(tmp_path, monkeypatch):
    """Stand-in for Hermes' bundled plugins/context_engine/ (for the CLI and the loader)."""
    import plugins.context_engine as pce

    d = tmp_path / "context_engine"
    d.mkdir()
    (d / "lcmtest").mkdir()
    (d / "lcmtest" / "__init__.py").write_text(TEST_ENGINE, encoding="utf-8")
    monkeypatch.setattr(pce, "_CONTEXT_ENGINE_PLUGINS_DIR", d)
    monkeypatch.setattr(host, "bundled_engines_dir", lambda: d)
    before = {n for n in sys.modules if n.startswith("plugins.context_engine.")}
    yield d
    for name in [n for n in sys.modules if n.startswith("plugins.context_engine.")]:
        if name not in before:
            sys.modules.pop(name, None)


def run(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def backups(home: Path):
    return sorted(home.glob(cli_paths.BACKUP_PREFIX + "*"))


def test_repository_plugin_dir_is_the_packaged_copy():
    """observed_engine/hermes_plugin_dir/ is the one copy (it ships in the wheel);
    plugins/context_engine/observed/ holds relative symlinks to it."""
    for name in cli_paths.PLUGIN_FILE_NAMES:
        link = PLUGIN_SRC / name
        assert link.is_symlink(), f"plugins/context_engine/observed/{name} should be a symlink"
        assert link.resolve() == (PACKAGED_PLUGIN / name).resolve()
        assert not Path(os.readlink(link)).is_absolute()     # works in any checkout location
    assert sorted(p.name for p in PLUGIN_SRC.iterdir() if p.name != "__pycache__") \
        == sorted(cli_paths.PLUGIN_FILE_NAMES)
    assert cli_paths.plugin_source_files() == {
        name: (PACKAGED_PLUGIN / name).read_text(encoding="utf-8") for name in cli_paths.PLUGIN_FILE_NAMES}
    meta = yaml.safe_load(cli_paths.plugin_source_files()["plugin.yaml"])
    assert meta["name"] == "observed" and meta["version"] == observed_engine.__version__
    assert meta["description"]


def test_doctor_fails_an_inner_whose_tool_schemas_raise(home, engines_dir, capsys):
    """Hermes calls get_tool_schemas() while it builds each agent; doctor used to list such an
    engine as "tools=none" with the verdict OK."""
    (engines_dir / "toolsbroken").mkdir()
    (engines_dir / "toolsbroken" / "__init__.py").write_text(
        TEST_ENGINE.replace('name = "lcmtest"', 'name = "toolsbroken"').replace(
            'return [{"name": "lcm_grep"', 'raise RuntimeError("schema table missing")\n        return [{"name": "x"'),
        encoding="utf-8")
    (home / "config.yaml").write_text(ORIGINAL.replace("engine: lcmtest", "engine: toolsbroken"), encoding="utf-8")
    code, out = run(capsys, "install", "--hermes-home", str(home), "--route", "bundled")
    assert code == 0, out
    code, out = run(capsys, "doctor", "--hermes-home", str(home))
    assert code != 0 and "verdict: OK" not in out, out
    line = next(ln for ln in out.splitlines() if "inner tools" in ln)
    assert "[FAIL]" in line and "toolsbroken.get_tool_schemas() raised RuntimeError: schema table missing" in line
    code, out = run(capsys, "doctor", "--hermes-home", str(home), "--json")
    assert json.loads(out)["inner"]["tools_error"] == "RuntimeError: schema table missing"


def test_missing_plugin_files_are_an_operator_error(home, engines_dir, capsys, monkeypatch):
    monkeypatch.setattr(cli_paths, "PLUGIN_FILES_DIR", "no-such-dir")
    code, out = run(capsys, "install", "--hermes-home", str(home), "--route", "bundled")
    assert code == 2 and "lacks its plugin files" in out and "reinstall" in out
    assert not (engines_dir / "observed").exists()


def test_install_doctor_uninstall_round_trip(home, engines_dir, capsys):
    cfg = home / "config.yaml"
    cfg.write_text(ORIGINAL, encoding="utf-8")

    # -- install, twice ---------------------------------------------------------------
    code, out = run(capsys, "install", "--hermes-home", str(home), "--route", "bundled")
    assert code == 0, out
    installed = cfg.read_text(encoding="utf-8")
    data = yaml.safe_load(installed)
    assert data["context"]["engine"] == "observed"
    assert data["observed"]["inner"] == "lcmtest"          # the operator's engine gets wrapped
    for key in ("model", "toolsets", "compression", "display"):
        assert data[key] == yaml.safe_load(ORIGINAL)[key]
    for comment in ("# Operator's Hermes config -- keep this comment", "# main model",
                    "# compress later", "  - web"):
        assert comment in installed
    [backup] = backups(home)
    assert backup.read_text(encoding="utf-8") == ORIGINAL
    plugin_dir = engines_dir / "observed"
    for name in cli_paths.PLUGIN_FILE_NAMES:
        assert (plugin_dir / name).read_bytes() == (PLUGIN_SRC / name).read_bytes()
    assert (plugin_dir / cli_paths.MARKER_FILE).exists()

    code, out = run(capsys, "install", "--hermes-home", str(home), "--route", "bundled")
    assert code == 0, out
    assert "already" in out
    assert cfg.read_text(encoding="utf-8") == installed     # byte for byte
    assert len(backups(home)) == 1                          # nothing changed, no new backup

    # Hermes' own loader now finds it and wraps the operator's engine
    from plugins.context_engine import load_context_engine
    engine = load_context_engine("observed")
    assert engine.name == "observed" and type(engine).__name__ == "LcmTestEngine"

    # -- doctor, twice ----------------------------------------------------------------
    for _ in range(2):
        code, out = run(capsys, "doctor", "--hermes-home", str(home))
        assert code == 0, out
        assert "route: bundled" in out
        assert "inner engine: lcmtest" in out and "select_context=yes" in out
        assert "on_turn_complete=no" in out and "tools=lcm_grep" in out
        assert "hermes-agent 0.19.0" in out
        assert "verdict: OK" in out
    code, out = run(capsys, "doctor", "--hermes-home", str(home), "--json")
    assert code == 0
    report = json.loads(out)
    assert report["ok"] is True and report["route"] == "bundled"
    assert report["hermes_version"] == "0.19.0"
    assert report["inner"]["name"] == "lcmtest"
    assert {"select_context", "get_tool_schemas", "handle_tool_call"} <= set(report["inner"]["overrides"])
    assert "on_turn_complete" not in report["inner"]["overrides"]
    assert report["exporters"]["store"]["writable"] is True
    assert report["exporters"]["prometheus"]["enabled"] is False
    assert report["tokenizer"]
    # doctor does not touch the config
    assert cfg.read_text(encoding="utf-8") == installed

    # -- uninstall, twice --------------------------------------------------------------
    store = home / "observed" / "telemetry.sqlite"
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_bytes(b"")
    code, out = run(capsys, "uninstall", "--hermes-home", str(home))
    assert code == 0, out
    restored = cfg.read_text(encoding="utf-8")
    data = yaml.safe_load(restored)
    assert data["context"]["engine"] == "lcmtest"
    for key in ("model", "toolsets", "compression", "display"):
        assert data[key] == yaml.safe_load(ORIGINAL)[key]
    for comment in ("# Operator's Hermes config -- keep this comment", "# main model", "# compress later"):
        assert comment in restored
    assert not plugin_dir.exists()
    assert store.exists()                                   # telemetry kept
    assert backup.exists() and len(backups(home)) == 2      # + backup of the installed config

    code, out = run(capsys, "uninstall", "--hermes-home", str(home))
    assert code == 0, out
    assert cfg.read_text(encoding="utf-8") == restored
    assert len(backups(home)) == 2

    code, out = run(capsys, "doctor", "--hermes-home", str(home))
    assert code == 1
    assert "[FAIL] context.engine" in out and "fix: run `observed-engine install`" in out
    assert "[FAIL] route" in out


def test_install_on_a_fresh_home_and_uninstall(home, engines_dir, capsys):
    cfg = home / "config.yaml"
    assert not cfg.exists()
    for _ in range(2):
        code, out = run(capsys, "install", "--hermes-home", str(home), "--route", "bundled")
        assert code == 0, out
    data = yaml.safe_load(cfg.read_text(encoding="utf-8"))
    assert data["context"]["engine"] == "observed"
    assert data["observed"]["inner"] == "compressor"
    assert backups(home) == []                                  # nothing to back up
    code, out = run(capsys, "doctor", "--hermes-home", str(home))
    assert code == 0, out
    assert "inner engine: compressor via builtin" in out
    for _ in range(2):
        code, out = run(capsys, "uninstall", "--hermes-home", str(home))
        assert code == 0, out
    data = yaml.safe_load(cfg.read_text(encoding="utf-8"))
    assert "context" not in data                                # there was no context.engine
    assert "observed" in data                                   # inert section kept


def test_explicit_compressor_is_restored(home, engines_dir, capsys):
    cfg = home / "config.yaml"
    cfg.write_text("context:\n  engine: compressor\n", encoding="utf-8")
    assert run(capsys, "install", "--hermes-home", str(home), "--route", "bundled")[0] == 0
    assert yaml.safe_load(cfg.read_text())["observed"]["inner"] == "compressor"
    assert run(capsys, "uninstall", "--hermes-home", str(home))[0] == 0
    assert yaml.safe_load(cfg.read_text())["context"] == {"engine": "compressor"}


def test_inner_option_and_existing_section(home, engines_dir, capsys):
    cfg = home / "config.yaml"
    cfg.write_text("observed:\n  capture_content: true   # mine\n", encoding="utf-8")
    code, out = run(capsys, "install", "--hermes-home", str(home), "--route", "bundled",
                    "--inner", "lcmtest")
    assert code == 0, out
    text = cfg.read_text()
    assert "# mine" in text
    data = yaml.safe_load(text)
    assert data["observed"] == {"capture_content": True, "inner": "lcmtest"}
    code, out = run(capsys, "install", "--hermes-home", str(home), "--inner", "observed")
    assert code == 2 and "itself" in out


@pytest.fixture
def ep_site(tmp_path, monkeypatch):
    """Where `install --route entrypoint` writes its dist-info: a directory on sys.path."""
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.setattr(cli_entry_point, "site_dir", lambda: site)
    on_path(monkeypatch, site)
    return site


def test_entry_point_route_enables_and_disables(home, engines_dir, ep_site, capsys):
    cfg = home / "config.yaml"
    cfg.write_text("plugins:\n  enabled:\n    - foo   # a plugin of mine\n", encoding="utf-8")
    for _ in range(2):
        code, out = run(capsys, "install", "--hermes-home", str(home), "--route", "entrypoint")
        assert code == 0, out
    text = cfg.read_text()
    assert yaml.safe_load(text)["plugins"]["enabled"] == ["foo", "observed"]
    assert "# a plugin of mine" in text
    assert not (engines_dir / "observed").exists()             # no copy for this route
    [info] = cli_entry_point.written_dirs(ep_site)
    assert cli_paths.entry_point_installed()
    for _ in range(2):
        assert run(capsys, "uninstall", "--hermes-home", str(home))[0] == 0
    data = yaml.safe_load(cfg.read_text())
    assert data["plugins"]["enabled"] == ["foo"]
    assert "engine" not in (data.get("context") or {})
    assert not info.exists() and not cli_paths.entry_point_installed()


def test_entry_point_route_refused_in_safe_mode(home, engines_dir, ep_site, capsys, monkeypatch):
    monkeypatch.setenv("HERMES_SAFE_MODE", "1")
    code, out = run(capsys, "install", "--hermes-home", str(home), "--route", "entrypoint")
    assert code == 2 and "HERMES_SAFE_MODE" in out and "--route bundled" in out
    assert not (home / "config.yaml").exists() and not cli_entry_point.written_dirs(ep_site)


def test_auto_route(monkeypatch, engines_dir):
    assert cli_install.resolve_route("auto") == "bundled"             # Hermes 0.19.0, writable install
    monkeypatch.setattr(host, "supports_user_engines", lambda: True)
    assert cli_install.resolve_route("auto") == "user"                 # head: $HERMES_HOME/plugins/observed/
    assert cli_install.resolve_route("entrypoint") == "entrypoint"


def test_user_route_refused_where_hermes_does_not_load_it(home, engines_dir, capsys):
    """0.19.0's directory loader reads only its installation: $HERMES_HOME/plugins/observed/ would
    never run, and Hermes' plugin list would show it as a plugin that is not enabled."""
    code, out = run(capsys, "install", "--hermes-home", str(home), "--route", "user")
    assert code == 2 and "does not load context engines from $HERMES_HOME/plugins/" in out
    assert not (home / "plugins").exists() and not (home / "config.yaml").exists()


def test_user_route_writes_into_hermes_home(home, engines_dir, capsys, monkeypatch):
    monkeypatch.setattr(host, "supports_user_engines", lambda: True)      # head, as far as the CLI knows
    code, out = run(capsys, "install", "--hermes-home", str(home), "--route", "user")
    # the files are written; 0.19.0's real loader, which install runs afterwards, does not read them
    assert code == 1 and "FAIL: Hermes would not select observed" in out, out
    user_dir = home / "plugins" / "observed"
    init = (user_dir / "__init__.py").read_text()
    assert "register_context_engine" in init          # head's detection heuristic
    assert not (engines_dir / "observed").exists()
    assert run(capsys, "uninstall", "--hermes-home", str(home))[0] == 0
    assert not user_dir.exists()


def test_doctor_reports_problems_with_fixes(home, engines_dir, capsys):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        cfg = home / "config.yaml"
        assert run(capsys, "install", "--hermes-home", str(home), "--route", "bundled")[0] == 0
        text = cfg.read_text().replace("port: 9464", f"port: {port}").replace(
            "enabled: false", "enabled: true", 1)
        cfg.write_text(text)
        code, out = run(capsys, "doctor", "--hermes-home", str(home))
        assert code == 1, out
        assert f"[FAIL] prometheus: 127.0.0.1:{port} is bound by another program" in out
        assert "fix: set observed.prometheus.port" in out

        cfg.write_text(text.replace("inner: compressor", "inner: nosuchengine"))
        code, out = run(capsys, "doctor", "--hermes-home", str(home), "--json")
        report = json.loads(out)
        inner = next(c for c in report["checks"] if c["check"] == "inner engine")
        assert inner["status"] == "fail" and "nosuchengine" in inner["detail"] and inner["fix"]

        cfg.write_text(text.replace("retention_days: 14", "retention_days: soon"))
        code, out = run(capsys, "doctor", "--hermes-home", str(home))
        assert code == 1
        assert "[FAIL] observed section: observed.store.retention_days" in out
    finally:
        busy.close()


def test_doctor_free_port_is_ok(home, engines_dir, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = home / "config.yaml"
    assert run(capsys, "install", "--hermes-home", str(home), "--route", "bundled")[0] == 0
    cfg.write_text(cfg.read_text().replace("port: 9464", f"port: {port}").replace(
        "enabled: false", "enabled: true", 1))
    code, out = run(capsys, "doctor", "--hermes-home", str(home), "--json")
    assert code == 0, out
    assert json.loads(out)["exporters"]["prometheus"]["port_state"] == "free"


def test_pyyaml_fallback_without_ruamel(home, engines_dir, capsys, monkeypatch):
    for name in [n for n in sys.modules if n == "ruamel.yaml" or n.startswith("ruamel.yaml.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ruamel.yaml", None)      # import fails
    cfg = home / "config.yaml"
    cfg.write_text(ORIGINAL)
    code, out = run(capsys, "install", "--hermes-home", str(home), "--route", "bundled")
    assert code == 0, out
    assert "PyYAML" in out
    data = yaml.safe_load(cfg.read_text())
    assert data["context"]["engine"] == "observed" and data["display"] == {"skin": "mono"}
    assert backups(home)[0].read_text() == ORIGINAL            # the comments are in the backup


def test_demo_is_dispatched_lazily(monkeypatch):
    seen = []
    fake = types.ModuleType("observed_engine.demo")
    fake.main = lambda argv: seen.append(argv) or 7
    monkeypatch.setitem(sys.modules, "observed_engine.demo", fake)
    assert cli.main(["demo", "--sessions", "3", "--help"]) == 7
    assert seen == [["--sessions", "3", "--help"]]


def test_real_installation_bundled_route(home, capsys, monkeypatch):
    """Install into the venv's real Hermes plugins/context_engine/, load it through
    Hermes, uninstall; a finalizer removes the copy whatever happens."""
    base = host.bundled_engines_dir()
    assert base is not None
    target = base / "observed"
    if target.exists() and not (target / cli_paths.MARKER_FILE).exists():
        pytest.skip(f"{target} exists and is not ours")
    if not os.access(base, os.W_OK):
        pytest.skip(f"{base} is not writable")
    pre_existing = target.exists()
    try:
        code, out = run(capsys, "install", "--hermes-home", str(home))   # auto -> bundled on 0.19.0
        assert code == 0, out
        assert "route: bundled" in out and target.is_dir()
        sys.modules.pop("plugins.context_engine.observed", None)
        from plugins.context_engine import load_context_engine
        engine = load_context_engine("observed")
        assert engine is not None and engine.name == "observed"
        code, out = run(capsys, "doctor", "--hermes-home", str(home))
        assert code == 0, out
        code, out = run(capsys, "uninstall", "--hermes-home", str(home))
        assert code == 0, out
        assert not target.exists()
    finally:
        sys.modules.pop("plugins.context_engine.observed", None)
        if target.exists() and not pre_existing:
            shutil.rmtree(target, ignore_errors=True)
