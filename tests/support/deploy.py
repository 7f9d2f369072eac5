"""The shipped deploy/ files as the end-to-end tests use them: where they are, the queries of the
Grafana board's panels, and the shipped Alertmanager config pointed at a local webhook."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ALERT_RULES = DEPLOY / "prometheus" / "alerts.yml"
ALERTMANAGER_CONFIG = DEPLOY / "alertmanager" / "alertmanager.yml"


def panel_exprs(board: Dict[str, Any]) -> List[str]:
    """The PromQL of every panel target of a Grafana board (rows' nested panels included), in order."""
    exprs: List[str] = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    exprs.append(t["expr"])
            walk(p.get("panels", []))
    walk(board["panels"])
    return exprs


def alertmanager_config(webhook_url: str) -> Dict[str, Any]:
    """The shipped Alertmanager config with every receiver pointed at ``webhook_url`` and 1 s group
    timings on every route (a route without a repeat interval gets 1 h); routing, grouping and
    inhibition stay as shipped."""
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = webhook_url

    def shorten(route):
        route["group_wait"] = "1s"
        route["group_interval"] = "1s"
        route.setdefault("repeat_interval", "1h")
        for child in route.get("routes", []):
            shorten(child)

    shorten(config["route"])
    return config
