"""Static checks of deploy/: compose file, Collector config, Prometheus/Alertmanager/Grafana
configuration, the metric names they use, and the fleet sizing numbers in the README.

No Docker engine and no network are needed: everything is parsed and cross-checked. The real
Prometheus tools run in test_alert_rules.py and e2e/test_prometheus_rules.py.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.deploy import panel_exprs
from support.paths import REPO

from observed_engine.contract.catalogue import BY_PROM_NAME, HISTOGRAM, METRICS, prometheus_series_names

DEPLOY = REPO / "deploy"
COMPOSE = DEPLOY / "docker-compose.yaml"
COLLECTOR = DEPLOY / "otel-collector.yaml"
PROM = DEPLOY / "prometheus" / "prometheus.yml"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
AM = DEPLOY / "alertmanager" / "alertmanager.yml"
BOARD = DEPLOY / "grafana" / "dashboards" / "hermes-context-engine.json"
BUILD_BOARD = DEPLOY / "grafana" / "build_dashboard.py"
DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources"
DASH_PROVIDERS = DEPLOY / "grafana" / "provisioning" / "dashboards"
SIZING = DEPLOY / "sizing.py"

REQUIRED_ALERTS = (
    "HermesContextCompressionTimeout", "HermesContextEngineFailOpen", "HermesContextCompressionStuck",
    "HermesContextNearWindow", "HermesContextCompressionErrors", "HermesObservedTelemetryErrors",
    "HermesContextCompressionBlocked", "HermesContextCompressionThrash", "HermesContextThresholdDeadZone",
)
# Images without a shell or HTTP client, so Docker cannot run a healthcheck inside them.
NO_HEALTHCHECK_OK = {"otel/opentelemetry-collector-contrib": "binary-only image; health_check extension on :13133"}
# Labels every series may carry besides its catalogue labels (scrape / exporter identity).
IDENTITY_LABELS = {"job", "instance", "le", "otel_scope_name", "otel_scope_version", "otel_scope_schema_url"}
METRIC_TOKEN = re.compile(r"\bhermes_[a-z_]+\b")
# Hermes identifiers that are not metric names and may appear in dashboard code strings.
NON_METRIC_TOKENS = {"hermes_home", "hermes_state", "hermes_cli", "hermes_constants", "hermes_agent",
                     "hermes_plugin", "hermes_config"}


def load_yaml(path: Path):
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def compose():
    return load_yaml(COMPOSE)


@pytest.fixture(scope="module")
def collector():
    return load_yaml(COLLECTOR)


@pytest.fixture(scope="module")
def alert_rules():
    doc = load_yaml(ALERTS)
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}


@pytest.fixture(scope="module")
def board():
    return json.loads(BOARD.read_text())


def resolve_defaults(text: str) -> str:
    """Compose interpolation with the variables unset: ${VAR:-default} / ${VAR-default} -> default."""
    text = re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?-([^}]*)\}", r"\1", text)
    return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}", "", text)


# --------------------------------------------------------------------------- docker compose

def test_compose_has_the_stack(compose):
    assert {"otel-collector", "prometheus", "alertmanager", "tempo", "grafana", "dashboard"} <= set(compose["services"])


def test_compose_images_pinned_to_exact_versions(compose):
    exact = re.compile(r"^[a-z0-9./_-]+:v?\d+\.\d+\.\d+(?:[-.][A-Za-z0-9.-]+)?$")
    for name, svc in compose["services"].items():
        image = svc.get("image")
        assert image, f"{name}: no image (a build would not be pinned)"
        assert "@sha256:" in image or exact.match(image), f"{name}: image {image!r} is not pinned to an exact version"
        assert not image.endswith(":latest")


def test_compose_ports_bound_to_localhost_by_default(compose):
    for name, svc in compose["services"].items():
        for port in svc.get("ports", []):
            if isinstance(port, dict):
                assert port.get("host_ip") == "127.0.0.1", f"{name}: {port}"
                continue
            resolved = resolve_defaults(str(port))
            assert resolved.startswith("127.0.0.1:"), f"{name}: port {port!r} resolves to {resolved!r}"


def test_compose_bind_mounts_exist_and_named_volumes_are_declared(compose):
    declared = set((compose.get("volumes") or {}).keys())
    for name, svc in compose["services"].items():
        for vol in svc.get("volumes", []):
            if isinstance(vol, dict):
                src, kind = vol.get("source", ""), vol.get("type")
            else:
                src = str(vol).split(":")[0]
                kind = "bind" if src.startswith((".", "/", "~")) else "volume"
            if kind == "bind":
                path = (DEPLOY / src).resolve()
                assert path.exists(), f"{name}: bind mount source {src} ({path}) does not exist"
                assert path == REPO or REPO in path.parents, f"{name}: {src} is outside the repository"
            else:
                assert src in declared, f"{name}: named volume {src} not declared at top level"


def test_compose_healthchecks(compose):
    for name, svc in compose["services"].items():
        repo = svc["image"].split(":")[0]
        if repo in NO_HEALTHCHECK_OK:
            assert "healthcheck" not in svc or svc["healthcheck"].get("disable")
            continue
        hc = svc.get("healthcheck")
        assert hc and hc.get("test"), f"{name}: no healthcheck"
        assert not hc.get("disable")


def test_compose_dependencies_exist(compose):
    services = set(compose["services"])
    for name, svc in compose["services"].items():
        deps = svc.get("depends_on", {})
        for dep in (deps if isinstance(deps, list) else deps.keys()):
            assert dep in services, f"{name} depends on unknown service {dep}"
            if isinstance(deps, dict) and deps[dep].get("condition") == "service_healthy":
                assert "healthcheck" in compose["services"][dep], f"{name} waits for {dep} to be healthy, which has no healthcheck"


def test_compose_dashboard_service(compose):
    svc = compose["services"]["dashboard"]
    env = svc["environment"]
    env = env if isinstance(env, dict) else dict(e.split("=", 1) for e in env)
    assert env["OBSERVED_PROMETHEUS_URL"] == "http://prometheus:9090"
    command = " ".join(svc["command"]) if isinstance(svc["command"], list) else svc["command"]
    # the package with the extra that brings Streamlit, started by its own command (issue 25:
    # `pip install /app` alone had no Streamlit; every way of starting it is this command or
    # binds 127.0.0.1: in the container, every interface, which the host publishes on 127.0.0.1)
    assert "pip install '/app[dashboard]'" in command
    assert "exec observed-engine dashboard --host 0.0.0.0 --port 8501 --prometheus http://prometheus:9090" in command
    assert "streamlit run" not in command
    assert [resolve_defaults(str(p)) for p in svc["ports"]] == ["127.0.0.1:8501:8501"]
    assert svc["image"].startswith("python:3.11")


def test_compose_collector_receives_otlp_on_localhost(compose):
    ports = [resolve_defaults(str(p)) for p in compose["services"]["otel-collector"]["ports"]]
    assert "127.0.0.1:4317:4317" in ports and "127.0.0.1:4318:4318" in ports


# --------------------------------------------------------------------------- collector

def _component_type(name: str) -> str:
    return name.split("/", 1)[0]


def test_collector_pipelines_are_wired(collector):
    pipelines = collector["service"]["pipelines"]
    assert {"metrics", "traces"} <= set(pipelines)
    used = {"receivers": set(), "processors": set(), "exporters": set()}
    for pname, pipe in pipelines.items():
        for section in used:
            for comp in pipe.get(section, []):
                assert comp in (collector.get(section) or {}), f"pipeline {pname}: {section[:-1]} {comp} is not defined"
                used[section].add(comp)
        assert pipe["receivers"] and pipe["exporters"], pname
        assert pipe["processors"][0] == "memory_limiter", f"{pname}: memory_limiter must come first"
        assert "batch" in pipe["processors"], f"{pname}: no batch processor"
    for section, names in used.items():
        unused = set(collector[section]) - names
        assert not unused, f"{section} defined but not in any pipeline: {unused}"
    for ext in collector["service"].get("extensions", []):
        assert ext in collector["extensions"]


def test_collector_receivers_and_exporters(collector):
    otlp = collector["receivers"]["otlp"]["protocols"]
    assert otlp["grpc"]["endpoint"].endswith(":4317")
    assert otlp["http"]["endpoint"].endswith(":4318")
    pipes = collector["service"]["pipelines"]
    assert any(_component_type(e) in ("prometheus", "prometheusremotewrite") for e in pipes["metrics"]["exporters"])
    trace_exporters = [e for e in pipes["traces"]["exporters"] if _component_type(e) in ("otlp", "otlphttp")]
    assert trace_exporters
    assert any(_component_type(e) == "debug" for e in pipes["metrics"]["exporters"] + pipes["traces"]["exporters"])
    # The prometheus exporter keeps resource attributes off the series (target_info instead).
    prom = collector["exporters"]["prometheus"]
    assert prom["resource_to_telemetry_conversion"]["enabled"] is False


def test_collector_targets_match_compose_and_prometheus(collector, compose):
    services = compose["services"]
    # Traces go to the tempo service on the port Tempo receives OTLP gRPC on.
    tempo_endpoint = collector["exporters"]["otlp/tempo"]["endpoint"]
    host, port = tempo_endpoint.rsplit(":", 1)
    assert host in services
    tempo_cfg = load_yaml(DEPLOY / "tempo.yaml")
    assert tempo_cfg["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].endswith(":" + port)
    # Prometheus scrapes the collector's prometheus exporter port, honouring its job/instance labels.
    exporter_port = collector["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1]
    prom = load_yaml(PROM)
    job = next(j for j in prom["scrape_configs"] if j["job_name"] == "otel-collector")
    assert job["honor_labels"] is True
    assert f"otel-collector:{exporter_port}" in job["static_configs"][0]["targets"]


# --------------------------------------------------------------------------- prometheus / alertmanager

def test_prometheus_config_wiring(compose):
    prom = load_yaml(PROM)
    assert "alerts.yml" in prom["rule_files"]
    am_targets = prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am_targets == ["alertmanager:9093"] and "alertmanager" in compose["services"]
    hermes = next(j for j in prom["scrape_configs"] if j["job_name"] == "hermes")
    assert "127.0.0.1:9464" in hermes["static_configs"][0]["targets"]
    for fsd in hermes.get("file_sd_configs", []):
        for pattern in fsd["files"]:
            assert list((PROM.parent).glob(pattern)), f"file_sd pattern {pattern} matches nothing in the repo"


def test_alertmanager_routes_to_webhook():
    am = load_yaml(AM)
    route = am["route"]
    assert set(route["group_by"]) >= {"alertname", "engine"}
    receivers = {r["name"]: r for r in am["receivers"]}
    hooks = receivers[route["receiver"]]["webhook_configs"]
    assert hooks and hooks[0]["url"].startswith("http://127.0.0.1")
    for sub in route.get("routes", []):
        assert sub["receiver"] in receivers


# --------------------------------------------------------------------------- alert rules

def test_required_alerts_have_severity_and_operator_text(alert_rules):
    for name in REQUIRED_ALERTS:
        assert name in alert_rules, f"missing alert {name}"
        rule = alert_rules[name]
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        ann = rule["annotations"]
        assert len(ann.get("summary", "")) > 20, name
        assert len(ann.get("description", "")) > 200 and "check" in ann["description"].lower(), name
        # Aggregated by process identity so the notification names the process.
        by_clauses = re.findall(r"\bby\s*\(([^)]*)\)", rule["expr"])
        assert by_clauses, name
        for clause in by_clauses:
            labels = {x.strip() for x in clause.split(",")}
            assert {"job", "instance"} <= labels, (name, clause)


def test_counter_alerts_fire_fast_enough_for_end_to_end_tests(alert_rules):
    for name in ("HermesContextCompressionTimeout", "HermesContextEngineFailOpen"):
        assert alert_rules[name].get("for", "0m") in ("0m", "0s", "0"), name
        assert "engine" in alert_rules[name]["expr"]
    assert alert_rules["HermesContextNearWindow"]["for"] == "5m"
    assert "0.9" in alert_rules["HermesContextNearWindow"]["expr"]


# --------------------------------------------------------------------------- metric names and labels

def metric_tokens(text: str) -> set:
    return {t for t in METRIC_TOKEN.findall(text) if not t.endswith("_")}


def python_string_tokens(path: Path) -> set:
    """hermes_* tokens inside string literals of a Python file (f-string pieces ending in '_' are
    partial names and skipped)."""
    tokens = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            tokens |= metric_tokens(node.value)
    return tokens - NON_METRIC_TOKENS


def board_queries(board: dict) -> list:
    exprs = panel_exprs(board)
    for var in board["templating"]["list"]:
        q = var.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if var["type"] == "query" and q:
            exprs.append(q)
    return exprs


def check_labels(expr: str, where: str) -> None:
    """Labels used in by/on/without clauses and in selectors exist on the metrics of the expr;
    values of closed label sets are valid."""
    names = {t for t in metric_tokens(expr) if t in prometheus_series_names()}
    specs = []
    for n in names:
        for suffix in ("_bucket", "_sum", "_count", ""):
            base = n[: -len(suffix)] if suffix and n.endswith(suffix) else n
            if base in BY_PROM_NAME:
                specs.append(BY_PROM_NAME[base])
                break
    allowed = set(IDENTITY_LABELS)
    for s in specs:
        allowed |= set(s.labels)
    for clause in re.findall(r"\b(?:by|on|without|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        for label in filter(None, (x.strip() for x in clause.split(","))):
            assert label in allowed, f"{where}: label {label!r} not on {sorted(names)}"
    for selector_metric, body in re.findall(r"\b(hermes_[a-z_]+)\s*\{([^}]*)\}", expr):
        spec = next((s for s in specs if selector_metric.startswith(s.prom_name)), None)
        for label, op, value in re.findall(r'([a-zA-Z_]+)\s*(=~|!~|!=|=)\s*"([^"]*)"', body):
            assert label in allowed, f"{where}: selector label {label!r} not on {selector_metric}"
            closed = (spec.label_values or {}).get(label) if spec else None
            if closed and op == "=":
                assert value in closed, f"{where}: {label}={value!r} not one of {closed}"


def test_alert_rules_use_catalogue_metrics_and_labels(alert_rules):
    valid = prometheus_series_names()
    for name, rule in alert_rules.items():
        tokens = metric_tokens(rule["expr"])
        assert tokens, name
        assert tokens <= valid, f"{name}: unknown metrics {tokens - valid}"
        check_labels(rule["expr"], name)


def test_grafana_board_uses_catalogue_metrics_and_labels(board):
    valid = prometheus_series_names()
    exprs = board_queries(board)
    assert len(exprs) > 20
    for expr in exprs:
        tokens = metric_tokens(expr)
        assert tokens <= valid, f"unknown metrics {tokens - valid} in {expr}"
        check_labels(expr, expr)


def test_dashboard_code_uses_catalogue_metrics():
    files = sorted((REPO / "dashboard").glob("*.py"))
    if not files:
        pytest.skip("dashboard/*.py does not exist yet")
    valid = prometheus_series_names()
    for path in files:
        unknown = python_string_tokens(path) - valid
        assert not unknown, f"{path.relative_to(REPO)} uses metric names not in the catalogue: {sorted(unknown)}"


def test_every_histogram_quantile_aggregates_buckets_by_le(board, alert_rules):
    for expr in board_queries(board) + [r["expr"] for r in alert_rules.values()]:
        for m in re.finditer(r"histogram_quantile\(", expr):
            tail = expr[m.end():]
            assert "_bucket{" in tail.split("histogram_quantile(")[0], expr
            assert re.search(r"by\s*\(\s*le\b", tail), expr


# --------------------------------------------------------------------------- grafana

def test_grafana_board_structure(board):
    assert board["schemaVersion"] >= 38
    assert board["uid"] == "hermes-context-engine"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("job", "instance", "engine"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"]["uid"] == "${datasource}"
    panels = [p for p in board["panels"] if p["type"] != "row"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    titles = " | ".join(p["title"] for p in panels).lower()
    for needle in ("usage vs threshold", "usage ratio", "rate by outcome", "compression latency",
                   "tokens before / after", "outcome mix", "churn", "cache tokens lost", "timeouts by kind",
                   "fail-opens by hook", "in flight", "hook latency", "calls/s", "telemetry errors",
                   "summary failures by kind / cause", "summary failures (1h)"):
        assert needle in titles, f"no panel for {needle!r}"
    # summary failures: by engine, kind and cause (the catalogue's labels), in the Compression row
    summary = BY_PROM_NAME["hermes_context_compression_summary_failures_total"]
    (panel,) = [p for p in panels if p["title"].lower() == "summary failures by kind / cause"]
    (expr,) = [t["expr"] for t in panel["targets"]]
    assert summary.prom_name in expr and re.search(r"by \(engine, kind, cause\)", expr), expr
    assert set(summary.labels) == {"engine", "kind", "cause"}
    rows = [p for p in board["panels"] if p["type"] == "row"]
    row_of = max((r for r in rows if r["gridPos"]["y"] <= panel["gridPos"]["y"]), key=lambda r: r["gridPos"]["y"])
    assert row_of["title"] == "Compression"
    for p in panels:
        if p["datasource"]["type"] == "prometheus":
            assert p["datasource"]["uid"] == "${datasource}", p["title"]
            for t in p["targets"]:
                assert t["datasource"]["uid"] == "${datasource}", p["title"]
                assert "$engine" in t["expr"] or "$instance" in t["expr"], (p["title"], t["expr"])
    # Quantile panels show p50/p95/p99.
    latency = [p for p in panels if "latency" in p["title"].lower()]
    assert len(latency) == 2
    for p in latency:
        qs = sorted(re.search(r"histogram_quantile\(([\d.]+)", t["expr"]).group(1) for t in p["targets"])
        assert qs == ["0.5", "0.95", "0.99"], p["title"]


def test_grafana_board_is_generated_from_the_script():
    proc = subprocess.run([sys.executable, str(BUILD_BOARD), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_grafana_panels_do_not_overlap(board):
    cells = set()
    for p in board["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {p['title']} overlaps at {(x, y)}"
                cells.add((x, y))


def test_grafana_provisioning(compose):
    sources = [ds for f in sorted(DATASOURCES.glob("*.yaml")) for ds in load_yaml(f)["datasources"]]
    by_type = {ds["type"]: ds for ds in sources}
    assert by_type["prometheus"]["uid"] == "prometheus" and by_type["prometheus"]["url"] == "http://prometheus:9090"
    assert by_type["tempo"]["uid"] == "tempo" and by_type["tempo"]["url"] == "http://tempo:3200"
    providers = [p for f in sorted(DASH_PROVIDERS.glob("*.yaml")) for p in load_yaml(f)["providers"]]
    mounted = {str(v).split(":")[1]: str(v).split(":")[0] for v in compose["services"]["grafana"]["volumes"]}
    for p in providers:
        path = p["options"]["path"]
        assert path in mounted, f"dashboard provider path {path} is not mounted into grafana"
        assert (DEPLOY / mounted[path] / BOARD.name).exists()
    assert "/etc/grafana/provisioning" in mounted


# --------------------------------------------------------------------------- sizing

def _sizing():
    spec = importlib.util.spec_from_file_location("deploy_sizing", SIZING)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_sizing_counts_label_combinations_and_buckets():
    sizing = _sizing()
    a = sizing.Assumptions()
    per = sizing.series_per_process(a)
    assert set(per) == {m.prom_name for m in METRICS} | {"target_info"}
    hook_hist = BY_PROM_NAME["hermes_context_engine_hook_duration_seconds"]
    assert per[hook_hist.prom_name] == a.hooks * (len(hook_hist.buckets) + 3)
    assert per["hermes_context_compressions_total"] == len(BY_PROM_NAME["hermes_context_compressions_total"].label_values["outcome"])
    for m in METRICS:
        if m.kind == HISTOGRAM:
            assert per[m.prom_name] % (len(m.buckets) + 3) == 0
    e = sizing.estimate(a)
    assert e.upper == sum(per.values()) and 0 < e.healthy < e.upper
    assert e.processes_per_server == a.series_per_server // e.upper
    # Twice the hooks: the hook metrics double, the rest stays.
    bigger = sizing.estimate(sizing.Assumptions(hooks=50))
    assert bigger.upper > e.upper


def test_readme_sizing_numbers_are_current():
    proc = subprocess.run([sys.executable, str(SIZING), "--check-readme"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    readme = (DEPLOY / "README.md").read_text()
    assert f"**{_sizing().estimate().upper} series per process**" in readme
    for needle in ("docker compose -f deploy/docker-compose.yaml up -d", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317",
                   "OTEL_SERVICE_NAME", "service.instance.id", "otlp: {enabled: true}", "Mimir", "Thanos", "VictoriaMetrics"):
        assert needle in readme, needle
