"""The private Hermes home the demo's agents run in, and the environment set before Hermes is
imported."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Dict, Optional

from .llm import CHAT_MODEL, SUMMARY_MODEL, DemoLLM


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
    shutil.copytree(Path(__file__).resolve().parent.parent / "hermes_plugin_dir", plugin,
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
