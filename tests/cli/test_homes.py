"""Several Hermes homes on one Hermes installation (issue 25, items 1, 10 and 12).

The bundled plugin directory (Hermes' ``plugins/context_engine/observed/``) is one per Hermes
installation and the entry point's dist-info one per Python environment: every home on them
that says ``context.engine: observed`` depends on them. ``uninstall`` for one home (or for a
home that does not exist) must leave them to the others, and the last one out removes them.

Everything here is the real thing: this venv's Hermes 0.19.0 installation (the bundled route
writes into its site-packages ``plugins/context_engine/observed``, the entry-point route a
dist-info beside the observed-engine distribution), the commands and ``doctor`` run as an
operator runs them, in fresh processes from a directory outside the checkout. A finalizer
removes whatever of ours is left in the installation, whatever happens.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from support.paths import REPO

from observed_engine import host
from observed_engine.cli import entry_point, paths


def env_for(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OBSERVED_", "HERMES_"))}
    env["HERMES_HOME"] = str(home)
    return env


def cli(home: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "observed_engine", *args, "--hermes-home", str(home)],
                          cwd=cwd, env=env_for(home), capture_output=True, text=True, timeout=180)


def doctor(home: Path, cwd: Path) -> subprocess.CompletedProcess:
    return cli(home, "doctor", cwd=cwd)


def bundled_dir() -> Path:
    return host.bundled_engines_dir() / paths.PLUGIN_NAME


def our_dist_infos() -> list:
    return entry_point.written_dirs(entry_point.site_dir())


@pytest.fixture
def installation():
    """The real Hermes installation, left as it was found."""
    base = host.bundled_engines_dir()
    if base is None or not os.access(base, os.W_OK):
        pytest.skip("Hermes' plugins/context_engine/ is missing or not writable")
    target = base / paths.PLUGIN_NAME
    if target.exists():
        pytest.skip(f"{target} exists already (another install): this test needs it absent")
    if our_dist_infos():
        pytest.skip("an observed entry point is installed already")
    yield base
    if target.exists() and paths.marker_homes(target) is not None:
        shutil.rmtree(target, ignore_errors=True)
    for info in our_dist_infos():
        shutil.rmtree(info, ignore_errors=True)


@pytest.fixture
def homes(tmp_path):
    """Two Hermes homes with a config of their own, and a working directory outside the checkout."""
    made = []
    for name in ("home-a", "home-b"):
        home = tmp_path / name
        home.mkdir()
        (home / "config.yaml").write_text("model:\n  default: some-model\ncontext:\n  engine: compressor\n",
                                          encoding="utf-8")
        made.append(home)
    work = tmp_path / "work"
    work.mkdir()
    return made[0], made[1], work


_IMPORT_LEAVES = None


def hermes_import_leaves(tmp: Path) -> set:
    """What importing Hermes' config module creates by itself in a home holding only a config.yaml
    (nothing on 0.19; on the lines that load config.yaml at import, their home skeleton and, on
    0.22, a backups/ copy of the file): beyond that, a command that changes nothing leaves the
    home as it was."""
    global _IMPORT_LEAVES
    if _IMPORT_LEAVES is None:
        bare = tmp / "bare-home"
        bare.mkdir()
        (bare / "config.yaml").write_text("model:\n  default: some-model\n", encoding="utf-8")
        subprocess.run([sys.executable, "-c", "import hermes_cli.config"], cwd=tmp, env=env_for(bare),
                       capture_output=True, timeout=120)
        _IMPORT_LEAVES = {p.name for p in bare.iterdir()} - {"config.yaml"}
        shutil.rmtree(bare)
    return _IMPORT_LEAVES


def engine_of(home: Path):
    return (yaml.safe_load((home / "config.yaml").read_text()).get("context") or {}).get("engine")


def assert_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_uninstall_of_a_missing_home_changes_nothing(installation, homes):
    """Item 1: the home does not exist: exit 2, one line, and the plugin the other home uses stays."""
    a, _b, work = homes
    assert_ok(cli(a, "install", "--route", "bundled", cwd=work))
    before = {p.name: p.read_bytes() for p in bundled_dir().iterdir() if p.is_file()}
    proc = cli(work / "no-such-home", "uninstall", cwd=work)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "no Hermes home at" in proc.stderr
    assert {p.name: p.read_bytes() for p in bundled_dir().iterdir() if p.is_file()} == before
    assert not (work / "no-such-home").exists()
    assert_ok(doctor(a, work))


def test_uninstall_of_a_home_that_never_installed_changes_nothing(installation, homes):
    a, b, work = homes
    assert_ok(cli(a, "install", "--route", "bundled", cwd=work))
    config_b = (b / "config.yaml").read_bytes()
    proc = cli(b, "uninstall", cwd=work)
    assert proc.returncode == 2 and "observed-engine is not installed in the Hermes home" in proc.stderr
    assert bundled_dir().is_dir() and (b / "config.yaml").read_bytes() == config_b
    assert {p.name for p in b.iterdir()} - hermes_import_leaves(work) == {"config.yaml"}
    assert_ok(doctor(a, work))


def test_two_homes_bundled_route(installation, homes):
    """Item 12, bundled route: install A and B; uninstall A: B stays observed and its doctor is
    green; uninstall B: nothing of ours is left in the installation."""
    a, b, work = homes
    for home in (a, b):
        proc = cli(home, "install", "--route", "bundled", cwd=work)
        assert_ok(proc)
        assert "selection: Hermes selects observed through its directory loader" in proc.stdout
    assert paths.marker_homes(bundled_dir()) == sorted([str(a), str(b)])
    for home in (a, b):
        assert_ok(doctor(home, work))

    proc = cli(a, "uninstall", cwd=work)
    assert_ok(proc)
    assert f"kept (still used by {b})" in proc.stdout
    assert engine_of(a) == "compressor" and engine_of(b) == "observed"
    assert bundled_dir().is_dir() and paths.marker_homes(bundled_dir()) == [str(b)]
    report = doctor(b, work)
    assert_ok(report)
    assert "[ OK ] route: bundled" in report.stdout and "verdict: OK" in report.stdout
    assert doctor(a, work).returncode == 1                    # A: context.engine is compressor again

    proc = cli(b, "uninstall", cwd=work)
    assert_ok(proc)
    assert f"plugin: removed {bundled_dir()}" in proc.stdout
    assert not bundled_dir().exists() and not our_dist_infos()
    assert engine_of(b) == "compressor"
    for home in (a, b):
        assert not (home / "observed").exists()               # no record, no store: nothing of ours
        assert not (home / "plugins").exists()


def test_deleted_home_does_not_keep_the_plugin(installation, homes):
    """A home that installed and was then deleted does not use the plugin any more: the last
    live home's uninstall removes it."""
    a, b, work = homes
    for home in (a, b):
        assert_ok(cli(home, "install", "--route", "bundled", cwd=work))
    shutil.rmtree(b)
    proc = cli(a, "uninstall", cwd=work)
    assert_ok(proc)
    assert not bundled_dir().exists()


def test_two_homes_entry_point_route(installation, homes):
    """Item 12, entry-point route: the dist-info beside the observed-engine distribution is shared
    by the homes; it goes with the last one."""
    a, b, work = homes
    for home in (a, b):
        proc = cli(home, "install", "--route", "entrypoint", cwd=work)
        assert_ok(proc)
        assert "selection: Hermes selects observed through its plugin system" in proc.stdout
    [info] = our_dist_infos()
    assert sorted(entry_point.homes_of(info)) == sorted([str(a), str(b)])
    for home in (a, b):
        assert_ok(doctor(home, work))

    proc = cli(a, "uninstall", cwd=work)
    assert_ok(proc)
    assert f"entry point: {info} kept (still used by {b})" in proc.stdout
    assert info.is_dir() and entry_point.homes_of(info) == [str(b)]
    report = doctor(b, work)
    assert_ok(report)
    assert "[ OK ] route: entrypoint" in report.stdout and "selects observed through its plugin system" in report.stdout
    assert "observed" not in (yaml.safe_load((a / "config.yaml").read_text()).get("plugins") or {}).get("enabled", [])

    assert_ok(cli(b, "uninstall", cwd=work))
    assert not our_dist_infos() and not bundled_dir().exists()


def test_homes_on_different_routes(installation, homes):
    """A on the bundled route, B on the entry-point route: uninstalling A removes the bundled copy
    (B never used it) and B is still observed through its entry point."""
    a, b, work = homes
    assert_ok(cli(a, "install", "--route", "bundled", cwd=work))
    assert_ok(cli(b, "install", "--route", "entrypoint", cwd=work))
    assert_ok(cli(a, "uninstall", cwd=work))
    assert not bundled_dir().exists() and our_dist_infos()
    report = doctor(b, work)
    assert_ok(report)
    assert "[ OK ] route: entrypoint" in report.stdout
    assert_ok(cli(b, "uninstall", cwd=work))
    assert not our_dist_infos()


def test_two_homes_user_route(homes):
    """Item 12, user route: each home has its own $HERMES_HOME/plugins/observed/, so one home's
    uninstall cannot touch the other's. Needs a Hermes that loads engines from there (0.22)."""
    if not host.supports_user_engines():
        pytest.skip(f"Hermes {host.hermes_version()} does not load context engines from $HERMES_HOME/plugins/")
    a, b, work = homes
    for home in (a, b):
        assert_ok(cli(home, "install", "--route", "user", cwd=work))
    assert_ok(cli(a, "uninstall", cwd=work))
    assert not (a / "plugins" / "observed").exists() and (b / "plugins" / "observed" / "__init__.py").is_file()
    assert_ok(doctor(b, work))
    assert_ok(cli(b, "uninstall", cwd=work))
    assert not (b / "plugins" / "observed").exists()
    for home in (a, b):       # the plugins/ install made goes with the last plugin in it
        assert not (home / "plugins").exists(), sorted(p.name for p in (home / "plugins").iterdir())


def test_user_route_keeps_a_plugins_directory_it_did_not_make(homes):
    """An operator's own $HERMES_HOME/plugins/ (another plugin in it, or empty) stays."""
    if not host.supports_user_engines():
        pytest.skip(f"Hermes {host.hermes_version()} does not load context engines from $HERMES_HOME/plugins/")
    a, b, work = homes
    (a / "plugins").mkdir()
    (b / "plugins" / "other").mkdir(parents=True)
    for home in (a, b):
        assert_ok(cli(home, "install", "--route", "user", cwd=work))
        assert_ok(cli(home, "uninstall", cwd=work))
    assert sorted(p.name for p in (a / "plugins").iterdir()) == []
    assert sorted(p.name for p in (b / "plugins").iterdir()) == ["other"]


# -- item 10: the entry-point route run from inside a source checkout ----------------------------------

def checkout_with_egg_info(tmp_path: Path) -> Path:
    """The repository itself when `pip install -e` left its observed_engine.egg-info there (the
    real case), else a stand-in directory holding one."""
    if (REPO / "observed_engine.egg-info" / "PKG-INFO").is_file():
        return REPO
    stand_in = tmp_path / "checkout"
    (stand_in / "observed_engine.egg-info").mkdir(parents=True)
    (stand_in / "observed_engine.egg-info" / "PKG-INFO").write_text(
        "Metadata-Version: 2.1\nName: observed-engine\nVersion: 0.1.0\n", encoding="utf-8")
    return stand_in


def test_entry_point_from_inside_a_checkout(installation, homes, tmp_path):
    """`python -m observed_engine install --route entrypoint` with the current directory a checkout
    holding an *.egg-info: the dist-info goes into the environment Hermes imports from (not the
    checkout), and Hermes (a doctor from elsewhere) selects observed."""
    a, _b, work = homes
    checkout = checkout_with_egg_info(tmp_path)
    before = sorted(p.name for p in checkout.iterdir())
    try:
        proc = cli(a, "install", "--route", "entrypoint", cwd=checkout)
        assert_ok(proc)
        assert sorted(p.name for p in checkout.iterdir()) == before, "written into the checkout"
        [info] = our_dist_infos()
        assert info.parent.resolve() == Path(sysconfig.get_paths()["purelib"]).resolve()   # this venv's
        assert f"entry point: {info}" in proc.stdout
        assert "selection: Hermes selects observed through its plugin system" in proc.stdout
        report = doctor(a, work)
        assert_ok(report)
        assert "[ OK ] route: entrypoint" in report.stdout
        assert_ok(cli(a, "uninstall", cwd=checkout))
        assert not our_dist_infos()
    finally:
        for stray in checkout.glob(f"{entry_point.DIST_PREFIX}*"):
            shutil.rmtree(stray, ignore_errors=True)


def test_install_checks_the_selection_in_a_fresh_process(installation, tmp_path, monkeypatch, capsys):
    """What only this process sees (a directory on its sys.path, not on Hermes'), install's check
    does not count: the entry point written there is not found by a fresh Python, so install says
    FAIL and exits 1, instead of 'Hermes selects observed'."""
    import hermes_cli.plugins as hp

    from observed_engine import cli as cli_module

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.setattr(hp, "_plugin_manager", None)
    only_here = tmp_path / "only-on-this-sys-path"
    only_here.mkdir()
    monkeypatch.setattr(entry_point, "site_dir", lambda: only_here)
    monkeypatch.syspath_prepend(str(only_here))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    code = cli_module.main(["install", "--hermes-home", str(home), "--route", "entrypoint"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "FAIL: Hermes would not select observed" in out
    assert "no `observed` entry point is installed" in out


# -- item 3 and item 9, beyond the table -----------------------------------------------------------------

def test_force_writes_an_inner_hermes_cannot_find(tmp_path, monkeypatch, capsys):
    from observed_engine import cli as cli_module

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    engines = tmp_path / "engines"
    engines.mkdir()
    import plugins.context_engine as pce
    monkeypatch.setattr(pce, "_CONTEXT_ENGINE_PLUGINS_DIR", engines)
    monkeypatch.setattr(host, "bundled_engines_dir", lambda: engines)
    assert cli_module.main(["install", "--hermes-home", str(home), "--route", "bundled",
                            "--inner", "nosuch-engine"]) == 2
    assert not (home / "config.yaml").exists() and not (engines / "observed").exists()
    capsys.readouterr()
    code = cli_module.main(["install", "--hermes-home", str(home), "--route", "bundled", "--inner",
                            "nosuch-engine", "--force"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert yaml.safe_load((home / "config.yaml").read_text())["observed"]["inner"] == "nosuch-engine"
    assert "observing inner engine 'nosuch-engine'" in out


def test_compare_says_pass_hermes_home_only_when_it_was_not(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    host.session_db(home / "state.db").close()
    env = env_for(home)
    passed = subprocess.run([sys.executable, "-m", "observed_engine", "compare", "--engines", "compressor",
                             "--hermes-home", str(home)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    default = subprocess.run([sys.executable, "-m", "observed_engine", "compare", "--engines", "compressor"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    for proc in (passed, default):
        assert proc.returncode == 2 and "no conversation is recorded yet in" in proc.stderr, proc.stderr
        assert "not a Hermes state.db" not in proc.stderr
    assert "pass --hermes-home" not in passed.stderr
    assert "(pass --hermes-home for another home)" in default.stderr


def test_tune_says_pass_hermes_home_only_when_it_was_not(tmp_path):
    """Item 9's hint, on compare's sibling: tune said "(pass --hermes-home)" after --hermes-home."""
    home = tmp_path / "home"
    home.mkdir()
    env = env_for(home)
    passed = subprocess.run([sys.executable, "-m", "observed_engine", "tune", "--hermes-home", str(home)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    default = subprocess.run([sys.executable, "-m", "observed_engine", "tune"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    for proc in (passed, default):
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert f"no session store at {home / 'state.db'}" in proc.stderr, proc.stderr
    assert "pass --hermes-home" not in passed.stderr
    assert "(pass --hermes-home for another home)" in default.stderr
    assert sorted(p.name for p in home.iterdir()) == []


def test_doctor_on_broken_yaml_writes_nothing_and_prints_no_hermes_warning(tmp_path):
    """Item 2: doctor's config check FAILs with the file, line and column; Hermes' loader, which
    would print its warning (twice) and write config.yaml.corrupt.*.bak, is not called."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("model:\n  default: x\n bad: [1, 2\n", encoding="utf-8")
    proc = doctor(home, tmp_path)
    assert proc.returncode == 1 and proc.stderr == "", proc.stderr
    assert f"[FAIL] config: {home / 'config.yaml'}: not valid YAML at line 3, column 2" in proc.stdout
    assert "observed-engine install" not in proc.stdout          # it would refuse this file too
    assert sorted(p.name for p in home.iterdir()) == ["config.yaml"]     # on every Hermes line
    report = json.loads(cli(home, "doctor", "--json", cwd=tmp_path).stdout)
    assert [c["check"] for c in report["checks"] if c["status"] == "fail"] == ["config"]
