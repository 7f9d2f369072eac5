"""The shipped deploy/ files as the end-to-end tests use them: where they are, the queries of the
Grafana board's panels, and the shipped Alertmanager config pointed at a local webhook."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, Iterable, List

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


def shortened_rules(shipped: str, alerts: Iterable[str], seconds: int) -> str:
    """The shipped alerts.yml with the ``for:`` line of each rule in ``alerts`` set to ``seconds``
    (an end-to-end test cannot wait out ``for: 5m``); every other line as shipped."""
    alerts = set(alerts)
    out, alert = [], None
    for line in shipped.splitlines(keepends=True):
        named = re.match(r"\s*- alert:\s*(\S+)\s*$", line)
        if named:
            alert = named.group(1)
        hold = re.match(r"(\s+)for:\s*\S+\s*$", line)
        if hold and alert in alerts:
            line = f"{hold.group(1)}for: {seconds}s\n"
        out.append(line)
    return "".join(out)


def assert_only_for_lines_differ(shipped: str, rewritten: str, alerts: Iterable[str], seconds: int) -> None:
    """``rewritten`` is ``shipped`` but for the ``for:`` line of each rule in ``alerts``: the
    expressions, labels and annotations under test are exactly the shipped ones."""
    alerts = set(alerts)
    old, new = shipped.splitlines(), rewritten.splitlines()
    assert len(old) == len(new)
    changed = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
    assert len(changed) == len(alerts), changed
    for i in changed:
        assert re.fullmatch(r"\s+for:\s*\S+", old[i]) and new[i].strip() == f"for: {seconds}s", (old[i], new[i])
    old_rules = {r["alert"]: r for g in yaml.safe_load(shipped)["groups"] for r in g["rules"]}
    new_rules = {r["alert"]: r for g in yaml.safe_load(rewritten)["groups"] for r in g["rules"]}
    assert old_rules.keys() == new_rules.keys() and alerts <= old_rules.keys()
    for name, rule in old_rules.items():
        expected = dict(rule, **{"for": f"{seconds}s"}) if name in alerts else rule
        assert new_rules[name] == expected, name
