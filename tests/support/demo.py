"""Running ``observed-engine demo`` as a user does: its command (the installed script, else
``python -m``) and an environment with a private Hermes home and none of the variables that
would point it at another store or collector."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def demo_command() -> list:
    script = Path(sys.executable).with_name("observed-engine")
    if script.exists():
        return [str(script), "demo"]
    return [sys.executable, "-m", "observed_engine.demo"]


def demo_env(tmp_path: Path) -> dict:
    env = dict(os.environ, HERMES_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    for var in ("OBSERVED_STORE", "OBSERVED_PROMETHEUS_URL", "OBSERVED_SOURCE", "OTEL_EXPORTER_OTLP_ENDPOINT",
                "OBSERVED_DEMO_DIR"):
        env.pop(var, None)
    return env
