"""Real ``hermes_agent.plugins`` entry-point plugins for tests: a module and a
``<dist>.dist-info`` (METADATA, entry_points.txt) in a directory put on ``sys.path``, so
``importlib.metadata`` (and with it Hermes' own plugin scan) finds them as it finds
pip-installed packages."""

from __future__ import annotations

import contextlib
import sys
import textwrap
from pathlib import Path

GROUP = "hermes_agent.plugins"

# A context-engine plugin as third-party packages write them: register(ctx) ends in
# ctx.register_context_engine(engine). REGISTER_CALLS counts the register() calls.
ENGINE_PLUGIN = '''
from agent.context_engine import ContextEngine

REGISTER_CALLS = []


class {cls}(ContextEngine):
    def __init__(self):
        self.context_length = 200000
        self.threshold_tokens = 150000

    @property
    def name(self):
        return {engine!r}

    def update_from_response(self, usage):
        pass

    def should_compress(self, prompt_tokens=None):
        return False

    def compress(self, messages, current_tokens=None, focus_topic=None):
        return messages


def register(ctx):
    REGISTER_CALLS.append(type(ctx).__name__)
    ctx.register_context_engine({cls}())
'''


def write_dist(site: Path, dist: str, entry_points: dict, version: str = "1.0",
               summary: str = "a test plugin") -> Path:
    """A ``dist-info`` for distribution *dist* in *site* declaring *entry_points*
    (``{name: "module[:attr]"}``, group hermes_agent.plugins)."""
    site.mkdir(parents=True, exist_ok=True)
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\nSummary: {summary}\n", encoding="utf-8")
    lines = [f"[{GROUP}]"] + [f"{name} = {value}" for name, value in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return info


def engine_plugin(site: Path, plugin: str, *, engine: str | None = None, module: str | None = None) -> str:
    """A pip-style context-engine plugin *plugin* in *site* (module + dist-info); its engine is
    named *engine* (default: the plugin's name). Returns the module name."""
    module = module or f"ep_{plugin}_engine"
    cls = "".join(part.capitalize() for part in plugin.split("_")) + "Engine"
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(
        textwrap.dedent(ENGINE_PLUGIN).format(cls=cls, engine=engine or plugin), encoding="utf-8")
    write_dist(site, f"{plugin}-test-plugin", {plugin: module})
    return module


def on_path(monkeypatch, site: Path) -> None:
    """*site* first on ``sys.path`` and on ``PYTHONPATH``, for this test: what a fresh Python
    started by the command under test (``install``'s selection check) sees too."""
    import os

    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p))


def forget_modules(*names: str) -> None:
    for name in names:
        sys.modules.pop(name, None)


def isolated_plugin_host(tmp_path: Path, monkeypatch):
    """A Hermes home of the test's own and a plugin host that starts clean: HERMES_HOME set, no
    safe mode, no OTEL_* variable, Hermes' plugin manager and the plugin's gate notices forgotten.
    Returns the home; the caller shuts observed-engine down after the test."""
    import os

    import hermes_cli.plugins as hp

    from observed_engine import plugin as oplugin

    home = tmp_path / "hermes-home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.delenv("HERMES_SAFE_MODE", raising=False)
    for var in list(os.environ):
        if var.startswith("OTEL_"):
            monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hp, "_plugin_manager", None)
    monkeypatch.setattr(oplugin.inner, "_gate_notices", set())
    return home


def observed_entry_point_declared() -> bool:
    """Is observed-engine's ``observed`` plugin entry point declared (as ``install --route entrypoint``
    writes it) in this environment?"""
    import importlib.metadata as md

    return any(ep.name == "observed" and ep.value == "observed_engine.hermes_plugin"
               for ep in md.entry_points(group=GROUP))


def simulate_observed_entry_point(patch, entry_point_class=None, replace_declared: bool = False) -> bool:
    """Unless it is declared already, make ``importlib.metadata.entry_points`` also answer the
    ``observed`` entry point, for this process only (the shared virtualenv is left as it is): Hermes'
    own loader then finds it. ``patch(md, "entry_points", replacement)`` installs it (a test's
    ``monkeypatch.setattr``, or ``setattr``). ``entry_point_class``: a subclass of
    ``importlib.metadata.EntryPoint`` to make it with (a benchmark's, timing ``load``);
    ``replace_declared``: where ``install --route entrypoint`` has declared it, answer this one in its
    place (same name and value) rather than leave the declared one. True when it was simulated."""
    import importlib.metadata as md

    if observed_entry_point_declared() and not replace_declared:
        return False
    ep = (entry_point_class or md.EntryPoint)(name="observed", value="observed_engine.hermes_plugin", group=GROUP)
    real = md.entry_points

    def others(eps):
        return [e for e in eps if not (e.group == GROUP and e.name == "observed")]

    def entry_points(**params):
        if params:
            return md.EntryPoints(others(real(**params)) + list(md.EntryPoints([ep]).select(**params)))
        groups = real()   # SelectableGroups (a dict) on 3.11, EntryPoints on 3.12+
        flat = [e for eps in groups.values() for e in eps] if isinstance(groups, dict) else list(groups)
        return md.EntryPoints(others(flat) + [ep])

    patch(md, "entry_points", entry_points)
    return True


@contextlib.contextmanager
def hermes_agent_home(tmp_path: Path, monkeypatch):
    """For a real AIAgent run: ``isolated_plugin_host`` without provider API keys either, an empty
    directory standing in for Hermes' bundled context-engine plugins, observed-engine shut down
    before and after, and the ``plugins.context_engine.*`` modules the run imported forgotten.
    Yields (the Hermes home, the stand-in plugins directory)."""
    import os

    import observed_engine
    import plugins.context_engine as pce

    home = isolated_plugin_host(tmp_path, monkeypatch)
    for var in list(os.environ):
        if var.endswith("_API_KEY"):
            monkeypatch.delenv(var, raising=False)
    engines = tmp_path / "context_engine"
    engines.mkdir()
    monkeypatch.setattr(pce, "_CONTEXT_ENGINE_PLUGINS_DIR", engines)
    before = {n for n in sys.modules if n.startswith("plugins.context_engine.")}
    observed_engine.shutdown(5)
    try:
        yield home, engines
    finally:
        observed_engine.shutdown(5)
        forget_modules(*[n for n in sys.modules if n.startswith("plugins.context_engine.") and n not in before])
